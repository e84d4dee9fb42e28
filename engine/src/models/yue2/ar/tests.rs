//! Parity of the AR half against the float64 numpy reference (scripts/ref/qwen3_reference.py)
//! on the tiny random weights committed in fixtures/ar.
use super::*;
use crate::gguf::GgufFile;
use crate::test_util::{argmax, rel_rms};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ar").join(name)
}

struct Case {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn load_case(key: &str) -> Case {
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("cases.json")).unwrap()).unwrap();
    let vocab = cases["vocab"].as_u64().unwrap() as usize;
    let tokens: Vec<u32> = cases[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let raw = std::fs::read(fixture(cases["files"][key].as_str().unwrap())).unwrap();
    let flat: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(flat.len(), tokens.len() * vocab);
    Case { tokens, logits: flat.chunks(vocab).map(|r| r.to_vec()).collect() }
}

fn check_row(got: &[f32], want: &[f32], what: &str) {
    let e = rel_rms(got, want);
    assert!(e < 2e-2, "{what}: relative RMS {e:.3e}");
    assert_eq!(argmax(got), argmax(want), "{what}: argmax differs (rel RMS {e:.3e})");
}

fn setup() -> (Backend, ArModel) {
    let f = GgufFile::open(fixture("tiny-qwen3.gguf")).unwrap();
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::for_tests(2);
    let model = ArModel::load(&f, &info, &backend).unwrap();
    (backend, model)
}

#[test]
fn prefill_matches_reference_at_every_position() {
    let (backend, mut m) = setup();
    let case = load_case("A");
    let vocab = m.cfg.vocab_size as u32;
    let mut sets = vec![KvSet::new(&backend, m.cfg.kv_dims(), 64).unwrap()];
    let out =
        m.forward(&backend, &mut sets, &[SeqInput { tokens: &case.tokens, set: 0 }], 0..vocab, Positions::All).unwrap();
    assert_eq!(sets[0].len(), case.tokens.len());
    for (p, row) in out.per_seq[0].iter().enumerate() {
        check_row(row, &case.logits[p], &format!("prefill A position {p}"));
    }
}

#[test]
fn batched_decode_with_mixed_cache_lengths_matches_reference() {
    let (backend, mut m) = setup();
    let (a, b) = (load_case("A"), load_case("B"));
    let vocab = m.cfg.vocab_size as u32;
    let mut sets =
        vec![KvSet::new(&backend, m.cfg.kv_dims(), 32).unwrap(), KvSet::new(&backend, m.cfg.kv_dims(), 32).unwrap()];
    // Prefill different lengths into the two sets.
    let pa = m
        .forward(&backend, &mut sets, &[SeqInput { tokens: &a.tokens[..8], set: 0 }], 0..vocab, Positions::Last)
        .unwrap();
    check_row(&pa.per_seq[0][0], &a.logits[7], "prefill A[..8] last");
    m.forward(&backend, &mut sets, &[SeqInput { tokens: &b.tokens[..4], set: 1 }], 0..vocab, Positions::Last).unwrap();
    // Decode both in one batch, one token each, until B runs out; set order swapped in the batch.
    let mut step = 0;
    while 4 + step < b.tokens.len() {
        let (ta, tb) = ([a.tokens[8 + step]], [b.tokens[4 + step]]);
        let out = m
            .forward(
                &backend,
                &mut sets,
                &[SeqInput { tokens: &tb, set: 1 }, SeqInput { tokens: &ta, set: 0 }],
                0..vocab,
                Positions::Last,
            )
            .unwrap();
        check_row(&out.per_seq[0][0], &b.logits[4 + step], &format!("decode B step {step}"));
        check_row(&out.per_seq[1][0], &a.logits[8 + step], &format!("decode A step {step}"));
        step += 1;
    }
    assert_eq!(sets[1].len(), b.tokens.len());
    assert_eq!(sets[0].len(), 8 + step);
    // Every batched step after the first reused the first one's graph.
    let (builds, reuses) = m.graph_stats();
    assert_eq!(builds, 3, "two prefills and one decode shape");
    assert_eq!(reuses as usize, step - 1);
    // A continues alone.
    while 8 + step < a.tokens.len() {
        let ta = [a.tokens[8 + step]];
        let out =
            m.forward(&backend, &mut sets, &[SeqInput { tokens: &ta, set: 0 }], 0..vocab, Positions::Last).unwrap();
        check_row(&out.per_seq[0][0], &a.logits[8 + step], &format!("decode A alone step {step}"));
        step += 1;
    }
}

/// Sequences on the streams of one set: a batch on consecutive streams attends in one node
/// per layer, other batches (a gap, a swapped order, unequal token counts) per run; all
/// match the reference, and a stream copied out continues on its own.
#[test]
fn streams_of_one_set_decode_in_one_attention_and_copy_out() {
    let (backend, mut m) = setup();
    let (a, b) = (load_case("A"), load_case("B"));
    let vocab = m.cfg.vocab_size as u32;
    let mut sets = vec![KvSet::with_streams(&backend, m.cfg.kv_dims(), 32, 3).unwrap()];
    // Prefill of unequal lengths in one forward: two runs (A into stream 0, B into stream 2).
    let out = m
        .forward(
            &backend,
            &mut sets,
            &[SeqInput { tokens: &a.tokens[..6], set: 0 }, SeqInput { tokens: &b.tokens[..3], set: 2 }],
            0..vocab,
            Positions::Last,
        )
        .unwrap();
    check_row(&out.per_seq[0][0], &a.logits[5], "prefill A[..6] in stream 0");
    check_row(&out.per_seq[1][0], &b.logits[2], "prefill B[..3] in stream 2");
    m.forward(&backend, &mut sets, &[SeqInput { tokens: &b.tokens[..3], set: 1 }], 0..vocab, Positions::Last).unwrap();
    assert_eq!((sets[0].stream_len(0), sets[0].stream_len(1), sets[0].stream_len(2)), (6, 3, 3));
    let (pa, pb) = (6usize, 3usize);
    // Step 0: streams 0, 1, 2 in order (one run); step 1: 2 and 0 only (two runs, a gap
    // and a swapped order); step 2: 0, 1 (one run again, stream 2 one token ahead).
    let steps: [&[usize]; 3] = [&[0, 1, 2], &[2, 0], &[0, 1]];
    let mut at = [pa, pb, pb];
    for (k, streams) in steps.iter().enumerate() {
        let toks: Vec<[u32; 1]> =
            streams.iter().map(|&s| [if s == 0 { a.tokens[at[0]] } else { b.tokens[at[s]] }]).collect();
        let seqs: Vec<SeqInput<'_>> = streams.iter().zip(&toks).map(|(&s, t)| SeqInput { tokens: t, set: s }).collect();
        let out = m.forward(&backend, &mut sets, &seqs, 0..vocab, Positions::Last).unwrap();
        // One attention and one K and one V write per layer and run.
        let runs = if k == 1 { 2 } else { 1 };
        let layers = m.cfg.num_hidden_layers;
        assert_eq!(m.graph_op_count("FLASH_ATTN_EXT"), runs * layers, "step {k}");
        assert_eq!(m.graph_op_count("SET_ROWS"), 2 * runs * layers, "step {k}");
        for (j, &s) in streams.iter().enumerate() {
            let want = if s == 0 { &a.logits[at[0]] } else { &b.logits[at[s]] };
            check_row(&out.per_seq[j][0], want, &format!("step {k}, stream {s}"));
            at[s] += 1;
        }
    }
    assert_eq!((sets[0].stream_len(0), sets[0].stream_len(1), sets[0].stream_len(2)), (at[0], at[1], at[2]));
    // Stream 0 copied into a set of its own continues A.
    let mut own = vec![sets[0].copy_stream(&backend, 0, 32).unwrap()];
    assert_eq!((own[0].streams(), own[0].len()), (1, at[0]));
    for p in at[0]..a.tokens.len() {
        let out = m
            .forward(&backend, &mut own, &[SeqInput { tokens: &a.tokens[p..p + 1], set: 0 }], 0..vocab, Positions::Last)
            .unwrap();
        check_row(&out.per_seq[0][0], &a.logits[p], &format!("copied stream, A position {p}"));
    }
    // So does stream 1 (B), from its offset in the set.
    let mut own = vec![sets[0].copy_stream(&backend, 1, 16).unwrap()];
    assert_eq!(own[0].len(), at[1]);
    for p in at[1]..b.tokens.len() {
        let out = m
            .forward(&backend, &mut own, &[SeqInput { tokens: &b.tokens[p..p + 1], set: 0 }], 0..vocab, Positions::Last)
            .unwrap();
        check_row(&out.per_seq[0][0], &b.logits[p], &format!("copied stream 1, B position {p}"));
    }
}

/// Decoding one token at a time through reused graphs, across the boundaries where the
/// attention window grows (multiples of WINDOW_STEP), into two sets taking turns and sharing batches, gives
/// the logits of one prefill of the same tokens.
#[test]
fn reused_step_graphs_across_window_boundaries_equal_one_prefill() {
    let (backend, mut m) = setup();
    let vocab = m.cfg.vocab_size as u32;
    let n = 600usize;
    let tokens: Vec<u32> = (0..n).map(|i| ((i * 7919 + 13) % vocab as usize) as u32).collect();
    let mut whole = vec![KvSet::new(&backend, m.cfg.kv_dims(), n).unwrap()];
    let want =
        m.forward(&backend, &mut whole, &[SeqInput { tokens: &tokens, set: 0 }], 0..vocab, Positions::All).unwrap();
    let want = &want.per_seq[0];

    let mut sets =
        vec![KvSet::new(&backend, m.cfg.kv_dims(), n).unwrap(), KvSet::new(&backend, m.cfg.kv_dims(), n).unwrap()];
    let start = 240;
    m.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens[..start], set: 0 }], 0..vocab, Positions::Last)
        .unwrap();
    m.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens[..start - 7], set: 1 }], 0..vocab, Positions::Last)
        .unwrap();
    let (b0, r0) = m.graph_stats();
    let mut worst = 0f64;
    let mut check = |got: &[f32], at: usize| {
        let e = rel_rms(got, &want[at]);
        worst = worst.max(e);
        // Prefill and decode multiply in different kernels (F16 rounding of the activations
        // in different places): close, not bit-equal.
        assert!(e < 3e-3, "position {at}: relative RMS {e:.3e} against the prefill");
    };
    let (mut p0, mut p1) = (start, start - 7);
    while p0 < n {
        // Set 0 alone for 3 steps, then both in one batch for 2, then set 1 alone once.
        for _ in 0..3 {
            if p0 < n {
                let out = m
                    .forward(
                        &backend,
                        &mut sets,
                        &[SeqInput { tokens: &tokens[p0..p0 + 1], set: 0 }],
                        0..vocab,
                        Positions::Last,
                    )
                    .unwrap();
                check(&out.per_seq[0][0], p0);
                p0 += 1;
            }
        }
        for _ in 0..2 {
            if p0 < n && p1 < n {
                let seqs = [
                    SeqInput { tokens: &tokens[p1..p1 + 1], set: 1 },
                    SeqInput { tokens: &tokens[p0..p0 + 1], set: 0 },
                ];
                let out = m.forward(&backend, &mut sets, &seqs, 0..vocab, Positions::Last).unwrap();
                check(&out.per_seq[0][0], p1);
                check(&out.per_seq[1][0], p0);
                p0 += 1;
                p1 += 1;
            }
        }
        if p1 < n {
            let out = m
                .forward(
                    &backend,
                    &mut sets,
                    &[SeqInput { tokens: &tokens[p1..p1 + 1], set: 1 }],
                    0..vocab,
                    Positions::Last,
                )
                .unwrap();
            check(&out.per_seq[0][0], p1);
            p1 += 1;
        }
    }
    // Shapes alternate, so most calls rebuild here; the sequence still has to be right.
    let (b1, r1) = m.graph_stats();
    assert!(b1 > b0 && r1 >= r0);
    // A plain decode run reuses: 20 steps of set 1 inside one window build at most twice.
    let mut one = vec![KvSet::new(&backend, m.cfg.kv_dims(), n).unwrap()];
    m.forward(&backend, &mut one, &[SeqInput { tokens: &tokens[..500], set: 0 }], 0..vocab, Positions::Last).unwrap();
    let (b2, r2) = m.graph_stats();
    for p in 500..520 {
        let out = m
            .forward(&backend, &mut one, &[SeqInput { tokens: &tokens[p..p + 1], set: 0 }], 0..vocab, Positions::Last)
            .unwrap();
        check(&out.per_seq[0][0], p);
    }
    let (b3, r3) = m.graph_stats();
    assert_eq!(WINDOW_STEP, 64, "the counts below assume 64");
    assert_eq!((b3 - b2, r3 - r2), (2, 18), "one build per window (500..512, 512..520)");
    eprintln!("worst relative RMS against the prefill: {worst:.2e}");
}

/// A reused graph computes exactly what a freshly built one computes.
#[test]
fn a_reused_step_graph_is_bit_identical_to_a_fresh_one() {
    let (backend, mut m) = setup();
    let vocab = m.cfg.vocab_size as u32;
    let tokens: Vec<u32> = (0..300).map(|i| ((i * 104_729 + 5) % vocab as usize) as u32).collect();
    let run = |m: &mut ArModel, fresh: bool| -> Vec<Vec<f32>> {
        let mut sets = vec![
            KvSet::new(&backend, m.cfg.kv_dims(), 300).unwrap(),
            KvSet::new(&backend, m.cfg.kv_dims(), 300).unwrap(),
        ];
        m.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens[..250], set: 0 }], 0..vocab, Positions::Last)
            .unwrap();
        m.forward(&backend, &mut sets, &[SeqInput { tokens: &tokens[..200], set: 1 }], 0..vocab, Positions::Last)
            .unwrap();
        let mut out = Vec::new();
        for i in 0..12 {
            if fresh {
                m.forget_graph();
            }
            let seqs = [
                SeqInput { tokens: &tokens[250 + i..251 + i], set: 0 },
                SeqInput { tokens: &tokens[200 + i..201 + i], set: 1 },
            ];
            let l = m.forward(&backend, &mut sets, &seqs, 0..vocab, Positions::Last).unwrap();
            out.extend(l.per_seq.into_iter().map(|mut p| p.remove(0)));
        }
        out
    };
    let fresh = run(&mut m, true);
    let (_, r0) = m.graph_stats();
    let reused = run(&mut m, false);
    let (_, r1) = m.graph_stats();
    assert_eq!(r1 - r0, 10, "12 steps, one rebuild where set 0 crosses 256 entries (a multiple of WINDOW_STEP)");
    assert!(fresh == reused, "reused graphs gave other logits");
}

#[test]
fn lm_head_row_slice_equals_the_full_head() {
    let (backend, mut m) = setup();
    let case = load_case("B");
    let vocab = m.cfg.vocab_size as u32;
    let mut s1 = vec![KvSet::new(&backend, m.cfg.kv_dims(), 16).unwrap()];
    let full =
        m.forward(&backend, &mut s1, &[SeqInput { tokens: &case.tokens, set: 0 }], 0..vocab, Positions::Last).unwrap();
    let mut s2 = vec![KvSet::new(&backend, m.cfg.kv_dims(), 16).unwrap()];
    let part =
        m.forward(&backend, &mut s2, &[SeqInput { tokens: &case.tokens, set: 0 }], 262..320, Positions::Last).unwrap();
    assert_eq!(part.per_seq[0][0].len(), 58);
    let want = &full.per_seq[0][0][262..320];
    let err = part.per_seq[0][0].iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err < 1e-5, "row slice differs by {err}");
}

#[test]
#[should_panic(expected = "KV stream 0 full")]
fn overflowing_a_set_is_refused() {
    let (backend, mut m) = setup();
    let mut sets = vec![KvSet::new(&backend, m.cfg.kv_dims(), 4).unwrap()];
    let _ = m.forward(&backend, &mut sets, &[SeqInput { tokens: &[1, 2, 3, 4, 5], set: 0 }], 0..10, Positions::Last);
}
