//! Parity of the AR half against the float64 numpy reference (scripts/ref/qwen3_reference.py)
//! on the tiny random weights committed in fixtures/ar.
use super::*;
use crate::gguf::GgufFile;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ar").join(name)
}

struct Case {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn load_case(key: &str) -> Case {
    let cases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture("cases.json")).unwrap()).unwrap();
    let vocab = cases["vocab"].as_u64().unwrap() as usize;
    let tokens: Vec<u32> = cases[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let raw = std::fs::read(fixture(cases["files"][key].as_str().unwrap())).unwrap();
    let flat: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(flat.len(), tokens.len() * vocab);
    Case { tokens, logits: flat.chunks(vocab).map(|r| r.to_vec()).collect() }
}

fn rel_rms(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den).sqrt()
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, x)| if *x > v[best] { i } else { best })
}

fn check_row(got: &[f32], want: &[f32], what: &str) {
    let e = rel_rms(got, want);
    assert!(e < 2e-2, "{what}: relative RMS {e:.3e}");
    assert_eq!(argmax(got), argmax(want), "{what}: argmax differs (rel RMS {e:.3e})");
}

fn setup() -> (Backend, ArModel) {
    let f = GgufFile::open(fixture("tiny-qwen3.gguf")).unwrap();
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::cpu(2).unwrap();
    let model = ArModel::load(&f, &info, &backend).unwrap();
    (backend, model)
}

#[test]
fn prefill_matches_reference_at_every_position() {
    let (backend, mut m) = setup();
    let case = load_case("A");
    let vocab = m.cfg.vocab_size as u32;
    let mut sets = vec![KvSet::new(&backend, &m.cfg, 64).unwrap()];
    let out = m.forward(&backend, &mut sets, &[SeqInput { tokens: &case.tokens, set: 0 }], 0..vocab, Positions::All).unwrap();
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
    let mut sets = vec![KvSet::new(&backend, &m.cfg, 32).unwrap(), KvSet::new(&backend, &m.cfg, 32).unwrap()];
    // Prefill different lengths into the two sets.
    let pa = m.forward(&backend, &mut sets, &[SeqInput { tokens: &a.tokens[..8], set: 0 }], 0..vocab, Positions::Last).unwrap();
    check_row(&pa.per_seq[0][0], &a.logits[7], "prefill A[..8] last");
    m.forward(&backend, &mut sets, &[SeqInput { tokens: &b.tokens[..4], set: 1 }], 0..vocab, Positions::Last).unwrap();
    // Decode both in one batch, one token each, until B runs out; set order swapped in the batch.
    let mut step = 0;
    while 4 + step < b.tokens.len() {
        let (ta, tb) = ([a.tokens[8 + step]], [b.tokens[4 + step]]);
        let out = m.forward(&backend, &mut sets, &[SeqInput { tokens: &tb, set: 1 }, SeqInput { tokens: &ta, set: 0 }], 0..vocab, Positions::Last).unwrap();
        check_row(&out.per_seq[0][0], &b.logits[4 + step], &format!("decode B step {step}"));
        check_row(&out.per_seq[1][0], &a.logits[8 + step], &format!("decode A step {step}"));
        step += 1;
    }
    assert_eq!(sets[1].len(), b.tokens.len());
    assert_eq!(sets[0].len(), 8 + step);
    // A continues alone.
    while 8 + step < a.tokens.len() {
        let ta = [a.tokens[8 + step]];
        let out = m.forward(&backend, &mut sets, &[SeqInput { tokens: &ta, set: 0 }], 0..vocab, Positions::Last).unwrap();
        check_row(&out.per_seq[0][0], &a.logits[8 + step], &format!("decode A alone step {step}"));
        step += 1;
    }
}

#[test]
fn lm_head_row_slice_equals_the_full_head() {
    let (backend, mut m) = setup();
    let case = load_case("B");
    let vocab = m.cfg.vocab_size as u32;
    let mut s1 = vec![KvSet::new(&backend, &m.cfg, 16).unwrap()];
    let full = m.forward(&backend, &mut s1, &[SeqInput { tokens: &case.tokens, set: 0 }], 0..vocab, Positions::Last).unwrap();
    let mut s2 = vec![KvSet::new(&backend, &m.cfg, 16).unwrap()];
    let part = m.forward(&backend, &mut s2, &[SeqInput { tokens: &case.tokens, set: 0 }], 262..320, Positions::Last).unwrap();
    assert_eq!(part.per_seq[0][0].len(), 58);
    let want = &full.per_seq[0][0][262..320];
    let err = part.per_seq[0][0].iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err < 1e-5, "row slice differs by {err}");
}

#[test]
#[should_panic(expected = "KV set 0 full")]
fn overflowing_a_set_is_refused() {
    let (backend, mut m) = setup();
    let mut sets = vec![KvSet::new(&backend, &m.cfg, 4).unwrap()];
    let _ = m.forward(&backend, &mut sets, &[SeqInput { tokens: &[1, 2, 3, 4, 5], set: 0 }], 0..10, Positions::Last);
}
