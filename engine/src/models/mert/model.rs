//! MERT-v2's encoder on a GGML backend (`docs/design/listening-part1.md`, section 4): three
//! subsampling stages of ConvNeXt blocks (the last two halving the frame rate first), then
//! conformer blocks. Activations are channel-innermost, `[C, T]`; one graph encodes one chunk.
use super::config::{MertConfig, CONFIG_KEY};
use super::frontend::MelFrontend;
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::nn::encoder::{attention, Blocks};
use crate::nn::lora::Term;
use crate::weights::{load_tensors_merged, LoadError};
use std::collections::HashMap;

/// The architecture name of a MERT file.
pub const ARCH: &str = "mert2";
/// ConvNeXt depthwise taps and the stages' channel expansion.
const CONVNEXT_KERNEL: i64 = 7;
const EXPANSION: i64 = 4;
/// The GRN's epsilon on the channels' mean norm.
const GRN_EPS: f32 = 1e-6;

/// Which outputs an encoding returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Taps<'w> {
    /// The last state only.
    Last,
    /// Every stage's output and every state (for parity checks).
    All,
    /// One output, `Σ w[l] · state l` over every state in order (the transcriber's mix).
    Mix(&'w [f32]),
}

/// An encoding, each tensor time-major `[frames][channels]`.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// The three subsampling stages' outputs ([`Taps::All`] only).
    pub stages: Vec<Vec<f32>>,
    /// State 0 is the subsampled frames, state `l + 1` conformer block `l`'s output; with
    /// [`Taps::Last`], only the last one asked for; with [`Taps::Mix`], the mix alone.
    pub states: Vec<Vec<f32>>,
    /// Frames of the states.
    pub frames: usize,
}

pub struct Mert {
    pub cfg: MertConfig,
    pub frontend: MelFrontend,
    weights: TensorStore,
    alloc: Allocator,
}

/// The tensors the encoder reads and their `ne` (innermost first), in its configuration.
pub(crate) fn tensor_shapes(c: &MertConfig) -> Vec<(String, Vec<i64>)> {
    let mut out = Vec::new();
    let mut put = |name: String, ne: &[i64]| out.push((name, ne.to_vec()));
    let chans: Vec<i64> = std::iter::once(c.num_mel_bins).chain(c.subsampling_channels).map(|v| v as i64).collect();
    for i in 0..3 {
        let (cin, ch, p) = (chans[i], chans[i + 1], format!("subsampling_module.{i}"));
        if i > 0 {
            put(format!("{p}.resampling_layer.0.weight"), &[cin]);
            put(format!("{p}.resampling_layer.0.bias"), &[cin]);
            put(format!("{p}.resampling_layer.2.weight"), &[2, cin, ch]);
            put(format!("{p}.resampling_layer.2.bias"), &[ch]);
        }
        for d in 0..c.subsampling_depths[i] {
            let q = format!("{p}.convnext_layers.{d}");
            put(format!("{q}.depthwise_block.1.weight"), &[CONVNEXT_KERNEL, 1, ch]);
            put(format!("{q}.depthwise_block.1.bias"), &[ch]);
            put(format!("{q}.pointwise_block.0.weight"), &[ch]);
            put(format!("{q}.pointwise_block.0.bias"), &[ch]);
            put(format!("{q}.pointwise_block.1.weight"), &[ch, EXPANSION * ch]);
            put(format!("{q}.pointwise_block.1.bias"), &[EXPANSION * ch]);
            put(format!("{q}.pointwise_block.3.weight"), &[EXPANSION * ch, 1, 1]);
            put(format!("{q}.pointwise_block.3.bias"), &[EXPANSION * ch, 1, 1]);
            put(format!("{q}.pointwise_block.4.weight"), &[EXPANSION * ch, ch]);
            put(format!("{q}.pointwise_block.4.bias"), &[ch]);
        }
    }
    let (d, inter, k) = (c.hidden_size as i64, c.intermediate_size as i64, c.conv_depthwise_kernel_size as i64);
    for l in 0..c.num_hidden_layers {
        let p = format!("layers.{l}");
        let norms = ["ffn1_layer_norm", "ffn2_layer_norm", "attn_layer_norm", "conv_module.layer_norm"];
        for n in norms.into_iter().chain(["conv_module.conv_block.4.1", "final_layer_norm"]) {
            put(format!("{p}.{n}.weight"), &[d]);
            put(format!("{p}.{n}.bias"), &[d]);
        }
        for f in ["ffn1", "ffn2"] {
            put(format!("{p}.{f}.w_1.weight"), &[d, inter]);
            put(format!("{p}.{f}.w_1.bias"), &[inter]);
            put(format!("{p}.{f}.w_2.weight"), &[inter, d]);
            put(format!("{p}.{f}.w_2.bias"), &[d]);
        }
        for n in ["query", "key", "value", "out"] {
            put(format!("{p}.attn.{n}_proj.weight"), &[d, d]);
            put(format!("{p}.attn.{n}_proj.bias"), &[d]);
        }
        put(format!("{p}.conv_module.conv_block.1.weight"), &[1, d, 2 * d]);
        put(format!("{p}.conv_module.conv_block.3.weight"), &[k, 1, d]);
        put(format!("{p}.conv_module.conv_block.6.weight"), &[1, d, d]);
    }
    out
}

impl Mert {
    /// Reads a MERT GGUF: its configuration, the front end's tables (on the host) and the
    /// encoder's weights (on `backend`), every shape checked.
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        Self::load_merged(f, backend, &Default::default())
    }

    /// [`Mert::load`] with adapter terms merged into the weights they name (the
    /// transcriber's own LoRA on the attention projections).
    pub fn load_merged(f: &GgufFile, backend: &Backend, terms: &HashMap<String, Vec<Term>>) -> Result<Self, LoadError> {
        f.expect_arch(ARCH)?;
        let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
        let cfg = MertConfig::from_json(f.get_str(CONFIG_KEY)?).map_err(|e| corrupt(e.to_string()))?;
        if cfg.subsampling_channels[0] != cfg.num_mel_bins {
            return Err(corrupt(format!(
                "the first subsampling stage has {} channels for {} mel bins",
                cfg.subsampling_channels[0], cfg.num_mel_bins
            ))
            .into());
        }
        let (bins, mels) = (cfg.n_fft as i64 / 2 + 1, cfg.num_mel_bins as i64);
        let table = |name: &str, ne: &[i64]| -> Result<Vec<f32>, GgufError> {
            let info = f.expect_tensor(name, ne)?;
            if info.ty != GgmlType::F32 {
                return Err(corrupt(format!("host table '{name}' is {}, not F32", info.ty.name())));
            }
            f.tensor_f32(name)
        };
        let frontend = MelFrontend {
            n_fft: cfg.n_fft,
            hop: cfg.hop_length,
            window: table("feature_extractor.spectrogram.window", &[cfg.n_fft as i64])?,
            filterbank: table("feature_extractor.mel_scale.fb", &[mels, bins])?,
            mean: table("feature_extractor.mel_mean", &[mels])?,
            std: table("feature_extractor.mel_std", &[mels])?,
        };
        let weights = load_tensors_merged(f, &tensor_shapes(&cfg), backend, "MERT weights", |_, _| false, terms)?;
        Ok(Mert { cfg, frontend, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Encodes one chunk of 24 kHz mono through `blocks` conformer blocks (at most the
    /// model's), from its log-mel spectrogram.
    pub fn encode(&mut self, backend: &Backend, mono: &[f32], blocks: usize, taps: Taps) -> Result<Encoded, GgmlError> {
        let mel = self.frontend.log_mel(mono);
        self.encode_mel(backend, &mel, blocks, taps)
    }

    /// [`Mert::encode`] from a log-mel spectrogram, time-major `[frames][mels]` (at least 4
    /// frames).
    pub fn encode_mel(
        &mut self,
        backend: &Backend,
        mel: &[f32],
        blocks: usize,
        taps: Taps,
    ) -> Result<Encoded, GgmlError> {
        let c = &self.cfg;
        assert!(blocks <= c.num_hidden_layers, "{blocks} blocks of a {}-block MERT", c.num_hidden_layers);
        let mels = c.num_mel_bins;
        let t_mel = mel.len() / mels;
        assert!(mel.len() == t_mel * mels && t_mel >= 4, "a mel of {} values, {mels} bins", mel.len());
        let t = t_mel / 4;
        let nodes = 64 * (c.subsampling_depths.iter().sum::<usize>() + 3) + 128 * blocks + 64;
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("MERT", nodes);
        let b = Blocks { ctx: &ctx, w: &self.weights };
        let x = ctx.new_tensor(GgmlType::F32, &[mels as i64, t_mel as i64]).set_input();
        let pos = ctx.new_tensor(GgmlType::I32, &[t as i64]).set_input();
        let mut outs = Vec::new();
        let mut h = x;
        for i in 0..3 {
            h = stage(&b, c, i, h);
            if taps == Taps::All {
                outs.push(h.set_output());
            }
        }
        let mix = match taps {
            Taps::Mix(w) => {
                assert_eq!(w.len(), blocks + 1, "a mix of {} states over {blocks} blocks", w.len());
                Some(w)
            }
            _ => None,
        };
        let mut acc = mix.map(|w| ctx.scale(h, w[0]));
        if taps == Taps::All || (blocks == 0 && mix.is_none()) {
            outs.push(h.set_output());
        }
        for l in 0..blocks {
            h = conformer(&b, c, &format!("layers.{l}"), h, pos);
            acc = acc.map(|a| ctx.add(a, ctx.scale(h, mix.expect("a mix")[l + 1])));
            if taps == Taps::All || (l + 1 == blocks && mix.is_none()) {
                outs.push(h.set_output());
            }
        }
        if let Some(a) = acc {
            outs.push(a.set_output());
        }
        for o in &outs {
            g.expand(*o);
        }
        g.check_capacity()?;
        self.alloc.alloc_graph(&g)?;
        x.write_f32(mel);
        pos.write_i32(&(0..t as i32).collect::<Vec<_>>());
        backend.compute(&g)?;
        let mut got: Vec<Vec<f32>> = outs.iter().map(|o| o.read_f32()).collect();
        let stages = if taps == Taps::All { got.drain(..3).collect() } else { Vec::new() };
        Ok(Encoded { stages, states: got, frames: t })
    }
}

/// Subsampling stage `i`: for `i > 0` a LayerNorm and a stride-2 convolution of two taps (one
/// matrix product over frame pairs, an odd last frame dropped), then its ConvNeXt blocks.
fn stage<'a>(b: &Blocks<'a>, c: &MertConfig, i: usize, x: Tensor<'a>) -> Tensor<'a> {
    let (ctx, p) = (b.ctx, format!("subsampling_module.{i}"));
    let eps = c.subsampling_layer_norm_eps as f32;
    let mut x = x;
    if i > 0 {
        let [cin, t, ..] = x.ne();
        let x_norm = b.layer_norm(&format!("{p}.resampling_layer.0"), x, eps);
        let pairs = ctx.view_2d(x_norm, 2 * cin, t / 2, x_norm.nb()[1] * 2, 0);
        // The kernel [2, C_in, C_out] read as one [2 C_in, C_out] matrix over (tap, channel).
        let w = b.w.get(&format!("{p}.resampling_layer.2.weight"));
        let cout = w.ne()[2];
        let w = ctx.reshape_2d(ctx.cont(ctx.permute(w, [1, 0, 2, 3])), 2 * cin, cout);
        x = ctx.add(ctx.mul_mat(w, pairs), b.w.get(&format!("{p}.resampling_layer.2.bias")));
    }
    for d in 0..c.subsampling_depths[i] {
        x = convnext(b, &format!("{p}.convnext_layers.{d}"), x, eps);
    }
    x
}

/// `x + f(x)`: a depthwise convolution of 7 taps, LayerNorm, the expanding linear map, GELU,
/// the GRN, the contracting linear map.
fn convnext<'a>(b: &Blocks<'a>, p: &str, x: Tensor<'a>, eps: f32) -> Tensor<'a> {
    let ctx = b.ctx;
    let y = depthwise(b, &format!("{p}.depthwise_block.1.weight"), x);
    let y = ctx.add(y, b.w.get(&format!("{p}.depthwise_block.1.bias")));
    let y = b.layer_norm(&format!("{p}.pointwise_block.0"), y, eps);
    let y = ctx.gelu_erf(b.linear(&format!("{p}.pointwise_block.1"), y));
    let y = grn(b, &format!("{p}.pointwise_block.3"), y);
    ctx.add(x, b.linear(&format!("{p}.pointwise_block.4"), y))
}

/// Global response normalisation over the encoded span: each channel's L2 norm over time,
/// divided by the channels' mean norm, scales the channel; `gamma (x N) + beta + x`.
fn grn<'a>(b: &Blocks<'a>, p: &str, x: Tensor<'a>) -> Tensor<'a> {
    let ctx = b.ctx;
    let ch = x.ne()[0];
    let norms = ctx.sqrt(ctx.sum_rows(ctx.cont(ctx.transpose(ctx.sqr(x))))); // [1, C]
    let norms = ctx.reshape_2d(norms, ch, 1);
    let scale = ctx.div(norms, ctx.scale_bias(ctx.mean(norms), 1.0, GRN_EPS)); // [C, 1]
    let scaled = ctx.mul(ctx.mul(x, scale), b.w.get(&format!("{p}.weight")));
    ctx.add(ctx.add(scaled, b.w.get(&format!("{p}.bias"))), x)
}

/// A same-padded depthwise convolution with the checkpoint's kernel `[K, 1, C]`.
fn depthwise<'a>(b: &Blocks<'a>, name: &str, x: Tensor<'a>) -> Tensor<'a> {
    let ctx = b.ctx;
    let w = b.w.get(name);
    let (k, ch) = (w.ne()[0], w.ne()[2]);
    let kernel = ctx.cont(ctx.transpose(ctx.reshape_2d(w, k, ch))); // [C, K]
    ctx.conv_1d_depthwise(kernel, x, (k / 2) as i32)
}

/// One conformer block: half a feed-forward, attention with rotary positions, the convolution
/// module, the other half feed-forward, a final LayerNorm.
fn conformer<'a>(b: &Blocks<'a>, c: &MertConfig, p: &str, x: Tensor<'a>, pos: Tensor<'a>) -> Tensor<'a> {
    let ctx = b.ctx;
    let eps = c.layer_norm_eps as f32;
    let ffn = |f: &str, x| {
        let y = ctx.gelu_erf(b.linear(&format!("{p}.{f}.w_1"), b.layer_norm(&format!("{p}.{f}_layer_norm"), x, eps)));
        ctx.scale(b.linear(&format!("{p}.{f}.w_2"), y), 0.5)
    };
    let x = ctx.add(x, ffn("ffn1", x));
    let x = ctx.add(x, self_attention(b, c, p, b.layer_norm(&format!("{p}.attn_layer_norm"), x, eps), pos));
    let x = ctx.add(x, conv_module(b, p, x, eps));
    let x = ctx.add(x, ffn("ffn2", x));
    b.layer_norm(&format!("{p}.final_layer_norm"), x, eps)
}

/// Biased projections, NeoX rotary halves on every dimension of the queries and keys,
/// unmasked softmax attention, the output projection.
fn self_attention<'a>(b: &Blocks<'a>, c: &MertConfig, p: &str, x: Tensor<'a>, pos: Tensor<'a>) -> Tensor<'a> {
    let ctx = b.ctx;
    let (hd, heads, t) = (c.head_dim() as i64, c.num_attention_heads as i64, x.ne()[1]);
    let base = c.rotary_embedding_base as f32;
    let proj = |n: &str| ctx.reshape_3d(b.linear(&format!("{p}.attn.{n}_proj"), x), hd, heads, t);
    let q = ctx.rope_neox(proj("query"), pos, hd as i32, base);
    let k = ctx.rope_neox(proj("key"), pos, hd as i32, base);
    b.linear(&format!("{p}.attn.out_proj"), attention(ctx, q, k, proj("value")))
}

/// LayerNorm, a pointwise map to twice the width, GLU, a depthwise convolution, LayerNorm,
/// GELU, a pointwise map; no biases on the convolutions.
fn conv_module<'a>(b: &Blocks<'a>, p: &str, x: Tensor<'a>, eps: f32) -> Tensor<'a> {
    let ctx = b.ctx;
    let [d, t, ..] = x.ne();
    let pointwise = |name: &str, x| {
        let w = b.w.get(&format!("{p}.conv_module.conv_block.{name}.weight"));
        ctx.mul_mat(ctx.reshape_2d(w, w.ne()[1], w.ne()[2]), x)
    };
    let y = pointwise("1", b.layer_norm(&format!("{p}.conv_module.layer_norm"), x, eps)); // [2D, T]
    let half = |i: usize| ctx.cont(ctx.view_2d(y, d, t, y.nb()[1], i * d as usize * 4));
    let y = ctx.mul(half(0), ctx.sigmoid(half(1)));
    let y = depthwise(b, &format!("{p}.conv_module.conv_block.3.weight"), y);
    let y = ctx.gelu_erf(b.layer_norm(&format!("{p}.conv_module.conv_block.4.1"), y, eps));
    pointwise("6", y)
}

#[cfg(test)]
mod tests;
