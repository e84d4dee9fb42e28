//! YuE2 hyper-parameters and the token id layout, read from a backbone GGUF.
//!
//! The backbone carries the checkpoint's `config.json` verbatim under `yue2.config_json`.
//! The control and code ids default to the published layout (abc_start 151847, abc_end
//! 151848, music_start 151851, music_end 151852, codes at 151853 + c over 32768 entries);
//! a file may override them with `yue2.token.*` keys, which is how the tiny demo model keeps
//! the same structure with a shrunken vocabulary.
use crate::gguf::{GgufError, GgufFile};
use serde::{Deserialize, Serialize};

pub const ARCH: &str = "yue2";
pub const VAE_ARCH: &str = "yue2-vae";

/// Transformer dimensions shared by the AR and NAR halves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Yue2Config {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Context length (the KV cache bound and the NAR chunking rule use it).
    pub max_position_embeddings: usize,
    pub vocab_size: usize,
    /// The NAR's timestep release curve `shift * s / (1 + (shift - 1) * s)` (1.0 in the
    /// published checkpoint: the identity).
    #[serde(default = "unit_shift")]
    pub timestep_shift: f64,
}

fn unit_shift() -> f64 {
    1.0
}

impl Yue2Config {
    /// The published YuE2-3B dimensions.
    pub fn full() -> Self {
        Yue2Config {
            hidden_size: 2048,
            intermediate_size: 6144,
            num_hidden_layers: 28,
            num_attention_heads: 16,
            num_key_value_heads: 8,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 1e6,
            max_position_embeddings: 24576,
            vocab_size: 184704,
            timestep_shift: 1.0,
        }
    }

    /// Parses `config.json` text; keys it lacks take the published values.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("config json: {e}"))?;
        let d = Self::full();
        let u = |k: &str, def: usize| -> Result<usize, String> {
            match v.get(k) {
                None | Some(serde_json::Value::Null) => Ok(def),
                Some(x) => x
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| format!("config json: '{k}' must be a positive integer")),
            }
        };
        let f = |k: &str, def: f64| -> Result<f64, String> {
            match v.get(k) {
                None | Some(serde_json::Value::Null) => Ok(def),
                Some(x) => x
                    .as_f64()
                    .filter(|n| *n > 0.0)
                    .ok_or_else(|| format!("config json: '{k}' must be a positive number")),
            }
        };
        let heads = u("num_attention_heads", d.num_attention_heads)?;
        let hidden = u("hidden_size", d.hidden_size)?;
        let c = Yue2Config {
            hidden_size: hidden,
            intermediate_size: u("intermediate_size", d.intermediate_size)?,
            num_hidden_layers: u("num_hidden_layers", d.num_hidden_layers)?,
            num_attention_heads: heads,
            num_key_value_heads: u("num_key_value_heads", d.num_key_value_heads)?,
            head_dim: u("head_dim", if v.get("hidden_size").is_some() { hidden / heads } else { d.head_dim })?,
            rms_norm_eps: f("rms_norm_eps", d.rms_norm_eps)?,
            rope_theta: f("rope_theta", d.rope_theta)?,
            max_position_embeddings: u("max_position_embeddings", d.max_position_embeddings)?,
            vocab_size: u("vocab_size", d.vocab_size)?,
            timestep_shift: f("timestep_shift", d.timestep_shift)?,
        };
        if !c.num_attention_heads.is_multiple_of(c.num_key_value_heads) {
            return Err(format!(
                "config json: {} attention heads are not a multiple of {} kv heads",
                c.num_attention_heads, c.num_key_value_heads
            ));
        }
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap()
    }

    /// What a decoder layer's graph needs (both halves share it).
    pub fn qwen3_dims(&self) -> crate::nn::qwen3::Qwen3Dims {
        crate::nn::qwen3::Qwen3Dims {
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            eps: self.rms_norm_eps as f32,
            rope_theta: self.rope_theta as f32,
        }
    }

    /// The shape of this backbone's KV cache.
    pub fn kv_dims(&self) -> crate::kv_cache::KvDims {
        crate::kv_cache::KvDims {
            layers: self.num_hidden_layers,
            head_dim: self.head_dim,
            kv_heads: self.num_key_value_heads,
        }
    }
}

/// Where the control tokens and the semantic codes sit in the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenLayout {
    pub endoftext: u32,
    pub abc_start: u32,
    pub abc_end: u32,
    pub music_start: u32,
    pub music_end: u32,
    /// Code c is token `code_base + c`.
    pub code_base: u32,
    pub codebook_size: u32,
}

impl TokenLayout {
    /// The published ids.
    pub const FULL: TokenLayout = TokenLayout {
        endoftext: 151643,
        abc_start: 151847,
        abc_end: 151848,
        music_start: 151851,
        music_end: 151852,
        code_base: 151853,
        codebook_size: 32768,
    };

    /// Rows the score stage samples from: every text and ABC id up to and including abc_end.
    pub fn score_rows(&self) -> std::ops::Range<u32> {
        0..self.abc_end + 1
    }
    /// Rows the semantic stage samples from: music_end then the codes, contiguous.
    pub fn semantic_rows(&self) -> std::ops::Range<u32> {
        self.music_end..self.code_base + self.codebook_size
    }
    pub fn code_token(&self, code: u32) -> u32 {
        self.code_base + code
    }
    pub fn token_code(&self, token: u32) -> Option<u32> {
        token.checked_sub(self.code_base).filter(|&c| c < self.codebook_size)
    }

    /// Qwen's special tokens for a vocabulary whose ordinary tokens end at `endoftext`
    /// ([`crate::tokenizer::append_qwen_specials`]): up to music_start, `<abc>` and
    /// `</abc>` in their slots.
    pub fn append_specials(&self, toks: &mut Vec<String>, types: &mut Vec<i32>) {
        assert_eq!(toks.len(), self.endoftext as usize, "ordinary tokens must end at endoftext");
        let named = [(self.abc_start, "<abc>"), (self.abc_end, "</abc>")];
        crate::tokenizer::append_qwen_specials(toks, types, self.music_start, &named);
    }

    fn check(&self, vocab: usize) -> Result<(), String> {
        let end = self.code_base as usize + self.codebook_size as usize;
        if self.abc_end != self.abc_start + 1
            || self.music_end != self.music_start + 1
            || self.code_base != self.music_end + 1
        {
            return Err(format!("token layout {self:?} breaks the adjacency the samplers rely on"));
        }
        if end > vocab {
            return Err(format!("codes end at {end}, past the vocabulary of {vocab}"));
        }
        Ok(())
    }
}

/// Everything the engine needs to know about a backbone file before loading weights.
#[derive(Clone, Debug)]
pub struct BackboneInfo {
    pub config: Yue2Config,
    pub tokens: TokenLayout,
    pub config_json: String,
}

impl BackboneInfo {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, GgufError> {
        let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
        let arch = f.get_str("general.architecture")?;
        if arch != ARCH {
            return Err(corrupt(format!("general.architecture is '{arch}', expected '{ARCH}' (a YuE2 backbone)")));
        }
        let config_json = f.get_str("yue2.config_json")?.to_string();
        let config = Yue2Config::from_json(&config_json).map_err(|e| corrupt(format!("yue2.config_json: {e}")))?;
        if let Some(v) = f.get("yue2.block_count") {
            if v.as_i64() != Some(config.num_hidden_layers as i64) {
                return Err(corrupt(format!(
                    "yue2.block_count {} disagrees with config num_hidden_layers {}",
                    v.summary(),
                    config.num_hidden_layers
                )));
            }
        }
        let d = TokenLayout::FULL;
        let id = |k: &str, def: u32| -> Result<u32, GgufError> {
            let key = format!("yue2.token.{k}");
            match f.get(&key) {
                None => Ok(def),
                Some(_) => u32::try_from(f.get_i64(&key)?).map_err(|_| corrupt(format!("{key} out of range"))),
            }
        };
        let tokens = TokenLayout {
            endoftext: id("endoftext", d.endoftext)?,
            abc_start: id("abc_start", d.abc_start)?,
            abc_end: id("abc_end", d.abc_end)?,
            music_start: id("music_start", d.music_start)?,
            music_end: id("music_end", d.music_end)?,
            code_base: id("code_base", d.code_base)?,
            codebook_size: id("codebook_size", d.codebook_size)?,
        };
        tokens.check(config.vocab_size).map_err(corrupt)?;
        Ok(BackboneInfo { config, tokens, config_json })
    }
}

/// Names of the backbone tensors, as in the HF checkpoint.
pub mod names {
    pub use crate::nn::qwen3::hf::{EMBED, LM_HEAD, NORM};
    pub const VAE2LLM_W: &str = "vae2llm.weight";
    pub const VAE2LLM_B: &str = "vae2llm.bias";
    pub const LLM2VAE_W: &str = "llm2vae.weight";
    pub const LLM2VAE_B: &str = "llm2vae.bias";
    pub const TIME_MLP0_W: &str = "time_embedder.mlp.0.weight";
    pub const TIME_MLP0_B: &str = "time_embedder.mlp.0.bias";
    pub const TIME_MLP2_W: &str = "time_embedder.mlp.2.weight";
    pub const TIME_MLP2_B: &str = "time_embedder.mlp.2.bias";

    /// `model.layers.{l}.{rest}`.
    pub fn layer(l: usize, rest: &str) -> String {
        format!("model.layers.{l}.{rest}")
    }

    /// Layer `l`'s tensor of `role` in the AR half (`nar = false`) or the NAR half.
    pub fn layer_role(l: usize, nar: bool, role: crate::nn::qwen3::Role) -> String {
        let i = crate::nn::qwen3::Role::ALL.iter().position(|&r| r == role).expect("every role is listed");
        layer(l, if nar { NAR_LAYER[i] } else { AR_LAYER[i] })
    }

    /// Per-layer tensors of the autoregressive half (11 per layer), in the order of
    /// [`crate::nn::qwen3::Role::ALL`]: the Hugging Face Qwen3 names.
    pub const AR_LAYER: [&str; 11] = crate::nn::qwen3::hf::LAYER;
    /// Per-layer tensors of the non-autoregressive half (11 per layer), same order.
    pub const NAR_LAYER: [&str; 11] = [
        "nar_input_layernorm.weight",
        "nar_self_attn.q_proj.weight",
        "nar_self_attn.k_proj.weight",
        "nar_self_attn.v_proj.weight",
        "nar_self_attn.o_proj.weight",
        "nar_self_attn.q_norm.weight",
        "nar_self_attn.k_norm.weight",
        "nar_pre_mlp_layernorm.weight",
        "nar_mlp.gate_proj.weight",
        "nar_mlp.up_proj.weight",
        "nar_mlp.down_proj.weight",
    ];
}

/// Expected `ne` (innermost first) of a per-layer tensor given its suffix.
pub fn layer_tensor_shape(c: &Yue2Config, suffix: &str) -> Vec<i64> {
    let (h, i, hd) = (c.hidden_size as i64, c.intermediate_size as i64, c.head_dim as i64);
    let (q, kv) = (c.num_attention_heads as i64 * hd, c.num_key_value_heads as i64 * hd);
    let s = suffix.trim_start_matches("nar_");
    match s {
        "input_layernorm.weight" | "post_attention_layernorm.weight" | "pre_mlp_layernorm.weight" => vec![h],
        "self_attn.q_proj.weight" => vec![h, q],
        "self_attn.k_proj.weight" | "self_attn.v_proj.weight" => vec![h, kv],
        "self_attn.o_proj.weight" => vec![q, h],
        "self_attn.q_norm.weight" | "self_attn.k_norm.weight" => vec![hd],
        "mlp.gate_proj.weight" | "mlp.up_proj.weight" => vec![h, i],
        "mlp.down_proj.weight" => vec![i, h],
        other => panic!("unknown layer tensor suffix {other}"),
    }
}

/// Whether a backbone tensor belongs to the NAR half (its layers and flow-matching heads).
pub fn is_nar_tensor(name: &str) -> bool {
    name.contains(".nar_")
        || name.starts_with("vae2llm.")
        || name.starts_with("llm2vae.")
        || name.starts_with("time_embedder.")
}

/// Every backbone tensor with its expected shape, in file order: AR half, then NAR half.
pub fn backbone_tensor_shapes(c: &Yue2Config, latent_dim: usize, time_freq_dim: usize) -> Vec<(String, Vec<i64>)> {
    let (h, v) = (c.hidden_size as i64, c.vocab_size as i64);
    let mut out = vec![(names::EMBED.to_string(), vec![h, v])];
    for l in 0..c.num_hidden_layers {
        for s in names::AR_LAYER {
            out.push((names::layer(l, s), layer_tensor_shape(c, s)));
        }
    }
    out.push((names::NORM.into(), vec![h]));
    out.push((names::LM_HEAD.into(), vec![h, v]));
    for l in 0..c.num_hidden_layers {
        for s in names::NAR_LAYER {
            out.push((names::layer(l, s), layer_tensor_shape(c, s)));
        }
    }
    let lat = latent_dim as i64;
    out.push((names::VAE2LLM_W.into(), vec![lat, h]));
    out.push((names::VAE2LLM_B.into(), vec![h]));
    out.push((names::LLM2VAE_W.into(), vec![h, lat]));
    out.push((names::LLM2VAE_B.into(), vec![lat]));
    out.push((names::TIME_MLP0_W.into(), vec![time_freq_dim as i64, h]));
    out.push((names::TIME_MLP0_B.into(), vec![h]));
    out.push((names::TIME_MLP2_W.into(), vec![h, h]));
    out.push((names::TIME_MLP2_B.into(), vec![h]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_backbone_has_627_tensors_split_311_316() {
        let shapes = backbone_tensor_shapes(&Yue2Config::full(), 64, 256);
        assert_eq!(shapes.len(), 627);
        let ar = shapes.iter().filter(|(n, _)| !is_nar_tensor(n)).count();
        assert_eq!(ar, 311);
        assert_eq!(crate::models::yue2::ar::ar_tensors(&Yue2Config::full()).len(), 311);
        assert_eq!(
            crate::models::yue2::nar::nar_tensors(&Yue2Config::full(), 64).len(),
            316 + 1,
            "plus the shared final norm"
        );
    }

    #[test]
    fn full_layout_row_ranges_match_the_architecture_reference() {
        let t = TokenLayout::FULL;
        assert_eq!(t.score_rows().len(), 151849);
        assert_eq!(t.semantic_rows().len(), 32769);
        assert_eq!(t.token_code(151853 + 5), Some(5));
        assert_eq!(t.token_code(151852), None);
        t.check(184704).unwrap();
    }

    #[test]
    fn config_json_defaults_and_errors() {
        let c = Yue2Config::from_json("{}").unwrap();
        assert_eq!(c, Yue2Config::full());
        let c = Yue2Config::from_json(r#"{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}"#)
            .unwrap();
        assert_eq!(c.head_dim, 16);
        assert!(Yue2Config::from_json(r#"{"num_attention_heads": 5, "num_key_value_heads": 2}"#)
            .unwrap_err()
            .contains("multiple"));
        assert!(Yue2Config::from_json(r#"{"hidden_size": -3}"#).unwrap_err().contains("hidden_size"));
        assert!(Yue2Config::from_json("not json").is_err());
    }
}
