//! The WebUI in a real browser: runs `clients/web/e2e/webui.test.mjs` (playwright-core
//! driving Debian's Chromium) against the `yued` binary cargo built. `scripts/test.sh`
//! installs Chromium and the npm packages and sets YUED_REQUIRE_BROWSER=1, so in CI a
//! missing browser or package fails the test instead of skipping it.
use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_webui_composes_plays_live_renders_the_score_and_survives_a_reload() {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("clients/web");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let ready = web.join("node_modules/playwright-core").exists() && std::path::Path::new(&chromium).exists() && Command::new("node").arg("--version").output().is_ok();
    if !ready {
        assert!(std::env::var_os("YUED_REQUIRE_BROWSER").is_none(), "YUED_REQUIRE_BROWSER is set but node, {chromium} or clients/web/node_modules is missing");
        eprintln!("node, chromium or clients/web/node_modules missing: skipping (scripts/test.sh installs them)");
        return;
    }
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webui-screenshots");
    let _ = std::fs::remove_dir_all(&shots); // only this run's screenshots count
    let out = Command::new("node").arg("e2e/webui.test.mjs").current_dir(&web).env("YUED_BIN", yued_e2e::yued_bin()).env("CHROMIUM", &chromium).env("SCREENSHOTS", &shots).output().expect("run node");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the WebUI e2e failed:\n{text}");
    eprintln!("{text}");
    for step in [
        "loaded",
        "form",
        "queued",
        "progress",
        "playing",
        "score-and-result",
        "reloaded",
        "downloaded",
        "variation-cancelled",
        "logs",
        "mm3-form",
        "mm3-queued",
        "mm3-done",
        "mm3-replayed",
        "mm3-reloaded",
    ] {
        assert!(std::fs::read_dir(&shots).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().ends_with(&format!("-{step}.png"))), "no screenshot of {step}");
    }
}
