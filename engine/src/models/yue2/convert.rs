//! Checkpoint folders to GGUF.
//!
//! Backbone: `config.json` + `*.safetensors` (sharded or not) + `qwen.tiktoken` into one
//! GGUF with `general.architecture = yue2`, the config verbatim under `yue2.config_json`,
//! `yue2.block_count`, the tokenizer converted to the GPT-2 layout, and every tensor under
//! its HF name in its native dtype (BF16 stays BF16, F32 stays F32). `latent_pos_embed.pe`
//! is dropped: the NAR rebuilds that sinusoid.
//!
//! VAE: `*.safetensors` (+ optional `config.json`) into `general.architecture = yue2-vae`
//! with the raw `weight_g` / `weight_v` pairs. Positional `nn.Sequential` names
//! (`decoder.layers.N...`, stable-audio-tools style) are remapped onto the block vocabulary
//! (`decoder.block.N.conv_t1`, `res_unit1.snake1`, ...); snake parameters stored as
//! `[1, C, 1]` are squeezed to `[C]`; a decoder output convolution saved without bias gets a
//! zero one.
use crate::ggml::GgmlType;
use crate::gguf::GgufWriter;
pub use crate::models::checkpoint::ConvertError;
use crate::models::checkpoint::{input, Shards};
use crate::models::yue2::config::{TokenLayout, Yue2Config, ARCH, VAE_ARCH};
use crate::tokenizer::{convert_tiktoken, token_type};
use std::collections::BTreeMap;
use std::path::Path;

/// Converts a backbone checkpoint folder. Returns the number of tensors written.
pub fn convert_backbone(dir: &Path, out: &Path) -> Result<usize, ConvertError> {
    let cfg_path = dir.join("config.json");
    let config_json = std::fs::read_to_string(&cfg_path).map_err(|e| input(&cfg_path, e.to_string()))?;
    let cfg = Yue2Config::from_json(&config_json).map_err(|e| input(&cfg_path, e))?;
    let tk_path = dir.join("qwen.tiktoken");
    let ranks = std::fs::read_to_string(&tk_path).map_err(|e| input(&tk_path, e.to_string()))?;
    let vocab = convert_tiktoken(&ranks).map_err(|e| input(&tk_path, e))?;
    let layout = TokenLayout::FULL;
    if vocab.tokens.len() != layout.endoftext as usize {
        return Err(input(
            &tk_path,
            format!("{} ranks, the YuE2 layout needs {}", vocab.tokens.len(), layout.endoftext),
        ));
    }
    let mut toks = vocab.tokens;
    let mut types = vec![token_type::NORMAL; toks.len()];
    layout.append_specials(&mut toks, &mut types);

    let shards = Shards::open(dir)?;
    let index = shards.index()?;
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", ARCH)
        .set_str("general.name", dir.file_name().map(|s| s.to_string_lossy().into_owned()).as_deref().unwrap_or("yue2"))
        .set_str("yue2.config_json", &config_json)
        .set_u32("yue2.block_count", cfg.num_hidden_layers as u32)
        .set_str("tokenizer.ggml.model", "gpt2")
        .set_str("tokenizer.ggml.pre", "qwen2")
        .set_strs("tokenizer.ggml.tokens", &toks)
        .set_i32s("tokenizer.ggml.token_type", &types)
        .set_strs("tokenizer.ggml.merges", &vocab.merges)
        .set_u32("tokenizer.ggml.eos_token_id", layout.endoftext);
    let names: Vec<(&String, &usize)> = index.iter().filter(|(n, _)| n.as_str() != "latent_pos_embed.pe").collect();
    for (name, &shard) in &names {
        let (ty, ne, _) = shards.get(shard, name)?;
        w.add_tensor(name, ty, &ne);
    }
    let mut data = w.create(out)?;
    for (name, &shard) in &names {
        data.write(shards.get(shard, name)?.2)?;
    }
    data.finish()?;
    Ok(names.len())
}

/// Maps a stable-audio-tools positional VAE name onto the block vocabulary; names already
/// in the vocabulary pass through.
pub fn vae_block_name(name: &str, n_blocks: usize) -> Option<String> {
    let parts: Vec<&str> = name.split('.').collect();
    let (side, rest) = (parts.first()?, &parts[1..]);
    if !matches!(*side, "decoder" | "encoder") || rest.first() != Some(&"layers") {
        return Some(name.to_string());
    }
    let top: usize = rest.get(1)?.parse().ok()?;
    let param = rest.last()?;
    let last = n_blocks + 1; // conv1, blocks, snake, conv2
    let unit = |sub: &[&str]| -> Option<String> {
        // ResidualUnit: layers.0 snake1, layers.1 conv1, layers.2 snake2, layers.3 conv2
        let i: usize = sub.get(1)?.parse().ok()?;
        Some(["snake1", "conv1", "snake2", "conv2"].get(i)?.to_string())
    };
    let mapped = if top == 0 {
        "conv1".to_string()
    } else if top <= n_blocks {
        let b = top - 1;
        let inner: usize = rest.get(3)?.parse().ok()?; // layers.<top>.layers.<inner>
        let deeper = &rest[4..rest.len() - 1];
        let leaf = if *side == "decoder" {
            match inner {
                0 => "snake1".to_string(),
                1 => "conv_t1".to_string(),
                2..=4 => format!("res_unit{}.{}", inner - 1, unit(deeper)?),
                _ => return None,
            }
        } else {
            match inner {
                0..=2 => format!("res_unit{}.{}", inner + 1, unit(deeper)?),
                3 => "snake1".to_string(),
                4 => "conv1".to_string(),
                _ => return None,
            }
        };
        format!("block.{b}.{leaf}")
    } else if top == last {
        "snake1".to_string()
    } else if top == last + 1 {
        "conv2".to_string()
    } else {
        return None;
    };
    Some(format!("{side}.{mapped}.{param}"))
}

/// Converts a VAE checkpoint folder. Returns the number of tensors written.
pub fn convert_vae(dir: &Path, out: &Path) -> Result<usize, ConvertError> {
    let cfg: serde_json::Value = match std::fs::read_to_string(dir.join("config.json")) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| input(&dir.join("config.json"), e.to_string()))?,
        Err(_) => serde_json::json!({}),
    };
    let ints = |k: &str| {
        cfg.get(k)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_u64()).map(|x| x as i32).collect::<Vec<_>>())
    };
    let strides: Vec<i32> = ints("upsampling_ratios")
        .or_else(|| {
            ints("downsampling_ratios").map(|mut v| {
                v.reverse();
                v
            })
        })
        .unwrap_or_else(|| vec![6, 5, 4, 4, 2, 2]);
    let latent =
        cfg.get("decoder_input_channels").or(cfg.get("latent_channels")).and_then(|v| v.as_u64()).unwrap_or(64) as u32;
    let rate = cfg.get("sampling_rate").and_then(|v| v.as_u64()).unwrap_or(48000) as u32;
    let audio = cfg.get("audio_channels").and_then(|v| v.as_u64()).unwrap_or(2) as u32;
    let shards = Shards::open(dir)?;
    let index = shards.index()?;
    let mut tensors: BTreeMap<String, (GgmlType, Vec<i64>, Vec<u8>)> = BTreeMap::new();
    for (name, &shard) in &index {
        let Some(mapped) = vae_block_name(name, strides.len()) else {
            return Err(input(dir, format!("tensor '{name}' does not fit the Oobleck layout")));
        };
        let (ty, mut ne, bytes) = shards.get(shard, name)?;
        if mapped.ends_with(".alpha") || mapped.ends_with(".beta") {
            ne.retain(|&d| d != 1);
            if ne.is_empty() {
                ne.push(1);
            }
        }
        tensors.insert(mapped, (ty, ne, bytes.to_vec()));
    }
    if !tensors.contains_key("decoder.conv2.bias") {
        tensors.insert("decoder.conv2.bias".into(), (GgmlType::F32, vec![audio as i64], vec![0u8; audio as usize * 4]));
    }
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", VAE_ARCH)
        .set_str(
            "general.name",
            dir.file_name().map(|s| s.to_string_lossy().into_owned()).as_deref().unwrap_or("yue2-vae"),
        )
        .set_u32("yue2-vae.latent_channels", latent)
        .set_u32("yue2-vae.sampling_rate", rate)
        .set_u32("yue2-vae.audio_channels", audio)
        .set_i32s("yue2-vae.upsampling_ratios", &strides);
    for (n, (ty, ne, _)) in &tensors {
        w.add_tensor(n, *ty, ne);
    }
    let mut data = w.create(out)?;
    for (_, _, b) in tensors.values() {
        data.write(b)?;
    }
    data.finish()?;
    // The result must load as a VAE (every shape checked).
    let f = crate::gguf::GgufFile::open(out)?;
    crate::models::yue2::vae::VaeModel::info(&f)?;
    Ok(tensors.len())
}

#[cfg(test)]
mod tests;
