//! Whole requests on the tiny demo model.
use super::*;
use crate::models::yue2::demo::{write_demo, Preset};

fn pipeline(max_seq: usize) -> (tempfile::TempDir, Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
    let p = Pipeline::load(&bb, &vae, Backend::for_tests(2), &PipelineOptions { max_seq, vae_core: 16, vae_halo: 16 }).unwrap();
    (dir, p)
}

fn request() -> Yue2Request {
    let mut r = Yue2Request { style: "ambient".into(), lyrics: "[verse] hum".into(), cot: CotMode::Off, duration: 1.2, lm_seed: 3, seed: 8, steps: 2, synth_batch_size: 2, ..Default::default() };
    r.semantic_sampling.min_tokens = 30;
    r
}

#[test]
fn a_request_renders_tracks_of_exact_length_and_replays_bit_for_bit() {
    let (_d, mut p) = pipeline(0);
    let req = request();
    let mut tiles = 0;
    let mut latents_events = 0;
    let tracks = p
        .run(&req, &CancelToken::new(), &mut |e| match e {
            Event::Tile { .. } => tiles += 1,
            Event::Latents { .. } => latents_events += 1,
            _ => {}
        })
        .unwrap();
    assert_eq!(tracks.len(), 2);
    let t0 = &tracks[0];
    assert_eq!(t0.frames, 30, "the duration budget (1.2 s = 30 frames) ends the song: the floor blocks an earlier end");
    assert_eq!(t0.pcm.len(), 2 * (1920 * t0.frames - 64));
    assert_eq!(t0.latents.len(), t0.frames * 64);
    assert_eq!(latents_events, 2);
    assert!(tiles >= 4, "two tracks of two tiles each, got {tiles}");
    assert_eq!(tracks[1].replay.seed, 9);
    assert_eq!(t0.replay.synth_batch_size, 1);
    assert_ne!(tracks[0].pcm, tracks[1].pcm, "variations draw different noise");
    // The replay request renders the same audio bit for bit.
    let again = p.run(&t0.replay, &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].codes, t0.codes);
    assert_eq!(again[0].latents, t0.latents, "replay latents");
    assert_eq!(again[0].pcm, t0.pcm, "replay audio");
}

#[test]
fn long_songs_render_in_chunks() {
    // A small context forces several chunks; the result keeps the song's length.
    let (_d, mut p) = pipeline(200);
    let mut req = request();
    req.synth_batch_size = 1;
    req.semantic_tokens = (0..150).map(|c| (c * 7 % 1024).to_string()).collect::<Vec<_>>().join(",");
    let mut starts = Vec::new();
    let tracks = p
        .run(&req, &CancelToken::new(), &mut |e| {
            if let Event::Latents { start_frame, .. } = e {
                starts.push(start_frame)
            }
        })
        .unwrap();
    assert!(starts.len() >= 2, "chunks started at {starts:?}");
    assert_eq!(tracks[0].frames, 150);
    assert_eq!(tracks[0].pcm.len(), 2 * (1920 * 150 - 64));
}

#[test]
fn unresolved_seeds_and_oversized_requests_are_refused() {
    let (_d, mut p) = pipeline(0);
    let mut req = request();
    req.seed = -1;
    assert!(p.run(&req, &CancelToken::new(), &mut |_| {}).is_err());
    let mut req = request();
    req.duration = 2000.0;
    req.semantic_sampling.max_tokens = 100_000;
    let e = p.run(&req, &CancelToken::new(), &mut |_| {}).unwrap_err().to_string();
    assert!(e.starts_with("duration:"), "{e}");
}
