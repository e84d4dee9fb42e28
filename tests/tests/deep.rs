//! The daemon on the `deep` demo model: the published depth (28 layers) and head layout
//! (16 query heads over 8 KV heads) at tiny widths, so bugs that need depth show here. A
//! KV stream copy sized for 2 layers once aborted every guided or batched song at 28.
use std::time::Duration;
use yued_e2e::*;

fn request(extra: &str) -> String {
    format!(
        r#"{{"style": "lo-fi piano", "lyrics": "[verse] hum", "cot": "off", "duration": 1.5, "steps": 2,
            "output_format": "wav16", "semantic_sampling": {{"min_tokens": 30}}{extra}}}"#
    )
}

#[test]
fn guided_and_batched_songs_render_at_the_published_depth() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let flags = deep_model(&models);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--max-batch", "2"]);
    let d = Daemon::start(&dir.path().join("data"), &args);
    // cot off: the default guidance is 1.01, so both streams decode as a pair and the
    // song's stream is copied out of the pair's set.
    let guided = d.submit(&request(""));
    // Two songs in one batch, unguided: two streams of one set, each copied out.
    let batched = d.submit(&request(r#", "lm_batch_size": 2, "cfg_scale": 1.0"#));
    for (id, tracks) in [(&guided, 1), (&batched, 2)] {
        let s = d.wait(id, Duration::from_secs(600));
        assert_eq!(s["status"], "done", "{id}: {s}; log: {}", d.log());
        let r = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap();
        let parts = multipart_parts(&r.bytes().unwrap(), "yue2-batch-boundary");
        let audio = parts.iter().filter(|(ct, _)| ct.starts_with("audio/")).count();
        assert_eq!(audio, tracks, "{id}: parts {:?}", parts.iter().map(|p| &p.0).collect::<Vec<_>>());
    }
}
