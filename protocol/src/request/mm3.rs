//! The MiniMax Music 3 request (minimaxmusic.cpp's `POST /synth` body): every field, its default and
//! bound, and MiniMax Music 3's audio facts.
use super::*;

/// Output sample rate of the flow VAE, in Hz: every rendered track is 44.1 kHz stereo.
pub const SAMPLE_RATE: u32 = 44_100;

/// Output channels (the 128 latent channels are two 64 channel tracks, one per side).
pub const CHANNELS: u32 = 2;

/// Sample rate the LM's code frames are counted at, in Hz (with [`CODE_HOP`]: [`FRAME_RATE`]).
pub const CODE_SAMPLE_RATE: u32 = 24_000;

/// Samples of [`CODE_SAMPLE_RATE`] per code frame.
pub const CODE_HOP: u32 = 960;

/// Code frames per second written by the LM and the depth decoder, `24000 / 960`.
pub const FRAME_RATE: f64 = CODE_SAMPLE_RATE as f64 / CODE_HOP as f64;

/// Upsampling factor of the VAE decoder: output samples per latent frame.
pub const SAMPLES_PER_LATENT: u32 = 512;

/// Latent frames per second, `44100 / 512` (86.13 Hz).
pub const LATENT_RATE: f64 = SAMPLE_RATE as f64 / SAMPLES_PER_LATENT as f64;

/// Width of one latent frame of the DiT and the VAE.
pub const LATENT_CHANNELS: u32 = 128;

/// The LM budget in code frames (six minutes at 25 Hz); `duration` is capped to it.
pub const MAX_FRAMES: usize = 9000;

/// Size of the semantic codebook of the published LM: semantic codes are in `[0, 16384)`.
pub const SEMANTIC_CODEBOOK: u32 = 16_384;

/// Size of each acoustic codebook of the published depth decoder: codes are in `[0, 1024)`.
pub const ACOUSTIC_CODEBOOK: u32 = 1024;

/// Acoustic codebooks per frame (the RVQ levels the depth decoder writes).
pub const ACOUSTIC_CODEBOOKS: usize = 7;

/// Values per frame of `audio_codes`: the semantic code, then the 7 acoustic codes.
pub const CODES_PER_FRAME: usize = 1 + ACOUSTIC_CODEBOOKS;

/// Fewest frames `audio_codes` may carry: frame 0 only feeds the first feedback, so a
/// stream renders from its second frame on.
pub const MIN_AUDIO_CODE_FRAMES: usize = 2;

/// Most values `audio_codes` may carry: the leading feedback frame plus the [`MAX_FRAMES`]
/// budget, 8 values each.
pub const MAX_AUDIO_CODES: usize = (MAX_FRAMES + 1) * CODES_PER_FRAME;

/// Fewest Euler steps per DiT window.
pub const MIN_STEPS: u32 = 2;

/// Most Euler steps per DiT window (a sanity bound: the reference sets none).
pub const MAX_STEPS: u32 = 1000;

/// Token budget of the prompt (caption and lyrics as the LM reads them); the daemon checks
/// it after tokenizing, the protocol cannot.
pub const MAX_PROMPT_TOKENS: usize = 5000;

/// The code-book sizes `audio_codes` is checked against: the loaded LM's and depth
/// decoder's ([`Limits::mm3_codebooks`]); the published models' by default, a tiny demo
/// model's smaller ones when it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mm3Codebooks {
    /// Semantic codes (value 0 of a frame) are in `[0, semantic)`.
    pub semantic: u32,
    /// Acoustic codes (values 1..=7 of a frame) are in `[0, acoustic)`.
    pub acoustic: u32,
}

impl Mm3Codebooks {
    /// The published models' sizes.
    pub const FULL: Mm3Codebooks = Mm3Codebooks { semantic: SEMANTIC_CODEBOOK, acoustic: ACOUSTIC_CODEBOOK };
}

impl Default for Mm3Codebooks {
    fn default() -> Self {
        Self::FULL
    }
}

/// A MiniMax Music 3 song request. Every field has a default, and omitting a field is the
/// same as sending its default (a JSON `null` counts as omitted too); only `caption` and
/// `lyrics` are required, which [`validate`](Self::validate) checks.
///
/// Deserialization goes through [`Mm3Request::from_value`] so that a type error names the
/// field at fault. Unknown fields are ignored, which lets older daemons accept requests from
/// newer clients; so is a `"family"` key (the router reads it, [`route`]). Serialization
/// writes every field, so a journaled or replayed request is complete on its own.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(default)]
pub struct Mm3Request {
    /// Music description fed to the global LM (a Structured Caption or plain prose). Required.
    pub caption: String,
    /// Lyrics with their structural `[tag]` lines. Required (instrumentals carry lyrics too).
    pub lyrics: String,
    /// Target length in seconds, capped by the 9000 frame LM budget ([`frames`](Self::frames));
    /// the LM may end the song earlier. At least one frame (0.04 s) unless `audio_codes` replays.
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub duration: f64,
    /// Euler steps per DiT window, at least 2.
    #[schemars(range(min = MIN_STEPS, max = MAX_STEPS))]
    pub steps: u32,
    /// Philox seed of the DiT noise (low 32 bits consumed); -1 draws one. Variation `j` of a
    /// song uses `seed + j`.
    #[schemars(range(min = -1, max = 9_007_199_254_740_991_i64))]
    pub seed: i64,
    /// mt19937 seed of the autoregressive sampling (low 32 bits consumed); -1 draws one.
    /// Song `i` of a batch uses `lm_seed + i`.
    #[schemars(range(min = -1, max = 9_007_199_254_740_991_i64))]
    pub lm_seed: i64,
    /// Guidance on the LM and depth decoder logits: `uncond + (cond - uncond) * lm_cfg`.
    /// At most 100 in magnitude (1 is the conditional branch alone, 0 the unconditional one).
    #[schemars(range(min = -GUIDANCE_MAX, max = GUIDANCE_MAX))]
    pub lm_cfg: f64,
    /// Top-K restriction of the LM and depth decoder sampling, ranked on the conditional
    /// branch before guidance; at least 1.
    #[schemars(range(min = 1))]
    pub lm_top_k: u32,
    /// Songs generated from the prompt in one batched pass, bounded by `--max-batch`;
    /// ignored (one song) when `audio_codes` is given, yet still validated.
    #[schemars(range(min = 1))]
    pub lm_batch_size: u32,
    /// Flow matching variations rendered per song, 1 to 9.
    #[schemars(range(min = 1, max = MAX_SYNTH_BATCH))]
    pub synth_batch_size: u32,
    /// Guidance on the DiT velocity: `v_uncond + (v_cond - v_uncond) * dit_cfg`, at most 100
    /// in magnitude.
    #[schemars(range(min = -GUIDANCE_MAX, max = GUIDANCE_MAX))]
    pub dit_cfg: f64,
    /// Normalisation peak is the `1 - peak_clip / 1e6` percentile; 0 is the true peak.
    /// Ignored by `wav32`.
    #[schemars(range(min = 0, max = PEAK_CLIP_MAX))]
    pub peak_clip: i64,
    /// Audio encoder of the tracks.
    pub output_format: OutputFormat,
    /// kbps, read only by the MP3 encoder (still validated for every format).
    #[schemars(range(min = MP3_BITRATE_MIN, max = MP3_BITRATE_MAX))]
    pub mp3_bitrate: u32,
    /// Explicit code stream, flat comma separated, 8 values per frame (the semantic code,
    /// then the 7 acoustic codes); non-empty replaces the autoregressive sampling. Frame 0
    /// only feeds the first feedback. See [`audio_codes`](Self::audio_codes).
    #[schemars(pattern(CODES_PATTERN))]
    pub audio_codes: String,
    /// GGUF file of the global LM (`mm3-lm`), resolved by the daemon against its model
    /// registry; empty keeps the previous one or the first registered.
    pub lm_model: String,
    /// GGUF file of the RVQ depth decoder (`mm3-depth`); empty as for `lm_model`.
    pub depth_model: String,
    /// GGUF file of the condition encoder (`mm3-cond`); empty as for `lm_model`.
    pub cond_model: String,
    /// GGUF file of the flow matching DiT (`mm3-dit`); empty as for `lm_model`.
    pub dit_model: String,
    /// GGUF file of the flow VAE (`mm3-vae`); empty as for `lm_model`.
    pub vae_model: String,
}

impl Default for Mm3Request {
    fn default() -> Self {
        Self {
            caption: String::new(),
            lyrics: String::new(),
            duration: 60.0,
            steps: 30,
            seed: RANDOM_SEED,
            lm_seed: RANDOM_SEED,
            lm_cfg: 1.5,
            lm_top_k: 50,
            lm_batch_size: 1,
            synth_batch_size: 1,
            dit_cfg: 1.7,
            peak_clip: 10,
            output_format: OutputFormat::Mp3,
            mp3_bitrate: 128,
            audio_codes: String::new(),
            lm_model: String::new(),
            depth_model: String::new(),
            cond_model: String::new(),
            dit_model: String::new(),
            vae_model: String::new(),
        }
    }
}

impl Mm3Request {
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
            caption,
            lyrics,
            duration,
            steps,
            seed,
            lm_seed,
            lm_cfg,
            lm_top_k,
            lm_batch_size,
            synth_batch_size,
            dit_cfg,
            peak_clip,
            output_format,
            mp3_bitrate,
            audio_codes,
            lm_model,
            depth_model,
            cond_model,
            dit_model,
            vae_model,
        );
        Ok(r)
    }

    /// Checks every value against the protocol bounds and the server `limits`; the first
    /// violation is returned. `caption` and `lyrics` are required: missing, or empty after
    /// trimming, is an error naming the field.
    pub fn validate(&self, limits: &Limits) -> Result<(), RequestError> {
        for (field, text) in [("caption", &self.caption), ("lyrics", &self.lyrics)] {
            if text.trim().is_empty() {
                return Err(RequestError::new(field, "is required and must not be empty"));
            }
        }
        self.validate_options(limits)
    }

    /// Every field's bound without the required `caption` and `lyrics`: what a request that
    /// only carries options must satisfy.
    pub fn validate_options(&self, limits: &Limits) -> Result<(), RequestError> {
        let err = |field: &str, msg: String| Err(RequestError::new(field, msg));

        if !(self.duration.is_finite() && self.duration > 0.0) {
            return err("duration", format!("must be a positive number of seconds, got {}", self.duration));
        }
        // minimaxmusic.cpp's contract refuses only <= 0; a song shorter than one frame would
        // fail after queueing ("the LM ended the song before its first frame"), so it is the
        // request's 400 here. A replay's length is its codes'.
        if self.audio_codes.is_empty() && self.frames() == 0 {
            return err("duration", format!("must be at least 0.04 s (one 25 Hz frame), got {}", self.duration));
        }
        let max_steps = MAX_STEPS.min(limits.max_steps);
        if !(MIN_STEPS..=max_steps).contains(&self.steps) {
            return err("steps", format!("must be in [{MIN_STEPS}, {max_steps}], got {}", self.steps));
        }
        for (field, seed) in [("seed", self.seed), ("lm_seed", self.lm_seed)] {
            if !(seed == RANDOM_SEED || (0..RANDOM_SEED_LIMIT as i64).contains(&seed)) {
                return err(field, format!("must be -1 (random) or in [0, 2^53), got {seed}"));
            }
        }
        if !(self.lm_cfg.is_finite() && self.lm_cfg.abs() <= GUIDANCE_MAX) {
            return err("lm_cfg", format!("must be in [-{GUIDANCE_MAX}, {GUIDANCE_MAX}], got {}", self.lm_cfg));
        }
        if self.lm_top_k < 1 {
            return err("lm_top_k", "must be at least 1, got 0".into());
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
        if !(self.dit_cfg.is_finite() && self.dit_cfg.abs() <= GUIDANCE_MAX) {
            return err("dit_cfg", format!("must be in [-{GUIDANCE_MAX}, {GUIDANCE_MAX}], got {}", self.dit_cfg));
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
        self.checked_audio_codes(&limits.mm3_codebooks)?;
        Ok(())
    }

    /// Frames the LM may write: `duration` at 25 Hz, truncated, capped at [`MAX_FRAMES`].
    /// (Under 0.04 s this is 0; an invalid duration also gives 0.)
    pub fn frames(&self) -> usize {
        // `as` saturates: NaN and negative durations give 0, infinity the cap.
        ((self.duration * FRAME_RATE) as usize).min(MAX_FRAMES)
    }

    /// Whether the request carries a code stream (a replay) instead of sampling one.
    pub fn has_audio_codes(&self) -> bool {
        !self.audio_codes.trim_ascii().is_empty()
    }

    /// Songs the job renders: one for a replay (`audio_codes` given), else `lm_batch_size`.
    pub fn songs(&self) -> u32 {
        if self.has_audio_codes() {
            1
        } else {
            self.lm_batch_size
        }
    }

    /// The parsed `audio_codes`, one `[semantic, acoustic x 7]` array per frame; empty when
    /// the field is. The shape is checked (whole frames, at least 2, at most
    /// [`MAX_FRAMES`] + 1) but not the code ranges: see [`validate`](Self::validate) or
    /// [`checked_audio_codes`](Self::checked_audio_codes).
    pub fn audio_codes(&self) -> Result<Vec<[u32; CODES_PER_FRAME]>, RequestError> {
        let err = |msg: String| Err(RequestError::new("audio_codes", msg));
        let values = parse_codes(&self.audio_codes).map_err(|m| RequestError::new("audio_codes", m))?;
        let n = values.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > MAX_AUDIO_CODES {
            return err(format!(
                "{n} values exceed the {MAX_AUDIO_CODES} of {} frames (the feedback frame and the \
                {MAX_FRAMES} frame budget)",
                MAX_FRAMES + 1
            ));
        }
        if n % CODES_PER_FRAME != 0 {
            return err(format!(
                "{n} values are not whole frames of {CODES_PER_FRAME} (the semantic code then \
                {ACOUSTIC_CODEBOOKS} acoustic codes): {} left over",
                n % CODES_PER_FRAME
            ));
        }
        if n < MIN_AUDIO_CODE_FRAMES * CODES_PER_FRAME {
            return err(format!(
                "{n} values are fewer than {MIN_AUDIO_CODE_FRAMES} frames ({} values): frame 0 only \
                feeds the first feedback",
                MIN_AUDIO_CODE_FRAMES * CODES_PER_FRAME
            ));
        }
        Ok(values
            .chunks_exact(CODES_PER_FRAME)
            .map(|f| <[u32; CODES_PER_FRAME]>::try_from(f).expect("a whole frame"))
            .collect())
    }

    /// [`audio_codes`](Self::audio_codes) with every code checked against `codebooks`; an
    /// error names the entry, its frame and its codebook.
    pub fn checked_audio_codes(&self, codebooks: &Mm3Codebooks) -> Result<Vec<[u32; CODES_PER_FRAME]>, RequestError> {
        let frames = self.audio_codes()?;
        for (f, frame) in frames.iter().enumerate() {
            for (k, &c) in frame.iter().enumerate() {
                let (size, what) = if k == 0 {
                    (codebooks.semantic, "semantic code".to_string())
                } else {
                    (codebooks.acoustic, format!("acoustic codebook {k}"))
                };
                if c >= size {
                    let i = f * CODES_PER_FRAME + k;
                    return Err(RequestError::new(
                        "audio_codes",
                        format!("entry {i} (frame {f}, {what}) is {c}, outside [0, {size})"),
                    ));
                }
            }
        }
        Ok(frames)
    }

    /// The component model fields, by field name, in pipeline order.
    pub fn models(&self) -> [(&'static str, &str); 5] {
        [
            ("lm_model", &self.lm_model),
            ("depth_model", &self.depth_model),
            ("cond_model", &self.cond_model),
            ("dit_model", &self.dit_model),
            ("vae_model", &self.vae_model),
        ]
    }

    /// The same, to fill in (the submission check writes the files an empty field stands for).
    pub fn models_mut(&mut self) -> [(&'static str, &mut String); 5] {
        [
            ("lm_model", &mut self.lm_model),
            ("depth_model", &mut self.depth_model),
            ("cond_model", &mut self.cond_model),
            ("dit_model", &mut self.dit_model),
            ("vae_model", &mut self.vae_model),
        ]
    }

    /// Replaces random (negative) seeds by draws in `[0, 2^53)` so the job, and every
    /// replay request it returns, records the exact seeds it consumed (`lm_seed` first).
    pub fn with_resolved_seeds(mut self, mut rng_u64: impl FnMut() -> u64) -> Self {
        if self.lm_seed < 0 {
            self.lm_seed = (rng_u64() % RANDOM_SEED_LIMIT) as i64;
        }
        if self.seed < 0 {
            self.seed = (rng_u64() % RANDOM_SEED_LIMIT) as i64;
        }
        self
    }
}

impl<'de> Deserialize<'de> for Mm3Request {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request reference of the specification (minimaxmusic.cpp's architecture reference), with `audio_codes`.
    const REFERENCE: &str = r#"{
        "caption": "", "lyrics": "", "duration": 60.0, "steps": 30, "seed": -1, "lm_seed": -1,
        "lm_cfg": 1.5, "lm_top_k": 50, "lm_batch_size": 1, "synth_batch_size": 1, "dit_cfg": 1.7,
        "peak_clip": 10, "output_format": "mp3", "mp3_bitrate": 128, "audio_codes": "",
        "lm_model": "", "depth_model": "", "cond_model": "", "dit_model": "", "vae_model": ""
    }"#;

    fn valid() -> Mm3Request {
        Mm3Request { caption: "synthwave, 120 bpm".into(), lyrics: "[verse]\nneon".into(), ..Mm3Request::default() }
    }

    fn parse(json: &str) -> Result<Mm3Request, RequestError> {
        Mm3Request::from_json(json.as_bytes())
    }

    fn error_of(r: &Mm3Request) -> RequestError {
        r.validate(&Limits::default()).expect_err("request should be rejected")
    }

    fn field_of(r: &Mm3Request) -> String {
        error_of(r).field
    }

    fn parse_field(json: &str) -> String {
        parse(json).expect_err("body should be rejected").field
    }

    /// `frames` frames of codes, every value `v`, as the request spells them.
    fn codes(frames: usize, v: u32) -> String {
        vec![v.to_string(); frames * CODES_PER_FRAME].join(",")
    }

    #[test]
    fn reference_json_is_the_default() {
        assert_eq!(parse(REFERENCE).unwrap(), Mm3Request::default());
        assert_eq!(parse("{}").unwrap(), Mm3Request::default());
        let ours: Value = serde_json::to_value(Mm3Request::default()).unwrap();
        let reference: Value = serde_json::from_str(REFERENCE).unwrap();
        assert_eq!(ours, reference);
    }

    #[test]
    fn omitted_fields_equal_defaults() {
        let r = parse(r#"{"caption":"pop","lyrics":"la"}"#).unwrap();
        assert_eq!(r, Mm3Request { caption: "pop".into(), lyrics: "la".into(), ..Default::default() });
        assert_eq!((r.duration, r.steps, r.lm_top_k, r.mp3_bitrate), (60.0, 30, 50, 128));
        assert_eq!(r.validate(&Limits::default()), Ok(()));
    }

    #[test]
    fn null_counts_as_omitted() {
        let nulls = r#"{"caption":null,"lyrics":null,"duration":null,"steps":null,"seed":null,"lm_seed":null,
            "lm_cfg":null,"lm_top_k":null,"lm_batch_size":null,"synth_batch_size":null,"dit_cfg":null,"peak_clip":null,
            "output_format":null,"mp3_bitrate":null,"audio_codes":null,"lm_model":null,"depth_model":null,
            "cond_model":null,"dit_model":null,"vae_model":null}"#;
        assert_eq!(parse(nulls).unwrap(), Mm3Request::default());
        let r = parse(r#"{"caption":"x","lyrics":"y","steps":null,"dit_cfg":null}"#).unwrap();
        assert_eq!(r, Mm3Request { caption: "x".into(), lyrics: "y".into(), ..Default::default() });
    }

    #[test]
    fn family_and_unknown_fields_are_ignored() {
        let r = parse(r#"{"family":"mm3","caption":"x","lyrics":"y","style":"z","future_knob":[1,2]}"#).unwrap();
        assert_eq!(r, Mm3Request { caption: "x".into(), lyrics: "y".into(), ..Default::default() });
    }

    #[test]
    fn every_field_is_read_and_written() {
        let r = Mm3Request {
            caption: "c".into(),
            lyrics: "l".into(),
            duration: 12.5,
            steps: 12,
            seed: 3,
            lm_seed: 4,
            lm_cfg: 2.0,
            lm_top_k: 7,
            lm_batch_size: 2,
            synth_batch_size: 3,
            dit_cfg: 0.5,
            peak_clip: 0,
            output_format: OutputFormat::Wav24,
            mp3_bitrate: 320,
            audio_codes: codes(2, 1),
            lm_model: "lm.gguf".into(),
            depth_model: "depth.gguf".into(),
            cond_model: "cond.gguf".into(),
            dit_model: "dit.gguf".into(),
            vae_model: "vae.gguf".into(),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""output_format":"wav24""#), "{text}");
        assert_eq!(serde_json::to_value(&r).unwrap().as_object().unwrap().len(), 20);
        assert_eq!(serde_json::from_str::<Mm3Request>(&text).unwrap(), r);
        assert_eq!(Mm3Request::from_json(text.as_bytes()).unwrap(), r);
    }

    #[test]
    fn request_round_trips_with_its_family() {
        let r = Request::Mm3(Mm3Request {
            duration: 10.03,
            lm_cfg: 1.25,
            audio_codes: codes(3, 5),
            dit_model: "d.gguf".into(),
            ..valid()
        });
        let value = serde_json::to_value(&r).unwrap();
        assert_eq!(value["family"], "mm3");
        assert_eq!(value["caption"], "synthwave, 120 bpm");
        let text = serde_json::to_string(&r).unwrap();
        let back: Request = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.family(), Family::Mm3);
        assert!(back.as_mm3().is_some() && back.as_yue2().is_none());
        // The router reads the same body back to the same request.
        assert_eq!(Request::from_json(text.as_bytes(), &[Family::Yue2, Family::Mm3]).unwrap(), r);
        // A type error inside the tagged enum still names the field.
        let e = serde_json::from_str::<Request>(r#"{"family":"mm3","steps":"many"}"#).unwrap_err();
        assert!(e.to_string().starts_with("steps: "), "{e}");
    }

    #[test]
    fn request_routes_by_caption() {
        let both = [Family::Yue2, Family::Mm3];
        let r = Request::from_json(br#"{"caption":"pop","lyrics":"la","steps":8}"#, &both).unwrap();
        assert_eq!(
            r,
            Request::Mm3(Mm3Request { caption: "pop".into(), lyrics: "la".into(), steps: 8, ..Default::default() })
        );
        assert_eq!(Request::from_json(br#"{"family":"mm3"}"#, &both).unwrap(), Request::Mm3(Mm3Request::default()));
        assert_eq!(Request::from_json(br#"{"lyrics":"la"}"#, &[Family::Mm3]).unwrap().family(), Family::Mm3);
        assert_eq!(Request::from_json(br#"{"style":"pop"}"#, &both).unwrap().family(), Family::Yue2);
        assert_eq!(Request::from_json(br#"{"caption":3}"#, &both).unwrap_err().field, "caption");
        assert_eq!(Request::from(valid()), Request::Mm3(valid()));
    }

    #[test]
    fn caption_and_lyrics_are_required() {
        assert_eq!(field_of(&Mm3Request::default()), "caption");
        assert_eq!(field_of(&Mm3Request { caption: String::new(), ..valid() }), "caption");
        assert_eq!(field_of(&Mm3Request { caption: " \n\t".into(), ..valid() }), "caption");
        assert_eq!(field_of(&Mm3Request { lyrics: String::new(), ..valid() }), "lyrics");
        assert_eq!(field_of(&Mm3Request { lyrics: "  ".into(), ..valid() }), "lyrics");
        let missing = parse(r#"{"caption":"pop"}"#).unwrap();
        assert_eq!(field_of(&missing), "lyrics");
        let missing = parse(r#"{"lyrics":"la"}"#).unwrap();
        assert_eq!(field_of(&missing), "caption");
        // Options alone do not need them.
        assert_eq!(Mm3Request::default().validate_options(&Limits::default()), Ok(()));
    }

    #[test]
    fn type_errors_name_their_field() {
        assert_eq!(parse_field(r#"{"steps":-1}"#), "steps");
        assert_eq!(parse_field(r#"{"steps":2.5}"#), "steps");
        assert_eq!(parse_field(r#"{"caption":3}"#), "caption");
        assert_eq!(parse_field(r#"{"lm_seed":"7"}"#), "lm_seed");
        assert_eq!(parse_field(r#"{"duration":"long"}"#), "duration");
        assert_eq!(parse_field(r#"{"audio_codes":[1,2,3]}"#), "audio_codes");
        assert_eq!(parse_field(r#"{"dit_model":false}"#), "dit_model");
        assert_eq!(parse_field(r#"{"output_format":"aiff"}"#), "output_format");
        assert_eq!(parse_field(r#"{"output_format":"WAV16"}"#), "output_format");
        let e = parse(r#"{"caption": "#).unwrap_err();
        assert_eq!(e.field, "body");
        assert!(e.message.starts_with("malformed JSON"), "{e}");
        assert_eq!(parse_field("[1]"), "body");
    }

    #[test]
    fn every_output_format_is_accepted() {
        for f in OutputFormat::all() {
            let r = parse(&format!(r#"{{"caption":"x","lyrics":"y","output_format":"{}"}}"#, f.name())).unwrap();
            assert_eq!(r.output_format, *f);
            assert_eq!(r.validate(&Limits::default()), Ok(()));
        }
    }

    #[test]
    fn scalar_bounds_name_their_field() {
        let cases: Vec<(&str, Mm3Request)> = vec![
            ("duration", Mm3Request { duration: 0.0, ..valid() }),
            ("duration", Mm3Request { duration: -3.0, ..valid() }),
            ("duration", Mm3Request { duration: f64::NAN, ..valid() }),
            ("duration", Mm3Request { duration: f64::INFINITY, ..valid() }),
            ("duration", Mm3Request { duration: 0.039, ..valid() }),
            ("steps", Mm3Request { steps: 0, ..valid() }),
            ("steps", Mm3Request { steps: 1, ..valid() }),
            ("steps", Mm3Request { steps: MAX_STEPS + 1, ..valid() }),
            ("seed", Mm3Request { seed: -2, ..valid() }),
            ("lm_seed", Mm3Request { lm_seed: i64::MIN, ..valid() }),
            ("lm_cfg", Mm3Request { lm_cfg: f64::NAN, ..valid() }),
            ("lm_cfg", Mm3Request { lm_cfg: f64::INFINITY, ..valid() }),
            ("lm_top_k", Mm3Request { lm_top_k: 0, ..valid() }),
            ("lm_batch_size", Mm3Request { lm_batch_size: 0, ..valid() }),
            ("lm_batch_size", Mm3Request { lm_batch_size: 2, ..valid() }),
            ("synth_batch_size", Mm3Request { synth_batch_size: 0, ..valid() }),
            ("synth_batch_size", Mm3Request { synth_batch_size: 10, ..valid() }),
            ("dit_cfg", Mm3Request { dit_cfg: f64::NEG_INFINITY, ..valid() }),
            ("peak_clip", Mm3Request { peak_clip: -1, ..valid() }),
            ("peak_clip", Mm3Request { peak_clip: 1_000_001, ..valid() }),
            ("mp3_bitrate", Mm3Request { mp3_bitrate: 8, ..valid() }),
            ("mp3_bitrate", Mm3Request { mp3_bitrate: 321, ..valid() }),
        ];
        for (field, r) in cases {
            assert_eq!(field_of(&r), field, "{r:?}");
        }
        assert_eq!(error_of(&Mm3Request { steps: 1, ..valid() }).to_string(), "steps: must be in [2, 1000], got 1");
    }

    #[test]
    fn bounds_accept_their_edges() {
        let limits = Limits { max_batch: 4, ..Limits::default() };
        for r in [
            Mm3Request { lm_batch_size: 4, synth_batch_size: 9, ..valid() },
            Mm3Request { steps: 2, ..valid() },
            Mm3Request { steps: MAX_STEPS, ..valid() },
            Mm3Request { seed: 0, lm_seed: (1 << 53) - 1, ..valid() },
            Mm3Request { lm_cfg: 0.0, dit_cfg: -1.0, lm_top_k: 1, ..valid() },
            Mm3Request { peak_clip: 0, mp3_bitrate: 32, ..valid() },
            Mm3Request { peak_clip: PEAK_CLIP_MAX, mp3_bitrate: 320, ..valid() },
            Mm3Request { duration: 0.04, ..valid() },
            Mm3Request { duration: 1e-3, audio_codes: codes(2, 0), ..valid() },
            Mm3Request { duration: 1e9, ..valid() },
        ] {
            assert_eq!(r.validate(&limits), Ok(()), "{r:?}");
        }
        let over = Mm3Request { lm_batch_size: 5, ..valid() };
        assert_eq!(over.validate(&limits).unwrap_err().field, "lm_batch_size");
        // The limit bounds lm_batch_size even for a replay, where it is ignored.
        let replay = Mm3Request { lm_batch_size: 5, audio_codes: codes(2, 0), ..valid() };
        assert_eq!(replay.songs(), 1);
        assert_eq!(replay.validate(&limits).unwrap_err().field, "lm_batch_size");
        assert_eq!(Mm3Request { lm_batch_size: 3, ..valid() }.songs(), 3);
    }

    #[test]
    fn frames_truncate_and_cap() {
        assert_eq!(Mm3Request { duration: 10.03, ..valid() }.frames(), 250);
        assert_eq!(Mm3Request { duration: 60.0, ..valid() }.frames(), 1500);
        assert_eq!(Mm3Request { duration: 360.0, ..valid() }.frames(), MAX_FRAMES);
        assert_eq!(Mm3Request { duration: 360.04, ..valid() }.frames(), 9000);
        assert_eq!(Mm3Request { duration: 3600.0, ..valid() }.frames(), 9000);
        assert_eq!(Mm3Request { duration: 0.039, ..valid() }.frames(), 0);
        assert_eq!(Mm3Request { duration: f64::NAN, ..valid() }.frames(), 0);
        assert_eq!(Mm3Request { duration: -1.0, ..valid() }.frames(), 0);
    }

    #[test]
    fn audio_facts_agree() {
        assert_eq!(FRAME_RATE, 25.0);
        assert_eq!(LATENT_RATE, 44_100.0 / 512.0);
        assert!((LATENT_RATE - 86.13).abs() < 0.01);
        assert_eq!(CODES_PER_FRAME, 8);
        assert_eq!(MAX_AUDIO_CODES, 72_008);
        assert_eq!(MAX_FRAMES as f64 / FRAME_RATE, 360.0);
        assert_eq!(Limits::default().mm3_codebooks, Mm3Codebooks { semantic: 16_384, acoustic: 1024 });
    }

    #[test]
    fn audio_codes_parse_into_frames() {
        assert_eq!(valid().audio_codes(), Ok(vec![]));
        assert!(!Mm3Request { audio_codes: " \n".into(), ..valid() }.has_audio_codes());
        let r = Mm3Request { audio_codes: "16383,0,1,2,3,4,5,1023, 7,8,9,10,11,12,13,14\n".into(), ..valid() };
        assert!(r.has_audio_codes());
        assert_eq!(r.audio_codes(), Ok(vec![[16383, 0, 1, 2, 3, 4, 5, 1023], [7, 8, 9, 10, 11, 12, 13, 14]]));
        assert_eq!(r.validate(&Limits::default()), Ok(()));
        // The largest stream: the feedback frame and the whole budget.
        let full = Mm3Request { audio_codes: codes(MAX_FRAMES + 1, 0), ..valid() };
        assert_eq!(full.audio_codes().unwrap().len(), MAX_FRAMES + 1);
        assert_eq!(full.validate(&Limits::default()), Ok(()));
    }

    #[test]
    fn bad_audio_codes_name_the_field_and_what_is_wrong() {
        let check = |codes: String, needle: &str| {
            let e = error_of(&Mm3Request { audio_codes: codes.clone(), ..valid() });
            assert_eq!(e.field, "audio_codes", "{codes}");
            assert!(e.message.contains(needle), "{e} lacks {needle:?}");
        };
        // Not whole frames.
        check(["1"; 17].join(","), "not whole frames of 8");
        check(["1"; 12].join(","), "4 left over");
        // Too few: one frame only feeds the feedback.
        check(codes(1, 0), "fewer than 2 frames");
        // Too many.
        check(codes(MAX_FRAMES + 2, 0), "exceed");
        // Out of range, by position.
        let mut v: Vec<String> = codes(3, 0).split(',').map(String::from).collect();
        v[8] = "16384".into();
        check(v.join(","), "entry 8 (frame 1, semantic code) is 16384, outside [0, 16384)");
        let mut v: Vec<String> = codes(3, 0).split(',').map(String::from).collect();
        v[19] = "1024".into();
        check(v.join(","), "entry 19 (frame 2, acoustic codebook 3) is 1024, outside [0, 1024)");
        // Not integers.
        check("1,2,x".into(), "entry 2");
        check("1,,2".into(), "entry 1 is empty");
        check("-1,2".into(), "entry 0");
    }

    #[test]
    fn codebooks_of_the_loaded_model_bound_the_codes() {
        let tiny = Limits { mm3_codebooks: Mm3Codebooks { semantic: 64, acoustic: 32 }, ..Limits::default() };
        // Two frames: semantic 63 then acoustic 31 is the top of the tiny codebooks.
        let top = Mm3Request { audio_codes: "63,31,31,31,31,31,31,31,0,0,0,0,0,0,0,0".into(), ..valid() };
        assert_eq!(top.validate(&tiny), Ok(()));
        let acoustic = Mm3Request { audio_codes: "63,31,31,31,31,31,31,31,0,0,0,32,0,0,0,0".into(), ..valid() };
        assert_eq!(acoustic.validate(&Limits::default()), Ok(()));
        let e = acoustic.validate(&tiny).unwrap_err();
        assert_eq!(e.field, "audio_codes");
        assert!(e.message.contains("entry 11 (frame 1, acoustic codebook 3) is 32, outside [0, 32)"), "{e}");
        let semantic = Mm3Request { audio_codes: "64,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0".into(), ..valid() };
        assert!(semantic
            .validate(&tiny)
            .unwrap_err()
            .message
            .contains("entry 0 (frame 0, semantic code) is 64, outside [0, 64)"));
        assert_eq!(semantic.checked_audio_codes(&Mm3Codebooks::FULL).map(|f| f.len()), Ok(2));
    }

    #[test]
    fn seeds_are_minus_one_or_below_2_to_the_53() {
        // Every replay adds a song's or a variation's index to its seeds: a seed near i64::MAX
        // once wrapped to a negative one the replay request then refused.
        for (seed, ok) in
            [(-1i64, true), (0, true), ((1 << 53) - 1, true), (1 << 53, false), (i64::MAX, false), (-2, false)]
        {
            for r in [Mm3Request { seed, ..valid() }, Mm3Request { lm_seed: seed, ..valid() }] {
                assert_eq!(r.validate(&Limits::default()).is_ok(), ok, "{seed}");
            }
        }
    }

    #[test]
    fn seeds_resolve_to_non_negative_values() {
        let mut draws = [u64::MAX, 42].into_iter();
        let r = valid().with_resolved_seeds(|| draws.next().unwrap());
        assert_eq!(r.lm_seed, (u64::MAX % RANDOM_SEED_LIMIT) as i64);
        assert!(r.lm_seed >= 0 && (r.lm_seed as u64) < RANDOM_SEED_LIMIT);
        assert_eq!(r.seed, 42);
        let fixed = Mm3Request { lm_seed: 7, seed: 0, ..valid() }.with_resolved_seeds(|| panic!("no draw expected"));
        assert_eq!((fixed.lm_seed, fixed.seed), (7, 0));
        let half = Mm3Request { lm_seed: 3, ..valid() }.with_resolved_seeds(|| 9);
        assert_eq!((half.lm_seed, half.seed), (3, 9));
    }

    #[test]
    fn models_list_the_component_fields() {
        let r = Mm3Request { depth_model: "d.gguf".into(), vae_model: "v.gguf".into(), ..valid() };
        assert_eq!(
            r.models(),
            [
                ("lm_model", ""),
                ("depth_model", "d.gguf"),
                ("cond_model", ""),
                ("dit_model", ""),
                ("vae_model", "v.gguf")
            ]
        );
        for (field, _) in r.models() {
            assert!(Family::Mm3.own_fields().contains(&field), "{field}");
        }
    }
}
