//! Songs of different jobs in one decode step come out exactly as they do alone: with and
//! without guidance, with the plan stage, a replay, prompts prefilled piece by piece, jobs
//! joining and leaving mid-run and one cancelled.
use super::*;
use crate::models::yue2::demo::{write_demo, Preset};
use crate::models::yue2::prompt::Cot;

/// A job's outcome: each song's (index, score, codes, ended), a hash of the bits of the K
/// its NAR will attend to (every layer; 0 for a song of several chunks), or the error.
type Outcome = Result<Vec<(u32, String, Vec<u32>, bool, u64)>, String>;

/// A hash (FNV-1a) of every layer's K of a set, bit for bit.
fn k_bits(kv: &KvSet) -> u64 {
    let bits = (0..kv.layers()).flat_map(|l| kv.read_k(l)).map(f32::to_bits);
    bits.fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn pipeline() -> (tempfile::TempDir, Pipeline) {
    pipeline_of(false)
}

/// The tiny demo, its backbone's matrices in Q8_0 with `q8` (the published weights' type:
/// the row-exact steps then take the CPU's Q8_0 row product, `ggml::q8`).
fn pipeline_of(q8: bool) -> (tempfile::TempDir, Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let (mut bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
    if q8 {
        let q = dir.path().join("backbone-q8_0.gguf");
        crate::models::quantize::quantize_file(&bb, &q, crate::models::quantize::QuantTarget::Q8_0, &mut |_, _| {})
            .unwrap();
        bb = q;
    }
    let opts = PipelineOptions { vae_core: 16, vae_halo: 16, prefill_chunk: 8, ..Default::default() };
    (dir, Pipeline::load(&bb, &vae, Backend::for_tests(2), &opts).unwrap())
}

/// The jobs: (the step they join at, their settings).
fn jobs() -> Vec<(usize, Settings)> {
    let job = |cot, frames, lm_seed: u64, cfg: f32, songs: usize, lyrics: &str| {
        let mut s = crate::test_util::yue2_settings(cot, frames);
        s.style = "lo-fi, piano".into();
        s.lyrics = lyrics.into();
        (s.lm_seed, s.cfg_scale, s.songs) = (lm_seed, cfg, songs);
        s.plan.max_tokens = 24;
        s.plan.min_tokens = 4;
        s.plan_retries = 1;
        s
    };
    let mut replay = job(Cot::Off, 30, 5, 1.0, 1, "[chorus] oh");
    replay.replay = Some((0..30).map(|c| c * 37 % 1024).collect());
    vec![
        (0, job(Cot::Off, 40, 1, 1.5, 2, "[verse]\nla la")),
        (0, job(Cot::Full, 30, 7, 1.0, 1, "[verse]\nsing along")),
        (2, replay),
        (3, job(Cot::Off, 25, 11, 1.0, 1, "[verse]\na longer verse to prefill in pieces of eight")),
        (3, job(Cot::Off, 45, 13, 1.2, 1, "[bridge]\nhum")),
        (12, job(Cot::Melody, 50, 17, 1.3, 1, "[outro]\nbye")),
        // A prompt over 512 tokens, 80 codes: the shapes where the CPU's fast kernels split a
        // decode step's attention over the cache and tile a forward of many queries.
        (14, job(Cot::Off, 80, 19, 1.0, 1, &"[verse]\nla ".repeat(60))),
    ]
}

/// Collects a writer's songs as an outcome.
fn outcome(items: &[Written], end: Result<Vec<WrittenSong>, PipelineError>) -> Outcome {
    let told: Vec<_> = items
        .iter()
        .filter_map(|w| match w {
            Written::Codes(m) => Some((m.index, m.abc.clone(), m.codes.clone(), m.ended)),
            _ => None,
        })
        .collect();
    end.map(|songs| {
        assert_eq!(songs.len(), told.len(), "every song told once");
        told.into_iter()
            .zip(songs)
            .map(|((i, a, c, e), w)| (i, a, c, e, w.kv.as_ref().map(k_bits).unwrap_or_default()))
            .collect()
    })
    .map_err(|e| e.to_string())
}

fn alone(p: &mut Pipeline, s: &Settings) -> Outcome {
    let mut st = p.shared.ar_stages(&mut p.ar, &p.backend);
    let mut w = Writer::new(&mut st, s.clone(), false).unwrap();
    let mut items = Vec::new();
    while !w.done() {
        match w.step(&mut st) {
            Ok(mut i) => items.append(&mut i),
            Err(e) => return Err(e.to_string()),
        }
    }
    outcome(&items, w.finish())
}

#[test]
fn songs_decoded_beside_other_jobs_are_the_songs_decoded_alone() {
    batched_songs_are_the_songs_alone(false);
}

#[test]
fn songs_decoded_beside_other_jobs_are_the_songs_decoded_alone_on_q8_0_weights() {
    batched_songs_are_the_songs_alone(true);
}

fn batched_songs_are_the_songs_alone(q8: bool) {
    let (_d, mut p) = pipeline_of(q8);
    let jobs = jobs();
    let want: Vec<Outcome> = jobs.iter().map(|(_, s)| alone(&mut p, s)).collect();
    // The demo's random weights write malformed scores: the planning jobs fail after their
    // retries (the same failure batched), the others write songs.
    assert!(want.iter().filter(|o| o.is_ok()).count() >= 4, "the jobs mostly write songs: {want:?}");
    // Job 4 is cancelled at step 9: it leaves, and the others are not disturbed.
    let cancelled = 4;
    let mut st = p.shared.ar_stages(&mut p.ar, &p.backend);
    let mut running: Vec<(usize, Writer, Vec<Written>)> = Vec::new();
    let mut got: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut most_rows = 0;
    let mut step = 0;
    while step < 10_000 {
        for (j, (at, s)) in jobs.iter().enumerate() {
            if *at == step {
                running.push((j, Writer::new(&mut st, s.clone(), false).unwrap(), Vec::new()));
            }
        }
        if step == 9 {
            running.retain(|(j, _, _)| *j != cancelled);
        }
        if running.is_empty() && step > 12 {
            break;
        }
        most_rows = most_rows.max(running.iter().map(|(_, w, _)| w.rows()).sum::<usize>());
        let mut writers: Vec<&mut Writer> = running.iter_mut().map(|(_, w, _)| w).collect();
        // A budget of one piece: joiners that prefill at once take turns.
        let results = step_together(&mut st, &mut writers, 8).unwrap();
        let mut ended = Vec::new();
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(mut items) => running[k].2.append(&mut items),
                Err(e) => {
                    got[running[k].0] = Some(Err(e.to_string()));
                    ended.push(k);
                }
            }
            if running[k].1.done() && !ended.contains(&k) {
                ended.push(k);
            }
        }
        ended.sort_unstable();
        for k in ended.into_iter().rev() {
            let (j, w, items) = running.remove(k);
            if got[j].is_none() {
                got[j] = Some(outcome(&items, w.finish()));
            }
        }
        step += 1;
    }
    assert!(running.is_empty(), "every job left the batch");
    assert!(most_rows >= 6, "several jobs shared steps ({most_rows} rows at most)");
    for (j, want) in want.iter().enumerate() {
        if j == cancelled {
            assert!(got[j].is_none(), "the cancelled job left without an outcome");
            continue;
        }
        assert_eq!(got[j].as_ref(), Some(want), "job {j} batched against alone");
    }
}

#[test]
fn a_prompt_prefilled_in_pieces_gives_the_logits_of_one_forward() {
    // Chunked prefill is a different sum order from one forward; it stays within the
    // kernels' rounding and keeps the sampled codes of the demo.
    let (_d, mut p) = pipeline();
    let (_, s) = jobs().remove(3);
    let codes = |o: Outcome| o.map(|v| v.into_iter().map(|(i, a, c, e, _)| (i, a, c, e)).collect::<Vec<_>>());
    let chunked = codes(alone(&mut p, &s));
    p.shared.prefill_chunk = 4096;
    let whole = codes(alone(&mut p, &s));
    assert_eq!(chunked, whole);
}

/// A song's set as its writer leaves it (its stream completed with music_end, no prefill)
/// is, bit for bit, the set a replay of its codes prefills: under guidance with two songs,
/// after a continuation's source, with the prompt in pieces. The NAR of a replay attends to
/// exactly what the NAR of the song did.
#[test]
fn a_written_songs_set_is_the_set_its_replay_prefills() {
    written_set_is_the_replays(false);
}

#[test]
fn a_written_songs_set_is_the_set_its_replay_prefills_on_q8_0_weights() {
    written_set_is_the_replays(true);
}

fn written_set_is_the_replays(q8: bool) {
    let (_d, mut p) = pipeline_of(q8);
    let mut continued = jobs()[3].1.clone();
    continued.source = (0..12).map(|c| c * 53 % 1024).collect();
    continued.budget = 30;
    // A prompt over 512 tokens and 80 codes: where the CPU's fast kernels split a decode
    // step's attention over the cache and tile a forward of many codes (a different
    // rounding from a step's); the row-exact kernels give both the same bits.
    let long = jobs().pop().unwrap().1;
    for s in [jobs()[0].1.clone(), jobs()[4].1.clone(), continued, long] {
        let mut st = p.shared.ar_stages(&mut p.ar, &p.backend);
        let mut w = Writer::new(&mut st, s.clone(), false).unwrap();
        while !w.done() {
            w.step(&mut st).unwrap();
        }
        let songs = w.finish().unwrap();
        assert_eq!(songs.len(), s.songs);
        for song in songs {
            // A device without row-exact kernels prefills every chunk, as a replay does.
            let Some(kv) = song.kv else {
                assert!(!p.backend.has_row_exact_kernels(), "a song of one chunk keeps its set");
                continue;
            };
            assert!(song.meta.codes.starts_with(&s.source));
            let replay = st.prefill_sequence(song.prefix.clone(), &[], &song.meta.codes).unwrap();
            assert_eq!(kv.len(), song.prefix.len() + song.meta.codes.len() + 1);
            assert_eq!(replay.kv.len(), kv.len());
            assert_eq!(k_bits(&kv), k_bits(&replay.kv), "song {} of {s:?}", song.meta.index);
        }
    }
}
