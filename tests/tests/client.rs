//! The `yue` command-line client against the real daemon.
use std::process::Command;
use yued_e2e::*;

#[test]
fn yue_synth_streams_to_a_growing_wav_and_unpacks_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "16"]);
    let req = dir.path().join("req.json");
    // Two tracks, and a misspelt field the daemon ignores (the client says so).
    let mut body: serde_json::Value = serde_json::from_str(&song(4.0, 2)).unwrap();
    body["synth_batch_size"] = 2.into();
    body["duraton"] = 3.into();
    std::fs::write(&req, body.to_string()).unwrap();
    let wav = dir.path().join("live.wav");
    let out = dir.path().join("out");
    let yue = sibling_bin("yue");
    assert!(yue.exists(), "yue not built");
    let o = Command::new(&yue)
        .args([
            "--server",
            &d.url(""),
            "synth",
            req.to_str().unwrap(),
            "--stream",
            wav.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("ignored") && stderr.contains("duraton"), "{stderr}");
    // One live file per track, each the whole song.
    for live in [wav.clone(), dir.path().join("live-track01.wav")] {
        let r = hound::WavReader::open(&live).unwrap();
        assert_eq!(r.spec().channels, 2);
        assert_eq!(r.duration() as usize, 1920 * 100 - 64, "{} holds the whole track", live.display());
    }
    let files: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().any(|f| f.ends_with("track00.wav")) && files.iter().any(|f| f.ends_with("track01.wav")));
    // status and cancel of unknown jobs fail cleanly
    let o = Command::new(&yue).args(["--server", &d.url(""), "cancel", "00000000000000aa"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("404"));
    let o = Command::new(&yue).args(["--server", &d.url(""), "props"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"sample_rate\": 48000"));
}

/// The serving-overhead tools on the real daemon: an open-loop load on /health and a
/// WebSocket fan-out where every listener receives every tile of a job.
#[test]
fn yue_load_and_fanout_measure_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--vae-core", "8"]);
    let yue = sibling_bin("yue");
    let server = d.url("");
    let out = std::process::Command::new(&yue)
        .args(["--server", &server, "load", "--path", "/health", "--rps", "200", "--seconds", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["requests"], 200);
    assert_eq!(r["statuses"]["200"], 200, "{r}");
    assert!(r["p99_ms"].as_f64().unwrap() > 0.0);
    // Counted from the schedule, every request is later than from its send, so is every
    // percentile.
    for p in ["p50", "p99"] {
        assert!(
            r[format!("{p}_from_schedule_ms")].as_f64().unwrap() >= r[format!("{p}_ms")].as_f64().unwrap(),
            "{p}: {r}"
        );
    }
    // 20 listeners join a queued job (the first keeps the worker busy) and all hear it all.
    let _busy = d.submit(&song(6.0, 4));
    let id = d.submit(&song(3.0, 2));
    let out = std::process::Command::new(&yue)
        .args(["--server", &server, "fanout", &id, "--listeners", "20"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["completed"], 20, "{r}");
    assert_eq!(r["tiles_min"], r["tiles_max"], "every listener got every tile: {r}");
    assert!(r["tiles_min"].as_u64().unwrap() >= 9, "75 frames in tiles of 8: {r}");
    // The process series for RSS and CPU are exported.
    let m = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    assert!(m.contains("process_resident_memory_bytes") && m.contains("process_cpu_seconds_total"));
}
