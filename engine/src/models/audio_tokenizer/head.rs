//! The tokenizer's head on a GGML backend: torch's `TransformerEncoder` (pre-norm layers, a
//! fused q/k/v projection, GELU feed-forward) over one window of standardised MERT states plus
//! a learned position table, a final LayerNorm and the code classifier, argmax per frame.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::nn::encoder::{attention, Blocks};
use crate::weights::{load_tensors, LoadError};
use serde::{Deserialize, Serialize};

/// The architecture name of a head file, and its configuration's key.
pub const ARCH: &str = "yue2-tokenizer";
pub const CONFIG_KEY: &str = "yue2-tokenizer.config_json";

/// The head's configuration: what convert.py's `TOKENIZER_CONFIG` holds (the published
/// checkpoint ships none), the sizes checked against the tensors.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct HeadConfig {
    /// The MERT the head reads (its file is found beside the head by this name).
    pub base_model_name_or_path: String,
    /// The MERT state the head reads, HF-style: the output of block `mert_layer`.
    pub mert_layer: usize,
    pub chunk_seconds: usize,
    pub frame_rate: usize,
    pub window: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub layer_norm_eps: f64,
    pub instance_norm_eps: f64,
    pub vocab_size: usize,
}

impl HeadConfig {
    /// The v9 head of Mothersuperior's tokenizer (yue2.cpp's `TOKENIZER_CONFIG`).
    pub fn published() -> Self {
        HeadConfig {
            base_model_name_or_path: "m-a-p/MERT-v2-FullSong".into(),
            mert_layer: 20,
            chunk_seconds: 30,
            frame_rate: 25,
            window: 512,
            hidden_size: 512,
            num_hidden_layers: 8,
            num_attention_heads: 8,
            intermediate_size: 2048,
            layer_norm_eps: 1e-5,
            instance_norm_eps: 1e-5,
            vocab_size: 32768,
        }
    }

    /// The grid the pipeline plans on.
    pub fn grid(&self) -> super::plan::Grid {
        super::plan::Grid {
            chunk_samples: self.chunk_seconds * super::plan::SAMPLE_RATE,
            frame_rate: self.frame_rate,
            window: self.window,
            eps: self.instance_norm_eps as f32,
        }
    }

    /// The head's tensors and their `ne`, for MERT states of `mert_hidden` channels.
    pub fn tensor_shapes(&self, mert_hidden: usize) -> Vec<(String, Vec<i64>)> {
        let (d, ff, w, v) =
            (self.hidden_size as i64, self.intermediate_size as i64, self.window as i64, self.vocab_size as i64);
        let mut out = vec![
            ("inp.weight".to_string(), vec![mert_hidden as i64, d]),
            ("inp.bias".into(), vec![d]),
            ("pos".into(), vec![d, w, 1]),
            ("norm.weight".into(), vec![d]),
            ("norm.bias".into(), vec![d]),
            ("head.weight".into(), vec![d, v]),
            ("head.bias".into(), vec![v]),
        ];
        for l in 0..self.num_hidden_layers {
            let p = format!("enc.layers.{l}");
            out.push((format!("{p}.self_attn.in_proj_weight"), vec![d, 3 * d]));
            out.push((format!("{p}.self_attn.in_proj_bias"), vec![3 * d]));
            out.push((format!("{p}.self_attn.out_proj.weight"), vec![d, d]));
            out.push((format!("{p}.self_attn.out_proj.bias"), vec![d]));
            out.push((format!("{p}.linear1.weight"), vec![d, ff]));
            out.push((format!("{p}.linear1.bias"), vec![ff]));
            out.push((format!("{p}.linear2.weight"), vec![ff, d]));
            out.push((format!("{p}.linear2.bias"), vec![d]));
            for n in ["norm1", "norm2"] {
                out.push((format!("{p}.{n}.weight"), vec![d]));
                out.push((format!("{p}.{n}.bias"), vec![d]));
            }
        }
        out
    }

    /// Why the head cannot run, naming the key; `mert_layers` is its MERT's block count.
    pub fn check(&self, mert_layers: usize) -> Result<(), String> {
        if self.mert_layer >= mert_layers {
            return Err(format!("mert_layer is {}, its MERT has {mert_layers} blocks", self.mert_layer));
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!("num_attention_heads is {}, not a divisor of hidden_size", self.num_attention_heads));
        }
        if self.window < 4 || !self.window.is_multiple_of(4) {
            return Err(format!("window is {}, not a multiple of 4", self.window));
        }
        if self.chunk_seconds == 0 || self.frame_rate == 0 {
            return Err("chunk_seconds and frame_rate must be positive".into());
        }
        Ok(())
    }
}

pub struct Head {
    pub cfg: HeadConfig,
    weights: TensorStore,
    alloc: Allocator,
}

impl Head {
    /// Reads a head GGUF whose MERT has `mert_hidden` channels and `mert_layers` blocks.
    pub fn load(f: &GgufFile, mert_hidden: usize, mert_layers: usize, backend: &Backend) -> Result<Self, LoadError> {
        f.expect_arch(ARCH)?;
        let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
        let cfg: HeadConfig =
            serde_json::from_str(f.get_str(CONFIG_KEY)?).map_err(|e| corrupt(format!("{CONFIG_KEY}: {e}")))?;
        cfg.check(mert_layers).map_err(|e| corrupt(format!("{CONFIG_KEY}: {e}")))?;
        let weights = load_tensors(f, &cfg.tensor_shapes(mert_hidden), backend, "audio tokenizer head weights")?;
        Ok(Head { cfg, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// The codes of one window: `feats` holds `len` frames (at most the window) of the
    /// MERT's width, time-major; the rest of the window reads zeros.
    pub fn codes(&mut self, backend: &Backend, feats: &[f32], len: usize) -> Result<Vec<u32>, GgmlError> {
        let c = &self.cfg;
        let w = c.window;
        let dm = self.weights.get("inp.weight").ne()[0] as usize;
        assert!(len <= w && feats.len() == len * dm, "{} values for {len} frames of {dm}", feats.len());
        let nodes = 64 * c.num_hidden_layers + 64;
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("audio tokenizer head", nodes);
        let b = Blocks { ctx: &ctx, w: &self.weights };
        let x = ctx.new_tensor(GgmlType::F32, &[dm as i64, w as i64]).set_input();
        let pos = self.weights.get("pos");
        let mut h = ctx.add(b.linear("inp", x), ctx.reshape_2d(pos, pos.ne()[0], pos.ne()[1]));
        let eps = c.layer_norm_eps as f32;
        for l in 0..c.num_hidden_layers {
            h = layer(&b, c, &format!("enc.layers.{l}"), h, eps);
        }
        let logits = b.linear("head", b.layer_norm("norm", h, eps));
        let codes = ctx.argmax(logits).set_output();
        g.expand(codes);
        g.check_capacity()?;
        self.alloc.alloc_graph(&g)?;
        let mut padded = feats.to_vec();
        padded.resize(w * dm, 0.0);
        x.write_f32(&padded);
        backend.compute(&g)?;
        let mut raw = vec![0u8; 4 * w];
        codes.read_bytes(0, &mut raw);
        Ok(raw.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32).collect())
    }
}

/// One pre-norm encoder layer: `x + SA(norm1(x))`, then `x + FF(norm2(x))`.
fn layer<'a>(b: &Blocks<'a>, c: &HeadConfig, p: &str, x: Tensor<'a>, eps: f32) -> Tensor<'a> {
    let ctx = b.ctx;
    let x = ctx.add(x, self_attention(b, c, p, b.layer_norm(&format!("{p}.norm1"), x, eps)));
    let y = ctx.gelu_erf(b.linear(&format!("{p}.linear1"), b.layer_norm(&format!("{p}.norm2"), x, eps)));
    ctx.add(x, b.linear(&format!("{p}.linear2"), y))
}

/// Multi-head attention with torch's fused projection: rows q, then k, then v.
fn self_attention<'a>(b: &Blocks<'a>, c: &HeadConfig, p: &str, x: Tensor<'a>) -> Tensor<'a> {
    let ctx = b.ctx;
    let (d, t) = (c.hidden_size as i64, x.ne()[1]);
    let heads = c.num_attention_heads as i64;
    let w = b.w.get(&format!("{p}.self_attn.in_proj_weight"));
    let qkv = ctx.add(ctx.mul_mat(w, x), b.w.get(&format!("{p}.self_attn.in_proj_bias"))); // [3D, T]
    let part = |i: usize| {
        let v = ctx.cont(ctx.view_2d(qkv, d, t, qkv.nb()[1], i * d as usize * 4));
        ctx.reshape_3d(v, d / heads, heads, t)
    };
    b.linear(&format!("{p}.self_attn.out_proj"), attention(ctx, part(0), part(1), part(2)))
}
