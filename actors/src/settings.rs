//! The edge between the requests users send and the engine's settings: each family's
//! request mapped onto what its engine takes, the engine's refusals mapped back onto the
//! request field at fault, and a rendered track onto the request that renders it again.
//! The stages and the CLI tools call these; the engine never sees a request.
use yued_engine::models::mm3::compose::{ArSettings, Song as Mm3Song};
use yued_engine::models::mm3::synth::SynthSettings;
use yued_engine::models::yue2::nar::Solver;
use yued_engine::models::yue2::pipeline::{Phase, Shared, SongMeta};
use yued_engine::models::yue2::prompt::{source_section, Cot};
use yued_engine::models::yue2::settings::{Invalid, Settings};
use yued_engine::sampling::Sampling;
use yued_protocol::request::yue2::STREAM_CONTEXT_FRAMES;
use yued_protocol::{CotMode, Limits, Mm3Request, RequestError, SamplingPreset, Stage, Yue2Request, FRAME_RATE};

/// The settings of a YuE2 request whose seeds are resolved (non-negative).
pub fn yue2(req: &Yue2Request) -> Result<Settings, RequestError> {
    let seed = |field: &str, v: i64| {
        u64::try_from(v).map_err(|_| RequestError::new(field, "must be resolved before the job runs"))
    };
    let replay = (!req.semantic_tokens.is_empty()).then(|| req.semantic_codes()).transpose()?;
    let source = source_section(&req.source_codes()?, req.source_start, req.source_end).to_vec();
    let by_duration = (req.duration * f64::from(FRAME_RATE)).round().max(1.0) as usize;
    Ok(Settings {
        style: req.style.clone(),
        lyrics: req.lyrics.clone(),
        abc: req.abc.clone(),
        abc_continue: req.abc_continue,
        cot: cot(req.cot),
        songs: if replay.is_some() { 1 } else { req.lm_batch_size.max(1) as usize },
        variations: req.synth_batch_size.max(1) as usize,
        lm_seed: seed("lm_seed", req.lm_seed)?,
        seed: seed("seed", req.seed)?,
        steps: req.steps as usize,
        solver: match req.solver {
            yued_protocol::request::Solver::Midpoint => Solver::Midpoint,
            yued_protocol::request::Solver::Ab2 => Solver::Ab2,
        },
        cfg_scale: req.effective_cfg_scale() as f32,
        plan: sampling(&req.abc_sampling),
        plan_retries: req.plan_retries,
        semantic: sampling(&req.semantic_sampling),
        budget: (req.semantic_sampling.max_tokens as usize).min(by_duration),
        source,
        replay,
        stream: req.stream_chunk_frames().map(|f| (f, STREAM_CONTEXT_FRAMES)),
    })
}

fn cot(c: CotMode) -> Cot {
    match c {
        CotMode::Full => Cot::Full,
        CotMode::Melody => Cot::Melody,
        CotMode::Off => Cot::Off,
    }
}

fn sampling(p: &SamplingPreset) -> Sampling {
    Sampling {
        temperature: p.temperature,
        top_p: p.top_p,
        top_k: p.top_k,
        repetition_penalty: p.repetition_penalty,
        penalty_window: p.penalty_window,
        min_tokens: p.min_tokens,
        max_tokens: p.max_tokens,
    }
}

/// A request's adapters as the engine names them, each with its strength per half.
pub fn adapters(req: &Yue2Request) -> Vec<yued_engine::models::yue2::adapter::AdapterUse> {
    req.adapters
        .iter()
        .map(|a| yued_engine::models::yue2::adapter::AdapterUse {
            name: a.name.clone(),
            ar: a.half_scale(false) as f32,
            nar: a.half_scale(true) as f32,
        })
        .collect()
}

/// An engine refusal as the request error naming its field.
pub fn invalid(e: Invalid) -> RequestError {
    RequestError::new(e.field, e.message)
}

/// The request that renders variation `variation` of `song` again, bit for bit: its score
/// and codes, its own seeds, one song, one variation (what each track's JSON holds).
pub fn yue2_replay(req: &Yue2Request, song: &SongMeta, variation: u32) -> Yue2Request {
    let mut rq = req.clone();
    rq.abc = song.abc.clone();
    rq.abc_continue = false;
    rq.semantic_tokens = song.codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    rq.source_tokens.clear();
    rq.lm_seed = song.plan_seed.map(|s| s as i64).unwrap_or(req.lm_seed + song.index as i64);
    rq.seed = req.seed + variation as i64;
    rq.lm_batch_size = 1;
    rq.synth_batch_size = 1;
    rq
}

/// The bounds a YuE2 backbone puts on requests.
pub fn yue2_limits(shared: &Shared, max_batch: u32) -> Limits {
    Limits {
        max_batch,
        context: shared.max_seq as u32,
        codebook_size: shared.info.tokens.codebook_size,
        ..Limits::default()
    }
}

/// The request's stage of a YuE2 progress report.
pub fn stage(p: Phase) -> Stage {
    match p {
        Phase::Plan => Stage::Plan,
        Phase::Semantic => Stage::Semantic,
        Phase::Synth => Stage::Synth,
    }
}

/// The AR half's settings of a MiniMax Music 3 request.
pub fn mm3_ar(req: &Mm3Request, batch_cfg: bool) -> ArSettings {
    ArSettings { lm_cfg: req.lm_cfg as f32, top_k: req.lm_top_k.max(1) as usize, max_frames: req.frames(), batch_cfg }
}

/// The synthesis half's settings of a MiniMax Music 3 request.
pub fn mm3_synth(req: &Mm3Request, batch_cfg: bool) -> SynthSettings {
    SynthSettings { steps: req.steps.max(2) as usize, dit_cfg: req.dit_cfg as f32, batch_cfg }
}

/// The request that renders track (song `song_index`, variation `variation`) of a
/// MiniMax Music 3 job again without sampling: its codes, its own seeds, one song, one
/// variation (`replayed`: the job already replayed its codes, its LM seed stands).
pub fn mm3_replay(req: &Mm3Request, song: &Mm3Song, song_index: usize, variation: usize, replayed: bool) -> Mm3Request {
    let mut r = req.clone();
    r.audio_codes = song.codes.iter().flatten().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    if !replayed {
        r.lm_seed = req.lm_seed + song_index as i64;
    }
    r.seed = req.seed + variation as i64;
    r.lm_batch_size = 1;
    r.synth_batch_size = 1;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Yue2Request {
        Yue2Request {
            style: "pop".into(),
            lyrics: "la".into(),
            lm_seed: 40,
            seed: 7,
            lm_batch_size: 3,
            synth_batch_size: 2,
            stream_chunk_seconds: 2.0,
            ..Default::default()
        }
    }

    /// A track's replay request maps onto the settings the engine's own replay gives, so
    /// the track JSON a user sends back renders what the engine would render again.
    #[test]
    fn a_replay_request_maps_onto_the_engines_replay() {
        let req = request();
        let s = yue2(&req).unwrap();
        for plan_seed in [None, Some(1234)] {
            let meta =
                SongMeta { index: 2, abc: "X:1\nK:C\nCDE|".into(), plan_seed, codes: vec![5, 6, 7], ended: true };
            let wire = yue2(&yue2_replay(&req, &meta, 1)).unwrap();
            assert_eq!(wire, s.replay(2, &meta.abc, &meta.codes, plan_seed, 1));
            assert_eq!((wire.songs, wire.variations, wire.seed), (1, 1, 8));
            assert_eq!(wire.lm_seed, plan_seed.unwrap_or(42));
            assert_eq!(wire.stream, Some((50, STREAM_CONTEXT_FRAMES)));
        }
        // The solver travels with the replay, and only when it is not the default.
        let ab2 = Yue2Request { solver: yued_protocol::request::Solver::Ab2, ..request() };
        let meta = SongMeta { index: 0, abc: String::new(), plan_seed: None, codes: vec![1, 2], ended: true };
        let replay = serde_json::to_value(yue2_replay(&ab2, &meta, 0)).unwrap();
        assert_eq!(replay["solver"], "ab2");
        assert_eq!(yue2(&Yue2Request::from_value(replay).unwrap()).unwrap().solver, Solver::Ab2);
        assert!(serde_json::to_value(yue2_replay(&req, &meta, 0)).unwrap().get("solver").is_none());
        // A continued score replays as the whole score, planned no more.
        let cont = Yue2Request { abc: "X:1\nK:C\n".into(), abc_continue: true, ..request() };
        assert!(yue2(&cont).unwrap().plans());
        let meta =
            SongMeta { index: 0, abc: "X:1\nK:C\nCDEF|".into(), plan_seed: Some(9), codes: vec![1], ended: true };
        let replay = yue2_replay(&cont, &meta, 0);
        assert_eq!((replay.abc.as_str(), replay.abc_continue), ("X:1\nK:C\nCDEF|", false));
        assert!(!yue2(&replay).unwrap().plans());
    }

    /// The edge names the field: unresolved seeds and malformed codes are the request's
    /// errors; the budget is the shorter of the preset and the duration.
    #[test]
    fn request_errors_name_their_field_and_the_budget_is_the_shorter() {
        let mut req = request();
        req.seed = -1;
        assert_eq!(yue2(&req).unwrap_err().field, "seed");
        let mut req = request();
        req.semantic_tokens = "1,x".into();
        assert_eq!(yue2(&req).unwrap_err().field, "semantic_tokens");
        let mut req = request();
        req.duration = 3.0;
        assert_eq!(yue2(&req).unwrap().budget, 75);
        req.semantic_sampling.max_tokens = 20;
        assert_eq!(yue2(&req).unwrap().budget, 20);
        req.source_tokens = (0..100).map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        req.source_start = 1.0;
        req.source_end = 2.0;
        assert_eq!(yue2(&req).unwrap().source, (25..50).collect::<Vec<u32>>());
        assert_eq!(invalid(Invalid::new("abc", "too long")), RequestError::new("abc", "too long"));
    }

    #[test]
    fn an_mm3_replay_keeps_its_own_seeds() {
        let req = Mm3Request { lm_seed: 5, seed: 9, lm_batch_size: 1, synth_batch_size: 2, ..Default::default() };
        let song = Mm3Song { codes: vec![[3u32; 8]; 4], states: Vec::new(), ended: true };
        let r = mm3_replay(&req, &song, 0, 1, false);
        assert_eq!((r.lm_seed, r.seed, r.synth_batch_size), (5, 10, 1));
        assert_eq!(r.audio_codes.split(',').count(), 8 * song.codes.len());
    }
}
