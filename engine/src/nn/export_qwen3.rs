//! A Qwen3 language model inside one of our files, written as a standard llama.cpp `qwen3`
//! GGUF: the same tensors (bytes untouched, quantization kept) under llama.cpp's names, the
//! hyper-parameters under `qwen3.*`, and the tokenizer padded with placeholder entries up
//! to the vocabulary (control and code ids above the BPE). Its purpose is the side-by-side
//! benchmark: llama.cpp decoding exactly the weights yued decodes. Each family says which
//! of its tensors are the LM's and what its hyper-parameters are
//! (`models::yue2::export_qwen3`, `models::mm3::lm::export_qwen3`).
use crate::gguf::{GgufError, GgufFile, GgufWriter, Value};
use std::path::Path;

/// The hyper-parameters llama.cpp's `qwen3` reads.
#[derive(Clone, Debug)]
pub struct Qwen3Hparams {
    pub layers: usize,
    pub context: usize,
    pub hidden: usize,
    pub feed_forward: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_eps: f64,
    pub vocab: usize,
}

/// The keys of a Hugging Face Qwen3 `config.json` the export needs.
#[derive(serde::Deserialize)]
struct HfQwen3 {
    num_hidden_layers: usize,
    max_position_embeddings: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    #[serde(default)]
    head_dim: Option<usize>,
    rope_theta: f64,
    rms_norm_eps: f64,
    vocab_size: usize,
}

impl Qwen3Hparams {
    /// From a config that serializes the Hugging Face Qwen3 keys, as both families' do
    /// (`head_dim` absent or null: hidden / heads).
    pub fn from_config(config: &impl serde::Serialize) -> Result<Self, String> {
        let v = serde_json::to_value(config).map_err(|e| e.to_string())?;
        let c: HfQwen3 = serde_json::from_value(v).map_err(|e| format!("not a Qwen3 config: {e}"))?;
        Ok(Qwen3Hparams {
            layers: c.num_hidden_layers,
            context: c.max_position_embeddings,
            hidden: c.hidden_size,
            feed_forward: c.intermediate_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim.unwrap_or(c.hidden_size / c.num_attention_heads),
            rope_theta: c.rope_theta,
            rms_eps: c.rms_norm_eps,
            vocab: c.vocab_size,
        })
    }
}

/// The llama.cpp name of a Hugging Face Qwen3 tensor name, None for any other.
pub fn llama_name(name: &str) -> Option<String> {
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

/// Writes `out` from the LM tensors of `f` (those `is_lm` accepts and [`llama_name`]
/// maps), with the BPE `tokens` and their `types` (padded with control placeholders to
/// `hp.vocab`); returns the number of tensors written.
pub fn write(
    f: &GgufFile,
    hp: &Qwen3Hparams,
    label: &str,
    mut tokens: Vec<String>,
    mut types: Vec<i32>,
    is_lm: &dyn Fn(&str) -> bool,
    out: &Path,
) -> Result<usize, GgufError> {
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", "qwen3");
    w.set_str("general.name", &format!("{label} (exported by yued for benchmarks)"));
    w.set_u32("qwen3.block_count", hp.layers as u32);
    w.set_u32("qwen3.context_length", hp.context as u32);
    w.set_u32("qwen3.embedding_length", hp.hidden as u32);
    w.set_u32("qwen3.feed_forward_length", hp.feed_forward as u32);
    w.set_u32("qwen3.attention.head_count", hp.heads as u32);
    w.set_u32("qwen3.attention.head_count_kv", hp.kv_heads as u32);
    w.set_u32("qwen3.attention.key_length", hp.head_dim as u32);
    w.set_u32("qwen3.attention.value_length", hp.head_dim as u32);
    w.set_f32("qwen3.rope.freq_base", hp.rope_theta as f32);
    w.set_f32("qwen3.attention.layer_norm_rms_epsilon", hp.rms_eps as f32);
    // Byte-level BPE has no byte-fallback tokens: llama.cpp reads type BYTE (6) as an SPM
    // "<0xXX>" piece, so the 256 byte symbols go out as NORMAL (1).
    for t in types.iter_mut().filter(|t| **t == 6) {
        *t = 1;
    }
    tokens.truncate(hp.vocab);
    types.resize(tokens.len(), 1);
    while tokens.len() < hp.vocab {
        tokens.push(format!("<|id_{}|>", tokens.len()));
        types.push(3); // CONTROL
    }
    w.set_str("tokenizer.ggml.model", f.get_str("tokenizer.ggml.model").unwrap_or("gpt2"));
    w.set_str("tokenizer.ggml.pre", f.get_str("tokenizer.ggml.pre").unwrap_or("qwen2"));
    w.set_strs("tokenizer.ggml.tokens", &tokens);
    w.set_i32s("tokenizer.ggml.token_type", &types);
    let merges: Vec<String> =
        f.get_str_array("tokenizer.ggml.merges").map(|m| m.into_iter().map(String::from).collect()).unwrap_or_default();
    w.set_strs("tokenizer.ggml.merges", &merges);
    if let Some(Value::U32(e)) = f.get("tokenizer.ggml.eos_token_id") {
        w.set_u32("tokenizer.ggml.eos_token_id", *e);
    }
    let mut picked = Vec::new();
    for t in f.tensors() {
        if let Some(n) = llama_name(&t.name).filter(|_| is_lm(&t.name)) {
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
