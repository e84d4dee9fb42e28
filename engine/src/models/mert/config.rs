//! MERT-v2's configuration, as its GGUF carries it: the checkpoint's `config.json` under
//! `mert2.config_json` (the keys yue2.cpp's loader requires; `docs/design/listening-part1.md`,
//! section 1), and where a head finds its MERT file.
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The metadata key of the configuration.
pub const CONFIG_KEY: &str = "mert2.config_json";

/// The configuration: front end, subsampling, conformer.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MertConfig {
    pub sampling_rate: u32,
    pub n_fft: usize,
    pub hop_length: usize,
    pub win_length: usize,
    pub num_mel_bins: usize,
    /// Channels and ConvNeXt depths of the three subsampling stages.
    pub subsampling_channels: [usize; 3],
    pub subsampling_depths: [usize; 3],
    pub subsampling_layer_norm_eps: f64,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub conv_depthwise_kernel_size: usize,
    pub layer_norm_eps: f64,
    pub rotary_embedding_base: f64,
    /// Input samples per output frame (the hop times the subsampling's two strides of 2).
    pub inputs_to_logits_ratio: usize,
}

/// A configuration the encoder cannot run, named by its key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{CONFIG_KEY}: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{CONFIG_KEY}: {key} is {got}, {want}")]
    Value { key: &'static str, got: String, want: &'static str },
}

impl MertConfig {
    /// Parses and checks the configuration JSON.
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let c: MertConfig = serde_json::from_str(json)?;
        let bad = |key, got: &dyn std::fmt::Display, want| Err(ConfigError::Value { key, got: got.to_string(), want });
        if c.sampling_rate != 24_000 {
            return bad("sampling_rate", &c.sampling_rate, "MERT-v2 reads 24000 Hz");
        }
        if c.num_hidden_layers == 0 || c.num_hidden_layers > 24 {
            return bad("num_hidden_layers", &c.num_hidden_layers, "between 1 and 24");
        }
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return bad("num_attention_heads", &c.num_attention_heads, "a divisor of hidden_size");
        }
        if c.win_length != c.n_fft || !c.n_fft.is_power_of_two() {
            return bad("win_length", &c.win_length, "n_fft, a power of two");
        }
        if c.subsampling_channels[2] != c.hidden_size {
            return bad("subsampling_channels", &c.subsampling_channels[2], "ending at hidden_size");
        }
        if c.inputs_to_logits_ratio != 4 * c.hop_length {
            return bad("inputs_to_logits_ratio", &c.inputs_to_logits_ratio, "4 x hop_length");
        }
        Ok(c)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Hidden states of a chunk of `n` samples (the front end's frames, halved twice with an
    /// odd trailing frame dropped each time).
    pub fn frames(&self, n: usize) -> usize {
        n / self.hop_length / 2 / 2
    }
}

/// The MERT file a head at `head` runs on, yue2.cpp's rule: in the head's folder, named after
/// the last part of the head's base model (`m-a-p/MERT-v2-FullSong` → `MERT-v2-FullSong`)
/// with the head's own suffix from its last `-` (its quant: `…-Q8_0.gguf`). None when the
/// head's name has no `-`.
pub fn beside(head: &Path, base_model: &str) -> Option<PathBuf> {
    let name = head.file_name()?.to_str()?;
    let suffix = &name[name.rfind('-')?..];
    let base = base_model.rsplit('/').next().filter(|b| !b.is_empty())?;
    Some(head.with_file_name(format!("{base}{suffix}")))
}

#[cfg(test)]
mod tests;
