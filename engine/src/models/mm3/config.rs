//! MiniMax Music 3's configuration as its GGUFs carry it: the LM's `config.json` (a stock
//! Qwen3, under `mm3.config_json`, as minimaxmusic.cpp writes it), the depth decoder's
//! `mm3-depth.*` keys, and where the control tokens and the codes sit in the LM vocabulary.
use crate::gguf::{GgufError, GgufFile};
use crate::kv_cache::KvDims;
use crate::nn::qwen3::{Qwen3Dims, Role};
use serde::{Deserialize, Serialize};

/// `general.architecture` of the five component files (the names minimaxmusic.cpp writes).
pub const LM_ARCH: &str = "mm3-lm";
pub const DEPTH_ARCH: &str = "mm3-depth";
pub const COND_ARCH: &str = "mm3-cond";
pub const DIT_ARCH: &str = "mm3-dit";
pub const VAE_ARCH: &str = "mm3-vae";

/// The LM's `config.json`, embedded as one string.
pub const CONFIG_JSON_KEY: &str = "mm3.config_json";
/// Metadata key that marks a file as random demo weights.
pub const DEMO_KEY: &str = "mm3.demo_preset";

/// Codes per frame: the semantic code, then the acoustic codebooks.
pub const CODES_PER_FRAME: usize = 8;
/// The LM writes frames at 24000 / 960 = 25 Hz.
pub const FRAME_RATE: f64 = 25.0;
/// The LM's frame budget (six minutes), also the cap on `duration`.
pub const MAX_FRAMES: usize = 9000;
/// Longest prompt the reference accepts, in tokens.
pub const MAX_PROMPT_TOKENS: usize = 5000;
/// The frame feedback scale, `8^-0.5` (one over the root of the codes summed).
pub const FEEDBACK_SCALE: f32 = 0.353_553_38;

/// The global LM's `config.json` (a transformers `Qwen3ForCausalLM`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_ctx")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    1e6
}
fn default_ctx() -> usize {
    10240
}

impl LmConfig {
    /// The published 8B LM.
    pub fn full() -> Self {
        LmConfig {
            vocab_size: 200_000,
            hidden_size: 4096,
            intermediate_size: 12288,
            num_hidden_layers: 36,
            num_attention_heads: 32,
            num_key_value_heads: 8,
            head_dim: Some(128),
            rms_norm_eps: 1e-6,
            rope_theta: 1e6,
            max_position_embeddings: 10240,
            tie_word_embeddings: false,
        }
    }

    /// Parses a `config.json`; the RoPE base may sit under `rope_parameters` (transformers 5).
    pub fn from_json(s: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(s).map_err(|e| format!("LM config.json: {e}"))?;
        let mut c: LmConfig = serde_json::from_value(v.clone()).map_err(|e| format!("LM config.json: {e}"))?;
        if v.get("rope_theta").is_none() {
            if let Some(t) = v.pointer("/rope_parameters/rope_theta").and_then(|t| t.as_f64()) {
                c.rope_theta = t;
            }
        }
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        if self.num_attention_heads == 0
            || self.num_key_value_heads == 0
            || !self.num_attention_heads.is_multiple_of(self.num_key_value_heads)
        {
            return Err(format!(
                "LM config: {} query heads over {} KV heads",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.tie_word_embeddings {
            return Err("LM config: tied word embeddings; MiniMax Music 3's LM has its own head".into());
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    pub fn qwen3_dims(&self) -> Qwen3Dims {
        Qwen3Dims {
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim(),
            eps: self.rms_norm_eps as f32,
            rope_theta: self.rope_theta as f32,
        }
    }

    pub fn kv_dims(&self) -> KvDims {
        KvDims { layers: self.num_hidden_layers, head_dim: self.head_dim(), kv_heads: self.num_key_value_heads }
    }

    /// Every LM tensor with its `ne` (innermost first), in the checkpoint's names.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let (h, i, v, hd) =
            (self.hidden_size as i64, self.intermediate_size as i64, self.vocab_size as i64, self.head_dim() as i64);
        let (q, kv) = (self.num_attention_heads as i64 * hd, self.num_key_value_heads as i64 * hd);
        let mut out = vec![(lm_names::EMBED.to_string(), vec![h, v])];
        for l in 0..self.num_hidden_layers {
            for role in Role::ALL {
                let ne = match role {
                    Role::AttnNorm | Role::MlpNorm => vec![h],
                    Role::Q => vec![h, q],
                    Role::K | Role::V => vec![h, kv],
                    Role::O => vec![q, h],
                    Role::QNorm | Role::KNorm => vec![hd],
                    Role::Gate | Role::Up => vec![h, i],
                    Role::Down => vec![i, h],
                };
                out.push((lm_names::layer_role(l, role), ne));
            }
        }
        out.push((lm_names::NORM.into(), vec![h]));
        out.push((lm_names::LM_HEAD.into(), vec![h, v]));
        out
    }
}

/// The LM's tensor names (the checkpoint's, kept verbatim in the GGUF).
pub mod lm_names {
    pub use crate::nn::qwen3::hf::{layer_role, EMBED, LM_HEAD, NORM};
}

/// The RVQ depth decoder's `config.json` (diffusers `MiniMaxMusic3RVQDepthDecoder`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthConfig {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    /// Entries of each acoustic codebook.
    pub audio_vocab_size: usize,
    /// Codebooks per frame, the semantic one included.
    pub num_codebooks: usize,
    pub max_position_embeddings: usize,
}

/// The depth decoder's RMSNorm epsilon (fixed in the reference).
pub const DEPTH_EPS: f32 = 1e-6;

impl DepthConfig {
    pub fn full() -> Self {
        DepthConfig {
            hidden_size: 4096,
            num_layers: 4,
            num_attention_heads: 16,
            intermediate_size: 6144,
            audio_vocab_size: 1024,
            num_codebooks: 8,
            max_position_embeddings: 16,
        }
    }

    /// The u32 keys the GGUF carries, in minimaxmusic.cpp's names.
    pub const KEYS: [&'static str; 7] = [
        "hidden_size",
        "num_layers",
        "num_attention_heads",
        "intermediate_size",
        "audio_vocab_size",
        "num_codebooks",
        "max_position_embeddings",
    ];

    pub fn values(&self) -> [usize; 7] {
        [
            self.hidden_size,
            self.num_layers,
            self.num_attention_heads,
            self.intermediate_size,
            self.audio_vocab_size,
            self.num_codebooks,
            self.max_position_embeddings,
        ]
    }

    /// Reads the `mm3-depth.*` keys.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, GgufError> {
        let mut v = [0usize; 7];
        for (slot, key) in v.iter_mut().zip(Self::KEYS) {
            *slot = f.get_i64(&format!("{DEPTH_ARCH}.{key}"))? as usize;
        }
        let c = DepthConfig {
            hidden_size: v[0],
            num_layers: v[1],
            num_attention_heads: v[2],
            intermediate_size: v[3],
            audio_vocab_size: v[4],
            num_codebooks: v[5],
            max_position_embeddings: v[6],
        };
        if c.num_attention_heads == 0
            || !c.hidden_size.is_multiple_of(c.num_attention_heads)
            || c.num_codebooks != CODES_PER_FRAME
            || c.max_position_embeddings < CODES_PER_FRAME
        {
            return Err(GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: format!("depth decoder config {c:?} is not MiniMax Music 3's layout"),
            });
        }
        Ok(c)
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Acoustic codebooks (the semantic one is the LM's).
    pub fn acoustic_codebooks(&self) -> usize {
        self.num_codebooks - 1
    }

    /// Every tensor with its `ne`; `lm_hidden` is the LM width the projection reads.
    pub fn tensor_shapes(&self, lm_hidden: usize) -> Vec<(String, Vec<i64>)> {
        let (h, i, a) = (self.hidden_size as i64, self.intermediate_size as i64, self.audio_vocab_size as i64);
        let mut out = vec![
            ("audio_embeddings.weight".to_string(), vec![h, a * self.acoustic_codebooks() as i64]),
            ("projection.weight".to_string(), vec![lm_hidden as i64, h]),
            ("pos_embedding.weight".to_string(), vec![h, self.max_position_embeddings as i64]),
        ];
        for l in 0..self.num_layers {
            let p = |s: &str| format!("layers.{l}.{s}");
            out.push((p("input_layernorm.weight"), vec![h]));
            for s in ["attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.weight"] {
                out.push((p(s), vec![h, h]));
            }
            out.push((p("post_attention_layernorm.weight"), vec![h]));
            out.push((p("gate_proj.weight"), vec![h, i]));
            out.push((p("up_proj.weight"), vec![h, i]));
            out.push((p("down_proj.weight"), vec![i, h]));
        }
        out.push(("norm.weight".into(), vec![h]));
        for k in 0..self.acoustic_codebooks() {
            out.push((format!("audio_heads.{k}.weight"), vec![h, a]));
        }
        out
    }
}

/// Where the control tokens and the semantic codes sit in the LM vocabulary. The published
/// layout is [`TokenLayout::FULL`]; a demo file with a shrunken vocabulary says where they
/// are in `mm3.token.*` keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenLayout {
    /// Ordinary BPE tokens are `[0, text_vocab)`; the added tokens follow.
    pub text_vocab: u32,
    pub im_start: u32,
    pub im_end: u32,
    /// Fills the unconditional prompt.
    pub audio_cfg: u32,
    pub audio_start: u32,
    /// End of audio: the LM's stop token.
    pub audio_end: u32,
    pub caption_start: u32,
    pub caption_end: u32,
    pub lyrics_start: u32,
    pub lyrics_end: u32,
    /// Semantic code `s` is LM token `semantic_base + s`.
    pub semantic_base: u32,
    pub semantic_size: u32,
}

impl TokenLayout {
    pub const FULL: TokenLayout = TokenLayout {
        text_vocab: 151_643,
        im_start: 151_644,
        im_end: 151_645,
        audio_cfg: 151_654,
        audio_start: 151_669,
        audio_end: 151_670,
        caption_start: 151_671,
        caption_end: 151_672,
        lyrics_start: 151_673,
        lyrics_end: 151_674,
        semantic_base: 151_675,
        semantic_size: 16_384,
    };

    /// The published layout moved to start its added tokens at `text_vocab` (the demos':
    /// every added token keeps its distance from the first).
    pub fn shifted(text_vocab: u32, semantic_size: u32) -> TokenLayout {
        let f = TokenLayout::FULL;
        let m = |id: u32| id - f.text_vocab + text_vocab;
        TokenLayout {
            text_vocab,
            im_start: m(f.im_start),
            im_end: m(f.im_end),
            audio_cfg: m(f.audio_cfg),
            audio_start: m(f.audio_start),
            audio_end: m(f.audio_end),
            caption_start: m(f.caption_start),
            caption_end: m(f.caption_end),
            lyrics_start: m(f.lyrics_start),
            lyrics_end: m(f.lyrics_end),
            semantic_base: m(f.semantic_base),
            semantic_size,
        }
    }

    const KEYS: [&'static str; 12] = [
        "text_vocab",
        "im_start",
        "im_end",
        "audio_cfg",
        "audio_start",
        "audio_end",
        "caption_start",
        "caption_end",
        "lyrics_start",
        "lyrics_end",
        "semantic_base",
        "semantic_size",
    ];

    fn values(&self) -> [u32; 12] {
        [
            self.text_vocab,
            self.im_start,
            self.im_end,
            self.audio_cfg,
            self.audio_start,
            self.audio_end,
            self.caption_start,
            self.caption_end,
            self.lyrics_start,
            self.lyrics_end,
            self.semantic_base,
            self.semantic_size,
        ]
    }

    /// `(key, value)` metadata pairs of a shrunken layout.
    pub fn metadata(&self) -> Vec<(String, u32)> {
        Self::KEYS.iter().zip(self.values()).map(|(k, v)| (format!("mm3.token.{k}"), v)).collect()
    }

    /// The layout of an LM file: its `mm3.token.*` keys, or the published one.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, GgufError> {
        if f.get("mm3.token.semantic_base").is_none() {
            return Ok(TokenLayout::FULL);
        }
        let mut v = [0u32; 12];
        for (slot, key) in v.iter_mut().zip(Self::KEYS) {
            *slot = f.get_i64(&format!("mm3.token.{key}"))? as u32;
        }
        Ok(TokenLayout {
            text_vocab: v[0],
            im_start: v[1],
            im_end: v[2],
            audio_cfg: v[3],
            audio_start: v[4],
            audio_end: v[5],
            caption_start: v[6],
            caption_end: v[7],
            lyrics_start: v[8],
            lyrics_end: v[9],
            semantic_base: v[10],
            semantic_size: v[11],
        })
    }

    /// The logit rows a semantic step reads: from the end-of-audio token to the last code
    /// (the control tokens between them are masked).
    pub fn sample_rows(&self) -> std::ops::Range<u32> {
        self.audio_end..self.semantic_base + self.semantic_size
    }

    pub fn check(&self, vocab: usize) -> Result<(), String> {
        let v = self.values();
        if v[1..11].iter().any(|&id| id < self.text_vocab)
            || self.audio_end >= self.semantic_base
            || (self.semantic_base + self.semantic_size) as usize > vocab
        {
            return Err(format!("token layout {self:?} does not fit a vocabulary of {vocab}"));
        }
        Ok(())
    }
}

/// What an LM file says about itself.
#[derive(Clone, Debug)]
pub struct LmInfo {
    pub config: LmConfig,
    pub tokens: TokenLayout,
    pub config_json: String,
}

impl LmInfo {
    pub fn read(f: &GgufFile) -> Result<Self, GgufError> {
        let corrupt = |m: String| GgufError::Corrupt { path: f.path().to_path_buf(), what: m };
        let arch = f.get_str("general.architecture")?;
        if arch != LM_ARCH {
            return Err(corrupt(format!("general.architecture is '{arch}', a MiniMax Music 3 LM is '{LM_ARCH}'")));
        }
        let config_json = f.get_str(CONFIG_JSON_KEY)?.to_string();
        let config = LmConfig::from_json(&config_json).map_err(corrupt)?;
        let tokens = TokenLayout::from_gguf(f)?;
        tokens.check(config.vocab_size).map_err(corrupt)?;
        Ok(LmInfo { config, tokens, config_json })
    }
}

/// Checks a file's architecture.
pub fn expect_arch(f: &GgufFile, arch: &str) -> Result<(), GgufError> {
    f.expect_arch(arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_shapes() {
        let c = LmConfig::full();
        let t = c.tensor_shapes();
        assert_eq!(t.len(), 36 * 11 + 3, "399 tensors, as the published checkpoint");
        assert!(t.contains(&("model.layers.35.self_attn.k_proj.weight".into(), vec![4096, 1024])));
        let d = DepthConfig::full().tensor_shapes(4096);
        assert_eq!(d.len(), 47);
        assert!(d.contains(&("audio_embeddings.weight".into(), vec![4096, 7168])));
        assert_eq!(TokenLayout::shifted(151_643, 16_384), TokenLayout::FULL);
        assert_eq!(TokenLayout::FULL.sample_rows(), 151_670..168_059);
        TokenLayout::FULL.check(200_000).unwrap();
        assert!(TokenLayout::FULL.check(160_000).is_err());
        let tiny = TokenLayout::shifted(256, 64);
        assert_eq!(
            (tiny.im_start, tiny.audio_cfg, tiny.audio_start, tiny.audio_end, tiny.semantic_base),
            (257, 267, 282, 283, 288)
        );
        assert!((FEEDBACK_SCALE - 8f32.powf(-0.5)).abs() < 1e-8);
    }
}
