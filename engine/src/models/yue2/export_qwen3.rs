//! The AR half of a YuE2 backbone as a standard llama.cpp `qwen3` GGUF: the same tensors
//! (bytes untouched, quantization kept) under llama.cpp's names, the hyper-parameters
//! under `qwen3.*`, and the tokenizer padded with placeholder entries up to the backbone's
//! vocabulary (the control and code ids above the BPE). Its purpose is the side-by-side
//! benchmark: llama.cpp decoding exactly the weights yued decodes.
use crate::gguf::{GgufError, GgufFile, GgufWriter, Value};
use crate::models::yue2::config::{is_nar_tensor, BackboneInfo};
use std::path::Path;

/// The llama.cpp name of an AR tensor, None for tensors of the NAR half.
pub fn llama_name(name: &str) -> Option<String> {
    if is_nar_tensor(name) {
        return None;
    }
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, part) = rest.split_once('.')?;
    let mapped = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{mapped}"))
}

/// Writes `out` from the backbone `model`; returns the number of tensors written.
pub fn export_qwen3(model: &Path, out: &Path) -> Result<usize, GgufError> {
    let f = GgufFile::open(model)?;
    let info = BackboneInfo::from_gguf(&f)?;
    let c = &info.config;
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", "qwen3");
    w.set_str("general.name", "YuE2 AR half (exported by yued for benchmarks)");
    w.set_u32("qwen3.block_count", c.num_hidden_layers as u32);
    w.set_u32("qwen3.context_length", c.max_position_embeddings as u32);
    w.set_u32("qwen3.embedding_length", c.hidden_size as u32);
    w.set_u32("qwen3.feed_forward_length", c.intermediate_size as u32);
    w.set_u32("qwen3.attention.head_count", c.num_attention_heads as u32);
    w.set_u32("qwen3.attention.head_count_kv", c.num_key_value_heads as u32);
    w.set_u32("qwen3.attention.key_length", c.head_dim as u32);
    w.set_u32("qwen3.attention.value_length", c.head_dim as u32);
    w.set_f32("qwen3.rope.freq_base", c.rope_theta as f32);
    w.set_f32("qwen3.attention.layer_norm_rms_epsilon", c.rms_norm_eps as f32);
    // The BPE entries, then one control placeholder per id above them.
    let mut tokens: Vec<String> = f.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    // Byte-level BPE has no byte-fallback tokens: llama.cpp reads type BYTE (6) as an SPM
    // "<0xXX>" piece, so the 256 byte symbols go out as NORMAL (1).
    let mut types: Vec<i32> = f.get_i64_array("tokenizer.ggml.token_type")?.into_iter().map(|t| if t == 6 { 1 } else { t as i32 }).collect();
    while tokens.len() < c.vocab_size {
        tokens.push(format!("<|yue2_{}|>", tokens.len()));
        types.push(3); // CONTROL
    }
    w.set_str("tokenizer.ggml.model", f.get_str("tokenizer.ggml.model").unwrap_or("gpt2"));
    w.set_str("tokenizer.ggml.pre", f.get_str("tokenizer.ggml.pre").unwrap_or("qwen2"));
    w.set_strs("tokenizer.ggml.tokens", &tokens);
    w.set_i32s("tokenizer.ggml.token_type", &types);
    let merges: Vec<String> = f.get_str_array("tokenizer.ggml.merges").map(|m| m.into_iter().map(String::from).collect()).unwrap_or_default();
    w.set_strs("tokenizer.ggml.merges", &merges);
    if let Some(Value::U32(e)) = f.get("tokenizer.ggml.eos_token_id") {
        w.set_u32("tokenizer.ggml.eos_token_id", *e);
    }
    let mut picked = Vec::new();
    for t in f.tensors() {
        if let Some(n) = llama_name(&t.name) {
            w.add_tensor(&n, t.ty, &t.ne);
            picked.push(t.clone());
        }
    }
    let mut data = w.create(out)?;
    for t in &picked {
        data.write(f.tensor_bytes(t))?;
    }
    data.finish()?;
    Ok(picked.len())
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
        for (ours, theirs) in
            [("model.layers.1.self_attn.k_norm.weight", "blk.1.attn_k_norm.weight"), ("lm_head.weight", "output.weight"), ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight")]
        {
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
        let ours = ar.forward(&backend, &mut sets, &[crate::models::yue2::ar::SeqInput { tokens: &tokens, set: 0 }], 0..1288, crate::models::yue2::ar::Positions::Last).unwrap();
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
        ar.forward(&backend, &mut pair, &[SeqInput { tokens: &a[..20], set: 0 }, SeqInput { tokens: &b[..12], set: 1 }], 0..vocab, Positions::Last).unwrap();
        for i in 0..8 {
            ar.forward(&backend, &mut pair, &[SeqInput { tokens: &a[20 + i..21 + i], set: 0 }, SeqInput { tokens: &b[12 + i..13 + i], set: 1 }], 0..vocab, Positions::Last).unwrap();
        }
        for (stream, s) in [(0, &a), (1, &b)] {
            let mut own = vec![pair[0].copy_stream(&backend, stream, 64).unwrap()];
            let done = own[0].len();
            assert_eq!(done, if stream == 0 { 28 } else { 20 });
            let ours = ar.forward(&backend, &mut own, &[SeqInput { tokens: &s[done..], set: 0 }], 0..vocab, Positions::Last).unwrap();
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
