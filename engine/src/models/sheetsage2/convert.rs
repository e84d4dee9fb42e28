//! The SheetSage2 checkpoint folder (`config.json`, `model.safetensors`) to its GGUF, as
//! yue2.cpp writes it (`docs/design/listening-part2.md` 1.1-1.4): every tensor under its own
//! name, sorted, byte for byte; the configuration as compact JSON; the vocabulary, which
//! the checkpoint computes in Python rather than ships, built from the window's time range
//! with the ABC texts of its key and chord labels.
use super::config::{HeadConfig, Vocab, ARCH, CONFIG_KEY, TOKENIZER_KEY};
use crate::gguf::GgufWriter;
use crate::models::checkpoint::{input, write_verbatim, ConvertError, Shards};
use std::path::{Path, PathBuf};

pub const NAME: &str = "SheetSage2 audio to score transcriber head on MERT-v2-FullSong";
/// The published file's name before its dtype.
pub const STEM: &str = "SheetSage2";
/// The published vocabulary's fingerprint, when the configuration names none.
const FINGERPRINT: &str = "5ba3325af0344c7f";

/// The head's GGUF metadata for a configuration: `config_json` (compact) and the vocabulary.
pub fn metadata(w: &mut GgufWriter, config_json: &str, cfg: &HeadConfig, fingerprint: &str) {
    let vocab = Vocab::build(cfg.time_ids() as u32);
    let tokenizer = vocab.to_json(fingerprint, super::notation::label_abc);
    w.set_str("general.architecture", ARCH)
        .set_str("general.name", NAME)
        .set_str(CONFIG_KEY, config_json)
        .set_str(TOKENIZER_KEY, &tokenizer);
}

/// Converts the folder `dir` into `out` (a file, or a folder to hold the published name);
/// returns the file written and its tensor count. Every head tensor must be there in its
/// shape, each LoRA factor with its partner, the vocabulary the size the configuration says.
pub fn convert(dir: &Path, out: &Path) -> Result<(PathBuf, usize), ConvertError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| input(&path, e.to_string()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| input(&path, format!("not JSON: {e}")))?;
    let cfg: HeadConfig = serde_json::from_value(json.clone()).map_err(|e| input(&path, e.to_string()))?;
    cfg.check().map_err(|e| input(&path, e))?;
    let tokens = Vocab::build(cfg.time_ids() as u32).n_tokens as usize;
    if tokens != cfg.vocab_size {
        return Err(input(
            &path,
            format!(
                "vocab_size is {}, a {} s window's vocabulary has {tokens}",
                cfg.vocab_size, cfg.input_audio_length
            ),
        ));
    }
    let shards = Shards::open(dir)?;
    let tensors = shards.tensors()?;
    let ne = |name: &str| tensors.iter().find(|(n, _)| *n == name).map(|(_, t)| t.1.clone());
    let need = |name: &str| ne(name).ok_or_else(|| input(dir, format!("no tensor '{name}'")));
    let (proj, mix) = (need("encoder_projection.weight")?, need("layer_weight")?);
    for (name, want) in cfg.tensor_shapes(proj[0] as usize, mix[0] as usize) {
        let got = need(&name)?;
        if got != want {
            return Err(input(dir, format!("tensor '{name}' has shape {got:?}, the configuration's is {want:?}")));
        }
    }
    for (name, _) in &tensors {
        if let Some(module) = name.strip_prefix("adapter.").and_then(|n| n.strip_suffix(".lora_A.weight")) {
            need(&format!("adapter.{module}.lora_B.weight"))?;
        }
    }
    let fingerprint = json["tokenizer_fingerprint"].as_str().unwrap_or(FINGERPRINT);
    let mut w = GgufWriter::new();
    metadata(&mut w, &serde_json::to_string(&json).expect("a JSON value serialises"), &cfg, fingerprint);
    let dtype = shards.native_dtype()?.name().to_uppercase();
    let path = if out.is_dir() { out.join(format!("{STEM}-{dtype}.gguf")) } else { out.to_path_buf() };
    write_verbatim(w, &tensors, &path)?;
    Ok((path, tensors.len()))
}
