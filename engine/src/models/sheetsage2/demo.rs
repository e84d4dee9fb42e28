//! The transcriber's demo head: the exact architecture with random weights, beside the
//! listening demo's MERT of the same preset (`yued demo-model --family listen` writes both).
//! Random weights decode random events; the head's own LoRA factors are written too, so the
//! merge into MERT runs as with the published file.
use super::config::HeadConfig;
use super::convert::metadata;
use crate::gguf::{GgufError, GgufWriter};
use crate::models::audio_tokenizer::demo::{base_model, mert_config, values, write};
use crate::nn::demo::Preset;
use std::path::{Path, PathBuf};

/// The head of a preset: tiny widths on a 20 s window (`tiny`), tiny widths at the published
/// depth and window (`deep`), or the published configuration (`full`).
pub fn head_config(preset: Preset) -> HeadConfig {
    let published = HeadConfig {
        hidden_size: 512,
        intermediate_size: 2048,
        decoder_layers: 6,
        num_attention_heads: 8,
        vocab_size: 31_678,
        max_output_seq_len: 5120,
        input_audio_length: 300.0,
        time_hz: 100,
        lora_alpha: 128.0,
        lora_rank: 64,
        sampling_rate: 24_000,
        base_model_name_or_path: base_model(preset),
    };
    let tiny_widths = HeadConfig {
        hidden_size: 32,
        intermediate_size: 64,
        num_attention_heads: 4,
        lora_alpha: 8.0,
        lora_rank: 4,
        ..published.clone()
    };
    match preset {
        Preset::Full => published,
        Preset::Deep => tiny_widths,
        Preset::Tiny => HeadConfig {
            decoder_layers: 2,
            input_audio_length: 20.0,
            vocab_size: 31_678 - 30_000 + 2000,
            max_output_seq_len: 512,
            ..tiny_widths
        },
    }
}

/// The head's tensors and its LoRA factors on every attention projection of `mert_layers`
/// blocks of `mert_hidden` channels.
pub fn tensor_shapes(c: &HeadConfig, mert_hidden: usize, mert_layers: usize) -> Vec<(String, Vec<i64>)> {
    let mut out = c.tensor_shapes(mert_hidden, mert_layers + 1);
    let (d, r) = (mert_hidden as i64, c.lora_rank as i64);
    for l in 0..mert_layers {
        for p in ["query", "key", "value", "out"] {
            let m = format!("adapter.layers.{l}.attn.{p}_proj");
            out.push((format!("{m}.lora_A.weight"), vec![d, r]));
            out.push((format!("{m}.lora_B.weight"), vec![r, d]));
        }
    }
    out
}

/// Writes `SheetSage2-demo-{preset}-F32.gguf` into `dir` (beside the listening demo's MERT,
/// which it names as its base model).
pub fn write_demo(dir: &Path, preset: Preset, seed: u64) -> Result<PathBuf, GgufError> {
    std::fs::create_dir_all(dir).map_err(|source| GgufError::Io { path: dir.to_path_buf(), error: source })?;
    let (mc, hc) = (mert_config(preset), head_config(preset));
    let mut tensors: Vec<(String, Vec<i64>, Vec<f32>)> = tensor_shapes(&hc, mc.hidden_size, mc.num_hidden_layers)
        .into_iter()
        .map(|(name, ne)| {
            let v = values(seed, &name, &ne);
            (name, ne, v)
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let path = dir.join(format!("SheetSage2-demo-{}-F32.gguf", preset.name()));
    let mut w = GgufWriter::new();
    let json = serde_json::to_string(&hc).expect("a configuration serialises");
    metadata(&mut w, &json, &hc, "yued-demo");
    w.set_str("general.name", &format!("yued demo SheetSage2 head ({}, RANDOM WEIGHTS)", preset.name()));
    write(&path, &mut w, tensors)?;
    Ok(path)
}
