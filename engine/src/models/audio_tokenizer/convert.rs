//! The tokenizer head's safetensors to its GGUF, as yue2.cpp writes it
//! (`docs/design/listening-part1.md`, section 2): every tensor under its own name, sorted,
//! F32 only; the configuration (which the published checkpoint does not ship) synthesised:
//! the published values, overridden by a `config.json` in the folder when there is one, the
//! sizes read from the tensors.
use super::head::{HeadConfig, ARCH, CONFIG_KEY};
use crate::ggml::GgmlType;
use crate::gguf::GgufWriter;
use crate::models::checkpoint::{input, write_verbatim, ConvertError, Shards};
use std::path::{Path, PathBuf};

pub const NAME: &str = "YuE2 audio tokenizer, the v9 head of Mothersuperior, on MERT-v2-FullSong";
/// The published file's name before its dtype.
pub const STEM: &str = "yue2-mothersuperior-realaudio-tokenizer-v4";

/// Converts the head folder `dir` into `out` (a file, or a folder to hold the published
/// name); returns the file written and its tensor count.
pub fn convert(dir: &Path, out: &Path) -> Result<(PathBuf, usize), ConvertError> {
    let shards = Shards::open(dir)?;
    let tensors = shards.tensors()?;
    if let Some((name, (ty, ..))) = tensors.iter().find(|(_, t)| t.0 != GgmlType::F32) {
        return Err(input(dir, format!("tensor '{name}' is {}; the head is converted from F32", ty.name())));
    }
    let ne = |name: &str| {
        tensors
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.1.clone())
            .ok_or_else(|| input(dir, format!("no tensor '{name}'")))
    };
    let mut json = serde_json::to_value(HeadConfig::published()).expect("a configuration serialises");
    let path = dir.join("config.json");
    if path.is_file() {
        let text = std::fs::read_to_string(&path).map_err(|e| input(&path, e.to_string()))?;
        let given: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| input(&path, format!("not JSON: {e}")))?;
        let given = given.as_object().ok_or_else(|| input(&path, "not a JSON object"))?;
        for (k, v) in given {
            if json.get(k).is_some() {
                json[k] = v.clone();
            }
        }
    }
    let layers = tensors
        .iter()
        .filter_map(|(n, _)| n.strip_prefix("enc.layers.")?.split('.').next()?.parse::<usize>().ok())
        .max()
        .map_or(0, |l| l + 1);
    let (inp, pos, head) = (ne("inp.weight")?, ne("pos")?, ne("head.weight")?);
    json["hidden_size"] = inp[1].into();
    json["window"] = pos[1].into();
    json["vocab_size"] = head[1].into();
    json["num_hidden_layers"] = layers.into();
    json["intermediate_size"] = ne("enc.layers.0.linear1.weight")?[1].into();
    let cfg: HeadConfig = serde_json::from_value(json).map_err(|e| input(&path, e.to_string()))?;
    if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(input(dir, format!("{} heads do not divide width {}", cfg.num_attention_heads, cfg.hidden_size)));
    }
    for (name, want) in cfg.tensor_shapes(inp[0] as usize) {
        let got = ne(&name)?;
        if got != want {
            return Err(input(dir, format!("tensor '{name}' has shape {got:?}, the head's is {want:?}")));
        }
    }
    let path = if out.is_dir() { out.join(format!("{STEM}-F32.gguf")) } else { out.to_path_buf() };
    let mut w = GgufWriter::new();
    let config = serde_json::to_string(&cfg).expect("a configuration serialises");
    w.set_str("general.architecture", ARCH).set_str("general.name", NAME).set_str(CONFIG_KEY, &config);
    write_verbatim(w, &tensors, &path)?;
    Ok((path, tensors.len()))
}
