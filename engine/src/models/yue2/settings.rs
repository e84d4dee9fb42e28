//! What one YuE2 song job asks of the engine, in the engine's own terms: the prompt, the
//! score slot, the seeds (resolved), the budgets and samplers of the two AR stages, the
//! guidance, the flow-matching steps and the chunk grid. Whoever speaks to users (the
//! daemon's request, a CLI file) maps its own types onto these, and maps [`Invalid`]
//! back onto its own errors.
use crate::models::yue2::nar::{ChunkPlan, Solver};
use crate::models::yue2::prompt::Cot;
use crate::sampling::Sampling;

/// A setting the engine cannot honour, named by the request field it comes from
/// (`lm_seed`, `semantic_tokens`, `abc`, `duration`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Invalid { field, message: message.into() }
    }
}

/// The settings of one YuE2 job.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Style tags, under the `[Tags]` header.
    pub style: String,
    /// Lyrics, under the `[Lyrics]` header.
    pub lyrics: String,
    /// The score to realise; empty: planned (or none under [`Cot::Off`]).
    pub abc: String,
    /// The planner continues `abc` (its opening, fed as the score's first tokens) instead of
    /// taking it whole.
    pub abc_continue: bool,
    pub cot: Cot,
    /// Songs written side by side (one for a replay).
    pub songs: usize,
    /// Noise variations rendered per song.
    pub variations: usize,
    /// The token draw's Philox key (song `i`, retry `k`: `lm_seed + i + k * songs`).
    pub lm_seed: u64,
    /// The acoustic noise seed (variation `j`: `seed + j`).
    pub seed: u64,
    /// Steps of the flow matching, and its solver.
    pub steps: usize,
    pub solver: Solver,
    /// Guidance of the semantic stage (1: none).
    pub cfg_scale: f32,
    /// The planning stage's sampler; its `max_tokens` bounds a planned score.
    pub plan: Sampling,
    /// Extra planning attempts for a malformed score (sampled plans only).
    pub plan_retries: u32,
    /// The semantic stage's sampler.
    pub semantic: Sampling,
    /// Frames the semantic stage may write: the shorter of the sampler's `max_tokens` and
    /// the duration at 25 Hz.
    pub budget: usize,
    /// The codes a continuation starts from (the source section), empty for a fresh song.
    pub source: Vec<u32>,
    /// A replay: the codes to render, in place of the semantic stage.
    pub replay: Option<Vec<u32>>,
    /// Streaming chunks: (frames a chunk paints, frames of left context it is painted
    /// behind); `None` keeps yue2.cpp's rule of one chunk per context window.
    pub stream: Option<(usize, usize)>,
}

impl Settings {
    /// Whether the score is planned by the AR half (none given, none replayed, not off).
    pub fn plans(&self) -> bool {
        (self.abc.is_empty() || self.abc_continue) && self.cot != Cot::Off && self.replay.is_none()
    }

    /// Codes the semantic stage may write after the source's (its progress bar's total).
    pub fn semantic_steps(&self) -> usize {
        self.budget.saturating_sub(self.source.len())
    }

    /// Where a song's chunks fall behind a prefix of `prefix_len` tokens in a KV cache of
    /// `max_seq` (yue2.cpp's rule, or the streaming grid).
    pub fn chunk_plan(&self, max_seq: usize, prefix_len: usize) -> Result<ChunkPlan, Invalid> {
        ChunkPlan::new(max_seq, prefix_len, self.stream).ok_or_else(|| {
            Invalid::new(
                "abc",
                format!(
                    "the prefix of {prefix_len} tokens leaves no room for a latent block in a context of {max_seq}"
                ),
            )
        })
    }

    /// The VAE tile core of the tracks: the server's `core`, or under streaming chunks at
    /// most a chunk less the halo, so a track's first tile is decoded as soon as its first
    /// chunk is painted. Part of what a replay must match to render the same samples.
    pub fn tile_core(&self, core: usize, halo: usize) -> usize {
        match self.stream {
            Some((f, _)) => core.min(f.saturating_sub(halo).max(1)),
            None => core,
        }
    }

    /// The settings that render song `song` again from its score and codes (its planning
    /// seed when it was planned), every variation: what a resumed job runs per song.
    pub fn for_song(&self, song: u32, abc: &str, codes: &[u32], plan_seed: Option<u64>) -> Settings {
        Settings {
            abc: abc.to_string(),
            abc_continue: false,
            songs: 1,
            lm_seed: plan_seed.unwrap_or(self.lm_seed + u64::from(song)),
            source: Vec::new(),
            replay: Some(codes.to_vec()),
            ..self.clone()
        }
    }

    /// The settings that render variation `variation` of a song again, bit for bit.
    pub fn replay(&self, song: u32, abc: &str, codes: &[u32], plan_seed: Option<u64>, variation: u32) -> Settings {
        Settings { seed: self.seed + u64::from(variation), variations: 1, ..self.for_song(song, abc, codes, plan_seed) }
    }
}
