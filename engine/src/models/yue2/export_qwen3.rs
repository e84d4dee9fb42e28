//! The AR half of a YuE2 backbone as a standard llama.cpp `qwen3` GGUF
//! ([`crate::nn::export_qwen3`]), for the side-by-side benchmark.
use crate::gguf::{GgufError, GgufFile};
use crate::models::yue2::config::{is_nar_tensor, BackboneInfo};
use crate::nn::export_qwen3::{write, Qwen3Hparams};
use std::path::Path;

/// The llama.cpp name of an AR tensor, None for tensors of the NAR half.
pub fn llama_name(name: &str) -> Option<String> {
    if is_nar_tensor(name) {
        return None;
    }
    crate::nn::export_qwen3::llama_name(name)
}

/// Writes `out` from the backbone `model`; returns the number of tensors written.
pub fn export_qwen3(model: &Path, out: &Path) -> Result<usize, GgufError> {
    let f = GgufFile::open(model)?;
    let info = BackboneInfo::from_gguf(&f)?;
    let corrupt = |what| GgufError::Corrupt { path: model.to_path_buf(), what };
    let hp = Qwen3Hparams::from_config(&info.config).map_err(corrupt)?;
    let tokens: Vec<String> = f.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    let types: Vec<i32> = f.get_i64_array("tokenizer.ggml.token_type")?.into_iter().map(|t| t as i32).collect();
    write(&f, &hp, "YuE2 AR half", tokens, types, &|n| !is_nar_tensor(n), out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::yue2::demo::{write_demo, Preset};

    #[test]
    fn the_ar_half_exports_under_llama_cpp_names_with_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (bb, _) = write_demo(dir.path(), Preset::Tiny, 3, &mut |_, _| {}).unwrap();
        let out = dir.path().join("qwen3.gguf");
        let n = export_qwen3(&bb, &out).unwrap();
        let src = GgufFile::open(&bb).unwrap();
        let q = GgufFile::open(&out).unwrap();
        let layers = BackboneInfo::from_gguf(&src).unwrap().config.num_hidden_layers;
        assert_eq!(n, 3 + 11 * layers, "embed, norm, head and 11 tensors per layer");
        assert_eq!(q.get_str("general.architecture").unwrap(), "qwen3");
        assert_eq!(q.get_str_array("tokenizer.ggml.tokens").unwrap().len(), 1288, "padded to the vocabulary");
        for (ours, theirs) in [
            ("model.layers.1.self_attn.k_norm.weight", "blk.1.attn_k_norm.weight"),
            ("lm_head.weight", "output.weight"),
            ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
        ] {
            let (a, b) = (src.tensor(ours).unwrap(), q.tensor(theirs).unwrap());
            assert_eq!((a.ty, &a.ne), (b.ty, &b.ne));
            assert_eq!(src.tensor_bytes(a), q.tensor_bytes(b), "{theirs}");
        }
        assert!(q.tensors().iter().all(|t| !t.name.contains("nar") && !t.name.starts_with("model.")));
        // llama.cpp itself loads it and decodes with it, batched, behind a cache.
        let l = crate::ggml::llama_ref::LlamaRef::load(&out, false).unwrap();
        let times = l.decode_steps(2, 40, 3, 1).unwrap();
        assert_eq!(times.len(), 3);
        assert!(times.iter().all(|t| *t > 0.0));

        // And its qwen3 forward is ours: the same logits for the same tokens (an independent
        // implementation of the AR half, beside the numpy reference of the fixtures).
        let tokens: Vec<u32> = (0..37u32).map(|i| (i * 97 + 5) % 1288).collect();
        let theirs = l.last_logits(&tokens.iter().map(|&t| t as i32).collect::<Vec<_>>(), 1).unwrap();
        let backend = crate::ggml::Backend::cpu(1).unwrap();
        let info = BackboneInfo::from_gguf(&src).unwrap();
        let mut ar = crate::models::yue2::ar::ArModel::load(&src, &info, &backend).unwrap();
        let mut sets = vec![crate::kv_cache::KvSet::new(&backend, info.config.kv_dims(), tokens.len()).unwrap()];
        let ours = ar
            .forward(
                &backend,
                &mut sets,
                &[crate::models::yue2::ar::SeqInput { tokens: &tokens, set: 0 }],
                0..1288,
                crate::models::yue2::ar::Positions::Last,
            )
            .unwrap();
        let ours = &ours.per_seq[0][0];
        assert_eq!(ours.len(), theirs.len());
        let diff: f64 = ours.iter().zip(&theirs).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = theirs.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
        let argmax = |v: &[f32]| v.iter().enumerate().max_by(|a, b| a.1.partial_cmp(b.1).unwrap()).unwrap().0;
        eprintln!("relative RMS against llama.cpp: {:e}", diff / norm);
        assert!(diff / norm < 1e-4, "relative RMS {} against llama.cpp", diff / norm);
        assert_eq!(argmax(ours), argmax(&theirs));
    }

    /// At the published depth and head layout (the `deep` demo: 28 layers, 16 query heads
    /// over 8 KV heads): two sequences prefilled and decoded as the streams of one set (a
    /// batch, as guidance and `lm_batch_size` run), then each copied into a set of its own
    /// and decoded on, end on llama.cpp's logits for the same tokens. The stream copy's
    /// graph was once sized for 2 layers and aborted the process at 28.
    #[test]
    fn deep_streams_decode_and_copy_out_as_llama_cpp_computes() {
        let dir = tempfile::tempdir().unwrap();
        let (bb, _) = write_demo(dir.path(), Preset::Deep, 5, &mut |_, _| {}).unwrap();
        let out = dir.path().join("qwen3.gguf");
        let src = GgufFile::open(&bb).unwrap();
        let info = BackboneInfo::from_gguf(&src).unwrap();
        let c = &info.config;
        assert_eq!((c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads), (28, 16, 8));
        assert_eq!(export_qwen3(&bb, &out).unwrap(), 3 + 11 * 28);
        let l = crate::ggml::llama_ref::LlamaRef::load(&out, false).unwrap();
        let vocab = c.vocab_size as u32;
        let seq = |k: u32, n: u32| -> Vec<u32> { (0..n).map(|i| (i * 131 + k * 17 + 3) % vocab).collect() };
        let (a, b) = (seq(1, 40), seq(2, 33));
        let backend = crate::ggml::Backend::for_tests(2);
        let mut ar = crate::models::yue2::ar::ArModel::load(&src, &info, &backend).unwrap();
        use crate::models::yue2::ar::{Positions, SeqInput};
        let mut pair = vec![crate::kv_cache::KvSet::with_streams(&backend, c.kv_dims(), 64, 2).unwrap()];
        ar.forward(
            &backend,
            &mut pair,
            &[SeqInput { tokens: &a[..20], set: 0 }, SeqInput { tokens: &b[..12], set: 1 }],
            0..vocab,
            Positions::Last,
        )
        .unwrap();
        for i in 0..8 {
            ar.forward(
                &backend,
                &mut pair,
                &[SeqInput { tokens: &a[20 + i..21 + i], set: 0 }, SeqInput { tokens: &b[12 + i..13 + i], set: 1 }],
                0..vocab,
                Positions::Last,
            )
            .unwrap();
        }
        for (stream, s) in [(0, &a), (1, &b)] {
            let mut own = vec![pair[0].copy_stream(&backend, stream, 64).unwrap()];
            let done = own[0].len();
            assert_eq!(done, if stream == 0 { 28 } else { 20 });
            let ours = ar
                .forward(&backend, &mut own, &[SeqInput { tokens: &s[done..], set: 0 }], 0..vocab, Positions::Last)
                .unwrap();
            let theirs = l.last_logits(&s.iter().map(|&t| t as i32).collect::<Vec<_>>(), 2).unwrap();
            let ours = &ours.per_seq[0][0];
            let diff: f64 = ours.iter().zip(&theirs).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
            let norm: f64 = theirs.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
            eprintln!("deep, stream {stream}: relative RMS against llama.cpp {:e}", diff / norm);
            let tol = if backend.is_cpu() { 1e-4 } else { 5e-3 };
            assert!(diff / norm < tol, "stream {stream}: relative RMS {} against llama.cpp", diff / norm);
        }
    }
}
