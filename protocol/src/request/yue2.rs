//! The YuE2 request (yue2.cpp's `POST /synth` body): every field, its default and bound,
//! and YuE2's audio facts as its `/props` publishes them.
use super::*;

/// Output sample rate of YuE2's VAE, in Hz: every rendered track is 48 kHz stereo.
pub const SAMPLE_RATE: u32 = 48_000;

/// Semantic codes and acoustic latents share this rate: one code per latent frame.
pub const FRAME_RATE: u32 = 25;

/// Upsampling factor of the VAE decoder, `SAMPLE_RATE / FRAME_RATE`.
pub const SAMPLES_PER_FRAME: u32 = 1920;

/// Width of one acoustic latent frame (the raw `.vae` layout is `[T, 64]` f32).
pub const LATENT_CHANNELS: u32 = 64;

/// Chain of thought mode: who writes the ABC score, and how detailed it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CotMode {
    /// Chord annotated score.
    #[default]
    Full,
    /// Melody only score.
    Melody,
    /// No symbolic stage: the score slot is closed at once.
    Off,
}

impl CotMode {
    pub const ALL: [CotMode; 3] = [CotMode::Full, CotMode::Melody, CotMode::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            CotMode::Full => "full",
            CotMode::Melody => "melody",
            CotMode::Off => "off",
        }
    }

    /// Guidance the protocol applies when `cfg_scale` is negative.
    pub fn protocol_cfg_scale(self) -> f64 {
        match self {
            CotMode::Off => 1.01,
            CotMode::Full | CotMode::Melody => 1.0,
        }
    }
}

impl fmt::Display for CotMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CotMode {
    type Err = RequestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| RequestError::new("cot", format!("unknown mode {s:?}, expected full, melody or off")))
    }
}

/// The ODE solver of the flow matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Solver {
    /// Two velocity evaluations a step (yue2.cpp's solver).
    #[default]
    Midpoint,
    /// Adams-Bashforth 2 after a first midpoint step: one evaluation a later step
    /// (`steps + 1` in all), a slightly different render of the same codes.
    Ab2,
}

impl Solver {
    fn is_default(&self) -> bool {
        *self == Solver::Midpoint
    }
}

/// One LoRA adapter of the `--adapters` directory, stacked at its own strength.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AdapterRef {
    /// An adapter of the daemon's `--adapters` directory (GET /props lists them).
    pub name: String,
    /// Strength of the merge, at most 16 in magnitude; 0 leaves the weights untouched.
    #[serde(default = "unit_scale")]
    #[schemars(range(min = -ADAPTER_SCALE_MAX, max = ADAPTER_SCALE_MAX))]
    pub scale: f64,
    /// Strength on the AR half (the score and the codes); absent: `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -ADAPTER_SCALE_MAX, max = ADAPTER_SCALE_MAX))]
    pub ar_scale: Option<f64>,
    /// Strength on the NAR half (the acoustics); absent: `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -ADAPTER_SCALE_MAX, max = ADAPTER_SCALE_MAX))]
    pub nar_scale: Option<f64>,
}

impl AdapterRef {
    /// An adapter at one strength on both halves.
    pub fn new(name: impl Into<String>, scale: f64) -> Self {
        AdapterRef { name: name.into(), scale, ar_scale: None, nar_scale: None }
    }

    /// Its strength on the AR half (`nar` false) or the NAR half.
    pub fn half_scale(&self, nar: bool) -> f64 {
        if nar { self.nar_scale } else { self.ar_scale }.unwrap_or(self.scale)
    }
}

fn unit_scale() -> f64 {
    1.0
}

fn is_unit(x: &f64) -> bool {
    *x == 1.0
}

/// The bound of `companion_scale`.
pub const COMPANION_SCALE_MAX: f64 = 2.0;

/// A song generation request. Every field has a default, and omitting a field is the same
/// as sending its default (a JSON `null` counts as omitted too).
///
/// Deserialization goes through [`Yue2Request::from_value`] so that a type error names the
/// field at fault and a partial sampling preset keeps its stage's defaults. Unknown fields
/// are ignored, which lets older daemons accept requests from newer clients.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(default)]
pub struct Yue2Request {
    /// Style tags, verbatim under the `[Tags]` header.
    pub style: String,
    /// Lyrics with their structural tags, verbatim under the `[Lyrics]` header.
    pub lyrics: String,
    /// Score to realise; non-empty skips the planning stage (unless `abc_continue`).
    pub abc: String,
    /// The planner continues `abc` instead of skipping: the given score opens it (without an
    /// end marker), the planning stage writes the rest under the request's `cot` (full or
    /// melody), and the whole score is sung and returned. The replay request records the
    /// whole score with this false. Refused (400) without an abc, under cot off, or beside
    /// semantic_tokens.
    #[serde(skip_serializing_if = "is_false")]
    pub abc_continue: bool,
    pub cot: CotMode,
    /// Target length in seconds, capped by the semantic budget. Given `semantic_tokens`, the
    /// codes fix the length and this is not read; a continuation (`source_tokens`) writes at
    /// least to the end of its source.
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub duration: f64,
    /// Philox key of the token draw; -1 draws one.
    #[schemars(range(min = -1, max = 9_007_199_254_740_991_i64))]
    pub lm_seed: i64,
    /// mt19937 seed of the acoustic noise; -1 draws one.
    #[schemars(range(min = -1, max = 9_007_199_254_740_991_i64))]
    pub seed: i64,
    /// Steps of the flow matching ODE.
    #[schemars(range(min = 1))]
    pub steps: u32,
    /// The ODE solver: `midpoint` (two evaluations a step) or `ab2` (one a step after the
    /// first: `steps + 1` in all). The replay request records it (when not the default: a
    /// request at the default serializes as yue2.cpp's reference body).
    #[serde(skip_serializing_if = "Solver::is_default")]
    pub solver: Solver,
    /// Songs generated from the prompt, bounded by `--max-batch`.
    #[schemars(range(min = 1))]
    pub lm_batch_size: u32,
    /// Noise variations rendered per song.
    #[schemars(range(min = 1, max = MAX_SYNTH_BATCH))]
    pub synth_batch_size: u32,
    /// Guidance of the semantic stage, at most 100 in magnitude; negative applies the
    /// protocol value of the cot mode.
    #[schemars(range(min = -GUIDANCE_MAX, max = GUIDANCE_MAX))]
    pub cfg_scale: f64,
    /// Comma separated semantic codes; non-empty replaces the autoregressive stage.
    #[schemars(pattern(CODES_PATTERN))]
    pub semantic_tokens: String,
    /// Normalisation peak is the `1 - peak_clip / 1e6` percentile; 0 is the true peak.
    #[schemars(range(min = 0, max = PEAK_CLIP_MAX))]
    pub peak_clip: i64,
    pub output_format: OutputFormat,
    /// kbps, read only by the MP3 encoder (still validated for every format).
    #[schemars(range(min = MP3_BITRATE_MIN, max = MP3_BITRATE_MAX))]
    pub mp3_bitrate: u32,
    pub adapters: Vec<AdapterRef>,
    /// Strength of the daemon's `--companion` adapter, merged into the NAR half under every
    /// render (a request that names the same adapter in `adapters` merges it once, at that
    /// entry's strength); 0 renders without it. Ignored by a daemon without one. The replay
    /// request records it when not 1.
    #[serde(skip_serializing_if = "is_unit")]
    #[schemars(range(min = 0, max = COMPANION_SCALE_MAX))]
    pub companion_scale: f64,
    /// Codes of a source song to continue from; exclusive with `semantic_tokens`.
    #[schemars(pattern(CODES_PATTERN))]
    pub source_tokens: String,
    /// Start of the source section, in seconds.
    #[schemars(range(min = 0))]
    pub source_start: f64,
    /// End of the source section, in seconds; -1 is the end of the source.
    #[schemars(extend("anyOf" = [{"const": -1}, {"minimum": 0}]))]
    pub source_end: f64,
    /// Extra planning attempts when the score comes out malformed.
    #[schemars(range(min = 0, max = MAX_PLAN_RETRIES))]
    pub plan_retries: u32,
    pub abc_sampling: SamplingPreset,
    pub semantic_sampling: SamplingPreset,
    /// Live streaming: the song is painted in NAR chunks of about this many seconds (each
    /// with 25 frames (1 s) of the previous chunk's codes as left context, cropped
    /// after), so the first audio comes after one small chunk instead of the whole song;
    /// with `--keep-loaded` chunk k renders while the AR half writes chunk k+1. 0 (the
    /// default) keeps yue2.cpp's chunk rule: one chunk per context window. A different
    /// value renders different audio from the same codes; the replay request records it
    /// (when non-zero: a request at the default serializes as yue2.cpp's reference body).
    #[serde(skip_serializing_if = "is_off")]
    #[schemars(extend("anyOf" = [{"const": 0}, {"minimum": STREAM_CHUNK_SECONDS_MIN,
        "maximum": STREAM_CHUNK_SECONDS_MAX}]))]
    pub stream_chunk_seconds: f64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_off(seconds: &f64) -> bool {
    *seconds == 0.0
}

/// Frames of the previous chunk's codes a streaming chunk (`stream_chunk_seconds`) is
/// painted behind, then cropped: one second, so the chunk's first frames do not start
/// from silence. Measured in the README (the seam table).
pub const STREAM_CONTEXT_FRAMES: usize = 25;

/// Bounds of a non-zero `stream_chunk_seconds`.
pub const STREAM_CHUNK_SECONDS_MIN: f64 = 2.0;
pub const STREAM_CHUNK_SECONDS_MAX: f64 = 600.0;

impl Default for Yue2Request {
    fn default() -> Self {
        Self {
            style: String::new(),
            lyrics: String::new(),
            abc: String::new(),
            abc_continue: false,
            cot: CotMode::Full,
            duration: 360.0,
            lm_seed: RANDOM_SEED,
            seed: RANDOM_SEED,
            steps: 8,
            solver: Solver::Midpoint,
            lm_batch_size: 1,
            synth_batch_size: 1,
            cfg_scale: -1.0,
            semantic_tokens: String::new(),
            peak_clip: 10,
            output_format: OutputFormat::Mp3,
            mp3_bitrate: 128,
            adapters: Vec::new(),
            companion_scale: 1.0,
            source_tokens: String::new(),
            source_start: 0.0,
            source_end: -1.0,
            plan_retries: 2,
            abc_sampling: SamplingPreset::abc_default(),
            semantic_sampling: SamplingPreset::semantic_default(),
            stream_chunk_seconds: 0.0,
        }
    }
}

/// `plan_retries` must be a JSON integer: `1.5`, `2.0` and `"2"` are refused rather than
/// rounded or coerced, since a silently changed retry count changes which seeds run.
fn parse_plan_retries(v: &Value) -> Result<u32, RequestError> {
    let n = match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    };
    n.ok_or_else(|| {
        RequestError::new("plan_retries", format!("must be an integer in [0, {MAX_PLAN_RETRIES}], got {v}"))
    })
}

impl Yue2Request {
    /// Parses a request body. Malformed JSON and non-object bodies are reported on the
    /// pseudo field `body`; type errors name the field. Values are not checked: call
    /// [`validate`](Self::validate).
    pub fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        Self::from_value(parse_body(bytes)?)
    }

    /// Builds a request from an already parsed JSON value, field by field over the defaults.
    pub fn from_value(value: Value) -> Result<Self, RequestError> {
        let mut obj = fields_of(value)?;
        let mut r = Self::default();
        take_fields!(
            obj,
            r,
            style,
            lyrics,
            abc,
            abc_continue,
            cot,
            duration,
            lm_seed,
            seed,
            steps,
            solver,
            lm_batch_size,
            synth_batch_size,
            cfg_scale,
            semantic_tokens,
            peak_clip,
            output_format,
            mp3_bitrate,
            adapters,
            companion_scale,
            source_tokens,
            source_start,
            source_end,
            stream_chunk_seconds,
        );
        match obj.remove("plan_retries") {
            None | Some(Value::Null) => {}
            Some(v) => r.plan_retries = parse_plan_retries(&v)?,
        }
        for (key, slot) in [("abc_sampling", &mut r.abc_sampling), ("semantic_sampling", &mut r.semantic_sampling)] {
            match obj.remove(key) {
                None | Some(Value::Null) => {}
                Some(v) => *slot = slot.overlay(v, key)?,
            }
        }
        Ok(r)
    }

    /// Checks every value against the protocol bounds and the server `limits`; the first
    /// violation is returned.
    ///
    /// Content rule: the reference accepts an empty style and an empty lyrics (the model
    /// then composes on its own), yet the server must refuse a request that carries
    /// nothing at all. A request is therefore refused only when style and lyrics are both
    /// empty *and* it brings no other content: no `abc`, no `semantic_tokens`, no
    /// `source_tokens`. A replay (codes only) or a cover (score only) stays valid.
    pub fn validate(&self, limits: &Limits) -> Result<(), RequestError> {
        if self.style.is_empty()
            && self.lyrics.is_empty()
            && self.abc.is_empty()
            && self.semantic_tokens.trim_ascii().is_empty()
            && self.source_tokens.trim_ascii().is_empty()
        {
            return Err(RequestError::new(
                "style",
                "a request needs style or lyrics (or an abc score, semantic_tokens or source_tokens)",
            ));
        }
        self.check_continue()?;
        self.validate_options(limits)
    }

    /// Every field's type and bound, without the content rule: what a request that only
    /// carries options (the `request` part of a `/vae` decode) must satisfy.
    pub fn validate_options(&self, limits: &Limits) -> Result<(), RequestError> {
        let err = |field: &str, msg: String| Err(RequestError::new(field, msg));

        if !(self.duration.is_finite() && self.duration > 0.0) {
            return err("duration", format!("must be a positive number of seconds, got {}", self.duration));
        }
        for (field, seed) in [("lm_seed", self.lm_seed), ("seed", self.seed)] {
            if !(seed == RANDOM_SEED || (0..RANDOM_SEED_LIMIT as i64).contains(&seed)) {
                return err(field, format!("must be -1 (random) or in [0, 2^53), got {seed}"));
            }
        }
        if !(1..=limits.max_steps).contains(&self.steps) {
            return err("steps", format!("must be in [1, {}], got {}", limits.max_steps, self.steps));
        }
        if !(1..=limits.max_batch).contains(&self.lm_batch_size) {
            return err("lm_batch_size", format!("must be in [1, {}], got {}", limits.max_batch, self.lm_batch_size));
        }
        if !(1..=limits.max_synth_batch).contains(&self.synth_batch_size) {
            return err(
                "synth_batch_size",
                format!("must be in [1, {}], got {}", limits.max_synth_batch, self.synth_batch_size),
            );
        }
        if !(self.cfg_scale.is_finite() && self.cfg_scale.abs() <= GUIDANCE_MAX) {
            return err("cfg_scale", format!("must be in [-{GUIDANCE_MAX}, {GUIDANCE_MAX}], got {}", self.cfg_scale));
        }
        if !(0..=PEAK_CLIP_MAX).contains(&self.peak_clip) {
            return err("peak_clip", format!("must be in [0, {PEAK_CLIP_MAX}], got {}", self.peak_clip));
        }
        if !(MP3_BITRATE_MIN..=MP3_BITRATE_MAX).contains(&self.mp3_bitrate) {
            return err(
                "mp3_bitrate",
                format!("must be in [{MP3_BITRATE_MIN}, {MP3_BITRATE_MAX}] kbps, got {}", self.mp3_bitrate),
            );
        }
        for (i, a) in self.adapters.iter().enumerate() {
            if a.name.trim().is_empty() {
                return err(&format!("adapters[{i}].name"), "must not be empty".into());
            }
            for (field, s) in [("scale", Some(a.scale)), ("ar_scale", a.ar_scale), ("nar_scale", a.nar_scale)] {
                if let Some(s) = s.filter(|s| !(s.is_finite() && s.abs() <= ADAPTER_SCALE_MAX)) {
                    return err(
                        &format!("adapters[{i}].{field}"),
                        format!("must be in [-{ADAPTER_SCALE_MAX}, {ADAPTER_SCALE_MAX}], got {s}"),
                    );
                }
            }
        }
        if !(0.0..=COMPANION_SCALE_MAX).contains(&self.companion_scale) {
            return err(
                "companion_scale",
                format!("must be in [0, {COMPANION_SCALE_MAX}], got {}", self.companion_scale),
            );
        }
        let has_semantic = !self.semantic_tokens.trim_ascii().is_empty();
        let has_source = !self.source_tokens.trim_ascii().is_empty();
        if has_semantic && has_source {
            return err("source_tokens", "is exclusive with semantic_tokens".into());
        }
        check_codes("semantic_tokens", &self.semantic_tokens, limits)?;
        let source = check_codes("source_tokens", &self.source_tokens, limits)?;
        if !(self.source_start.is_finite() && self.source_start >= 0.0) {
            return err("source_start", format!("must be a non-negative number of seconds, got {}", self.source_start));
        }
        if has_source {
            let source_seconds = source.len() as f64 / f64::from(crate::FRAME_RATE);
            if self.source_start >= source_seconds {
                return err(
                    "source_start",
                    format!("{} s is past the end of the source ({source_seconds} s)", self.source_start),
                );
            }
        }
        if !self.source_end.is_finite() || (self.source_end != -1.0 && self.source_end < self.source_start) {
            return err(
                "source_end",
                format!("must be -1 or at least source_start ({}), got {}", self.source_start, self.source_end),
            );
        }
        if self.plan_retries > MAX_PLAN_RETRIES {
            return err(
                "plan_retries",
                format!("must be an integer in [0, {MAX_PLAN_RETRIES}], got {}", self.plan_retries),
            );
        }
        let s = self.stream_chunk_seconds;
        if !(s == 0.0 || (STREAM_CHUNK_SECONDS_MIN..=STREAM_CHUNK_SECONDS_MAX).contains(&s)) {
            return err(
                "stream_chunk_seconds",
                format!(
                    "must be 0 (off) or in [{STREAM_CHUNK_SECONDS_MIN}, {STREAM_CHUNK_SECONDS_MAX}] seconds, got {s}"
                ),
            );
        }
        self.abc_sampling.validate("abc_sampling")?;
        self.semantic_sampling.validate("semantic_sampling")?;
        Ok(())
    }

    /// `abc_continue` needs a score to open, a planning stage to continue it, and no codes
    /// that take its place.
    fn check_continue(&self) -> Result<(), RequestError> {
        if !self.abc_continue {
            return Ok(());
        }
        let refuse = |why: &str| Err(RequestError::new("abc_continue", why));
        if self.abc.trim().is_empty() {
            return refuse("needs an abc to continue");
        }
        if self.cot == CotMode::Off {
            return refuse("the planner continues the score under cot full or melody, not off");
        }
        if !self.semantic_tokens.trim_ascii().is_empty() {
            return refuse("semantic_tokens replay a whole score; give it without abc_continue");
        }
        Ok(())
    }

    /// Replaces random (negative) seeds by draws in `[0, 2^53)` so the job, and every
    /// replay request it returns, records the exact seeds it consumed.
    pub fn with_resolved_seeds(mut self, mut rng_u64: impl FnMut() -> u64) -> Self {
        if self.lm_seed < 0 {
            self.lm_seed = (rng_u64() % RANDOM_SEED_LIMIT) as i64;
        }
        if self.seed < 0 {
            self.seed = (rng_u64() % RANDOM_SEED_LIMIT) as i64;
        }
        self
    }

    /// Guidance actually applied: `cfg_scale`, or the protocol value when it is negative.
    pub fn effective_cfg_scale(&self) -> f64 {
        if self.cfg_scale < 0.0 {
            self.cot.protocol_cfg_scale()
        } else {
            self.cfg_scale
        }
    }

    /// Frames of one streaming chunk (`stream_chunk_seconds` at 25 Hz), `None` when off.
    pub fn stream_chunk_frames(&self) -> Option<usize> {
        (self.stream_chunk_seconds > 0.0).then(|| (self.stream_chunk_seconds * f64::from(FRAME_RATE)).round() as usize)
    }

    /// The parsed `semantic_tokens` (no codebook check: see [`validate`](Self::validate)).
    pub fn semantic_codes(&self) -> Result<Vec<u32>, RequestError> {
        parse_codes(&self.semantic_tokens).map_err(|m| RequestError::new("semantic_tokens", m))
    }

    /// The parsed `source_tokens` (no codebook check: see [`validate`](Self::validate)).
    pub fn source_codes(&self) -> Result<Vec<u32>, RequestError> {
        parse_codes(&self.source_tokens).map_err(|m| RequestError::new("source_tokens", m))
    }
}

impl<'de> Deserialize<'de> for Yue2Request {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request reference of the specification, verbatim in its values.
    const REFERENCE: &str = r#"{
        "style": "", "lyrics": "", "abc": "", "cot": "full", "duration": 360.0,
        "lm_seed": -1, "seed": -1, "steps": 8, "lm_batch_size": 1, "synth_batch_size": 1,
        "cfg_scale": -1.0, "semantic_tokens": "", "peak_clip": 10, "output_format": "mp3",
        "mp3_bitrate": 128, "adapters": [], "source_tokens": "", "source_start": 0.0,
        "source_end": -1.0, "plan_retries": 2,
        "abc_sampling": { "temperature": 0.7, "top_p": 0.9, "top_k": 30, "repetition_penalty": 1.005,
            "penalty_window": 100, "min_tokens": 32, "max_tokens": 4096 },
        "semantic_sampling": { "temperature": 1.0, "top_p": 0.95, "top_k": 100, "repetition_penalty": 1.2,
            "penalty_window": 50, "min_tokens": 200, "max_tokens": 9000 }
    }"#;

    fn valid() -> Yue2Request {
        Yue2Request { style: "pop, piano".into(), ..Yue2Request::default() }
    }

    fn parse(json: &str) -> Result<Yue2Request, RequestError> {
        Yue2Request::from_json(json.as_bytes())
    }

    fn field_of(r: &Yue2Request) -> String {
        r.validate(&Limits::default()).expect_err("request should be rejected").field
    }

    fn parse_field(json: &str) -> String {
        parse(json).expect_err("body should be rejected").field
    }

    #[test]
    fn abc_continue_needs_a_score_a_planner_and_no_replay() {
        let limits = Limits::default();
        let field = |body: &str| parse(body).unwrap().validate(&limits).err().map(|e| e.to_string());
        assert_eq!(field(r#"{"style":"x","abc":"X:1\nK:C\nC","abc_continue":true}"#), None);
        assert_eq!(
            field(r#"{"style":"x","abc_continue":true}"#).as_deref(),
            Some("abc_continue: needs an abc to continue")
        );
        assert!(field(r#"{"abc":"X:1","abc_continue":true,"cot":"off"}"#).unwrap().contains("not off"));
        assert!(field(r#"{"abc":"X:1","abc_continue":true,"semantic_tokens":"1,2"}"#).unwrap().contains("replay"));
        let r = parse(r#"{"style":"x","abc":"X:1","abc_continue":true}"#).unwrap();
        assert!(serde_json::to_string(&r).unwrap().contains(r#""abc_continue":true"#));
        let plain = serde_json::to_string(&Yue2Request::default()).unwrap();
        assert!(!plain.contains("abc_continue"), "a request at the default serializes as before");
    }

    #[test]
    fn omitted_fields_equal_defaults() {
        let r = parse(r#"{"style":"pop"}"#).unwrap();
        assert_eq!(r, Yue2Request { style: "pop".into(), ..Default::default() });
        assert_eq!(parse("{}").unwrap(), Yue2Request::default());
        assert_eq!(r.duration, 360.0);
        assert_eq!(r.steps, 8);
        assert_eq!(r.plan_retries, 2);
        assert_eq!(r.abc_sampling.top_k, 30);
        assert_eq!(r.semantic_sampling.max_tokens, 9000);
        assert!(r.validate(&Limits::default()).is_ok());
    }

    #[test]
    fn reference_json_is_the_default() {
        assert_eq!(parse(REFERENCE).unwrap(), Yue2Request::default());
        let ours: Value = serde_json::from_str(&serde_json::to_string(&Yue2Request::default()).unwrap()).unwrap();
        let reference: Value = serde_json::from_str(REFERENCE).unwrap();
        assert_eq!(ours, reference);
    }

    #[test]
    fn serialize_round_trips() {
        let mut r = valid();
        r.lyrics = "[verse]\nhello".into();
        r.cot = CotMode::Melody;
        r.output_format = OutputFormat::Wav24;
        r.adapters = vec![AdapterRef::new("lorn.safetensors", 0.5)];
        r.abc_sampling.top_p = 0.5;
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""cot":"melody""#));
        assert!(text.contains(r#""output_format":"wav24""#));
        let back: Yue2Request = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn null_counts_as_omitted() {
        let r = parse(r#"{"style":"x","steps":null,"abc_sampling":null}"#).unwrap();
        assert_eq!(r.steps, 8);
        assert_eq!(r.abc_sampling, SamplingPreset::abc_default());
    }

    #[test]
    fn partial_preset_keeps_stage_defaults() {
        let r = parse(r#"{"style":"x","semantic_sampling":{"top_k":7}}"#).unwrap();
        assert_eq!(r.semantic_sampling, SamplingPreset { top_k: 7, ..SamplingPreset::semantic_default() });
        assert_eq!(r.abc_sampling, SamplingPreset::abc_default());
    }

    #[test]
    fn the_solver_is_midpoint_unless_asked_and_an_unknown_one_names_its_field() {
        assert_eq!(parse(r#"{"style":"x"}"#).unwrap().solver, Solver::Midpoint);
        assert_eq!(parse(r#"{"style":"x","solver":"ab2"}"#).unwrap().solver, Solver::Ab2);
        assert_eq!(parse(r#"{"style":"x","solver":null}"#).unwrap().solver, Solver::Midpoint);
        assert_eq!(parse_field(r#"{"style":"x","solver":"euler"}"#), "solver");
        assert_eq!(parse_field(r#"{"style":"x","solver":2}"#), "solver");
        // The default stays out of the body (yue2.cpp's reference body); ab2 is written.
        let text = serde_json::to_string(&Yue2Request::default()).unwrap();
        assert!(!text.contains("solver"), "{text}");
        let ab2 = Yue2Request { solver: Solver::Ab2, ..Default::default() };
        assert!(serde_json::to_string(&ab2).unwrap().contains(r#""solver":"ab2""#));
    }

    #[test]
    fn adapter_scale_defaults_to_one() {
        let r = parse(r#"{"style":"x","adapters":[{"name":"a.safetensors"}]}"#).unwrap();
        assert_eq!(r.adapters, vec![AdapterRef::new("a.safetensors", 1.0)]);
        assert_eq!((r.adapters[0].half_scale(false), r.adapters[0].half_scale(true)), (1.0, 1.0));
        let r = parse(r#"{"style":"x","adapters":[{"name":"a","scale":0.5,"nar_scale":1.5}]}"#).unwrap();
        assert_eq!((r.adapters[0].half_scale(false), r.adapters[0].half_scale(true)), (0.5, 1.5));
        // The per-half strengths and a companion strength of 1 stay out of the serialized body.
        let json = serde_json::to_string(&Yue2Request { adapters: vec![AdapterRef::new("a", 1.0)], ..valid() });
        let json = json.unwrap();
        assert!(!json.contains("ar_scale") && !json.contains("companion_scale"), "{json}");
    }

    #[test]
    fn malformed_json_is_reported() {
        let e = parse(r#"{"style": "#).unwrap_err();
        assert_eq!(e.field, "body");
        assert!(e.message.starts_with("malformed JSON"), "{e}");
        assert!(e.to_string().starts_with("body: malformed JSON"));
        assert_eq!(parse("[1,2]").unwrap_err().field, "body");
    }

    #[test]
    fn unknown_enums_name_their_field() {
        assert_eq!(parse_field(r#"{"cot":"half"}"#), "cot");
        assert_eq!(parse_field(r#"{"output_format":"aiff"}"#), "output_format");
        assert_eq!(parse_field(r#"{"output_format":"MP3"}"#), "output_format");
        assert_eq!("melody".parse::<CotMode>().unwrap(), CotMode::Melody);
        assert_eq!("half".parse::<CotMode>().unwrap_err().field, "cot");
        assert_eq!("flac".parse::<OutputFormat>().unwrap(), OutputFormat::Flac);
        assert_eq!("aiff".parse::<OutputFormat>().unwrap_err().field, "output_format");
    }

    #[test]
    fn type_errors_name_their_field() {
        assert_eq!(parse_field(r#"{"steps":-1}"#), "steps");
        assert_eq!(parse_field(r#"{"steps":2.5}"#), "steps");
        assert_eq!(parse_field(r#"{"style":3}"#), "style");
        assert_eq!(parse_field(r#"{"lm_seed":"7"}"#), "lm_seed");
        assert_eq!(parse_field(r#"{"adapters":[{"scale":1}]}"#), "adapters");
        assert_eq!(parse_field(r#"{"abc_sampling":{"top_k":"x"}}"#), "abc_sampling.top_k");
        assert_eq!(parse_field(r#"{"semantic_sampling":5}"#), "semantic_sampling");
    }

    #[test]
    fn integral_numbers_fill_integer_fields() {
        // JSON Schema's integer includes 6.0; only plan_retries refuses it (its own rule).
        let r =
            parse(r#"{"style":"x","synth_batch_size":6.0,"lm_seed":-3.0,"steps":8.0,"abc_sampling":{"top_k":5.0}}"#);
        let r = r.unwrap();
        assert_eq!((r.synth_batch_size, r.lm_seed, r.steps, r.abc_sampling.top_k), (6, -3, 8, 5));
        for bad in ["6.5", "1e300", "\"6\""] {
            let e = parse(&format!(r#"{{"style":"x","synth_batch_size":{bad}}}"#)).unwrap_err();
            assert_eq!(e.field, "synth_batch_size", "{bad}");
        }
        // A float field keeps its fraction.
        assert_eq!(parse(r#"{"style":"x","cfg_scale":2.0}"#).unwrap().cfg_scale, 2.0);
    }

    #[test]
    fn plan_retries_must_be_an_integer() {
        for bad in ["1.5", "\"2\"", "2.0", "-1", "true", "[2]"] {
            let e = parse(&format!(r#"{{"style":"x","plan_retries":{bad}}}"#)).unwrap_err();
            assert_eq!(e.field, "plan_retries", "{bad}");
            assert!(e.message.contains("integer"), "{e}");
        }
        assert_eq!(parse(r#"{"style":"x","plan_retries":0}"#).unwrap().plan_retries, 0);
        assert_eq!(parse(r#"{"style":"x","plan_retries":8}"#).unwrap().plan_retries, 8);
        let nine = parse(r#"{"style":"x","plan_retries":9}"#).unwrap();
        assert_eq!(field_of(&nine), "plan_retries");
        // The serde path reports the same field.
        let e = serde_json::from_str::<Yue2Request>(r#"{"plan_retries":1.5}"#).unwrap_err();
        assert!(e.to_string().starts_with("plan_retries: "), "{e}");
    }

    #[test]
    fn content_rule() {
        assert_eq!(field_of(&Yue2Request::default()), "style");
        let limits = Limits::default();
        for r in [
            Yue2Request { lyrics: "la la".into(), ..Default::default() },
            Yue2Request { abc: "X:1\nK:C\nC".into(), ..Default::default() },
            Yue2Request { semantic_tokens: "1,2,3".into(), ..Default::default() },
            Yue2Request { source_tokens: "1,2,3".into(), ..Default::default() },
        ] {
            assert_eq!(r.validate(&limits), Ok(()), "{r:?}");
        }
    }

    #[test]
    fn scalar_bounds_name_their_field() {
        let cases: Vec<(&str, Yue2Request)> = vec![
            ("duration", Yue2Request { duration: 0.0, ..valid() }),
            ("duration", Yue2Request { duration: -3.0, ..valid() }),
            ("duration", Yue2Request { duration: f64::NAN, ..valid() }),
            ("duration", Yue2Request { duration: f64::INFINITY, ..valid() }),
            ("lm_seed", Yue2Request { lm_seed: -2, ..valid() }),
            ("seed", Yue2Request { seed: -5, ..valid() }),
            ("steps", Yue2Request { steps: 0, ..valid() }),
            ("lm_batch_size", Yue2Request { lm_batch_size: 0, ..valid() }),
            ("lm_batch_size", Yue2Request { lm_batch_size: 2, ..valid() }),
            ("synth_batch_size", Yue2Request { synth_batch_size: 0, ..valid() }),
            ("synth_batch_size", Yue2Request { synth_batch_size: 10, ..valid() }),
            ("cfg_scale", Yue2Request { cfg_scale: f64::NAN, ..valid() }),
            ("cfg_scale", Yue2Request { cfg_scale: f64::NEG_INFINITY, ..valid() }),
            ("peak_clip", Yue2Request { peak_clip: -1, ..valid() }),
            ("peak_clip", Yue2Request { peak_clip: 1_000_001, ..valid() }),
            ("mp3_bitrate", Yue2Request { mp3_bitrate: 8, ..valid() }),
            ("mp3_bitrate", Yue2Request { mp3_bitrate: 321, ..valid() }),
            ("source_start", Yue2Request { source_start: -0.5, ..valid() }),
            ("source_end", Yue2Request { source_start: 10.0, source_end: 5.0, ..valid() }),
            ("source_end", Yue2Request { source_end: -2.0, ..valid() }),
            ("source_end", Yue2Request { source_end: f64::NAN, ..valid() }),
            ("plan_retries", Yue2Request { plan_retries: 9, ..valid() }),
            ("adapters[0].name", Yue2Request { adapters: vec![AdapterRef::new(" ", 1.0)], ..valid() }),
            ("adapters[0].scale", Yue2Request { adapters: vec![AdapterRef::new("a", f64::NAN)], ..valid() }),
            (
                "adapters[0].nar_scale",
                Yue2Request {
                    adapters: vec![AdapterRef { nar_scale: Some(f64::INFINITY), ..AdapterRef::new("a", 1.0) }],
                    ..valid()
                },
            ),
            ("companion_scale", Yue2Request { companion_scale: 2.5, ..valid() }),
            ("companion_scale", Yue2Request { companion_scale: -0.1, ..valid() }),
            ("companion_scale", Yue2Request { companion_scale: f64::NAN, ..valid() }),
            ("stream_chunk_seconds", Yue2Request { stream_chunk_seconds: 1.0, ..valid() }),
            ("stream_chunk_seconds", Yue2Request { stream_chunk_seconds: -2.0, ..valid() }),
            ("stream_chunk_seconds", Yue2Request { stream_chunk_seconds: 601.0, ..valid() }),
            ("stream_chunk_seconds", Yue2Request { stream_chunk_seconds: f64::NAN, ..valid() }),
        ];
        for (field, r) in cases {
            assert_eq!(field_of(&r), field, "{r:?}");
        }
    }

    #[test]
    fn bounds_accept_their_edges() {
        let limits = Limits { max_batch: 4, ..Limits::default() };
        for r in [
            Yue2Request { lm_batch_size: 4, synth_batch_size: 9, ..valid() },
            Yue2Request { peak_clip: 0, ..valid() },
            Yue2Request { stream_chunk_seconds: 2.0, ..valid() },
            Yue2Request { stream_chunk_seconds: 600.0, ..valid() },
            Yue2Request { peak_clip: 1_000_000, ..valid() },
            Yue2Request { mp3_bitrate: 32, ..valid() },
            Yue2Request { mp3_bitrate: 320, ..valid() },
            Yue2Request { cfg_scale: 1.0, plan_retries: 0, steps: 1, ..valid() },
            Yue2Request { source_start: 5.0, source_end: 5.0, ..valid() },
            Yue2Request { lm_seed: 0, seed: (1 << 53) - 1, ..valid() },
        ] {
            assert_eq!(r.validate(&limits), Ok(()), "{r:?}");
        }
        let four = Yue2Request { lm_batch_size: 5, ..valid() };
        assert_eq!(four.validate(&limits).unwrap_err().field, "lm_batch_size");
    }

    #[test]
    fn sampling_bounds_name_the_nested_field() {
        type Edit = fn(&mut SamplingPreset);
        let cases: [(&str, Edit); 11] = [
            ("temperature", |p| p.temperature = -0.1),
            ("temperature", |p| p.temperature = 5.5),
            ("temperature", |p| p.temperature = f64::NAN),
            ("top_p", |p| p.top_p = 0.0),
            ("top_p", |p| p.top_p = 1.01),
            ("top_k", |p| p.top_k = 0),
            ("repetition_penalty", |p| p.repetition_penalty = 0.0),
            ("penalty_window", |p| p.penalty_window = 0),
            ("penalty_window", |p| p.penalty_window = 101),
            ("min_tokens", |p| p.min_tokens = p.max_tokens + 1),
            ("max_tokens", |p| {
                p.max_tokens = 0;
                p.min_tokens = 0;
            }),
        ];
        for (name, edit) in cases {
            let mut r = valid();
            edit(&mut r.abc_sampling);
            assert_eq!(field_of(&r), format!("abc_sampling.{name}"));
            let mut r = valid();
            edit(&mut r.semantic_sampling);
            assert_eq!(field_of(&r), format!("semantic_sampling.{name}"));
        }
        // Edges are inclusive where the bounds say so.
        let edge = SamplingPreset {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 1,
            repetition_penalty: 0.01,
            penalty_window: 1,
            min_tokens: 1,
            max_tokens: 1,
        };
        assert_eq!(edge.validate("abc_sampling"), Ok(()));
        assert_eq!(SamplingPreset { temperature: 5.0, penalty_window: 100, ..edge }.validate("x"), Ok(()));
    }

    #[test]
    fn sampling_bounds_from_json() {
        let r = parse(r#"{"style":"x","abc_sampling":{"top_p":1.5}}"#).unwrap();
        let e = r.validate(&Limits::default()).unwrap_err();
        assert_eq!(e.field, "abc_sampling.top_p");
        assert_eq!(e.to_string(), "abc_sampling.top_p: must be in (0, 1], got 1.5");
    }

    #[test]
    fn semantic_and_source_are_exclusive() {
        let r = Yue2Request { semantic_tokens: "1,2".into(), source_tokens: "3,4".into(), ..valid() };
        assert_eq!(field_of(&r), "source_tokens");
    }

    #[test]
    fn codes_parse() {
        assert_eq!(parse_codes("12046,8433, 7 ,0\n"), Ok(vec![12046, 8433, 7, 0]));
        assert_eq!(parse_codes(""), Ok(vec![]));
        assert_eq!(parse_codes("  \n"), Ok(vec![]));
        assert_eq!(parse_codes("32767"), Ok(vec![32767]));
        assert_eq!(parse_codes("1,,2").unwrap_err(), "entry 1 is empty");
        assert_eq!(parse_codes("1,2,").unwrap_err(), "entry 2 is empty");
        assert!(parse_codes("1,-2").unwrap_err().starts_with("entry 1 "));
        assert!(parse_codes("1,2,+3").unwrap_err().starts_with("entry 2 "));
        assert!(parse_codes("1.5").unwrap_err().starts_with("entry 0 "));
        assert!(parse_codes("99999999999").unwrap_err().starts_with("entry 0 "));
        let r = Yue2Request { semantic_tokens: "5,6,7".into(), ..valid() };
        assert_eq!(r.semantic_codes(), Ok(vec![5, 6, 7]));
    }

    #[test]
    fn bad_codes_name_field_and_entry() {
        let r = Yue2Request { semantic_tokens: "1,2,32768".into(), ..valid() };
        let e = r.validate(&Limits::default()).unwrap_err();
        assert_eq!(e.field, "semantic_tokens");
        assert!(e.message.contains("entry 2"), "{e}");
        let r = Yue2Request { source_tokens: "1,x,3".into(), ..valid() };
        let e = r.validate(&Limits::default()).unwrap_err();
        assert_eq!(e.field, "source_tokens");
        assert!(e.message.contains("entry 1"), "{e}");
        // The codebook of the loaded model is the bound, not the constant.
        let small = Limits { codebook_size: 100, ..Limits::default() };
        let r = Yue2Request { semantic_tokens: "99,100".into(), ..valid() };
        assert!(r.validate(&small).unwrap_err().message.contains("entry 1"));
        // A stream longer than the KV cache cannot prefill.
        let tiny = Limits { context: 4, ..Limits::default() };
        assert_eq!(Yue2Request { semantic_tokens: "1,2".into(), ..valid() }.validate(&tiny), Ok(()));
        let r = Yue2Request { semantic_tokens: "1,2,3".into(), ..valid() };
        assert_eq!(r.validate(&tiny).unwrap_err().field, "semantic_tokens");
    }

    #[test]
    fn source_section_must_lie_in_the_source() {
        // 50 codes are two seconds of source.
        let codes = vec!["7"; 50].join(",");
        let ok = Yue2Request { source_tokens: codes.clone(), source_start: 1.5, ..valid() };
        assert_eq!(ok.validate(&Limits::default()), Ok(()));
        let late = Yue2Request { source_tokens: codes, source_start: 2.0, ..valid() };
        assert_eq!(field_of(&late), "source_start");
    }

    #[test]
    fn seeds_are_minus_one_or_below_2_to_the_53() {
        // Every replay adds a song's or a variation's index to its seeds: a seed near i64::MAX
        // once wrapped to a negative one the replay request then refused.
        for (seed, ok) in
            [(-1i64, true), (0, true), ((1 << 53) - 1, true), (1 << 53, false), (i64::MAX, false), (-2, false)]
        {
            for r in [Yue2Request { seed, ..valid() }, Yue2Request { lm_seed: seed, ..valid() }] {
                assert_eq!(r.validate(&Limits::default()).is_ok(), ok, "{seed}");
            }
        }
    }

    #[test]
    fn seeds_resolve_to_non_negative_values() {
        let mut draws = [u64::MAX, 42].into_iter();
        let r = valid().with_resolved_seeds(|| draws.next().unwrap());
        assert_eq!(r.lm_seed, ((u64::MAX) % RANDOM_SEED_LIMIT) as i64);
        assert!(r.lm_seed >= 0 && (r.lm_seed as u64) < RANDOM_SEED_LIMIT);
        assert_eq!(r.seed, 42);
        // Explicit seeds are kept and consume no draw.
        let fixed = Yue2Request { lm_seed: 7, seed: 0, ..valid() }.with_resolved_seeds(|| panic!("no draw expected"));
        assert_eq!((fixed.lm_seed, fixed.seed), (7, 0));
        let half = Yue2Request { lm_seed: 3, ..valid() }.with_resolved_seeds(|| 9);
        assert_eq!((half.lm_seed, half.seed), (3, 9));
    }

    #[test]
    fn cfg_scale_falls_back_to_protocol() {
        assert_eq!(valid().effective_cfg_scale(), 1.0);
        assert_eq!(Yue2Request { cot: CotMode::Off, ..valid() }.effective_cfg_scale(), 1.01);
        assert_eq!(Yue2Request { cfg_scale: 3.0, ..valid() }.effective_cfg_scale(), 3.0);
    }

    #[test]
    fn output_formats() {
        let names: Vec<&str> = OutputFormat::all().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["mp3", "opus", "ogg", "flac", "aac", "m4a", "wav16", "wav24", "wav32"]);
        for f in OutputFormat::all() {
            assert_eq!(serde_json::to_string(f).unwrap(), format!("\"{}\"", f.name()));
            assert_eq!(f.name().parse::<OutputFormat>().unwrap(), *f);
            assert!(f.mime().starts_with("audio/"));
        }
        assert_eq!(OutputFormat::Mp3.extension(), "mp3");
        assert_eq!(OutputFormat::Mp3.mime(), "audio/mpeg");
        assert_eq!(OutputFormat::Wav24.extension(), "wav");
        assert_eq!(OutputFormat::Wav32.mime(), "audio/wav");
        assert_eq!(OutputFormat::M4a.mime(), "audio/mp4");
        assert_eq!(OutputFormat::Flac.mime(), "audio/flac");
        assert!(!OutputFormat::Wav32.normalizes());
        assert!(OutputFormat::Wav16.normalizes());
    }
}
