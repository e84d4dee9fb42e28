//! The compute stages on the real daemon: under --keep-loaded the next job's AR half runs
//! while the current one renders, and nothing is loaded twice; under the default STRICT
//! policy the two halves trade places for every job (the loads show it), unless the jobs
//! share the AR half's decode steps (`--parallel`), when one AR load serves them all and
//! each song is the one it would be alone.
use std::time::{Duration, Instant};
use yued_e2e::*;

fn metric(d: &Daemon, name: &str) -> f64 {
    let text = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// Submits two songs (A with `a_steps` flow steps) and waits for both; their final statuses.
fn two_jobs(d: &Daemon, a_steps: u32) -> (serde_json::Value, serde_json::Value) {
    let a = d.submit(&song(8.0, a_steps));
    let b = d.submit(&song(8.0, 16));
    let sa = d.wait(&a, Duration::from_secs(600));
    let sb = d.wait(&b, Duration::from_secs(600));
    for s in [&sa, &sb] {
        assert_eq!(s["status"], "done", "{s}; log: {}", d.log());
    }
    (sa, sb)
}

/// The daemon log's lines of `job`, in order.
fn job_lines(log: &str, job: &str) -> Vec<String> {
    log.lines().filter(|l| l.contains(&format!("job={job}"))).map(String::from).collect()
}

/// The ModelStore's load and evict events from the log, in order: (loaded?, module).
fn store_events(log: &str) -> Vec<(bool, String)> {
    log.lines()
        .filter_map(|l| {
            let loaded = l.contains("module loaded");
            if !loaded && !l.contains("evicting") {
                return None;
            }
            let m = l.split_whitespace().find_map(|w| w.strip_prefix("module="))?;
            Some((loaded, m.trim_matches('"').to_string()))
        })
        .collect()
}

#[test]
fn keep_loaded_overlaps_the_stages_of_two_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--keep-loaded"]);
    // Warm-up loaded the three modules before the daemon reported ready.
    assert_eq!(metric(&d, "yued_module_loads_total"), 3.0);
    // A renders 256 flow steps (512 forwards over its block), B's AR samples 200 tokens:
    // on any machine B's codes are ready while A is still rendering.
    let a_steps = 256;
    let (sa, sb) = two_jobs(&d, a_steps);
    let log = d.log();
    let ids: Vec<String> = log
        .lines()
        .filter(|l| l.contains("job queued"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("job=")).map(String::from))
        .collect();
    let (a, b) = (&ids[0], &ids[1]);
    let at = |what: &str, job: &str| {
        log.lines()
            .position(|l| l.contains(what) && l.contains(&format!("job={job}")))
            .unwrap_or_else(|| panic!("no '{what}' for {job}: {log}"))
    };
    assert!(
        at("handing over", b) < at("job finished", a),
        "job B's AR ran while job A rendered: {:?}",
        job_lines(&log, b)
    );
    assert!(store_events(&log).iter().all(|(loaded, _)| *loaded), "nothing is evicted");
    assert_eq!(metric(&d, "yued_module_loads_total"), 3.0, "nothing is loaded twice");
    for s in [&sa, &sb] {
        assert_eq!(s["metrics"]["module_loads"], 0, "{s}");
        assert_eq!(s["metrics"]["resident_modules"], 3, "{s}");
        assert_eq!(s["metrics"]["keep_loaded"], true, "{s}");
    }
    assert_eq!(metric(&d, "yued_kv_sets_in_use"), 0.0, "every KV set is freed");
    // Two songs of 8 s: 2 x 200 semantic tokens sampled, at a measured speed.
    assert!(metric(&d, "yued_ar_tokens_total{family=\"yue2\",stage=\"semantic\"}") >= 400.0);
    assert!(metric(&d, "yued_ar_tokens_per_second_count{family=\"yue2\",stage=\"semantic\"}") >= 2.0);
}

/// Under STRICT the store's own events say it: every load finds only its own group
/// resident (the AR half never beside the NAR or the VAE), and each job swaps the halves.
#[test]
fn strict_swaps_the_halves_for_every_job() {
    let dir = tempfile::tempdir().unwrap();
    // One job at a time: two jobs in one batch would share one AR load.
    let d = Daemon::start(&dir.path().join("data"), &["--strict", "--parallel", "1"]);
    assert_eq!(metric(&d, "yued_module_loads_total"), 0.0, "STRICT loads at the first request");
    let (sa, sb) = two_jobs(&d, 16);
    let group = |m: &str| if m.ends_with("/ar") { "ar" } else { "synthesis" };
    let mut resident: Vec<String> = Vec::new();
    let mut loads = std::collections::BTreeMap::<String, u32>::new();
    for (loaded, m) in store_events(&d.log()) {
        if loaded {
            assert!(resident.iter().all(|r| group(r) == group(&m)), "{m} loaded beside {resident:?}; log: {}", d.log());
            resident.push(m.clone());
            *loads.entry(m).or_default() += 1;
        } else {
            resident.retain(|r| *r != m);
        }
    }
    // A: AR, then NAR + VAE (evicting AR); B: AR again (evicting both), NAR, VAE.
    assert_eq!(
        loads.into_iter().collect::<Vec<_>>(),
        vec![("yue2/ar".into(), 2), ("yue2/nar".into(), 2), ("yue2/vae".into(), 2)]
    );
    assert_eq!(metric(&d, "yued_module_loads_total"), 6.0, "log: {}", d.log());
    for s in [&sa, &sb] {
        assert!(s["metrics"]["resident_modules"].as_u64().unwrap() <= 2, "never both groups: {s}");
        assert!(s["metrics"]["module_loads"].as_u64().unwrap() >= 3, "{s}");
    }
    assert_eq!(metric(&d, "yued_kv_sets_in_use"), 0.0);
}

/// SIGTERM while jobs are in the stages (one rendering, others in the AR half under
/// --keep-loaded): the daemon stops within seconds, the jobs stay queued in the journal,
/// after a restart on the same data directory they complete with their ids, and their waits
/// are not measured a second time.
#[test]
fn sigterm_stops_the_stages_and_a_restart_finishes_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--keep-loaded"]);
    let a = d.submit(&song(8.0, 16));
    let b = d.submit(&song(8.0, 16));
    // C writes codes for long (3000 of them): the stop finds it in the AR half, no song's codes
    // journaled yet.
    let c = d.submit(&song(120.0, 2));
    let t0 = Instant::now();
    while d.status(&a)["status"] != "running" || d.status(&a)["stage"] != "synth" {
        assert!(t0.elapsed() < Duration::from_secs(120), "A never reached synth: {}", d.status(&a));
        std::thread::sleep(Duration::from_millis(10));
    }
    while d.status(&c)["status"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(120), "C never started: {}", d.status(&c));
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
    // Every one of them had started: their waits were measured before the stop (from their
    // submission), not again after it with the downtime in them; C, which had no codes yet, too.
    let t2 = Instant::now();
    while d.status(&c)["progress"].as_f64().unwrap_or(0.0) == 0.0 {
        assert!(t2.elapsed() < Duration::from_secs(120), "C never went on: {}", d.status(&c));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(metric(&d, "yued_queue_wait_seconds_count"), 0.0);
    assert_eq!(metric(&d, "yued_first_audio_seconds_count{family=\"yue2\"}"), 0.0);
    assert_eq!(d.http.post(d.url(&format!("/job?id={c}&cancel=1"))).send().unwrap().status(), 200);
}

/// `stream_chunk_seconds` under --keep-loaded: the synthesis stage paints each chunk while
/// the AR half writes the next, so the first audio frame reaches a listener before the
/// song's codes are complete; the result is the same WAV, byte for byte, as the replay of
/// its codes (which renders the same chunks after the AR half, the STRICT order).
#[test]
fn streamed_chunks_reach_the_listener_while_the_song_is_written() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--keep-loaded", "--vae-core", "16", "--vae-halo", "8"]);
    let mut req: serde_json::Value = serde_json::from_str(&song(40.0, 2)).unwrap();
    req["stream_chunk_seconds"] = 2.0.into();
    req["lm_seed"] = 7.into();
    req["seed"] = 11.into();
    let submitted = Instant::now();
    let id = d.submit(&req.to_string());
    let url = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    // (what, seconds since submission) in arrival order.
    let events: Vec<(String, f64)> =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            let mut seen = Vec::new();
            while let Some(m) = ws.next().await {
                let at = submitted.elapsed().as_secs_f64();
                match m.unwrap() {
                    Message::Binary(_) => seen.push(("audio".to_string(), at)),
                    Message::Text(t) => {
                        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                        seen.push((v["event"].as_str().unwrap_or("?").to_string(), at));
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            seen
        });
    let at = |what: &str| {
        events
            .iter()
            .position(|(e, _)| e == what)
            .unwrap_or_else(|| panic!("no {what} event: {events:?}; log: {}", d.log()))
    };
    assert!(at("audio") < at("codes"), "the first audio comes before the song's codes are complete: {events:?}");
    let (first_audio, done) = (events[at("audio")].1, events[at("done")].1);
    eprintln!(
        "time to first audio {first_audio:.2} s of {done:.2} s (codes complete at {:.2} s)",
        events[at("codes")].1
    );
    let s = d.wait(&id, Duration::from_secs(600));
    assert_eq!(s["status"], "done", "{s}");
    let result = |id: &str| {
        let body = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap().bytes().unwrap();
        multipart_parts(&body, "yue2-batch-boundary")
    };
    let parts = result(&id);
    let replay: serde_json::Value = serde_json::from_slice(&parts[0].1).unwrap();
    assert_eq!(replay["stream_chunk_seconds"], 2.0, "the replay records the chunking");
    assert_eq!(replay["semantic_tokens"].as_str().unwrap().split(',').count(), 1000);
    let again = d.submit(&replay.to_string());
    assert_eq!(d.wait(&again, Duration::from_secs(600))["status"], "done");
    let wav = |p: &[(String, Vec<u8>)]| p.iter().find(|(t, _)| t.contains("audio/wav")).unwrap().1.clone();
    assert!(wav(&result(&again)) == wav(&parts), "the replay renders the streamed song's WAV byte for byte");
    assert!(d.log().contains("streamed chunk by chunk"), "the streamed path ran");
    assert_eq!(metric(&d, "yued_kv_sets_in_use"), 0.0, "every chunk's KV set is freed");
}

/// MiniMax Music 3 under --keep-loaded: the synthesis stage renders each 200-frame window
/// as soon as its frames' states exist (restated chunk by chunk while the LM writes), so
/// the first audio reaches a listener before the song's codes are complete; the result is
/// the WAV its replay renders, byte for byte. 40 s: the LM has 800 frames still to write when
/// the first window can render (at 20 s, with 300, a loaded run once heard it after the codes).
#[test]
fn a_minimax_window_is_heard_while_the_song_is_written() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--keep-loaded"]);
    let body = r#"{"family": "mm3", "caption": "<|genre pop|> bright", "lyrics": "[Verse] la la", "duration": 40,
        "steps": 2, "lm_seed": 21, "seed": 9, "output_format": "wav16"}"#;
    let id = d.submit(body);
    let url = d.ws_url(&format!("/stream?id={id}&format=pcm16"));
    let events: Vec<String> =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            let mut seen = Vec::new();
            while let Some(m) = ws.next().await {
                match m.unwrap() {
                    Message::Binary(_) => seen.push("audio".to_string()),
                    Message::Text(t) => seen.push(
                        serde_json::from_str::<serde_json::Value>(t.as_str()).unwrap()["event"]
                            .as_str()
                            .unwrap_or("?")
                            .to_string(),
                    ),
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            seen
        });
    let s = d.wait(&id, Duration::from_secs(600));
    assert_eq!(s["status"], "done", "{s}; log: {}", d.log());
    let at =
        |what: &str| events.iter().position(|e| e == what).unwrap_or_else(|| panic!("no {what} event: {events:?}"));
    let result = |id: &str| {
        let body = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap().bytes().unwrap();
        multipart_parts(&body, "mm3-batch-boundary")
    };
    let parts = result(&id);
    let replay: serde_json::Value = serde_json::from_slice(&parts[0].1).unwrap();
    let frames = replay["audio_codes"].as_str().unwrap().split(',').count() / 8 - 1;
    assert!(frames > 200, "the song has more than one window ({frames} frames)");
    assert!(at("audio") < at("codes"), "the first window is heard before the song's codes are complete: {events:?}");
    assert!(d.log().contains("streamed window by window"), "the streamed path ran");
    let again = d.submit(&replay.to_string());
    assert_eq!(d.wait(&again, Duration::from_secs(600))["status"], "done");
    let wav = |p: &[(String, Vec<u8>)]| p.iter().find(|(t, _)| t.contains("wav")).unwrap().1.clone();
    assert!(wav(&result(&again)) == wav(&parts), "the replay renders the streamed song's WAV byte for byte");
}

/// `bodies` submitted at once to a daemon started with `extra`: each job's end and result
/// body, the daemon's log and its module loads.
fn jobs_at_once(bodies: &[String], extra: &[&str]) -> (Vec<(String, Vec<u8>)>, String, f64) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), extra);
    let ids: Vec<String> = bodies.iter().map(|b| d.submit(b)).collect();
    let out = ends_and_results(&d, &ids);
    (out, d.log(), metric(&d, "yued_module_loads_total"))
}

/// Each job's end (waited for) and its result body.
fn ends_and_results(d: &Daemon, ids: &[String]) -> Vec<(String, Vec<u8>)> {
    ids.iter()
        .map(|id| {
            let s = d.wait(id, Duration::from_secs(600));
            let body = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap().bytes().unwrap();
            (s["status"].as_str().unwrap_or("?").to_string(), body.to_vec())
        })
        .collect()
}

/// `bodies` submitted at once to a daemon started with `extra` and killed (-9) once at least
/// two of them are in their AR half together, then restarted on the same data: each job's end
/// and result body, and the journal's crash count of each.
fn jobs_at_once_across_a_kill(bodies: &[String], extra: &[&str]) -> (Vec<(String, Vec<u8>)>, Vec<u32>) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), extra);
    let ids: Vec<String> = bodies.iter().map(|b| d.submit(b)).collect();
    let t0 = Instant::now();
    loop {
        let in_ar = |id: &String| {
            let s = d.status(id);
            s["status"] == "running" && matches!(s["stage"].as_str(), Some("plan" | "semantic"))
        };
        if ids.iter().filter(|id| in_ar(id)).count() >= 2 && d.log().contains("joins the AR batch") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "two jobs never decoded together; log: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    let (data, port, args) = d.kill9();
    let d = Daemon::start_on(&data, port, args);
    let out = ends_and_results(&d, &ids);
    let (data, _, _) = d.kill9();
    let records = yued_actors::node::journal_records(&data.join("journal")).unwrap();
    let crashes = ids.iter().map(|id| records.iter().find(|r| r.id.as_str() == id).map_or(0, |r| r.crashes)).collect();
    (out, crashes)
}

/// Three clients' songs (two under guidance, one with a plan stage, different lengths)
/// submitted at once under STRICT: they decode in one batch (one AR load for all three, one
/// synthesis load after it, and the log's joins), and each result is byte for byte the one
/// a daemon running one job at a time gives, also when the daemon is killed (-9) while they
/// decode together and restarted.
#[test]
fn songs_of_different_jobs_decode_together_and_come_out_as_alone() {
    let bodies: Vec<String> = [(12.0, 3, "off"), (16.0, 5, "off"), (10.0, 9, "full")]
        .iter()
        .map(|&(secs, seed, cot)| {
            let mut r: serde_json::Value = serde_json::from_str(&song(secs, 2)).unwrap();
            r["lm_seed"] = seed.into();
            r["seed"] = (seed + 1).into();
            r["cot"] = cot.into();
            r["abc_sampling"] = serde_json::json!({"max_tokens": 24, "min_tokens": 4});
            r["plan_retries"] = 1.into();
            r.to_string()
        })
        .collect();
    let (alone, _, alone_loads) = jobs_at_once(&bodies, &["--strict", "--parallel", "1"]);
    let (batched, log, loads) = jobs_at_once(&bodies, &["--strict", "--parallel", "8"]);
    // One job at a time: the AR half, then the synthesis group, for each (a job whose plan
    // fails loads no synthesis group).
    assert!(alone_loads >= 7.0, "one job at a time swaps the halves for each: {alone_loads}");
    let joins: Vec<&str> = log.lines().filter(|l| l.contains("joins the AR batch")).collect();
    assert!(joins.iter().any(|l| l.contains("members=3")), "the three jobs shared decode steps: {joins:?}");
    assert_eq!(loads, 3.0, "one AR load for the batch, one synthesis load after it; log: {log}");
    for (j, (a, b)) in alone.iter().zip(&batched).enumerate() {
        assert_eq!(a.0, b.0, "job {j}'s end");
        if a.0 == "done" {
            let (x, y) = (a.1.len(), b.1.len());
            match test_device() {
                Some(device) if a.1 != b.1 => say_where_parts_differ(&device, &["--strict"], j, "result", &a.1, &b.1),
                _ => assert!(a.1 == b.1, "job {j}'s result is the same bytes batched as alone ({x} vs {y} bytes)"),
            }
        }
    }
    assert!(
        alone.iter().filter(|a| a.0 == "done").count() >= 2,
        "{:?}",
        alone.iter().map(|a| &a.0).collect::<Vec<_>>()
    );
    // A kill -9 while they decode together: after the restart each job ends as it did alone
    // (those in the stages at the kill resumed once), with the same bytes.
    let (killed, crashes) = jobs_at_once_across_a_kill(&bodies, &["--strict", "--parallel", "8"]);
    assert!(crashes.iter().filter(|&&c| c == 1).count() >= 2, "two or more were decoding at the kill: {crashes:?}");
    for (j, (a, k)) in alone.iter().zip(&killed).enumerate() {
        assert_eq!(a.0, k.0, "job {j}'s end across the kill");
        if a.0 == "done" && test_device().is_none() {
            assert!(a.1 == k.1, "job {j}'s result is the same bytes across a kill of its batch as alone");
        }
    }
}

/// Three MiniMax clients' songs (different lengths and seeds) submitted at once decode in one
/// batch: under STRICT (one AR load for the three, one synthesis load after it) and under
/// --keep-loaded (each song streamed window by window to its synthesis half while the batch
/// decodes on). Each result is byte for byte the one a daemon running one job at a time gives,
/// also across a kill (-9) of the daemon while they decode together under --keep-loaded.
#[test]
fn minimax_songs_of_different_jobs_decode_together_and_come_out_as_alone() {
    let bodies: Vec<String> = [(8, 3), (12, 5), (6, 9)]
        .iter()
        .map(|&(secs, seed)| {
            serde_json::json!({"family": "mm3", "caption": "<|genre pop|> bright", "duration": secs,
                "lyrics": format!("[Verse] la la {seed}"), "steps": 2, "lm_seed": seed, "seed": seed + 1,
                "output_format": "wav16"})
            .to_string()
        })
        .collect();
    let results = |extra: &[&str]| {
        let (out, log, loads) = jobs_at_once(&bodies, extra);
        let parts: Vec<_> =
            out.into_iter().map(|(s, body)| (s, multipart_parts(&body, "mm3-batch-boundary"))).collect();
        (parts, log, loads)
    };
    let (alone, _, alone_loads) = results(&["--strict", "--parallel", "1"]);
    assert_eq!(alone_loads, 15.0, "one job at a time swaps the LM and depth decoder for the synthesis group");
    assert!(alone.iter().all(|a| a.0 == "done"), "{:?}", alone.iter().map(|a| &a.0).collect::<Vec<_>>());
    for extra in [["--strict", "--parallel", "8"], ["--keep-loaded", "--parallel", "8"]] {
        let (batched, log, loads) = results(&extra);
        let joins: Vec<&str> = log.lines().filter(|l| l.contains("joins the AR batch")).collect();
        assert!(joins.iter().any(|l| l.contains("members=3")), "{extra:?}: the three shared decode steps: {joins:?}");
        if extra[0] == "--strict" {
            assert_eq!(loads, 5.0, "one AR load for the batch, one synthesis load after it; log: {log}");
        } else {
            assert!(log.contains("streamed window by window"), "the songs streamed to their synthesis halves");
        }
        for (j, (a, b)) in alone.iter().zip(&batched).enumerate() {
            assert_eq!(a.0, b.0, "{extra:?}: job {j}'s end");
            assert_eq!(a.1.len(), b.1.len(), "{extra:?}: job {j}'s parts");
            for ((ta, xa), (tb, xb)) in a.1.iter().zip(&b.1) {
                assert_eq!(ta, tb);
                match test_device() {
                    Some(device) if xa != xb => say_where_parts_differ(&device, &extra, j, ta, xa, xb),
                    _ => assert!(xa == xb, "{extra:?}: job {j}'s {ta} is the same bytes batched as alone"),
                }
            }
        }
    }
    // A kill -9 while they decode together, each song streaming its windows: after the restart
    // every job is done with the same parts as alone (those in the stages at the kill resumed
    // once, from the codes they had journaled or from the start).
    let (killed, crashes) = jobs_at_once_across_a_kill(&bodies, &["--keep-loaded", "--parallel", "8"]);
    assert!(crashes.iter().filter(|&&c| c == 1).count() >= 2, "two or more were decoding at the kill: {crashes:?}");
    for (j, (a, (end, body))) in alone.iter().zip(killed).enumerate() {
        assert_eq!(a.0, end, "job {j}'s end across the kill");
        if test_device().is_none() {
            assert!(a.1 == multipart_parts(&body, "mm3-batch-boundary"), "job {j}'s parts across a kill as alone");
        }
    }
}

/// On a device a song stepped beside other jobs' rows may round apart from the song alone
/// (a device's products pick their kernel by the rows a step has; docs/NUMERICS.md): where the
/// CPU holds every byte, a device's run says where the two parts differ and by how much.
fn say_where_parts_differ(device: &str, extra: &[&str], j: usize, ty: &str, a: &[u8], b: &[u8]) {
    let how = if ty == "application/json" {
        let (a, b): (serde_json::Value, serde_json::Value) =
            (serde_json::from_slice(a).unwrap(), serde_json::from_slice(b).unwrap());
        let keys = a.as_object().unwrap().keys().filter(|k| a[k.as_str()] != b[k.as_str()]);
        // A list (a song's codes, comma-separated): where the two part, and their lengths.
        let at = |k: &String| match (a[k.as_str()].as_str(), b[k.as_str()].as_str()) {
            (Some(x), Some(y)) => {
                let (x, y): (Vec<&str>, Vec<&str>) = (x.split(',').collect(), y.split(',').collect());
                let first = x.iter().zip(&y).position(|(p, q)| p != q).unwrap_or(x.len().min(y.len()));
                // Rounding tips a draw somewhere along a song; a batch path that is wrong parts at once.
                assert!(first >= 8, "{extra:?}: job {j}'s {k} part within the first frame (item {first})");
                format!("{k} (from item {first}; {} and {} items)", x.len(), y.len())
            }
            _ => k.clone(),
        };
        format!("the fields {}", keys.map(at).collect::<Vec<_>>().join(", "))
    } else if ty.starts_with("audio/wav") {
        let samples = |x: &[u8]| -> Vec<f64> {
            hound::WavReader::new(x).unwrap().samples::<i16>().map(|v| f64::from(v.unwrap())).collect()
        };
        let (a, b) = (samples(a), samples(b));
        let (d, n): (f64, f64) = a.iter().zip(&b).fold((0.0, 0.0), |(d, n), (x, y)| (d + (x - y).powi(2), n + y * y));
        format!("{} and {} samples, rel. RMS {:.1e}", a.len(), b.len(), (d / n.max(1.0)).sqrt())
    } else {
        let first = a.iter().zip(b).position(|(x, y)| x != y);
        format!("{} and {} bytes, apart from byte {first:?}", a.len(), b.len())
    };
    eprintln!("{device}: {extra:?}: job {j}'s {ty} batched differs from alone: {how}");
}

/// Residency by default fits the box: the demo's groups and the KV cache of its rows fit
/// this machine's memory, so every group stays resident (warmed up before ready, /props
/// says why); rows whose KV cache cannot fit make it STRICT; the flags force either.
#[test]
fn residency_keeps_every_group_when_the_memory_holds_them_and_says_why() {
    let props_of = |extra: &[&str]| -> (serde_json::Value, f64) {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(&dir.path().join("data"), extra);
        let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
        (props, metric(&d, "yued_module_loads_total"))
    };
    let (auto, loads) = props_of(&["--parallel", "4"]);
    assert_eq!(auto["residency"], "keep-loaded", "{auto}");
    assert!(auto["residency_reason"].as_str().unwrap().starts_with("every group fits: weights"), "{auto}");
    assert_eq!(auto["parallel"], 4);
    assert!(auto["batch_kv_bytes"].as_u64().unwrap() > 0, "{auto}");
    assert_eq!(loads, 3.0, "the groups are loaded before the daemon is ready");
    // A million rows' KV cache at the full context fits no machine.
    let (big, loads) = props_of(&["--parallel", "1000000"]);
    assert_eq!(big["residency"], "strict", "{big}");
    assert!(big["residency_reason"].as_str().unwrap().starts_with("one group at a time (STRICT)"), "{big}");
    assert_eq!(loads, 0.0, "STRICT loads at the first request");
    let (strict, _) = props_of(&["--strict"]);
    assert_eq!((strict["residency"].as_str(), strict["residency_reason"].as_str()), (Some("strict"), Some("--strict")));
    let (kept, _) = props_of(&["--keep-loaded"]);
    assert_eq!(kept["residency_reason"], "--keep-loaded");
}
