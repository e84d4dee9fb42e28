//! The compute stages on the real daemon: under --keep-loaded the next job's AR half runs
//! while the current one renders, and nothing is loaded twice; under the default STRICT
//! policy the two halves trade places for every job (the loads show it).
use std::time::{Duration, Instant};
use yued_e2e::*;

fn metric(d: &Daemon, name: &str) -> f64 {
    let text = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' ')).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// Submits two songs and polls both until done; returns whether a poll ever saw job B
/// making progress in an AR stage (plan/semantic) while job A was in a synthesis stage:
/// (A in synth or decode, A in synth), and the final statuses.
fn two_jobs(d: &Daemon) -> ((bool, bool), serde_json::Value, serde_json::Value) {
    let a = d.submit(&song(8.0, 16));
    let b = d.submit(&song(8.0, 16));
    let t0 = Instant::now();
    let (mut overlap, mut overlap_synth) = (false, false);
    loop {
        // B first, then A: A's stages only move forward (one song, one chunk), so A still
        // in synth when read after B proves both held at the moment B was read.
        let sb = d.status(&b);
        let sa = d.status(&a);
        let stage = |s: &serde_json::Value| s["stage"].as_str().unwrap_or("").to_string();
        if sa["status"] == "running" && sb["status"] == "running" && matches!(stage(&sa).as_str(), "synth" | "decode") && matches!(stage(&sb).as_str(), "plan" | "semantic") && sb["progress"].as_f64().unwrap_or(0.0) > 0.0 {
            overlap = true;
            overlap_synth |= stage(&sa) == "synth";
        }
        if sa["status"] == "done" && sb["status"] == "done" {
            return ((overlap, overlap_synth), sa, sb);
        }
        assert!(!matches!(sa["status"].as_str(), Some("failed" | "cancelled")) && !matches!(sb["status"].as_str(), Some("failed" | "cancelled")), "{sa} {sb}");
        assert!(t0.elapsed() < Duration::from_secs(300), "jobs not done: {sa} {sb}; log: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn keep_loaded_overlaps_the_stages_of_two_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--keep-loaded"]);
    // Warm-up loaded the three modules before the daemon reported ready.
    assert_eq!(metric(&d, "yued_module_loads_total"), 3.0);
    let ((overlap, _), sa, sb) = two_jobs(&d);
    assert!(overlap, "job B's AR never ran while job A rendered");
    assert_eq!(metric(&d, "yued_module_loads_total"), 3.0, "nothing is loaded twice");
    for s in [&sa, &sb] {
        assert_eq!(s["metrics"]["module_loads"], 0, "{s}");
        assert_eq!(s["metrics"]["resident_modules"], 3, "{s}");
        assert_eq!(s["metrics"]["keep_loaded"], true, "{s}");
    }
    assert_eq!(metric(&d, "yued_kv_sets_in_use"), 0.0, "every KV set is freed");
    // Two songs of 8 s: 2 x 200 semantic tokens sampled, at a measured speed.
    assert!(metric(&d, "yued_ar_tokens_total{stage=\"semantic\"}") >= 400.0);
    assert!(metric(&d, "yued_ar_tokens_per_second_count{stage=\"semantic\"}") >= 2.0);
}

#[test]
fn strict_swaps_the_halves_for_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    assert_eq!(metric(&d, "yued_module_loads_total"), 0.0, "STRICT loads at the first request");
    let ((_, overlap_synth), sa, sb) = two_jobs(&d);
    // (A's status may still read "decode" for an instant after its last tile, when the
    // synthesis group is already released.)
    assert!(!overlap_synth, "under STRICT the AR half never runs while the NAR renders");
    // A: AR, then NAR + VAE (evicting AR); B: AR again (evicting both), NAR, VAE.
    assert_eq!(metric(&d, "yued_module_loads_total"), 6.0, "log: {}", d.log());
    for s in [&sa, &sb] {
        assert!(s["metrics"]["resident_modules"].as_u64().unwrap() <= 2, "never both groups: {s}");
        assert!(s["metrics"]["module_loads"].as_u64().unwrap() >= 3, "{s}");
    }
    assert!(d.log().contains("evicting"), "the store logs its evictions");
    assert_eq!(metric(&d, "yued_kv_sets_in_use"), 0.0);
}

/// SIGTERM while two jobs are in the stages (one rendering, one in the AR half under
/// --keep-loaded): the daemon stops within seconds, both jobs stay queued in the journal,
/// and after a restart on the same data directory both complete with their ids.
#[test]
fn sigterm_stops_the_stages_and_a_restart_finishes_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--keep-loaded"]);
    let a = d.submit(&song(8.0, 16));
    let b = d.submit(&song(8.0, 16));
    let t0 = Instant::now();
    while d.status(&a)["status"] != "running" || d.status(&a)["stage"] != "synth" {
        assert!(t0.elapsed() < Duration::from_secs(120), "A never reached synth: {}", d.status(&a));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (port, args) = (d.port, d.args.clone());
    let mut d = d;
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let t1 = Instant::now();
    let code = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(t1.elapsed() < Duration::from_secs(30), "yued did not stop after SIGTERM; log: {}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "exit status {code:?}; log: {}", d.log());
    drop(d);
    let d = Daemon::start_on(&data, port, args);
    for id in [&a, &b] {
        let s = d.wait(id, Duration::from_secs(300));
        assert_eq!(s["status"], "done", "{id}: {s}");
    }
}
