//! The quantizer, with the policy the architecture references give each architecture:
//! - Q8_0 quantizes every 2-D weight matrix;
//! - the K mixes (Q6_K, Q5_K_M) put `embed_tokens` and the untied `lm_head` in Q6_K and the
//!   other matrices in the target type; Q4_K_M puts the feed-forward output matrices in Q6_K
//!   and the rest in Q4_K;
//! - 1-D tensors (norms, biases) are promoted to F32;
//! - which targets a file takes depends on what it is ([`allowed`]): code-writing LMs (the
//!   YuE2 backbone, MiniMax Music 3's LM) stop at Q5 (audio-code LMs break below), MiniMax's
//!   DiT goes down to Q4_K_M, its depth decoder takes Q8_0 only, and the VAEs and the
//!   condition encoder are never quantized (bandwidth-bound frontends stay native);
//! - the listening models (MERT-v2, the audio tokenizer's head, the SheetSage2 head) take Q8_0
//!   on their linear projections only: convolution kernels, the front end's tables, the
//!   heads' positions and the transcriber's LoRA factors keep their type ([`keeps_type`]).
use crate::ggml::{decode_to_f32, quantize, GgmlType};
use crate::gguf::{GgufError, GgufFile, GgufWriter};
use crate::models::audio_tokenizer::head::ARCH as HEAD_ARCH;
use crate::models::mert::model::ARCH as MERT_ARCH;
use crate::models::sheetsage2::config::ARCH as SS2_ARCH;
use crate::models::yue2::config::{names, VAE_ARCH};
use std::path::Path;

/// Whether a tensor of a file of architecture `arch` keeps its type under any target: in the
/// listening models, everything but a linear projection (a 2-D weight outside the front end).
pub fn keeps_type(arch: &str, name: &str, ne: &[i64]) -> bool {
    match arch {
        MERT_ARCH | HEAD_ARCH => ne.len() != 2 || name.starts_with("feature_extractor."),
        SS2_ARCH => ne.len() != 2 || name.starts_with("adapter.") || name == "decoder.embed_positions.weight",
        _ => false,
    }
}

/// Target of a quantization run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantTarget {
    Q8_0,
    Q6K,
    Q5KM,
    Q4KM,
}

impl std::str::FromStr for QuantTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "Q8_0" => Ok(QuantTarget::Q8_0),
            "Q6_K" => Ok(QuantTarget::Q6K),
            "Q5_K_M" => Ok(QuantTarget::Q5KM),
            "Q4_K_M" => Ok(QuantTarget::Q4KM),
            _ => {
                Err(format!("unsupported quantization '{s}' (Q8_0, Q6_K, Q5_K_M, or Q4_K_M for a MiniMax Music 3 DiT)"))
            }
        }
    }
}

impl QuantTarget {
    pub fn name(self) -> &'static str {
        match self {
            QuantTarget::Q8_0 => "Q8_0",
            QuantTarget::Q6K => "Q6_K",
            QuantTarget::Q5KM => "Q5_K_M",
            QuantTarget::Q4KM => "Q4_K_M",
        }
    }
    /// The type a tensor gets under this target.
    pub fn type_for(self, name: &str, ne: &[i64], current: GgmlType) -> GgmlType {
        if ne.len() < 2 {
            return GgmlType::F32;
        }
        let want = match self {
            QuantTarget::Q8_0 => GgmlType::Q8_0,
            _ if name == names::EMBED || name == names::LM_HEAD => GgmlType::Q6_K,
            QuantTarget::Q6K => GgmlType::Q6_K,
            QuantTarget::Q5KM => GgmlType::Q5_K,
            QuantTarget::Q4KM if name.contains("ff_out") || name.contains("down_proj") => GgmlType::Q6_K,
            QuantTarget::Q4KM => GgmlType::Q4_K,
        };
        // Rows that are not whole blocks of the target fall back to Q8_0, then keep their type.
        [want, GgmlType::Q8_0].into_iter().find(|t| ne[0] % t.block_size() as i64 == 0).unwrap_or(current)
    }
}

/// The targets a file of architecture `arch` takes, or why it takes none.
pub fn allowed(arch: &str) -> Result<&'static [QuantTarget], String> {
    use crate::models::mm3::config as mm3;
    use QuantTarget::*;
    match arch {
        crate::models::yue2::config::ARCH | mm3::LM_ARCH => Ok(&[Q8_0, Q6K, Q5KM]),
        mm3::DIT_ARCH => Ok(&[Q8_0, Q6K, Q5KM, Q4KM]),
        mm3::DEPTH_ARCH | MERT_ARCH | HEAD_ARCH | SS2_ARCH => Ok(&[Q8_0]),
        VAE_ARCH | mm3::VAE_ARCH => Err(format!("is a VAE ({arch}): the VAE is never quantized")),
        mm3::COND_ARCH => Err("is a condition encoder (mm3-cond): it is never quantized".into()),
        other => Err(format!("has architecture '{other}', which yued does not quantize")),
    }
}

/// Quantizes `input` into `output`. `progress(done, total)` after each tensor.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: QuantTarget,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(), GgufError> {
    let f = GgufFile::open(input)?;
    let corrupt = |what: String| GgufError::Corrupt { path: input.to_path_buf(), what };
    let arch = f.get_str("general.architecture")?;
    let targets = allowed(arch).map_err(corrupt)?;
    if !targets.contains(&target) {
        let names: Vec<&str> = targets.iter().map(|t| t.name()).collect();
        return Err(corrupt(format!("a {arch} file takes {} only, not {}", names.join(", "), target.name())));
    }
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata_ordered() {
        if k != "general.alignment" {
            w.set(k, v.clone());
        }
    }
    w.set_str("general.quantization", target.name());
    let plan: Vec<GgmlType> = f
        .tensors()
        .iter()
        .map(|t| if keeps_type(arch, &t.name, &t.ne) { t.ty } else { target.type_for(&t.name, &t.ne, t.ty) })
        .collect();
    for (t, ty) in f.tensors().iter().zip(&plan) {
        w.add_tensor(&t.name, *ty, &t.ne);
    }
    let mut out = w.create(output)?;
    let total = f.tensors().len();
    for (i, (t, ty)) in f.tensors().iter().zip(&plan).enumerate() {
        let raw = f.tensor_bytes(t);
        if *ty == t.ty {
            out.write(raw)?;
        } else {
            let vals = decode_to_f32(t.ty, raw)
                .ok_or_else(|| corrupt(format!("tensor '{}' of type {} cannot be converted", t.name, t.ty.name())))?;
            let bytes = if *ty == GgmlType::F32 {
                crate::ggml::encode_f32(GgmlType::F32, &vals).unwrap()
            } else {
                quantize(*ty, &vals, t.ne[0] as usize)
            };
            out.write(&bytes)?;
        }
        progress(i + 1, total);
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::yue2::demo::{write_demo, Preset};

    #[test]
    fn policy_matches_the_references() {
        let m = &[2048, 6144];
        assert_eq!(QuantTarget::Q8_0.type_for("model.layers.0.mlp.up_proj.weight", m, GgmlType::BF16), GgmlType::Q8_0);
        assert_eq!(QuantTarget::Q5KM.type_for(names::EMBED, &[2048, 184704], GgmlType::BF16), GgmlType::Q6_K);
        assert_eq!(QuantTarget::Q5KM.type_for(names::LM_HEAD, &[2048, 184704], GgmlType::BF16), GgmlType::Q6_K);
        assert_eq!(QuantTarget::Q5KM.type_for("model.layers.0.mlp.up_proj.weight", m, GgmlType::BF16), GgmlType::Q5_K);
        assert_eq!(QuantTarget::Q6K.type_for("model.norm.weight", &[2048], GgmlType::BF16), GgmlType::F32);
        // 64-wide rows are not whole K blocks: fall back to Q8_0
        assert_eq!(QuantTarget::Q6K.type_for("vae2llm.weight", &[64, 2048], GgmlType::BF16), GgmlType::Q8_0);
        assert_eq!(
            QuantTarget::Q4KM.type_for("transformer_blocks.0.ff_out.weight", &[8192, 2048], GgmlType::F32),
            GgmlType::Q6_K
        );
        assert_eq!(
            QuantTarget::Q4KM.type_for("transformer_blocks.0.attn.to_q.weight", &[2048, 2048], GgmlType::F32),
            GgmlType::Q4_K
        );
        assert!("Q3_K".parse::<QuantTarget>().unwrap_err().contains("Q4_K_M"));
        // Per architecture (minimaxmusic.cpp's table).
        assert!(
            allowed("yue2").unwrap().contains(&QuantTarget::Q5KM)
                && !allowed("yue2").unwrap().contains(&QuantTarget::Q4KM)
        );
        assert!(!allowed("mm3-lm").unwrap().contains(&QuantTarget::Q4KM));
        assert!(allowed("mm3-dit").unwrap().contains(&QuantTarget::Q4KM));
        assert_eq!(allowed("mm3-depth").unwrap(), &[QuantTarget::Q8_0]);
        for never in ["yue2-vae", "mm3-vae", "mm3-cond"] {
            assert!(allowed(never).unwrap_err().contains("never quantized"), "{never}");
        }
    }

    #[test]
    fn quantizes_the_demo_backbone_and_refuses_the_vae() {
        let dir = tempfile::tempdir().unwrap();
        let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
        let out = dir.path().join("q8.gguf");
        quantize_file(&bb, &out, QuantTarget::Q8_0, &mut |_, _| {}).unwrap();
        let q = GgufFile::open(&out).unwrap();
        let src = GgufFile::open(&bb).unwrap();
        assert_eq!(q.tensors().len(), src.tensors().len());
        let up = q.require_tensor("model.layers.1.mlp.up_proj.weight").unwrap();
        assert_eq!(up.ty, GgmlType::Q8_0);
        assert_eq!(q.require_tensor("model.norm.weight").unwrap().ty, GgmlType::F32);
        assert_eq!(q.get_str("general.quantization").unwrap(), "Q8_0");
        let a = src.tensor_f32("model.layers.1.mlp.up_proj.weight").unwrap();
        let b = q.tensor_f32("model.layers.1.mlp.up_proj.weight").unwrap();
        let err = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(err < 0.01, "max abs error {err}");
        let e = quantize_file(&vae, &dir.path().join("v.gguf"), QuantTarget::Q8_0, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("never quantized"), "{e}");
        let e = quantize_file(&bb, &dir.path().join("q4.gguf"), QuantTarget::Q4KM, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("Q5_K_M"), "the backbone stops at Q5: {e}");
    }

    #[test]
    fn the_minimax_depth_decoder_takes_q8_0_only_and_keeps_its_norms_f32() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::models::mm3::demo::write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
        let e = quantize_file(&files[1], &dir.path().join("d6.gguf"), QuantTarget::Q6K, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("Q8_0 only"), "{e}");
        let out = dir.path().join("d8.gguf");
        quantize_file(&files[1], &out, QuantTarget::Q8_0, &mut |_, _| {}).unwrap();
        let q = GgufFile::open(&out).unwrap();
        assert_eq!(q.require_tensor("layers.0.attn.to_q.weight").unwrap().ty, GgmlType::Q8_0);
        assert_eq!(q.require_tensor("norm.weight").unwrap().ty, GgmlType::F32);
        // The quantized depth decoder still loads and runs beside the LM.
        let backend = crate::ggml::Backend::for_tests(1);
        let lm = crate::models::mm3::lm::LmModel::load(&GgufFile::open(&files[0]).unwrap(), &backend).unwrap();
        let mut d = crate::models::mm3::depth::DepthModel::load(&q, lm.hidden(), &backend).unwrap();
        let o = d.forward(&backend, &vec![0.1; 2 * 64], 2, 1, false).unwrap();
        assert!(o.logits[0].iter().all(|x| x.is_finite()));
    }
}
