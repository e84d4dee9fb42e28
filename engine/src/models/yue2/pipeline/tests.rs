//! Whole requests on the tiny demo model.
use super::*;
use crate::models::yue2::demo::{write_demo, Preset};

fn pipeline(max_seq: usize) -> (tempfile::TempDir, Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
    let p = Pipeline::load(
        &bb,
        &vae,
        Backend::for_tests(2),
        &PipelineOptions { max_seq, vae_core: 16, vae_halo: 16, ..Default::default() },
    )
    .unwrap();
    (dir, p)
}

/// A 1.2 s song (30 frames) in two variations.
fn request() -> Settings {
    let mut r = crate::test_util::yue2_settings(crate::models::yue2::prompt::Cot::Off, 30);
    r.style = "ambient".into();
    r.lyrics = "[verse] hum".into();
    (r.lm_seed, r.seed, r.steps, r.variations) = (3, 8, 2, 2);
    r.semantic.min_tokens = 30;
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
    assert_eq!(tracks[1].replay(&req).seed, 9);
    assert_eq!(t0.replay(&req).variations, 1);
    assert_ne!(tracks[0].pcm, tracks[1].pcm, "variations draw different noise");
    // The replay request renders the same audio bit for bit.
    let again = p.run(&t0.replay(&req), &CancelToken::new(), &mut |_| {}).unwrap();
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
    req.variations = 1;
    req.replay = Some((0..150).map(|c| c * 7 % 1024).collect());
    req.songs = 1;
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
fn oversized_requests_are_refused() {
    let (_d, mut p) = pipeline(0);
    let mut req = request();
    req.budget = 50_000;
    let e = p.run(&req, &CancelToken::new(), &mut |_| {}).unwrap_err().to_string();
    assert!(e.starts_with("duration:"), "{e}");
}

#[test]
fn streamed_chunks_are_handed_out_while_written_and_render_the_composed_audio() {
    let (_d, mut p) = pipeline(0);
    let mut req = request();
    req.budget = 125;
    req.semantic.min_tokens = 125;
    req.songs = 2;
    req.variations = 1;
    req.stream = Some((50, 25));
    // The whole request at once (what `yued synth` and a STRICT daemon do).
    let whole = p.run(&req, &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(whole.len(), 2);
    assert_eq!(whole[0].frames, 125);

    // Streamed: chunks come out of the semantic stage while it writes.
    enum Seen {
        Progress,
        Chunk(u32, ChunkSpan),
        End(u32),
    }
    let log = std::cell::RefCell::new(Vec::new());
    let mut ready = Vec::new();
    let metas = p
        .shared
        .compose_streamed(
            &mut p.ar,
            &p.backend,
            &req,
            &CancelToken::new(),
            &mut |e| {
                if let Event::Progress { phase: Phase::Semantic, .. } = e {
                    log.borrow_mut().push(Seen::Progress)
                }
            },
            &mut |r| {
                match &r {
                    ChunkReady::Chunk { song, chunk } => log.borrow_mut().push(Seen::Chunk(*song, chunk.span)),
                    ChunkReady::SongEnd(m) => log.borrow_mut().push(Seen::End(m.index)),
                }
                ready.push(r)
            },
        )
        .unwrap();
    assert_eq!(metas.len(), 2);
    let log = log.into_inner();
    // 2 s chunks (50 frames) behind 25 frames of context: [0, 50), [25 | 50, 100), [75 | 100, 125).
    let spans: Vec<ChunkSpan> =
        log.iter().filter_map(|s| if let Seen::Chunk(0, sp) = s { Some(*sp) } else { None }).collect();
    assert_eq!(
        spans,
        vec![
            ChunkSpan { context: 0, start: 0, end: 50 },
            ChunkSpan { context: 25, start: 50, end: 100 },
            ChunkSpan { context: 75, start: 100, end: 125 }
        ]
    );
    // The first chunk is out the step its 50th code is written, long before the last step.
    let first = log.iter().position(|s| matches!(s, Seen::Chunk(..))).unwrap();
    let steps_before = log[..first].iter().filter(|s| matches!(s, Seen::Progress)).count();
    assert_eq!(steps_before, 50, "the first chunk waits for its 50 codes only");
    // Each song's end follows its last chunk.
    for song in 0..2 {
        let last_chunk = log.iter().rposition(|s| matches!(s, Seen::Chunk(x, _) if *x == song)).unwrap();
        let end = log.iter().position(|s| matches!(s, Seen::End(x) if *x == song)).unwrap();
        assert!(end > last_chunk);
    }

    // Rendered chunk by chunk as they came (songs interleaved), then decoded: the same
    // audio, bit for bit, as the whole request's.
    let mut noise: Vec<SongNoise> = (0..2).map(|_| SongNoise::new(req.seed, 1, 64, 1)).collect();
    let mut latents = vec![Vec::new(); 2];
    let mut codes = vec![Vec::new(); 2];
    for r in ready {
        match r {
            ChunkReady::Chunk { song, chunk } => {
                let s = song as usize;
                p.shared
                    .render_chunk(
                        &mut p.nar,
                        &p.backend,
                        song,
                        chunk,
                        &mut noise[s],
                        &req,
                        (0, 1),
                        &CancelToken::new(),
                        &mut |e| {
                            if let Event::Latents { start_frame, latents: l, .. } = e {
                                assert_eq!(start_frame * 64, latents[s].len());
                                latents[s].extend_from_slice(l)
                            }
                        },
                    )
                    .unwrap();
            }
            ChunkReady::SongEnd(m) => codes[m.index as usize] = m.codes,
        }
    }
    for s in 0..2 {
        assert_eq!(codes[s], whole[s].codes);
        assert_eq!(latents[s], whole[s].latents, "song {s}: latents");
        let pcm = p.vae.decode_tiled(&p.backend, &latents[s], 16, 16, &CancelToken::new(), &mut |_| {}).unwrap();
        assert_eq!(pcm, whole[s].pcm, "song {s}: audio");
    }
    // The replay request keeps the setting, and with it the audio.
    assert_eq!(whole[1].replay(&req).stream, Some((50, 25)));
    let again = p.run(&whole[1].replay(&req), &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(again[0].pcm, whole[1].pcm);
    // A different chunking is a different render of the same codes.
    let mut plain = whole[1].replay(&req);
    plain.stream = None;
    let one_chunk = p.run(&plain, &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(one_chunk[0].codes, whole[1].codes);
    assert_ne!(one_chunk[0].latents, whole[1].latents, "one joint solve differs from three chunked ones");
}

/// AB2 renders the same codes with its own latents (17 evaluations at 16 steps instead of
/// 32), and its track's replay, which keeps the solver, renders them again bit for bit.
#[test]
fn the_ab2_solver_renders_its_own_latents_and_its_replay_keeps_them() {
    use crate::models::yue2::nar::Solver;
    let (_d, mut p) = pipeline(0);
    let mut req = request();
    (req.variations, req.steps) = (1, 4);
    let mid = p.run(&req, &CancelToken::new(), &mut |_| {}).unwrap();
    req.solver = Solver::Ab2;
    let mut steps = 0;
    let ab2 = p
        .run(&req, &CancelToken::new(), &mut |e| {
            if let Event::Progress { phase: Phase::Synth, .. } = e {
                steps += 1
            }
        })
        .unwrap();
    assert_eq!(steps, 4, "a progress report per step, whatever the solver");
    assert_eq!(ab2[0].codes, mid[0].codes);
    assert_ne!(ab2[0].latents, mid[0].latents);
    assert_eq!(ab2[0].replay(&req).solver, Solver::Ab2);
    let again = p.run(&ab2[0].replay(&req), &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(again[0].pcm, ab2[0].pcm);
    assert_eq!((Solver::Midpoint.evaluations(16), Solver::Ab2.evaluations(16)), (32, 17));
}
