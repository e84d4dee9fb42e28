//! The NAR half and the midpoint solver against the float64 numpy reference
//! (scripts/ref/nar_reference.py) on the tiny weights of fixtures/ar.
use super::*;
use crate::models::yue2::ar::{ArModel, Positions, SeqInput};
use crate::models::yue2::config::BackboneInfo;
use crate::test_util::rel_rms;
use std::path::PathBuf;

fn path(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn read_f32(p: &str) -> Vec<f32> {
    crate::test_util::read_f32(path(p))
}

struct Setup {
    backend: Backend,
    ar: ArModel,
    nar: NarModel,
    cfg: Yue2Config,
}

fn setup() -> Setup {
    setup_from(&path("fixtures/ar/tiny-qwen3.gguf"))
}

fn setup_from(gguf: &std::path::Path) -> Setup {
    let f = GgufFile::open(gguf).unwrap();
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::for_tests(2);
    let ar = ArModel::load(&f, &info, &backend).unwrap();
    let nar = NarModel::load(&f, &info, &backend).unwrap();
    Setup { backend, ar, nar, cfg: info.config }
}

fn prefill(s: &mut Setup, seq: &[u32]) -> KvSet {
    let mut sets = vec![KvSet::new(&s.backend, s.cfg.kv_dims(), seq.len()).unwrap()];
    s.ar.forward(&s.backend, &mut sets, &[SeqInput { tokens: seq, set: 0 }], 0..1, Positions::Last).unwrap();
    sets.pop().unwrap()
}

/// Runs every case of `dir/cases.json` on `s`; returns how many ran. The tolerance covers
/// the F16 KV cache the NAR reads (the reference keeps float64 throughout).
fn run_cases(s: &mut Setup, dir: &str) -> usize {
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path(&format!("{dir}/cases.json"))).unwrap()).unwrap();
    let mut checked = 0;
    for c in cases["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let seq: Vec<u32> = c["seq"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let (n, m) = (c["n_frames"].as_u64().unwrap() as usize, c["variations"].as_u64().unwrap() as usize);
        let noise = read_f32(&format!("{dir}/{}", c["noise"].as_str().unwrap()));
        let want = read_f32(&format!("{dir}/{}", c["output"].as_str().unwrap()));
        let kv = prefill(s, &seq);
        let steps = c["steps"].as_u64().unwrap_or(0) as usize;
        let solve = |s: &mut Setup, solver| {
            s.nar.solve(&s.backend, &kv, &noise, n, m, steps, solver, &CancelToken::new(), &mut |_, _| {}).unwrap()
        };
        let got = match c["kind"].as_str().unwrap() {
            "velocity" => s.nar.velocity(&s.backend, &kv, &noise, n, m, c["t"].as_f64().unwrap()).unwrap(),
            "ode" => solve(s, Solver::Midpoint),
            "ab2" => solve(s, Solver::Ab2),
            other => panic!("{name}: unknown case kind {other}"),
        };
        let e = rel_rms(&got, &want);
        eprintln!("{dir} {name}: relative RMS {e:.3e}");
        let tol = if s.backend.is_cpu() { 1e-2 } else { 3e-2 };
        assert!(e < tol, "{name}: relative RMS {e:.3e} (tolerance {tol:.0e})");
        assert_eq!(kv.len(), seq.len(), "{name}: the NAR must not write into the cache");
        checked += 1;
    }
    checked
}

#[test]
fn velocities_and_ode_match_the_reference() {
    // Six velocity and midpoint cases, two of the AB2 solver.
    assert!(run_cases(&mut setup(), "fixtures/nar") >= 8);
}

/// The same reference at the published depth and head layout: the `deep` demo (28 layers,
/// 16 query heads over 8 KV heads), written here by the generator whose file the fixtures
/// were computed from (its sha256 is in the fixture, so a change to the generator is named
/// rather than read as a numeric failure).
#[test]
fn velocities_and_ode_match_the_reference_at_the_published_depth() {
    use sha2::Digest;
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path("fixtures/nar/deep/cases.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (bb, _) =
        crate::models::yue2::demo::write_demo(dir.path(), crate::models::yue2::demo::Preset::Deep, 0, &mut |_, _| {})
            .unwrap();
    let sha: String = sha2::Sha256::digest(std::fs::read(&bb).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sha,
        cases["gguf_sha256"].as_str().unwrap(),
        "the deep demo generator changed: regenerate fixtures/nar/deep (see scripts/ref/nar_reference.py --deep)"
    );
    let mut s = setup_from(&bb);
    assert_eq!(s.cfg.num_hidden_layers, 28);
    assert!(run_cases(&mut s, "fixtures/nar/deep") >= 3);
}

#[test]
fn variations_side_by_side_equal_separate_runs() {
    let mut s = setup();
    let seq: Vec<u32> = vec![256, 72, 259, 260, 261, 270, 280, 262];
    let kv = prefill(&mut s, &seq);
    let noise = crate::rng::torch_cpu::randn(5, 2 * 3 * 64);
    let both = s.nar.velocity(&s.backend, &kv, &noise, 3, 2, 0.4).unwrap();
    let a = s.nar.velocity(&s.backend, &kv, &noise[..192], 3, 1, 0.4).unwrap();
    let b = s.nar.velocity(&s.backend, &kv, &noise[192..], 3, 1, 0.4).unwrap();
    // Variations mixing would be an O(1) error. On the CPU the two shapes take the same
    // kernels; a GPU picks other matmul kernels (f16 staging) for a different row count.
    let tol = if s.backend.is_cpu() { 1e-5 } else { 2e-3 };
    let (ea, eb) = (rel_rms(&both[..192], &a), rel_rms(&both[192..], &b));
    assert!(ea < tol && eb < tol, "relative RMS {ea:.3e} / {eb:.3e} (tolerance {tol:.0e})");
}

/// On Q8_0 weights the CPU's velocity graph takes `ggml::q8`'s products: the bits of ggml's
/// own (its fast kernels' tiles keep the same order per output), here for one and two
/// variations, before and after a solver's steps.
#[test]
fn velocities_on_q8_0_weights_are_ggmls_bits_with_the_q8_row_product() {
    if !crate::ggml::q8::available() {
        eprintln!("skipped: the Q8_0 row product needs an AVX2 + FMA + F16C host (both sides would be ggml's)");
        return;
    }
    use crate::models::quantize::{quantize_file, QuantTarget};
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("tiny-q8_0.gguf");
    quantize_file(&path("fixtures/ar/tiny-qwen3.gguf"), &q, QuantTarget::Q8_0, &mut |_, _| {}).unwrap();
    let mut s = setup_from(&q);
    let f = GgufFile::open(&q).unwrap();
    let mut plain = NarModel::load(&f, &BackboneInfo::from_gguf(&f).unwrap(), &s.backend).unwrap().without_q8_rows();
    let seq: Vec<u32> = vec![256, 72, 259, 260, 261, 270, 280, 262];
    let kv = prefill(&mut s, &seq);
    for (n, m, t) in [(3, 1, 0.4), (7, 2, 0.9), (20, 2, 0.1)] {
        let noise = crate::rng::torch_cpu::randn(n as u64, m * n * 64);
        let got = s.nar.velocity(&s.backend, &kv, &noise, n, m, t).unwrap();
        let want = plain.velocity(&s.backend, &kv, &noise, n, m, t).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert!(bits(&got) == bits(&want), "{n} frames x {m}: velocities");
    }
}

#[test]
fn helpers() {
    assert_eq!(chunk_frames(24576, 100), (24576 - 103) / 2);
    assert_eq!(chunk_frames(10, 20), 0);
    // The embedder sees t itself at shift 1 (up to the saturation of logit(t) at 20).
    assert!((shifted_timestep(0.3, 1.0) - 0.3).abs() < 1e-12);
    assert!((shifted_timestep(1.0, 1.0) - 1.0).abs() < 1e-8);
    assert!(shifted_timestep(0.0, 1.0) < 1e-8);
    // The release curve at shift 3: 3 * 0.5 / (1 + 2 * 0.5) = 0.75.
    assert!((shifted_timestep(0.5, 3.0) - 0.75).abs() < 1e-12);
    let e = time_sinusoid(1.0, 1.0);
    assert_eq!(e.len(), 256);
    assert_eq!(e[0], (shifted_timestep(1.0, 1.0)).cos() as f32);
    assert_eq!(e[128], (shifted_timestep(1.0, 1.0)).sin() as f32);
    let half = time_sinusoid(0.5, 1.0);
    assert_eq!(half[127], (0.5 * (-(10000f64.ln()) * 127.0 / 128.0).exp()).cos() as f32);
    let pe = frame_table(3, 4);
    assert_eq!(pe[..4], [0.0, 1.0, 0.0, 1.0]);
    assert!((pe[4] - 1f32.sin()).abs() < 1e-7);
}

/// The same velocity from a fresh compute buffer and from one the previous call left full:
/// nothing may read memory it did not write (on ggml-vulkan the attention once read past
/// an unpadded mask, so the first call was right and every later one was not).
#[test]
fn velocity_does_not_depend_on_what_the_last_call_left_in_memory() {
    let mut s = setup();
    let seq: Vec<u32> = vec![256, 72, 259, 260, 261, 270, 280, 262];
    let kv = prefill(&mut s, &seq);
    let noise = crate::rng::torch_cpu::randn(7, 3 * 64);
    let first = s.nar.velocity(&s.backend, &kv, &noise, 3, 1, 0.4).unwrap();
    let other = crate::rng::torch_cpu::randn(8, 3 * 64);
    s.nar.velocity(&s.backend, &kv, &other, 3, 1, 0.7).unwrap();
    let again = s.nar.velocity(&s.backend, &kv, &noise, 3, 1, 0.4).unwrap();
    assert_eq!(first, again);
}

#[test]
fn chunk_plans() {
    // yue2.cpp's rule: one chunk per context window, no left context.
    let seed = ChunkPlan::new(1003, 100, None).unwrap();
    assert_eq!(seed, ChunkPlan { step: 450, context: 0 });
    assert_eq!(
        seed.spans(1000),
        vec![
            ChunkSpan { context: 0, start: 0, end: 450 },
            ChunkSpan { context: 450, start: 450, end: 900 },
            ChunkSpan { context: 900, start: 900, end: 1000 }
        ]
    );
    assert!(ChunkPlan::new(100, 100, None).is_none());
    // Streaming: 125 kept frames behind 25 of context; the first chunk has none, the last
    // is what is left.
    let st = ChunkPlan::new(1003, 100, Some((125, 25))).unwrap();
    let spans = st.spans(300);
    assert_eq!(
        spans,
        vec![
            ChunkSpan { context: 0, start: 0, end: 125 },
            ChunkSpan { context: 100, start: 125, end: 250 },
            ChunkSpan { context: 225, start: 250, end: 300 }
        ]
    );
    assert_eq!(spans[1].painted(), 150);
    // The grid is known before the length: chunk 1 of a song that will be longer is the same.
    assert_eq!(st.span(1, 10_000), Some(ChunkSpan { context: 100, start: 125, end: 250 }));
    assert_eq!(st.span(3, 300), None);
    // Never more than the window holds: 450 frames of room, at most 225 of context.
    let big = ChunkPlan::new(1003, 100, Some((10_000, 25))).unwrap();
    assert_eq!(big, ChunkPlan { step: 425, context: 25 });
    assert!(big.spans(2000).iter().all(|s| s.painted() <= 450));
}

#[test]
fn torch_noise_is_a_prefix_stream_in_whole_frames() {
    // A chunk's noise is a slice of the song's: randn of a longer song starts with the
    // shorter one's values when both are whole 64-value frames (multiples of torch's
    // 16-value block), so a song of unknown length can draw its noise chunk by chunk.
    let long = crate::rng::torch_cpu::randn(7, 64 * 300);
    let short = crate::rng::torch_cpu::randn(7, 64 * 125);
    assert_eq!(long[..short.len()], short[..]);
}
