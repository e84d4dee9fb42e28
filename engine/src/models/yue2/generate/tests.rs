//! The AR stages on the tiny demo model (random weights: the music is noise, the mechanics
//! are real).
use super::*;
use crate::gguf::GgufFile;
use crate::models::yue2::config::BackboneInfo;
use crate::models::yue2::demo::{write_demo, Preset};

struct Fixture {
    backend: Backend,
    model: ArModel,
    tok: BpeTokenizer,
    tokens: TokenLayout,
    ins: Instructions,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (bb, _) = write_demo(dir.path(), Preset::Tiny, 3, &mut |_, _| {}).unwrap();
    let f = GgufFile::open(bb).unwrap();
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::for_tests(2);
    let model = ArModel::load(&f, &info, &backend).unwrap();
    Fixture {
        backend,
        model,
        tok: BpeTokenizer::from_gguf(&f).unwrap(),
        tokens: info.tokens,
        ins: Instructions::default(),
    }
}

impl Fixture {
    fn stages(&mut self, max_seq: usize) -> ArStages<'_> {
        ArStages {
            model: &mut self.model,
            backend: &self.backend,
            tokenizer: &self.tok,
            tokens: self.tokens,
            instructions: &self.ins,
            max_seq,
            prefill_chunk: crate::nn::batch::PREFILL_CHUNK,
        }
    }
}

/// A 2 s song (50 frames).
fn request(cot: Cot) -> Settings {
    let mut r = crate::test_util::yue2_settings(cot, 50);
    r.style = "lo-fi, piano".into();
    r.lyrics = "[verse]\nla la".into();
    (r.lm_seed, r.seed) = (11, 5);
    r.semantic.min_tokens = 10;
    r
}

#[test]
fn too_long_a_request_is_refused_before_any_compute() {
    let mut fx = fixture();
    let mut req = request(Cot::Off);
    req.budget = 9000;
    let st = fx.stages(1000);
    let e = st.check_fits(&req).unwrap_err().to_string();
    assert!(e.starts_with("duration:") && e.contains("1000"), "{e}");
    req.budget = 250;
    st.check_fits(&req).unwrap();
    // an unplanned score counts at its whole budget
    let mut full = request(Cot::Full);
    full.plan.max_tokens = 2000;
    assert!(st.check_fits(&full).is_err());
}

#[test]
fn cancel_lands_within_one_step() {
    let mut fx = fixture();
    let req = request(Cot::Off);
    let cancel = CancelToken::new();
    let mut calls = 0;
    let mut st = fx.stages(4096);
    let r = st.semantic(&req, &[vec![]], &cancel, &mut |p| {
        calls += 1;
        if p.done == 3 {
            cancel.cancel();
        }
    });
    assert!(matches!(r, Err(GenError::Cancelled)), "{:?}", r.err());
    assert_eq!(calls, 3, "no step may run after the cancel");
}

#[test]
fn semantic_batch_is_deterministic_and_songs_are_independent() {
    let mut fx = fixture();
    let mut req = request(Cot::Off);
    req.songs = 2;
    req.cfg_scale = 1.5;
    let budget = req.budget;
    assert_eq!(budget, 50);
    let run = |fx: &mut Fixture, req: &Settings, n: usize| {
        let mut st = fx.stages(4096);
        st.semantic(req, &vec![vec![]; n], &CancelToken::new(), &mut |_| {}).unwrap()
    };
    let a = run(&mut fx, &req, 2);
    let b = run(&mut fx, &req, 2);
    assert_eq!(a.len(), 2);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.codes, y.codes, "same seeds, same codes");
        assert!(!x.codes.is_empty() && x.codes.len() <= budget);
        assert!(x.codes.iter().all(|&c| c < fx.tokens.codebook_size));
        assert_eq!(x.kv.len(), x.prefix_len + x.codes.len() - if x.ended { 0 } else { 1 });
    }
    assert_ne!(a[0].codes, a[1].codes, "songs draw with lm_seed + i");
    // Song 1 of the batch is song 0 of a single run at lm_seed + 1.
    let mut single = req.clone();
    single.lm_seed += 1;
    single.songs = 1;
    let c = run(&mut fx, &single, 1);
    assert_eq!(c[0].codes, a[1].codes);
}

#[test]
fn completing_a_song_equals_replaying_its_codes() {
    let mut fx = fixture();
    let req = request(Cot::Off);
    let mut st = fx.stages(4096);
    let mut songs = st.semantic(&req, &[vec![]], &CancelToken::new(), &mut |_| {}).unwrap();
    let song = &mut songs[0];
    st.complete(song).unwrap();
    assert!(song.is_complete());
    let replay = st.replay(&req, &[], &song.codes).unwrap();
    assert!(replay.is_complete());
    assert_eq!(replay.kv.len(), song.kv.len());
    let n = song.kv.len() * (fx.model.cfg.num_key_value_heads * fx.model.cfg.head_dim);
    for l in 0..fx.model.cfg.num_hidden_layers {
        let a = song.kv.read_k(l);
        let b = replay.kv.read_k(l);
        assert_eq!((a.len(), b.len()), (n, n));
        if fx.backend.has_row_exact_kernels() {
            let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "layer {l}: the K written a code a step and the K of one forward differ");
        } else {
            // A device's only kernels round by the batch's shape.
            let err = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(err < 2e-2, "layer {l}: incremental and one-shot K differ by {err}");
        }
    }
}

#[test]
fn a_malformed_plan_exhausts_its_retries() {
    let mut fx = fixture();
    let mut req = request(Cot::Full);
    req.plan.max_tokens = 24;
    req.plan.min_tokens = 4;
    req.plan_retries = 2;
    let mut attempts_seen = 0;
    let mut st = fx.stages(4096);
    let e = st.plan(&req, 0, &CancelToken::new(), &mut |p| {
        if p.done == 1 {
            attempts_seen += 1;
        }
    });
    // Random weights write byte noise, never a score with M:, L: and K:.
    match e {
        Err(GenError::PlanExhausted { attempts, .. }) => assert_eq!(attempts, 3),
        other => panic!("expected exhaustion, got {:?}", other.map(|p| p.abc)),
    }
    assert_eq!(attempts_seen, 3);
    req.lm_seed = i64::MAX as u64;
    let e = st.plan(&req, 1, &CancelToken::new(), &mut |_| {}).unwrap_err().to_string();
    assert!(e.starts_with("lm_seed:") && e.contains("not representable"), "{e}");
}

#[test]
fn a_continued_score_opens_with_the_given_one() {
    let mut fx = fixture();
    let mut req = request(Cot::Full);
    req.abc = "X:1\nM:4/4\nL:1/8\nK:C\n%verse\nCDEF GABc|".into();
    assert!(!req.plans(), "a given score is sung as it is");
    req.abc_continue = true;
    assert!(req.plans(), "abc_continue plans the rest");
    req.plan.max_tokens = 16;
    req.plan.min_tokens = 16;
    req.plan_retries = 1;
    let mut steps = vec![];
    let mut st = fx.stages(4096);
    let opening = st.tokenizer.encode(&req.abc);
    let e = st.plan(&req, 0, &CancelToken::new(), &mut |p| steps.push((p.done, p.total)));
    // Random weights write bytes after the opening; the score the checker saw begins with it.
    match e {
        Err(GenError::PlanExhausted { attempts: 2, last_abc, .. }) => {
            assert!(last_abc.starts_with(req.abc.as_str()), "{last_abc:?}");
            let written = st.tokenizer.encode(&last_abc);
            assert!(written.len() > opening.len(), "the planner wrote past the opening");
        }
        Ok(plan) => assert!(plan.ids.starts_with(&opening) && plan.abc.starts_with(req.abc.as_str())),
        Err(other) => panic!("{other}"),
    }
    // The budget counts the written tokens alone: 16 a retry, the opening not among them.
    assert_eq!(steps.first(), Some(&(1, 16)));
    assert!(steps.iter().all(|&(done, total)| done <= total && total == 16), "{steps:?}");
}

#[test]
fn continuation_opens_with_the_source_section() {
    let mut fx = fixture();
    let mut req = request(Cot::Off);
    // The section 1.0 s to 1.4 s of a source counting 0, 1, 2, ... (the edge cuts it).
    req.source = (25..35).collect();
    let mut st = fx.stages(4096);
    let songs = st.semantic(&req, &[vec![]], &CancelToken::new(), &mut |_| {}).unwrap();
    assert_eq!(&songs[0].codes[..10], &(25..35).collect::<Vec<u32>>()[..]);
    assert!(songs[0].codes.len() <= req.budget);
}
