//! The WebUI in a real browser: runs `clients/web/e2e/webui.test.mjs` (playwright-core
//! driving Debian's Chromium) against the `yued` binary cargo built. `scripts/test.sh`
//! installs Chromium and the npm packages and sets YUED_REQUIRE_BROWSER=1, so in CI a
//! missing browser or package fails the test instead of skipping it. The tests take turns:
//! each starts its own daemon, and a browser test's timeouts assume the CPUs to itself.
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `clients/web` and the Chromium to drive, or None (the test skips) where node, the browser
/// or the npm packages are missing and YUED_REQUIRE_BROWSER is unset.
fn browser() -> Option<(PathBuf, String)> {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("clients/web");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let ready = web.join("node_modules/playwright-core").exists()
        && std::path::Path::new(&chromium).exists()
        && Command::new("node").arg("--version").output().is_ok();
    if !ready {
        assert!(
            std::env::var_os("YUED_REQUIRE_BROWSER").is_none(),
            "YUED_REQUIRE_BROWSER is set but node, {chromium} or clients/web/node_modules is missing"
        );
        eprintln!("node, chromium or clients/web/node_modules missing: skipping (scripts/test.sh installs them)");
        return None;
    }
    Some((web, chromium))
}

/// The screenshots a step list names, each `NN-step.png` in `shots`.
fn assert_screenshots(shots: &std::path::Path, steps: &[&str]) {
    for step in steps {
        assert!(
            std::fs::read_dir(shots).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(&format!("-{step}.png"))),
            "no screenshot of {step}"
        );
    }
}

#[test]
fn the_webui_composes_plays_live_renders_the_score_and_survives_a_reload() {
    let Some((web, chromium)) = browser() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webui-screenshots");
    // Only this run's screenshots count.
    let _ = std::fs::remove_dir_all(&shots);
    // The demo models written where the daemon looks for them, and an adapter directory
    // shaped for them: one usable LoRA and one that names no backbone tensor.
    let tmp = tempfile::tempdir().unwrap();
    let (data, adapters) = (tmp.path().join("data"), tmp.path().join("adapters"));
    let (backbone, _) = yued_engine::models::yue2::demo::write_demo(
        &data.join("models"),
        yued_engine::models::yue2::demo::Preset::Tiny,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let shapes = yued_engine::models::yue2::adapter::shapes_of(&yued_engine::gguf::GgufFile::open(&backbone).unwrap());
    std::fs::create_dir_all(&adapters).unwrap();
    let q = &shapes["model.layers.0.self_attn.q_proj.weight"];
    write_lora(&adapters.join("demo-lora.safetensors"), "layers.0.self_attn.q_proj", q[0], q[1]);
    write_lora(&adapters.join("broken.safetensors"), "layers.0.self_attn.w_proj", 4, 4);
    let out = Command::new("node")
        .arg("e2e/webui.test.mjs")
        .current_dir(&web)
        .env("YUED_BIN", yued_e2e::yued_bin())
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOTS", &shots)
        .env("YUED_DATA", &data)
        .env("YUED_ADAPTERS", &adapters)
        .output()
        .expect("run node");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the WebUI e2e failed:\n{text}");
    eprintln!("{text}");
    assert_screenshots(
        &shots,
        &[
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
            "cover-rerendered",
            "cover-continued",
            "docs",
        ],
    );
}

/// `clients/web/e2e/transcribe.test.mjs`: a recording's transcription from the upload and
/// from a finished song, its card (the notation and Sing/Continue when done, the daemon's
/// reason when not: the demo's random-weights head usually writes no score), restored after
/// a reload and from GET /jobs, and the form's "Continue this score" in the request.
#[test]
fn the_webui_transcribes_a_recording_and_offers_its_score_to_the_form() {
    let Some((web, chromium)) = browser() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webui-transcribe-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new("node")
        .arg("e2e/transcribe.test.mjs")
        .current_dir(&web)
        .env("YUED_BIN", yued_e2e::yued_bin())
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOTS", &shots)
        .env("YUED_DATA", tmp.path().join("data"))
        .output()
        .expect("run node");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the WebUI transcription e2e failed:\n{text}");
    eprintln!("{text}");
    assert_screenshots(&shots, &["transcribe-upload", "transcribe-restored", "transcribe-song", "transcribe-phone"]);
}

/// A rank-2 LoRA on `module` (native layout) as safetensors.
fn write_lora(path: &std::path::Path, module: &str, out: usize, inp: usize) {
    let a: Vec<u8> = (0..2 * inp).flat_map(|i| ((i as f32 * 0.61).sin() * 0.4).to_le_bytes()).collect();
    let b: Vec<u8> = (0..out * 2).flat_map(|i| ((i as f32 * 0.37).cos() * 0.4).to_le_bytes()).collect();
    let views = vec![
        (
            format!("{module}.lora_A.weight"),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, inp], &a).unwrap(),
        ),
        (
            format!("{module}.lora_B.weight"),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![out, 2], &b).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}
