//! The transcriber head's configuration (`sheetsage2.config_json`, the checkpoint's
//! `config.json`) and its vocabulary (`sheetsage2.tokenizer_json`): the token layout of the
//! event language, the label tables, the note-length templates
//! (`docs/design/listening-part2.md`, sections 1.2 and 1.3).
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// The architecture name of a head file, and its two metadata keys.
pub const ARCH: &str = "sheetsage2";
pub const CONFIG_KEY: &str = "sheetsage2.config_json";
pub const TOKENIZER_KEY: &str = "sheetsage2.tokenizer_json";

/// What the loader reads of the checkpoint's `config.json`; a missing key is an error
/// naming it (serde's "missing field").
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct HeadConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub decoder_layers: usize,
    pub num_attention_heads: usize,
    pub vocab_size: usize,
    /// The token budget of a window, prefix included; also the positions table's length
    /// (plus BART's offset of 2).
    pub max_output_seq_len: usize,
    /// The window, in seconds.
    pub input_audio_length: f64,
    /// Time tokens a second.
    pub time_hz: usize,
    pub lora_alpha: f64,
    pub lora_rank: usize,
    pub sampling_rate: u32,
    /// The MERT the head reads (its file is found beside the head by this name).
    pub base_model_name_or_path: String,
}

/// BART's learned positions start two rows in.
pub const POSITION_OFFSET: usize = 2;

impl HeadConfig {
    /// Why the head cannot run, naming the key.
    pub fn check(&self) -> Result<(), String> {
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!("num_attention_heads is {}, not a divisor of hidden_size", self.num_attention_heads));
        }
        if self.sampling_rate != 24_000 {
            return Err(format!("sampling_rate is {}, MERT-v2 reads 24000", self.sampling_rate));
        }
        if self.base_model_name_or_path.is_empty() {
            return Err("base_model_name_or_path is empty".into());
        }
        if !(self.input_audio_length >= 3.0 && self.input_audio_length <= 3600.0) {
            return Err(format!("input_audio_length is {}, not 3..3600 seconds", self.input_audio_length));
        }
        if self.time_hz == 0 || self.max_output_seq_len < 16 || self.lora_rank == 0 || self.decoder_layers == 0 {
            return Err("time_hz, max_output_seq_len, lora_rank and decoder_layers must be positive".into());
        }
        Ok(())
    }

    /// The LoRA factors' scale, `alpha / rank`.
    pub fn lora_scale(&self) -> f32 {
        (self.lora_alpha / self.lora_rank as f64) as f32
    }

    /// Samples of one window at 24 kHz.
    pub fn window_samples(&self) -> usize {
        (self.input_audio_length * self.sampling_rate as f64).round() as usize
    }

    /// Time ids of one window.
    pub fn time_ids(&self) -> usize {
        (self.input_audio_length * self.time_hz as f64).round() as usize
    }

    /// The head's tensors and their `ne`, for MERT states of `mert_hidden` channels and
    /// `states` of them (blocks + 1).
    pub fn tensor_shapes(&self, mert_hidden: usize, states: usize) -> Vec<(String, Vec<i64>)> {
        let (d, ff, v) = (self.hidden_size as i64, self.intermediate_size as i64, self.vocab_size as i64);
        let mut out = vec![
            ("layer_weight".to_string(), vec![states as i64]),
            ("encoder_projection.weight".into(), vec![mert_hidden as i64, d]),
            ("encoder_projection.bias".into(), vec![d]),
            ("token_embedding.weight".into(), vec![d, v]),
            ("decoder.embed_positions.weight".into(), vec![d, (self.max_output_seq_len + POSITION_OFFSET) as i64]),
            ("decoder.layernorm_embedding.weight".into(), vec![d]),
            ("decoder.layernorm_embedding.bias".into(), vec![d]),
        ];
        for n in 0..self.decoder_layers {
            let p = format!("decoder.layers.{n}");
            for a in ["self_attn", "encoder_attn"] {
                for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
                    out.push((format!("{p}.{a}.{proj}.weight"), vec![d, d]));
                    out.push((format!("{p}.{a}.{proj}.bias"), vec![d]));
                }
            }
            for ln in ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"] {
                out.push((format!("{p}.{ln}.weight"), vec![d]));
                out.push((format!("{p}.{ln}.bias"), vec![d]));
            }
            out.push((format!("{p}.fc1.weight"), vec![d, ff]));
            out.push((format!("{p}.fc1.bias"), vec![ff]));
            out.push((format!("{p}.fc2.weight"), vec![ff, d]));
            out.push((format!("{p}.fc2.bias"), vec![d]));
        }
        out
    }
}

/// The kinds of tokens after the four specials, in vocabulary order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Prompt,
    SubbeatShift,
    Time,
    Meter,
    EighthPosition,
    Structure,
    Key,
    MajminChord,
    FullChord,
    Pitch,
    Duration,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::Prompt,
        Kind::SubbeatShift,
        Kind::Time,
        Kind::Meter,
        Kind::EighthPosition,
        Kind::Structure,
        Kind::Key,
        Kind::MajminChord,
        Kind::FullChord,
        Kind::Pitch,
        Kind::Duration,
    ];

    /// The kind's name in `ranges`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prompt => "prompt",
            Kind::SubbeatShift => "subbeat_shift",
            Kind::Time => "time",
            Kind::Meter => "meter",
            Kind::EighthPosition => "eighth_position",
            Kind::Structure => "structure",
            Kind::Key => "key",
            Kind::MajminChord => "majmin_chord",
            Kind::FullChord => "full_chord",
            Kind::Pitch => "pitch",
            Kind::Duration => "duration",
        }
    }
}

/// The task prompts, in schema order.
pub const PROMPTS: [&str; 8] =
    ["timestamp", "downbeat_meter", "structure", "key", "chord_majmin", "chord_full", "melody_vocal", "melody_full"];
/// The prompts of a full transcription, in the order the prefix takes them.
pub const FULL_TASK: [&str; 6] = ["timestamp", "downbeat_meter", "structure", "key", "chord_full", "melody_full"];

const STRUCTURES: [&str; 23] = [
    "silence",
    "intro",
    "outro",
    "verse",
    "chorus",
    "bridge",
    "pre-chorus",
    "post-chorus",
    "interlude",
    "fade-out",
    "loop",
    "rap",
    "preshot",
    "irregular",
    "instrumental",
    "intro and verse",
    "pre-chorus and chorus",
    "verse and pre-chorus",
    "solo",
    "theme",
    "development",
    "variation",
    "pre-outro",
];
const SHARPS: [&str; 12] = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"];
const METER_DENOMINATORS: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// The chord qualities in vocabulary order, each with its inversions (written before the
/// root position).
const QUALITIES: [(&str, &[&str]); 15] = [
    ("maj", &["2", "3", "5"]),
    ("min", &["2", "b3", "5"]),
    ("dim", &[]),
    ("aug", &[]),
    ("maj7", &["3", "5", "7"]),
    ("min7", &["b3", "5", "b7"]),
    ("7", &["3", "5", "b7"]),
    ("hdim7", &[]),
    ("dim7", &[]),
    ("minmaj7", &[]),
    ("sus2", &[]),
    ("sus4", &[]),
    ("sus4(b7)", &[]),
    ("maj6", &[]),
    ("min6", &[]),
];
/// Note lengths in steps, one per duration bin.
const DURATION_TEMPLATES: [u32; 24] =
    [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096];
/// The prompt range's capacity, and the other fixed kinds' sizes.
const PROMPT_CAPACITY: u32 = 256;
const SHIFTS: u32 = 257;
const EIGHTHS: u32 = 256;
const PITCHES: u32 = 256;

/// The event language's vocabulary, as the GGUF carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    pub n_tokens: u32,
    pub pad: u32,
    pub sos: u32,
    pub eos: u32,
    pub out: u32,
    /// Half-open token ranges, indexed like [`Kind::ALL`].
    pub ranges: [Range<u32>; 11],
    pub prompts: Vec<String>,
    pub meters: Vec<(u32, u32)>,
    pub structures: Vec<String>,
    pub majmin_chords: Vec<String>,
    pub full_chords: Vec<String>,
    pub keys: Vec<String>,
    pub duration_templates: Vec<u32>,
}

/// The JSON form (`sheetsage2.tokenizer_json`); the ABC tables and the fingerprint travel
/// for yue2.cpp's loader, yued spells keys and chords itself.
#[derive(Debug, Deserialize, Serialize)]
struct VocabJson {
    n_tokens: u32,
    #[serde(default)]
    fingerprint: String,
    pad: u32,
    sos: u32,
    eos: u32,
    out: u32,
    ranges: std::collections::BTreeMap<String, [u32; 2]>,
    prompts: Vec<String>,
    meters: Vec<[u32; 2]>,
    structures: Vec<String>,
    majmin_chords: Vec<String>,
    full_chords: Vec<String>,
    #[serde(default)]
    full_chords_abc: Vec<String>,
    keys: Vec<String>,
    #[serde(default)]
    keys_abc: Vec<String>,
    duration_templates: Vec<u32>,
    #[serde(default)]
    duration_boundaries: Vec<f64>,
}

impl Vocab {
    /// The vocabulary of a window of `time_ids` time tokens (300 s at 100 Hz: 30000, for
    /// 31678 tokens in all), built as the checkpoint's tokenizer builds it.
    pub fn build(time_ids: u32) -> Self {
        let sizes = [
            PROMPT_CAPACITY,
            SHIFTS,
            time_ids,
            32 * METER_DENOMINATORS.len() as u32,
            EIGHTHS,
            STRUCTURES.len() as u32,
            24,
            25,
            full_chords().len() as u32,
            PITCHES,
            DURATION_TEMPLATES.len() as u32,
        ];
        let mut start = 4;
        let ranges = sizes.map(|n| {
            let r = start..start + n;
            start += n;
            r
        });
        let qualities = |q: &'static str| SHARPS.iter().map(move |r| format!("{r}:{q}"));
        Vocab {
            n_tokens: start,
            pad: 0,
            sos: 1,
            eos: 2,
            out: 3,
            ranges,
            prompts: PROMPTS.iter().map(|s| s.to_string()).collect(),
            meters: (1..=32).flat_map(|n| METER_DENOMINATORS.map(|d| (n, d))).collect(),
            structures: STRUCTURES.iter().map(|s| s.to_string()).collect(),
            majmin_chords: std::iter::once("N".to_string()).chain(qualities("maj")).chain(qualities("min")).collect(),
            full_chords: full_chords(),
            keys: qualities("major").chain(qualities("minor")).collect(),
            duration_templates: DURATION_TEMPLATES.to_vec(),
        }
    }

    /// Reads `sheetsage2.tokenizer_json`, every table checked against its range.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let j: VocabJson = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut ranges: [Range<u32>; 11] = Default::default();
        for (i, kind) in Kind::ALL.iter().enumerate() {
            let [a, b] = *j.ranges.get(kind.name()).ok_or_else(|| format!("no range '{}'", kind.name()))?;
            if a > b || b > j.n_tokens {
                return Err(format!("range '{}' [{a}, {b}) outside {} tokens", kind.name(), j.n_tokens));
            }
            ranges[i] = a..b;
        }
        let v = Vocab {
            n_tokens: j.n_tokens,
            pad: j.pad,
            sos: j.sos,
            eos: j.eos,
            out: j.out,
            ranges,
            prompts: j.prompts,
            meters: j.meters.iter().map(|m| (m[0], m[1])).collect(),
            structures: j.structures,
            majmin_chords: j.majmin_chords,
            full_chords: j.full_chords,
            keys: j.keys,
            duration_templates: j.duration_templates,
        };
        v.check()?;
        Ok(v)
    }

    fn check(&self) -> Result<(), String> {
        let tables = [
            (Kind::Meter, self.meters.len()),
            (Kind::Structure, self.structures.len()),
            (Kind::Key, self.keys.len()),
            (Kind::MajminChord, self.majmin_chords.len()),
            (Kind::FullChord, self.full_chords.len()),
            (Kind::Duration, self.duration_templates.len()),
        ];
        for (kind, n) in tables {
            if self.range(kind).len() != n {
                return Err(format!("{} labels for the {} tokens of '{}'", n, self.range(kind).len(), kind.name()));
            }
        }
        if self.range(Kind::Pitch).len() != 256 || self.range(Kind::SubbeatShift).len() < 2 {
            return Err("the pitch range is not 256 tokens, or the shift range is empty".into());
        }
        if let Some(p) = FULL_TASK.iter().find(|p| !self.prompts.iter().any(|q| q == *p)) {
            return Err(format!("no prompt '{p}'"));
        }
        if self.prompts.len() as u32 > self.range(Kind::Prompt).len() as u32 {
            return Err("more prompts than the prompt range holds".into());
        }
        Ok(())
    }

    /// The JSON the GGUF carries; `abc` gives the ABC texts of the chord and key labels that
    /// yue2.cpp's loader reads (`full_chords_abc`, `keys_abc`).
    pub fn to_json(&self, fingerprint: &str, abc: impl Fn(&str) -> String) -> String {
        let templates = &self.duration_templates;
        let j = VocabJson {
            n_tokens: self.n_tokens,
            fingerprint: fingerprint.to_string(),
            pad: self.pad,
            sos: self.sos,
            eos: self.eos,
            out: self.out,
            ranges: Kind::ALL
                .iter()
                .map(|k| (k.name().to_string(), [self.range(*k).start, self.range(*k).end]))
                .collect(),
            prompts: self.prompts.clone(),
            meters: self.meters.iter().map(|&(n, d)| [n, d]).collect(),
            structures: self.structures.clone(),
            majmin_chords: self.majmin_chords.clone(),
            full_chords_abc: self.full_chords.iter().map(|c| abc(c)).collect(),
            full_chords: self.full_chords.clone(),
            keys_abc: self.keys.iter().map(|k| abc(k)).collect(),
            keys: self.keys.clone(),
            duration_templates: templates.clone(),
            duration_boundaries: templates.windows(2).map(|w| (w[0] + w[1]) as f64 / 2.0).collect(),
        };
        serde_json::to_string(&j).expect("a vocabulary serialises")
    }

    pub fn range(&self, kind: Kind) -> Range<u32> {
        self.ranges[Kind::ALL.iter().position(|k| *k == kind).expect("a kind")].clone()
    }

    /// The kind of a token past the specials, and its index inside the kind's range.
    pub fn kind_of(&self, token: u32) -> Option<(Kind, u32)> {
        Kind::ALL
            .iter()
            .enumerate()
            .find(|(i, _)| self.ranges[*i].contains(&token))
            .map(|(i, k)| (*k, token - self.ranges[i].start))
    }

    /// A prompt's token.
    pub fn prompt(&self, name: &str) -> Option<u32> {
        let i = self.prompts.iter().position(|p| p == name)?;
        Some(self.range(Kind::Prompt).start + i as u32)
    }

    /// The prefix of a full transcription: sos, the six prompts, out.
    pub fn task_prefix(&self) -> Vec<u32> {
        let prompts = FULL_TASK.iter().map(|p| self.prompt(p).expect("checked at load"));
        std::iter::once(self.sos).chain(prompts).chain(std::iter::once(self.out)).collect()
    }

    /// Seconds of a time token's index.
    pub fn time_ids(&self) -> u32 {
        self.range(Kind::Time).len() as u32
    }
}

/// The full chord labels: `N`, then per quality and per sharp root its inversions and its
/// root position.
fn full_chords() -> Vec<String> {
    let mut out = vec!["N".to_string()];
    for (q, inversions) in QUALITIES {
        for r in SHARPS {
            out.extend(inversions.iter().map(|i| format!("{r}:{q}/{i}")));
            out.push(format!("{r}:{q}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_window_gives_the_published_layout() {
        let v = Vocab::build(30_000);
        assert_eq!(v.n_tokens, 31_678);
        let starts: Vec<u32> = Kind::ALL.iter().map(|k| v.range(*k).start).collect();
        assert_eq!(starts, [4, 260, 517, 30517, 30709, 30965, 30988, 31012, 31037, 31398, 31654]);
        assert_eq!(v.full_chords.len(), 361);
        assert_eq!(&v.full_chords[1..5], ["C:maj/2", "C:maj/3", "C:maj/5", "C:maj"]);
        assert_eq!(v.meters[20], (4, 4));
        assert_eq!(v.task_prefix(), [1, 4, 5, 6, 7, 9, 11, 3]);
        assert_eq!(v.kind_of(31_398 + 128 + 60), Some((Kind::Pitch, 188)));
        let back = Vocab::from_json(&v.to_json("f", |s| s.to_string())).unwrap();
        assert_eq!(back, v);
    }
}
