//! The OpenAI-compatible routes through the official `openai` Python SDK: runs
//! `clients/python/openai_sdk_test.py` against the `yued` binary cargo built. The venv comes
//! from `scripts/pyclients.sh` (scripts/test.sh runs it and sets YUED_REQUIRE_PYCLIENTS=1,
//! so in CI a missing SDK fails the test instead of skipping it).
use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_openai_sdk_lists_models_speaks_streams_and_is_rate_limited() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let python = std::env::var_os("YUED_PYCLIENTS_PYTHON").map(PathBuf::from).unwrap_or_else(|| root.join("target/pyclients-venv/bin/python"));
    let ready = python.exists() && Command::new("ffprobe").arg("-version").output().is_ok();
    if !ready {
        assert!(std::env::var_os("YUED_REQUIRE_PYCLIENTS").is_none(), "YUED_REQUIRE_PYCLIENTS is set but {} or ffprobe is missing (scripts/pyclients.sh)", python.display());
        eprintln!("{} or ffprobe missing: skipping (scripts/test.sh installs them)", python.display());
        return;
    }
    let out = Command::new(&python).arg(root.join("clients/python/openai_sdk_test.py")).env("YUED_BIN", yued_e2e::yued_bin()).output().expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("OPENAI SDK OK"), "the OpenAI SDK test failed:\n{text}");
    eprintln!("{text}");
}
