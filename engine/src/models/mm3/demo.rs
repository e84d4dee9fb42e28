//! Demo models of MiniMax Music 3: the five GGUFs (LM, depth decoder, condition encoder,
//! DiT, VAE) of the exact architecture with deterministic random weights, as
//! `yued demo-model --family mm3` writes them. `tiny` shrinks the vocabulary (256 byte
//! tokens, the 32 added tokens, 1024 semantic codes, 32 per acoustic codebook; described
//! by `mm3.token.*` keys) and the widths, keeping the published 512-sample hop, so a song
//! renders in seconds on a CPU at the real rate and length; `full` has the published
//! shapes, the LM, depth decoder and DiT written Q8_0 (within the quantizer's policy), for
//! benchmarks. The music is noise; the loader says so.
use crate::ggml::GgmlType;
use crate::gguf::{GgufError, GgufWriter, Value};
use crate::models::mm3::config::{DepthConfig, LmConfig, TokenLayout, CONFIG_JSON_KEY, DEMO_KEY, DEPTH_ARCH, LM_ARCH};
use crate::models::mm3::config::{COND_ARCH, DIT_ARCH, VAE_ARCH};
use crate::models::mm3::dit::DitConfig;
use crate::nn::demo::{random_values, tensor_type, write_tensors, Preset};
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
    /// The condition encoder's output width.
    pub cond_dim: usize,
    pub dit: DitConfig,
    /// The VAE: latent channels (two tracks), `dec_in_proj` and `conv_in` widths, strides.
    pub vae: (usize, usize, usize, [usize; 4]),
}

impl DemoSpec {
    pub fn new(p: Preset) -> Self {
        match p {
            Preset::Full => DemoSpec {
                lm: LmConfig::full(),
                depth: DepthConfig::full(),
                tokens: TokenLayout::FULL,
                matrix_type: GgmlType::Q8_0,
                cond_dim: 2048,
                dit: DitConfig {
                    in_channels: 128,
                    condition_dim: 2048,
                    num_layers: 36,
                    num_attention_heads: 32,
                    attention_head_dim: 64,
                    ff_inner_dim: 8192,
                    rotary_dim: 32,
                    fourier_embedding_dim: 256,
                },
                vae: (128, 1024, 1536, [8, 8, 4, 2]),
            },
            Preset::Tiny | Preset::Deep => {
                // 1024 codes: with the end-of-audio token one of 1025 candidates, a random-weight song
                // usually runs to its duration instead of ending after a few frames.
                let tokens = TokenLayout::shifted(256, 1024);
                let layers = if p == Preset::Deep { 36 } else { 2 };
                let lm = LmConfig {
                    vocab_size: 1344,
                    hidden_size: 64,
                    intermediate_size: 128,
                    num_hidden_layers: layers,
                    num_attention_heads: if p == Preset::Deep { 8 } else { 4 },
                    num_key_value_heads: 2,
                    head_dim: Some(16),
                    ..LmConfig::full()
                };
                let depth = DepthConfig {
                    hidden_size: 64,
                    num_layers: 4,
                    num_attention_heads: 4,
                    intermediate_size: 96,
                    audio_vocab_size: 32,
                    num_codebooks: 8,
                    max_position_embeddings: 16,
                };
                // The synthesis half at tiny widths, but with the published hop (512 samples a
                // latent) so the audio has the published rate and length.
                let dit = DitConfig {
                    in_channels: 8,
                    condition_dim: 32,
                    num_layers: 2,
                    num_attention_heads: 2,
                    attention_head_dim: 16,
                    ff_inner_dim: 64,
                    rotary_dim: 8,
                    fourier_embedding_dim: 16,
                };
                DemoSpec {
                    lm,
                    depth,
                    tokens,
                    matrix_type: GgmlType::F32,
                    cond_dim: 32,
                    dit,
                    vae: (8, 16, 32, [8, 8, 4, 2]),
                }
            }
        }
    }

    /// The token strings and types: the byte alphabet (tiny) or placeholders (full), then
    /// the added tokens as control tokens.
    pub fn vocabulary(&self) -> (Vec<String>, Vec<i32>) {
        let n = self.tokens.text_vocab as usize;
        let mut toks: Vec<String> = if n == 256 {
            byte_to_char_table().iter().map(|c| c.to_string()).collect()
        } else {
            (0..n).map(|i| format!("<|demo_{i}|>")).collect()
        };
        let mut types = vec![token_type::NORMAL; n];
        for t in ADDED_TOKENS {
            toks.push(t.to_string());
            types.push(token_type::CONTROL);
        }
        (toks, types)
    }
}

/// Random values of a demo tensor of the synthesis half: norm scales and snake alphas
/// around 1, biases small, matrices of unit gain.
fn synth_values(seed: u64, name: &str, ne: &[i64]) -> Vec<f32> {
    let v = random_values(seed, name, ne);
    let around_one =
        name.ends_with(".alpha") || (name.contains("norm") && name.ends_with(".weight")) || name == "layer_scale";
    if around_one {
        v.iter().map(|x| 1.0 + 0.2 * x.clamp(-1.0, 1.0)).collect()
    } else if name.ends_with(".bias") || name == "layer_weight_logits" {
        v.iter().map(|x| 0.02 * x).collect()
    } else if ne.len() == 3 {
        // A convolution [K, Cin, Cout]: the fan-in is K * Cin, not K (unit gain, so the
        // stacks neither blow up nor die out), the output layers quieter.
        let quiet = if name == "conv_out.weight" || name == "postprocess_conv.weight" {
            0.1
        } else if name.ends_with(".conv2.weight") {
            0.3
        } else {
            1.0
        };
        let k = quiet / (ne[1] as f32).sqrt();
        v.iter().map(|x| k * x).collect()
    } else if name == "proj_out.weight" {
        v.iter().map(|x| 0.3 * x).collect()
    } else {
        v
    }
}

/// Writes one GGUF of F32 (or the spec's matrix type) random tensors.
fn write_synth(
    path: &Path,
    w: &GgufWriter,
    tensors: &[(String, GgmlType, Vec<i64>)],
    seed: u64,
) -> Result<(), GgufError> {
    let mut data = w.create(path)?;
    for (name, ty, ne) in tensors {
        let v = synth_values(seed, name, ne);
        let bytes = if *ty == GgmlType::F32 {
            crate::ggml::encode_f32(GgmlType::F32, &v).unwrap()
        } else {
            crate::ggml::quantize(*ty, &v, ne[0] as usize)
        };
        data.write(&bytes)?;
    }
    data.finish()
}

/// A file's tensors: name, type and shape.
type Tensors = Vec<(String, GgmlType, Vec<i64>)>;

/// A writer whose header names the demo file: architecture, a name saying RANDOM WEIGHTS, the preset.
fn demo_writer(arch: &str, what: &str, tag: &str) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", arch)
        .set_str("general.name", &format!("yued demo MiniMax Music 3 {what} ({tag}, RANDOM WEIGHTS)"))
        .set_str(DEMO_KEY, tag);
    w
}

/// Declares `tensors` in `w`; hands them back.
fn declare(w: &mut GgufWriter, tensors: Tensors) -> Tensors {
    for (n, ty, ne) in &tensors {
        w.add_tensor(n, *ty, ne);
    }
    tensors
}

/// The LM: its configuration, token layout and vocabulary.
fn lm_file(spec: &DemoSpec, tag: &str) -> (GgufWriter, Tensors) {
    let mut w = demo_writer(LM_ARCH, "LM", tag);
    w.set_str(CONFIG_JSON_KEY, &serde_json::to_string(&spec.lm).expect("a config serializes"));
    if spec.tokens != TokenLayout::FULL {
        for (k, v) in spec.tokens.metadata() {
            w.set_u32(&k, v);
        }
    }
    let (toks, types) = spec.vocabulary();
    w.set_str("tokenizer.ggml.model", "gpt2")
        .set_str("tokenizer.ggml.pre", "qwen2")
        .set_strs("tokenizer.ggml.tokens", &toks)
        .set_i32s("tokenizer.ggml.token_type", &types);
    w.set("tokenizer.ggml.merges", Value::Array(vec![]));
    let shapes = spec.lm.tensor_shapes().into_iter();
    let tensors = shapes.map(|(n, ne)| (n, tensor_type(spec.matrix_type, &ne), ne)).collect();
    let tensors = declare(&mut w, tensors);
    (w, tensors)
}

/// The RVQ depth decoder.
fn depth_file(spec: &DemoSpec, tag: &str) -> (GgufWriter, Tensors) {
    let mut w = demo_writer(DEPTH_ARCH, "depth decoder", tag);
    for (k, v) in DepthConfig::KEYS.iter().zip(spec.depth.values()) {
        w.set_u32(&format!("{DEPTH_ARCH}.{k}"), v as u32);
    }
    let shapes = spec.depth.tensor_shapes(spec.lm.hidden_size).into_iter();
    let tensors = shapes.map(|(n, ne)| (n, tensor_type(spec.matrix_type, &ne), ne)).collect();
    let tensors = declare(&mut w, tensors);
    (w, tensors)
}

/// The condition encoder (F32).
fn cond_file(spec: &DemoSpec, tag: &str) -> (GgufWriter, Tensors) {
    let (h, cd) = (spec.lm.hidden_size as i64, spec.cond_dim as i64);
    let mut w = demo_writer(COND_ARCH, "condition encoder", tag);
    for (k, v) in [
        ("condition_hidden_dim", h as u32),
        ("num_condition_layers", 8),
        ("out_dim", cd as u32),
        ("input_sampling_rate", 24000),
        ("input_hop_length", 960),
        ("output_sampling_rate", 44100),
        ("output_hop_length", 512),
    ] {
        w.set_u32(&format!("{COND_ARCH}.{k}"), v);
    }
    let tensors = vec![
        ("layer_weight_logits".into(), GgmlType::F32, vec![8]),
        ("layer_scale".into(), GgmlType::F32, vec![1]),
        ("proj.weight".into(), GgmlType::F32, vec![3, h, cd]),
        ("proj.bias".into(), GgmlType::F32, vec![cd]),
    ];
    let tensors = declare(&mut w, tensors);
    (w, tensors)
}

/// The DiT: its matrices in the spec's type, convolutions and time embedding F32.
fn dit_file(spec: &DemoSpec, tag: &str) -> (GgufWriter, Tensors) {
    let d = &spec.dit;
    let mut w = demo_writer(DIT_ARCH, "DiT", tag);
    for (k, v) in [
        ("in_channels", d.in_channels),
        ("condition_dim", d.condition_dim),
        ("num_layers", d.num_layers),
        ("num_attention_heads", d.num_attention_heads),
        ("attention_head_dim", d.attention_head_dim),
        ("ff_inner_dim", d.ff_inner_dim),
        ("rotary_dim", d.rotary_dim),
        ("fourier_embedding_dim", d.fourier_embedding_dim),
    ] {
        w.set_u32(&format!("{DIT_ARCH}.{k}"), v as u32);
    }
    let typed = |(n, ne): (String, Vec<i64>)| {
        let f32 = n.contains("conv") || n.starts_with("time_");
        let ty = if f32 { GgmlType::F32 } else { tensor_type(spec.matrix_type, &ne) };
        (n, ty, ne)
    };
    let tensors = declare(&mut w, d.tensor_shapes().into_iter().map(typed).collect());
    (w, tensors)
}

/// The flow VAE (F32): the decoder, then the encoder (what `dav.pth` adds), whose widths double
/// from hid / 24 (64 at the published 1536) over the decoder's strides reversed.
fn vae_file(spec: &DemoSpec, tag: &str) -> (GgufWriter, Tensors) {
    let (lat, din, hid, strides) = spec.vae;
    let enc_strides: Vec<usize> = strides.iter().rev().copied().collect();
    let enc_widths: Vec<usize> = (0..=enc_strides.len()).map(|i| (hid / 24).max(2) << i).collect();
    let mut w = demo_writer(VAE_ARCH, "flow VAE", tag);
    w.set_u32(&format!("{VAE_ARCH}.latent_channels"), lat as u32)
        .set_u32(&format!("{VAE_ARCH}.sampling_rate"), 44100)
        .set_i32s(&format!("{VAE_ARCH}.upsampling_ratios"), &strides.map(|s| s as i32));
    let tensors = crate::models::mm3::vae::decoder_shapes(lat, din, hid, &strides)
        .into_iter()
        .chain(crate::models::mm3::vae_enc::encoder_shapes(&enc_widths, &enc_strides, lat / 2))
        .map(|(n, ne)| (n, GgmlType::F32, ne))
        .collect();
    let tensors = declare(&mut w, tensors);
    (w, tensors)
}

/// Writes `mm3-demo-{preset}-{lm,depth,cond,dit,vae}.gguf` into `dir`.
pub fn write_demo(
    dir: &Path,
    preset: Preset,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<PathBuf>, GgufError> {
    std::fs::create_dir_all(dir).map_err(|source| GgufError::Io { path: dir.to_path_buf(), error: source })?;
    let spec = DemoSpec::new(preset);
    let tag = preset.name();
    let path = |part: &str| dir.join(format!("mm3-demo-{tag}-{part}.gguf"));
    // The AR half (with progress: the large part), then the synthesis half.
    let ((lw, lm), (dw, depth)) = (lm_file(&spec, tag), depth_file(&spec, tag));
    let total = lm.len() + depth.len();
    write_tensors(&path("lm"), &lw, &lm, seed, &mut |i, _| progress(i, total))?;
    write_tensors(&path("depth"), &dw, &depth, seed ^ 0xde97, &mut |i, _| progress(lm.len() + i, total))?;
    let mut files = vec![path("lm"), path("depth")];
    type Maker = fn(&DemoSpec, &str) -> (GgufWriter, Tensors);
    let synthesis: [(&str, Maker, u64); 3] =
        [("cond", cond_file, 0xc0), ("dit", dit_file, 0xd1), ("vae", vae_file, 0x7ae)];
    for (part, make, salt) in synthesis {
        let (w, tensors) = make(&spec, tag);
        write_synth(&path(part), &w, &tensors, seed ^ salt)?;
        files.push(path(part));
    }
    progress(total, total);
    Ok(files)
}
