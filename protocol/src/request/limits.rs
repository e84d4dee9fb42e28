//! The bounds a request is checked against, and the error that names the field at fault.

/// Size of the semantic codebook: codes are in `[0, 32768)`.
pub const CODEBOOK_SIZE: u32 = 32_768;
/// Context of the YuE2-3B checkpoint, in tokens.
pub const DEFAULT_CONTEXT: u32 = 24_576;
/// Server bound on `synth_batch_size` (flow matching variations per song).
pub const MAX_SYNTH_BATCH: u32 = 9;
/// Upper bound of `plan_retries`.
pub const MAX_PLAN_RETRIES: u32 = 8;
/// Lowest accepted `mp3_bitrate`, in kbps.
pub const MP3_BITRATE_MIN: u32 = 32;
/// Highest accepted `mp3_bitrate`, in kbps (the MPEG-1 Layer III ceiling).
pub const MP3_BITRATE_MAX: u32 = 320;
/// `peak_clip` is a count per million samples, so a million clips everything.
pub const PEAK_CLIP_MAX: i64 = 1_000_000;
/// The largest guidance (`cfg_scale`, `lm_cfg`, `dit_cfg`) in magnitude: far past any
/// useful one, short of the overflow that turns a song's logits or velocities into NaN.
pub const GUIDANCE_MAX: f64 = 100.0;
/// The largest adapter strength in magnitude, for the same reason.
pub const ADAPTER_SCALE_MAX: f64 = 16.0;
/// Seed value meaning "draw one for me".
pub const RANDOM_SEED: i64 = -1;
/// Resolved random seeds stay below 2^53: batch and retry offsets (`lm_seed + i + k * n`)
/// then cannot overflow, and the seed survives a JavaScript number round trip in the WebUI.
pub const RANDOM_SEED_LIMIT: u64 = 1 << 53;

/// A request rejected by parsing or validation; `field` names the offending request field
/// (dotted for nested ones, e.g. `abc_sampling.top_p`) so a 400 tells the caller what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RequestError {
    pub field: String,
    pub message: String,
}

impl RequestError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// Server-side bounds a request is validated against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--max-batch`: songs per request, one KV set each.
    pub max_batch: u32,
    /// Flow matching variations per song.
    pub max_synth_batch: u32,
    /// KV cache length in tokens (`--max-seq`, else the model context).
    pub context: u32,
    /// Number of semantic codes of the loaded YuE2 model.
    pub codebook_size: u32,
    /// Code-book sizes of the loaded MiniMax Music 3 LM and depth decoder, which bound
    /// `audio_codes` (the published models' by default).
    pub mm3_codebooks: super::Mm3Codebooks,
    /// The daemon's bound on `steps` (`--max-steps`), on top of each family's own (YuE2 has
    /// none, MiniMax Music 3 [`super::mm3::MAX_STEPS`]).
    pub max_steps: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_batch: 1,
            max_synth_batch: MAX_SYNTH_BATCH,
            context: DEFAULT_CONTEXT,
            codebook_size: CODEBOOK_SIZE,
            mm3_codebooks: super::Mm3Codebooks::FULL,
            max_steps: u32::MAX,
        }
    }
}
