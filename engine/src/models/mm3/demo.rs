//! Demo models of MiniMax Music 3: the LM and depth decoder GGUFs of the exact
//! architecture with deterministic random weights, as `yued demo-model --family mm3`
//! writes them. `tiny` shrinks the vocabulary (256 byte tokens, the 32 added tokens, 64
//! semantic codes, 32 per acoustic codebook; described by `mm3.token.*` keys) and the widths
//! so the AR half runs in seconds on a CPU; `full` has the published shapes, written Q8_0
//! (the quantizer policy's floor for the depth decoder; the LM may go lower), for
//! benchmarks. The music is noise; the loader says so.
use crate::ggml::GgmlType;
use crate::gguf::{GgufError, GgufWriter, Value};
use crate::models::mm3::config::{DepthConfig, LmConfig, TokenLayout, CONFIG_JSON_KEY, DEMO_KEY, DEPTH_ARCH, LM_ARCH};
use crate::models::yue2::demo::{tensor_type, write_tensors, Preset};
use crate::tokenizer::{byte_to_char_table, token_type};
use std::path::{Path, PathBuf};

/// The 32 added tokens of the published tokenizer, from id 151643 on.
pub const ADDED_TOKENS: [&str; 32] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|audio_cfg|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|caption_start|>",
    "<|caption_end|>",
    "<|lyrics_start|>",
    "<|lyrics_end|>",
];

/// Everything that defines a demo preset.
pub struct DemoSpec {
    pub lm: LmConfig,
    pub depth: DepthConfig,
    pub tokens: TokenLayout,
    pub matrix_type: GgmlType,
}

impl DemoSpec {
    pub fn new(p: Preset) -> Self {
        match p {
            Preset::Full => DemoSpec { lm: LmConfig::full(), depth: DepthConfig::full(), tokens: TokenLayout::FULL, matrix_type: GgmlType::Q8_0 },
            Preset::Tiny | Preset::Deep => {
                let tokens = TokenLayout::shifted(256, 64);
                let layers = if p == Preset::Deep { 36 } else { 2 };
                let lm = LmConfig {
                    vocab_size: 384,
                    hidden_size: 64,
                    intermediate_size: 128,
                    num_hidden_layers: layers,
                    num_attention_heads: if p == Preset::Deep { 8 } else { 4 },
                    num_key_value_heads: 2,
                    head_dim: Some(16),
                    ..LmConfig::full()
                };
                let depth = DepthConfig { hidden_size: 64, num_layers: 4, num_attention_heads: 4, intermediate_size: 96, audio_vocab_size: 32, num_codebooks: 8, max_position_embeddings: 16 };
                DemoSpec { lm, depth, tokens, matrix_type: GgmlType::F32 }
            }
        }
    }

    /// The token strings and types: the byte alphabet (tiny) or placeholders (full), then
    /// the added tokens as control tokens.
    pub fn vocabulary(&self) -> (Vec<String>, Vec<i32>) {
        let n = self.tokens.text_vocab as usize;
        let mut toks: Vec<String> = if n == 256 { byte_to_char_table().iter().map(|c| c.to_string()).collect() } else { (0..n).map(|i| format!("<|demo_{i}|>")).collect() };
        let mut types = vec![token_type::NORMAL; n];
        for t in ADDED_TOKENS {
            toks.push(t.to_string());
            types.push(token_type::CONTROL);
        }
        (toks, types)
    }
}

/// Writes `mm3-demo-{preset}-lm.gguf` and `mm3-demo-{preset}-depth.gguf` into `dir`.
pub fn write_demo(dir: &Path, preset: Preset, seed: u64, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<PathBuf>, GgufError> {
    std::fs::create_dir_all(dir).map_err(|source| GgufError::Io { path: dir.to_path_buf(), source })?;
    let spec = DemoSpec::new(preset);
    let tag = preset.name();
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", LM_ARCH)
        .set_str("general.name", &format!("yued demo MiniMax Music 3 LM ({tag}, RANDOM WEIGHTS)"))
        .set_str(DEMO_KEY, tag)
        .set_str(CONFIG_JSON_KEY, &serde_json::to_string(&spec.lm).expect("a config serializes"));
    if spec.tokens != TokenLayout::FULL {
        for (k, v) in spec.tokens.metadata() {
            w.set_u32(&k, v);
        }
    }
    let (toks, types) = spec.vocabulary();
    w.set_str("tokenizer.ggml.model", "gpt2").set_str("tokenizer.ggml.pre", "qwen2").set_strs("tokenizer.ggml.tokens", &toks).set_i32s("tokenizer.ggml.token_type", &types);
    w.set("tokenizer.ggml.merges", Value::Array(vec![]));
    let lm: Vec<(String, GgmlType, Vec<i64>)> = spec.lm.tensor_shapes().into_iter().map(|(n, ne)| (n, tensor_type(spec.matrix_type, &ne), ne)).collect();
    for (n, ty, ne) in &lm {
        w.add_tensor(n, *ty, ne);
    }
    let mut d = GgufWriter::new();
    d.set_str("general.architecture", DEPTH_ARCH).set_str("general.name", &format!("yued demo MiniMax Music 3 depth decoder ({tag}, RANDOM WEIGHTS)")).set_str(DEMO_KEY, tag);
    for (k, v) in DepthConfig::KEYS.iter().zip(spec.depth.values()) {
        d.set_u32(&format!("{DEPTH_ARCH}.{k}"), v as u32);
    }
    let depth: Vec<(String, GgmlType, Vec<i64>)> = spec.depth.tensor_shapes(spec.lm.hidden_size).into_iter().map(|(n, ne)| (n, tensor_type(spec.matrix_type, &ne), ne)).collect();
    for (n, ty, ne) in &depth {
        d.add_tensor(n, *ty, ne);
    }
    let total = lm.len() + depth.len();
    let lm_path = dir.join(format!("mm3-demo-{tag}-lm.gguf"));
    write_tensors(&lm_path, &w, &lm, seed, &mut |i, _| progress(i, total))?;
    let depth_path = dir.join(format!("mm3-demo-{tag}-depth.gguf"));
    write_tensors(&depth_path, &d, &depth, seed ^ 0xde97, &mut |i, _| progress(lm.len() + i, total))?;
    Ok(vec![lm_path, depth_path])
}
