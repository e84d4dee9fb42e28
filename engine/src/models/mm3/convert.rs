//! The published MiniMax Music 3 checkpoint to its five GGUFs (`yued convert mm3`), in the
//! layout minimaxmusic.cpp writes, so the files of either tool load in the other:
//!
//! | folder | architecture | what |
//! |---|---|---|
//! | `language_model/` | `mm3-lm` | `config.json` as `mm3.config_json`; the BPE of `tokenizer/tokenizer.json` |
//! | `rvq_depth_decoder/` | `mm3-depth` | `mm3-depth.*` u32 keys from its `config.json` |
//! | `condition_encoder/` | `mm3-cond` | `mm3-cond.*` u32 keys |
//! | `transformer/` | `mm3-dit` | `mm3-dit.*` u32 keys |
//! | `vocoder/` | `mm3-vae` | weight norm folded (`w = g * v / ||v||` per output channel) |
//!
//! Every tensor keeps its checkpoint name and its native dtype, byte for byte (BF16 stays
//! BF16, F32 stays F32); the only transformation is the vocoder's weight-norm folding. The
//! vocoder *encoder* is not in `vocoder/` but in the training checkpoint `dav.pth` beside
//! it (a `torch.save` archive, read by [`crate::models::pth`] without running it): when
//! present, its `encoder.*` and `mean_proj.*` tensors join the vocoder file under the
//! decoder's naming ([`dav_encoder`]), folded like the decoder; without it the vocoder
//! converts alone (it renders; `yued codec encode` then says the encoder is missing).
use crate::ggml::GgmlType;
use crate::gguf::{GgufFile, GgufWriter};
use crate::models::checkpoint::{input, ConvertError, Shards};
use crate::models::mm3::config::{
    DepthConfig, LmConfig, LmInfo, TokenLayout, COND_ARCH, CONFIG_JSON_KEY, DEPTH_ARCH, DIT_ARCH, LM_ARCH, VAE_ARCH,
};
use crate::tokenizer::token_type;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The component folders, their architecture and output file name.
pub const COMPONENTS: [(&str, &str, &str); 5] = [
    ("language_model", LM_ARCH, "MiniMax-Music3-language_model"),
    ("rvq_depth_decoder", DEPTH_ARCH, "MiniMax-Music3-rvq_depth_decoder"),
    ("condition_encoder", COND_ARCH, "MiniMax-Music3-condition_encoder"),
    ("transformer", DIT_ARCH, "MiniMax-Music3-transformer"),
    ("vocoder", VAE_ARCH, "MiniMax-Music3-vocoder"),
];

/// Options of a conversion.
#[derive(Clone, Debug, Default)]
pub struct ConvertOptions {
    /// Semantic codes of the LM vocabulary when its layout is not the published one (test
    /// checkpoints with a shrunken vocabulary); default: 16384, or what fits.
    pub semantic_codes: Option<u32>,
}

/// What a conversion wrote.
#[derive(Clone, Debug)]
pub struct Converted {
    pub path: PathBuf,
    pub tensors: usize,
}

fn read_json(path: &Path) -> Result<serde_json::Value, ConvertError> {
    let text = std::fs::read_to_string(path).map_err(|e| input(path, e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| input(path, format!("not JSON: {e}")))
}

/// Converts every component folder present under `ckpt` into `out`; a folder that is
/// missing is skipped (said in the result). Returns one entry per component written.
pub fn convert_checkpoint(
    ckpt: &Path,
    out: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Converted>, ConvertError> {
    std::fs::create_dir_all(out).map_err(|e| input(out, e.to_string()))?;
    let mut done = Vec::new();
    for (folder, arch, stem) in COMPONENTS {
        let dir = ckpt.join(folder);
        if !dir.is_dir() {
            progress(&format!("skip {folder}: no such folder"));
            continue;
        }
        let shards = Shards::open(&dir)?;
        let dtype = shards.native_dtype()?;
        let path = out.join(format!("{stem}-{}.gguf", dtype.name().to_uppercase()));
        progress(&format!("{folder} -> {}", path.display()));
        let tensors = match arch {
            LM_ARCH => convert_lm(ckpt, &dir, &shards, &path, opts)?,
            DEPTH_ARCH => convert_depth(&dir, &shards, &path)?,
            VAE_ARCH => {
                let dav = ckpt.join(DAV_FILE);
                let encoder = if dav.is_file() {
                    progress(&format!("{DAV_FILE}: the vocoder's encoder"));
                    dav_encoder(&dav)?
                } else {
                    progress(&format!("no {DAV_FILE}: the vocoder is converted without its encoder"));
                    Vec::new()
                };
                convert_vocoder(&dir, &shards, encoder, &path)?
            }
            _ => convert_plain(&dir, &shards, arch, &path)?,
        };
        done.push(Converted { path, tensors });
    }
    if done.is_empty() {
        return Err(input(
            ckpt,
            "no component folder (language_model/, rvq_depth_decoder/, condition_encoder/, transformer/, vocoder/)",
        ));
    }
    Ok(done)
}

/// Writes every tensor of `shards` (renamed/transformed by the caller's list) after `w`'s metadata.
fn write_all(w: &mut GgufWriter, tensors: &Tensors<'_>, out: &Path) -> Result<usize, ConvertError> {
    for (n, ty, ne, _) in tensors {
        w.add_tensor(n, *ty, ne);
    }
    let mut data = w.create(out)?;
    for (_, _, _, b) in tensors {
        data.write(b)?;
    }
    data.finish()?;
    Ok(tensors.len())
}

/// Tensors to write: name, type, GGUF `ne`, bytes.
pub type Tensors<'a> = Vec<(String, GgmlType, Vec<i64>, std::borrow::Cow<'a, [u8]>)>;
/// Tokens, their types, merges, and the size of the ordinary vocabulary.
type TokenizerParts = (Vec<String>, Vec<i32>, Vec<String>, u32);

fn verbatim(shards: &Shards) -> Result<Tensors<'_>, ConvertError> {
    let mut out = Vec::new();
    for (name, shard) in shards.index()? {
        let (ty, ne, b) = shards.get(shard, &name)?;
        out.push((name, ty, ne, std::borrow::Cow::Borrowed(b)));
    }
    Ok(out)
}

fn name_of(dir: &Path) -> String {
    dir.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The tokenizer: `tokenizer.json` of `tokenizer/` (the published layout) or of the LM
/// folder. Tokens at their ids, the added tokens as control tokens, merges as "a b".
fn read_tokenizer(ckpt: &Path, lm_dir: &Path) -> Result<TokenizerParts, ConvertError> {
    let path = [ckpt.join("tokenizer/tokenizer.json"), lm_dir.join("tokenizer.json")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| input(ckpt, "no tokenizer/tokenizer.json nor language_model/tokenizer.json"))?;
    let j = read_json(&path)?;
    let vocab = j["model"]["vocab"].as_object().ok_or_else(|| input(&path, "no model.vocab"))?;
    let mut entries: Vec<(u64, String, i32)> =
        vocab.iter().filter_map(|(t, id)| id.as_u64().map(|id| (id, t.clone(), token_type::NORMAL))).collect();
    let text_vocab = entries.iter().map(|e| e.0 + 1).max().unwrap_or(0) as u32;
    for a in j["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(content)) = (a["id"].as_u64(), a["content"].as_str()) else {
            return Err(input(&path, "an added token without id or content"));
        };
        entries.push((id, content.to_string(), token_type::CONTROL));
    }
    let n = entries.iter().map(|e| e.0 + 1).max().unwrap_or(0) as usize;
    let mut tokens = vec![String::new(); n];
    let mut types = vec![token_type::UNUSED; n];
    for (id, t, ty) in entries {
        tokens[id as usize] = t;
        types[id as usize] = ty;
    }
    let merges = j["model"]["merges"]
        .as_array()
        .ok_or_else(|| input(&path, "no model.merges"))?
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Array(p) if p.len() == 2 => {
                Ok(format!("{} {}", p[0].as_str().unwrap_or_default(), p[1].as_str().unwrap_or_default()))
            }
            _ => Err(input(&path, "a merge that is neither \"a b\" nor [a, b]")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((tokens, types, merges, text_vocab))
}

fn convert_lm(
    ckpt: &Path,
    dir: &Path,
    shards: &Shards,
    out: &Path,
    opts: &ConvertOptions,
) -> Result<usize, ConvertError> {
    let cfg_path = dir.join("config.json");
    let config_json = std::fs::read_to_string(&cfg_path).map_err(|e| input(&cfg_path, e.to_string()))?;
    let cfg = LmConfig::from_json(&config_json).map_err(|e| input(&cfg_path, e))?;
    let compact = serde_json::to_string(&read_json(&cfg_path)?).expect("JSON serializes");
    let (tokens, types, merges, text_vocab) = read_tokenizer(ckpt, dir)?;
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", LM_ARCH)
        .set_str("general.name", "MiniMax-Music3 global LM (Qwen3)")
        .set_str(CONFIG_JSON_KEY, &compact);
    let layout = if text_vocab == TokenLayout::FULL.text_vocab {
        TokenLayout::FULL
    } else {
        let base = TokenLayout::shifted(text_vocab, 0).semantic_base;
        let size = opts.semantic_codes.unwrap_or(16_384).min((cfg.vocab_size as u32).saturating_sub(base));
        let l = TokenLayout::shifted(text_vocab, size);
        for (k, v) in l.metadata() {
            w.set_u32(&k, v);
        }
        l
    };
    layout.check(cfg.vocab_size).map_err(|e| input(dir, e))?;
    w.set_str("tokenizer.ggml.model", "gpt2")
        .set_str("tokenizer.ggml.pre", "qwen2")
        .set_strs("tokenizer.ggml.tokens", &tokens)
        .set_i32s("tokenizer.ggml.token_type", &types)
        .set_strs("tokenizer.ggml.merges", &merges);
    let n = write_all(&mut w, &verbatim(shards)?, out)?;
    // The result must load as an LM: every tensor the graph reads, at its shape.
    let f = GgufFile::open(out)?;
    let info = LmInfo::read(&f)?;
    for (name, ne) in info.config.tensor_shapes() {
        f.expect_tensor(&name, &ne)?;
    }
    Ok(n)
}

/// The integer fields of a `config.json` as `<arch>.<key>` u32 keys.
fn int_keys(w: &mut GgufWriter, arch: &str, cfg: &serde_json::Value) {
    for (k, v) in cfg.as_object().into_iter().flatten() {
        if let Some(x) = v.as_u64().filter(|&x| x <= u32::MAX as u64) {
            w.set_u32(&format!("{arch}.{k}"), x as u32);
        }
    }
}

fn convert_depth(dir: &Path, shards: &Shards, out: &Path) -> Result<usize, ConvertError> {
    let cfg = read_json(&dir.join("config.json")).unwrap_or(serde_json::json!({}));
    let full = DepthConfig::full();
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", DEPTH_ARCH).set_str("general.name", "MiniMax-Music3 RVQ depth decoder");
    for (k, v) in DepthConfig::KEYS.iter().zip(full.values()) {
        w.set_u32(&format!("{DEPTH_ARCH}.{k}"), cfg.get(*k).and_then(|x| x.as_u64()).unwrap_or(v as u64) as u32);
    }
    let n = write_all(&mut w, &verbatim(shards)?, out)?;
    let f = GgufFile::open(out)?;
    let c = DepthConfig::from_gguf(&f)?;
    let lm_hidden = f.require_tensor("projection.weight")?.ne[0] as usize;
    for (name, ne) in c.tensor_shapes(lm_hidden) {
        f.expect_tensor(&name, &ne)?;
    }
    Ok(n)
}

fn convert_plain(dir: &Path, shards: &Shards, arch: &str, out: &Path) -> Result<usize, ConvertError> {
    let cfg = read_json(&dir.join("config.json")).unwrap_or(serde_json::json!({}));
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", arch)
        .set_str("general.name", &format!("MiniMax-Music3 {}", name_of(dir)))
        .set_str(&format!("{arch}.config_json"), &serde_json::to_string(&cfg).expect("JSON serializes"));
    int_keys(&mut w, arch, &cfg);
    write_all(&mut w, &verbatim(shards)?, out)
}

/// `g * v / ||v||` with the norm over everything but the outermost (torch dim 0) axis.
pub fn fold_weight_norm(g: &[f32], v: &[f32]) -> Vec<f32> {
    let per = v.len() / g.len().max(1);
    v.chunks(per)
        .zip(g)
        .flat_map(|(row, &gi)| {
            let norm = row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            row.iter().map(move |&x| (gi as f64 * x as f64 / norm) as f32)
        })
        .collect()
}

/// The training checkpoint that holds the vocoder's encoder, beside the component folders.
pub const DAV_FILE: &str = "dav.pth";

/// The DAC-style encoder of `dav.pth` under the decoder's naming (what minimaxmusic.cpp's
/// vocoder file carries), weight norm folded, F32: `encoder.block.0` is `encoder.conv_in`;
/// `encoder.block.i` (1..=n) is `encoder.blocks.{i-1}`, whose `block.0..2` are the residual
/// units (`block.{0,1,2,3}` inside: snake1, conv1, snake2, conv2) and `block.3`, `block.4`
/// its snake1 and strided conv1; the last two are `encoder.snake_out` and
/// `encoder.conv_out`; the posterior's `mean_proj` is `encoder.mean_proj`. The tensors may
/// sit under a prefix (`generator.`, `state_dict.`), found from `encoder.block.0`.
pub fn dav_encoder(path: &Path) -> Result<Tensors<'static>, ConvertError> {
    let raw = crate::models::pth::read_tensors(path, &|n| n.contains("encoder.block.") || n.contains("mean_proj."))
        .map_err(|e| input(path, e.what))?;
    let prefix = raw
        .iter()
        .find_map(|(n, _)| {
            n.find("encoder.block.0.").filter(|&i| i == 0 || n.as_bytes()[i - 1] == b'.').map(|i| n[..i].to_string())
        })
        .ok_or_else(|| input(path, "no encoder.block.0.* tensor: not a DAC-style VAE checkpoint"))?;
    // Module path (after the prefix) -> parameter -> tensor.
    let mut modules: BTreeMap<String, BTreeMap<String, crate::models::pth::PthTensor>> = BTreeMap::new();
    for (name, t) in raw {
        let Some(rest) = name.strip_prefix(&prefix) else { continue };
        if !(rest.starts_with("encoder.block.") || rest.starts_with("mean_proj.")) {
            continue;
        }
        let (module, param) = [
            "parametrizations.weight.original0",
            "parametrizations.weight.original1",
            "weight_g",
            "weight_v",
            "weight",
            "bias",
            "alpha",
        ]
        .iter()
        .find_map(|p| rest.strip_suffix(p).and_then(|m| m.strip_suffix('.')).map(|m| (m.to_string(), p.to_string())))
        .ok_or_else(|| input(path, format!("'{name}': a parameter the encoder does not have")))?;
        modules.entry(module).or_default().insert(param, t);
    }
    let top = |m: &str| {
        m.strip_prefix("encoder.block.").and_then(|r| r.split('.').next()).and_then(|i| i.parse::<usize>().ok())
    };
    let last = modules.keys().filter_map(|m| top(m)).max().unwrap_or(0);
    if last < 3 {
        return Err(input(
            path,
            format!("the encoder ends at encoder.block.{last}: no room for blocks, snake_out and conv_out"),
        ));
    }
    let rename = |m: &str| -> Option<String> {
        if m == "mean_proj" {
            return Some("encoder.mean_proj".into());
        }
        let parts: Vec<&str> = m.strip_prefix("encoder.block.")?.split('.').collect();
        let i: usize = parts[0].parse().ok()?;
        Some(match parts[1..] {
            [] if i == 0 => "encoder.conv_in".into(),
            [] if i == last - 1 => "encoder.snake_out".into(),
            [] if i == last => "encoder.conv_out".into(),
            ["block", j, "block", k] if (1..last - 1).contains(&i) => {
                let (j, k): (usize, usize) = (j.parse().ok()?, k.parse().ok()?);
                let part = ["snake1", "conv1", "snake2", "conv2"].get(k)?;
                (j < 3).then(|| format!("encoder.blocks.{}.res_unit{}.{part}", i - 1, j + 1))?
            }
            ["block", "3"] if (1..last - 1).contains(&i) => format!("encoder.blocks.{}.snake1", i - 1),
            ["block", "4"] if (1..last - 1).contains(&i) => format!("encoder.blocks.{}.conv1", i - 1),
            _ => return None,
        })
    };
    let mut out: Tensors<'static> = Vec::new();
    let mut push = |name: String, shape: &[usize], data: Vec<f32>| {
        let ne: Vec<i64> = shape.iter().rev().map(|&d| d as i64).collect();
        out.push((name, GgmlType::F32, ne, std::borrow::Cow::Owned(bytemuck::cast_slice(&data).to_vec())));
    };
    for (module, params) in &modules {
        let name = rename(module).ok_or_else(|| {
            input(path, format!("'{module}' is not a module of the DAC encoder this converter knows"))
        })?;
        for (param, t) in params {
            match param.as_str() {
                "weight_g" | "parametrizations.weight.original0" => {}
                "weight_v" | "parametrizations.weight.original1" => {
                    let g = params
                        .get("weight_g")
                        .or_else(|| params.get("parametrizations.weight.original0"))
                        .ok_or_else(|| input(path, format!("'{module}' has a weight_v without its weight_g")))?;
                    push(format!("{name}.weight"), &t.shape, fold_weight_norm(&g.data, &t.data));
                }
                other => push(format!("{name}.{other}"), &t.shape, t.data.clone()),
            }
        }
    }
    Ok(out)
}

fn convert_vocoder(dir: &Path, shards: &Shards, encoder: Tensors<'static>, out: &Path) -> Result<usize, ConvertError> {
    let cfg = read_json(&dir.join("config.json")).unwrap_or(serde_json::json!({}));
    let index = shards.index()?;
    let f32s = |name: &str| -> Result<(Vec<i64>, Vec<f32>), ConvertError> {
        let (ty, ne, b) = shards.get(index[name], name)?;
        let v = crate::ggml::decode_to_f32(ty, b)
            .ok_or_else(|| input(dir, format!("tensor '{name}' of type {} cannot be read as f32", ty.name())))?;
        Ok((ne, v))
    };
    // A weight-normalized parameter: (g, v) names by the folded name.
    let pair = |name: &str| -> Option<(String, String, String)> {
        if let Some(base) = name.strip_suffix(".weight_v") {
            return Some((format!("{base}.weight"), format!("{base}.weight_g"), name.to_string()));
        }
        name.strip_suffix(".parametrizations.weight.original1").map(|base| {
            (format!("{base}.weight"), format!("{base}.parametrizations.weight.original0"), name.to_string())
        })
    };
    let mut tensors: Tensors<'_> = Vec::new();
    for name in index.keys() {
        if name.ends_with(".weight_g") || name.ends_with(".parametrizations.weight.original0") {
            continue;
        }
        if let Some((folded, g_name, v_name)) = pair(name) {
            let (_, g) = f32s(&g_name).map_err(|_| input(dir, format!("'{v_name}' has no '{g_name}'")))?;
            let (ne, v) = f32s(&v_name)?;
            let w = fold_weight_norm(&g, &v);
            tensors.push((folded, GgmlType::F32, ne, std::borrow::Cow::Owned(bytemuck::cast_slice(&w).to_vec())));
        } else {
            let (ty, ne, b) = shards.get(index[name], name)?;
            tensors.push((name.clone(), ty, ne, std::borrow::Cow::Borrowed(b)));
        }
    }
    if !encoder.is_empty() && tensors.iter().any(|t| t.0.starts_with("encoder.")) {
        return Err(input(
            dir,
            format!("the vocoder already has encoder.* tensors and {DAV_FILE} brings others: remove one"),
        ));
    }
    tensors.extend(encoder);
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", VAE_ARCH)
        .set_str("general.name", "MiniMax-Music3 flow VAE")
        .set_str(&format!("{VAE_ARCH}.config_json"), &serde_json::to_string(&cfg).expect("JSON serializes"));
    int_keys(&mut w, VAE_ARCH, &cfg);
    if let Some(r) = cfg.get("upsampling_ratios").and_then(|v| v.as_array()) {
        w.set_i32s(
            &format!("{VAE_ARCH}.upsampling_ratios"),
            &r.iter().filter_map(|x| x.as_i64()).map(|x| x as i32).collect::<Vec<_>>(),
        );
    }
    write_all(&mut w, &tensors, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::read_f32;

    #[test]
    fn weight_norm_folds_per_output_channel() {
        // Two output channels of three values.
        let v = [3.0, 0.0, 4.0, 0.0, 2.0, 0.0];
        let g = [10.0, -1.0];
        assert_eq!(fold_weight_norm(&g, &v), vec![6.0, 0.0, 8.0, 0.0, -1.0, 0.0]);
    }

    /// A torch.save archive of a DAC-style VAE (scripts/ref/mm3_dav_reference.py): its
    /// encoder joins the tiny vocoder's file, and encodes what torch computed from it.
    #[test]
    fn dav_pth_gives_the_vocoder_its_encoder_and_torchs_posterior_mean() {
        use crate::models::mm3::vae_enc::VaeEncoder;
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mm3");
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = tmp.path().join("ckpt");
        std::fs::create_dir_all(ckpt.join("vocoder")).unwrap();
        for e in std::fs::read_dir(fx.join("ckpt/vocoder")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), ckpt.join("vocoder").join(e.file_name())).unwrap();
        }
        let plain =
            convert_checkpoint(&ckpt, &tmp.path().join("plain"), &ConvertOptions::default(), &mut |_| {}).unwrap();
        std::fs::copy(fx.join("dav/dav.pth"), ckpt.join(DAV_FILE)).unwrap();
        let mut said = Vec::new();
        let done = convert_checkpoint(&ckpt, &tmp.path().join("out"), &ConvertOptions::default(), &mut |m| {
            said.push(m.to_string())
        })
        .unwrap();
        assert!(said.iter().any(|m| m.contains("dav.pth")), "{said:?}");
        let (with, without) = (GgufFile::open(&done[0].path).unwrap(), GgufFile::open(&plain[0].path).unwrap());
        // The decoder's tensors are untouched; the encoder's are the DAC encoder's, renamed.
        for t in without.tensors() {
            assert_eq!(with.tensor_bytes(with.tensor(&t.name).unwrap()), without.tensor_bytes(t), "{}", t.name);
        }
        let added: Vec<&str> =
            with.tensors().iter().map(|t| t.name.as_str()).filter(|n| without.tensor(n).is_none()).collect();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fx.join("dav/manifest.json")).unwrap()).unwrap();
        let strides: Vec<usize> =
            doc["strides"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let widths: Vec<usize> =
            doc["widths"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let half = doc["half"].as_u64().unwrap() as usize;
        let declared = crate::models::mm3::vae_enc::encoder_shapes(&widths, &strides, half);
        assert_eq!(added.len(), declared.len(), "{added:?}");
        for (name, ne) in &declared {
            assert_eq!(
                &with.tensor(name).unwrap_or_else(|| panic!("{name} missing")).ne[..ne.len()],
                &ne[..],
                "{name}"
            );
        }
        let backend = crate::ggml::Backend::for_tests(2);
        let mut enc = VaeEncoder::load(&with, &backend).unwrap();
        assert_eq!(enc.strides, strides);
        let got = enc.encode(&backend, &read_f32(fx.join("dav/audio.f32"))).unwrap();
        let want = read_f32(fx.join("dav/mean.f32"));
        assert_eq!(got.len(), want.len());
        let num: f64 = got.iter().zip(&want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
        let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
        let e = (num / den).sqrt();
        assert!(e < crate::test_util::tol(&backend, 1e-5) as f64, "relative RMS {e:.3e} against torch");
    }

    #[test]
    fn an_archive_without_an_encoder_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("dav.pth");
        std::fs::write(&p, b"not a zip").unwrap();
        let e = dav_encoder(&p).unwrap_err().to_string();
        assert!(e.contains("torch zip archive"), "{e}");
    }
}
