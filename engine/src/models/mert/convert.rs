//! The MERT-v2 checkpoint folder (`config.json`, `*.safetensors`) to its GGUF, as yue2.cpp
//! writes it (`docs/design/listening-part1.md`, section 1): every tensor under its own name,
//! sorted, in its native dtype, byte for byte; the configuration as compact JSON under
//! `mert2.config_json`.
use super::config::{MertConfig, CONFIG_KEY};
use super::model::{tensor_shapes, ARCH};
use crate::ggml::GgmlType;
use crate::gguf::GgufWriter;
use crate::models::checkpoint::{input, write_verbatim, ConvertError, Shards};
use std::path::{Path, PathBuf};

/// `general.name` of the file.
pub const NAME: &str = "MERT-v2-FullSong music audio encoder";
/// The file's name before its dtype, as a head looks for it beside itself.
pub const STEM: &str = "MERT-v2-FullSong";
/// The front end's tables, read on the host as F32.
pub const HOST_TABLES: [&str; 4] = [
    "feature_extractor.spectrogram.window",
    "feature_extractor.mel_scale.fb",
    "feature_extractor.mel_mean",
    "feature_extractor.mel_std",
];

/// The configuration of a checkpoint's `config.json`, with `inputs_to_logits_ratio` (a
/// derived attribute the published file need not carry) filled in as 4 hops; checked.
pub fn read_config(dir: &Path) -> Result<(MertConfig, String), ConvertError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| input(&path, e.to_string()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| input(&path, format!("not JSON: {e}")))?;
    let obj = json.as_object_mut().ok_or_else(|| input(&path, "not a JSON object"))?;
    if !obj.contains_key("inputs_to_logits_ratio") {
        if let Some(hop) = obj.get("hop_length").and_then(|h| h.as_u64()) {
            obj.insert("inputs_to_logits_ratio".into(), (4 * hop).into());
        }
    }
    let compact = serde_json::to_string(&json).expect("a JSON value serialises");
    let cfg = MertConfig::from_json(&compact).map_err(|e| input(&path, e.to_string()))?;
    Ok((cfg, compact))
}

/// Where [`convert`] writes into `out`: `out` itself, or the published name inside it when it
/// is a folder.
pub fn output_path(out: &Path, dtype: GgmlType) -> PathBuf {
    if out.is_dir() {
        out.join(format!("{STEM}-{}.gguf", dtype.name().to_uppercase()))
    } else {
        out.to_path_buf()
    }
}

/// Converts the folder `dir` into `out` (a file, or a folder to hold the published name);
/// returns the file written and its tensor count. Every tensor the encoder reads must be
/// there in its shape, and the front end's tables in F32.
pub fn convert(dir: &Path, out: &Path) -> Result<(PathBuf, usize), ConvertError> {
    let (cfg, json) = read_config(dir)?;
    let shards = Shards::open(dir)?;
    let tensors = shards.tensors()?;
    let find = |name: &str| tensors.iter().find(|(n, _)| *n == name).map(|(_, t)| t);
    for (name, ne) in tensor_shapes(&cfg) {
        match find(&name) {
            None => return Err(input(dir, format!("no tensor '{name}'"))),
            Some((_, got, _)) if *got != ne => {
                return Err(input(dir, format!("tensor '{name}' has shape {got:?}, the configuration's is {ne:?}")))
            }
            Some(_) => {}
        }
    }
    for name in HOST_TABLES {
        match find(name) {
            None => return Err(input(dir, format!("no tensor '{name}'"))),
            Some((ty, ..)) if *ty != GgmlType::F32 => {
                return Err(input(dir, format!("'{name}' is {}; the front end reads it as F32", ty.name())))
            }
            Some(_) => {}
        }
    }
    let path = output_path(out, shards.native_dtype()?);
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", ARCH).set_str("general.name", NAME).set_str(CONFIG_KEY, &json);
    write_verbatim(w, &tensors, &path)?;
    Ok((path, tensors.len()))
}
