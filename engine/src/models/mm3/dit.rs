//! The flow-matching DiT (diffusers' `MiniMaxMusic3Transformer1DModel`): the input is
//! `[latent, zeros, condition]` per latent frame, through `preprocess_conv` (k=1, residual)
//! and `proj_in`; the flow time enters as a prefix token (Fourier features `2 pi t w` ->
//! `cat(cos, sin)` -> linear -> SiLU -> linear) that the blocks see at position 0 and that is
//! dropped after them. Each block: LayerNorm (with bias, eps 1e-5), bidirectional attention
//! (scale `1 / sqrt(head_dim)`, NeoX RoPE on the first `rotary_dim` dims of each head, theta
//! 1e4, positions counting the time token), LayerNorm, then `ff_in` split into value and
//! gate and `ff_out(value * silu(gate))`; residuals around both. Then `proj_out` and
//! `postprocess_conv` (k=1, residual). Guidance: `v_uncond + (v_cond - v_uncond) * cfg`, the
//! unconditional branch on a zero condition, both in one batch.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mm3::config::{expect_arch, DIT_ARCH};
use crate::weights::{load_tensors_upcast, LoadError};

const LN_EPS: f32 = 1e-5;
const ROPE_THETA: f32 = 10_000.0;

/// The DiT's dimensions (its `config.json` as `mm3-dit.*` keys, checked against the tensors).
#[derive(Clone, Debug, PartialEq)]
pub struct DitConfig {
    pub in_channels: usize,
    pub condition_dim: usize,
    pub num_layers: usize,
    pub num_attention_heads: usize,
    pub attention_head_dim: usize,
    pub ff_inner_dim: usize,
    pub rotary_dim: usize,
    pub fourier_embedding_dim: usize,
}

impl DitConfig {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, GgufError> {
        let get = |k: &str| f.get_i64(&format!("{DIT_ARCH}.{k}")).map(|v| v as usize);
        let c = DitConfig {
            in_channels: get("in_channels")?,
            condition_dim: get("condition_dim")?,
            num_layers: get("num_layers")?,
            num_attention_heads: get("num_attention_heads")?,
            attention_head_dim: get("attention_head_dim")?,
            ff_inner_dim: get("ff_inner_dim")?,
            rotary_dim: get("rotary_dim")?,
            fourier_embedding_dim: get("fourier_embedding_dim")?,
        };
        Ok(c)
    }
    pub fn dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }
    fn concat(&self) -> usize {
        2 * self.in_channels + self.condition_dim
    }
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let (d, cc, cin, ff, fe) = (
            self.dim() as i64,
            self.concat() as i64,
            self.in_channels as i64,
            self.ff_inner_dim as i64,
            self.fourier_embedding_dim as i64,
        );
        let mut v = vec![
            ("time_proj.weight".to_string(), vec![1, fe / 2]),
            ("time_embed.linear_1.weight".into(), vec![fe, d]),
            ("time_embed.linear_1.bias".into(), vec![d]),
            ("time_embed.linear_2.weight".into(), vec![d, d]),
            ("time_embed.linear_2.bias".into(), vec![d]),
            ("preprocess_conv.weight".into(), vec![1, cc, cc]),
            ("proj_in.weight".into(), vec![cc, d]),
            ("proj_out.weight".into(), vec![d, cin]),
            ("postprocess_conv.weight".into(), vec![1, cin, cin]),
        ];
        for l in 0..self.num_layers {
            let p = |s: &str| format!("transformer_blocks.{l}.{s}");
            for n in ["norm1", "norm2"] {
                v.push((p(&format!("{n}.weight")), vec![d]));
                v.push((p(&format!("{n}.bias")), vec![d]));
            }
            for n in ["attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight"] {
                v.push((p(n), vec![d, d]));
            }
            v.push((p("ff_in.weight"), vec![d, 2 * ff]));
            v.push((p("ff_in.bias"), vec![2 * ff]));
            v.push((p("ff_out.weight"), vec![ff, d]));
            v.push((p("ff_out.bias"), vec![d]));
        }
        v
    }
}

pub struct DitModel {
    pub cfg: DitConfig,
    /// The Fourier projection on the host (`fourier / 2` frequencies).
    freqs: Vec<f32>,
    weights: TensorStore,
    alloc: Allocator,
    /// Whether the Q8_0 products of two rows or more take `ggml::q8`'s (on a CPU backend:
    /// the bits of ggml's products, each weight block loaded once for a tile of rows).
    q8_rows: bool,
}

impl DitModel {
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        expect_arch(f, DIT_ARCH)?;
        let cfg = DitConfig::from_gguf(f)?;
        let freqs = f.tensor_f32("time_proj.weight")?;
        // Norms, biases and the k=1 convolutions' weights in F32 (they are added, and the
        // residual convolutions are small).
        let weights = load_tensors_upcast(f, &cfg.tensor_shapes(), backend, "DiT weights", |_, ne| ne.len() == 1)?;
        Ok(DitModel { cfg, freqs, weights, alloc: Allocator::new(backend), q8_rows: backend.is_cpu() })
    }

    /// Takes ggml's own Q8_0 products instead of `ggml::q8`'s (a test's comparison).
    #[cfg(test)]
    pub(crate) fn without_q8_rows(mut self) -> Self {
        self.q8_rows = false;
        self
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// The time token's input: `cat(cos(2 pi t w), sin(2 pi t w))`.
    pub fn fourier(&self, t: f32) -> Vec<f32> {
        let a: Vec<f32> = self.freqs.iter().map(|w| 2.0 * std::f32::consts::PI * t * w).collect();
        a.iter().map(|x| x.cos()).chain(a.iter().map(|x| x.sin())).collect()
    }

    /// Velocities of `b` rows of `frames` latent frames: `x` and `cond` row-major
    /// `[b][frames][in_channels]` and `[b][frames][condition_dim]`, all at flow time `t`.
    pub fn velocity(
        &mut self,
        backend: &Backend,
        lat: &[f32],
        cond: &[f32],
        frames: usize,
        b: usize,
        t: f32,
    ) -> Result<Vec<f32>, GgmlError> {
        let c = self.cfg.clone();
        let (cin, cd, d) = (c.in_channels as i64, c.condition_dim as i64, c.dim() as i64);
        let (tl, bl) = (frames as i64, b as i64);
        assert_eq!(lat.len(), b * frames * c.in_channels, "latent input");
        assert_eq!(cond.len(), b * frames * c.condition_dim, "condition input");
        let nodes = 128 + 64 * c.num_layers;
        let ctx = Context::for_graph(nodes)?;
        ctx.set_q8_row_products(self.q8_rows);
        let mut g = ctx.new_graph("DiT velocity", nodes);
        let w = &self.weights;
        let xin = ctx.new_tensor(GgmlType::F32, &[cin, tl, bl]).set_input();
        let cin_t = ctx.new_tensor(GgmlType::F32, &[cd, tl, bl]).set_input();
        let zeros = ctx.new_tensor(GgmlType::F32, &[cin, tl, bl]).set_input();
        let four = ctx.new_tensor(GgmlType::F32, &[c.fourier_embedding_dim as i64, 1, bl]).set_input();
        let pos = ctx.new_tensor(GgmlType::I32, &[tl + 1]).set_input();
        let cc = c.concat() as i64;
        let h = ctx.concat(ctx.concat(xin, zeros, 0), cin_t, 0); // [cc, T, B]
        let h2 = ctx.reshape_2d(h, cc, tl * bl);
        let pre = ctx.reshape_2d(w.get("preprocess_conv.weight"), cc, cc);
        let h2 = ctx.add(ctx.mul_mat(pre, h2), h2);
        let h = ctx.reshape_3d(ctx.mul_mat(w.get("proj_in.weight"), h2), d, tl, bl);
        let lin = |x, n: &str| linear(&ctx, w, x, n);
        let temb = lin(ctx.silu(lin(four, "time_embed.linear_1")), "time_embed.linear_2"); // [D, 1, B]
        let mut x = ctx.concat(temb, h, 1); // [D, T + 1, B]
        let (hd, nh) = (c.attention_head_dim as i64, c.num_attention_heads as i64);
        let n = tl + 1;
        for l in 0..c.num_layers {
            let p = |s: &str| format!("transformer_blocks.{l}.{s}");
            let ln = |x, n: &str| layer_norm(&ctx, w, x, &p(n));
            let a_in = ln(x, "norm1");
            let proj = |name: &str| ctx.reshape_4d(ctx.mul_mat(w.get(&p(name)), a_in), hd, nh, n, bl);
            let rope = |t| ctx.rope_neox_4d(t, pos, c.rotary_dim as i32, ROPE_THETA);
            let q = ctx.permute(rope(proj("attn.to_q.weight")), [0, 2, 1, 3]); // [hd, n, nh, B]
            let k = ctx.permute(rope(proj("attn.to_k.weight")), [0, 2, 1, 3]);
            let v = ctx.permute(proj("attn.to_v.weight"), [0, 2, 1, 3]);
            // [n_k, n_q, nh, B]
            let kq = ctx.soft_max_ext(ctx.mul_mat(ctx.cont(k), ctx.cont(q)), None, 1.0 / (hd as f32).sqrt());
            let vt = ctx.cont(ctx.permute(v, [1, 0, 2, 3])); // [n, hd, nh, B]
            let a = ctx.mul_mat(vt, kq); // [hd, n_q, nh, B]
            let a = ctx.reshape_3d(ctx.cont(ctx.permute(a, [0, 2, 1, 3])), d, n, bl);
            x = ctx.add(x, ctx.mul_mat(w.get(&p("attn.to_out.0.weight")), a));
            let f = lin(ln(x, "norm2"), &p("ff_in")); // [2 ff, n, B]
            let ff = c.ff_inner_dim as i64;
            let value = ctx.view_3d(f, ff, n, bl, f.nb()[1], f.nb()[2], 0);
            let gate = ctx.view_3d(f, ff, n, bl, f.nb()[1], f.nb()[2], ff as usize * f.nb()[0]);
            let m = ctx.swiglu(ctx.cont(gate), ctx.cont(value));
            x = ctx.add(x, lin(m, &p("ff_out")));
        }
        let y = ctx.cont(ctx.view_3d(x, d, tl, bl, x.nb()[1], x.nb()[2], x.nb()[1])); // drop the time token
        let y = ctx.mul_mat(w.get("proj_out.weight"), y); // [Cin, T, B]
        let y2 = ctx.reshape_2d(y, cin, tl * bl);
        let post = ctx.reshape_2d(w.get("postprocess_conv.weight"), cin, cin);
        let out = ctx.add(ctx.mul_mat(post, y2), y2).set_output();
        g.expand(out);
        self.alloc.alloc_graph(&g)?;
        xin.write_f32(lat);
        cin_t.write_f32(cond);
        zeros.fill_zero();
        let f = self.fourier(t);
        four.write_f32(&f.iter().copied().cycle().take(f.len() * b).collect::<Vec<_>>());
        pos.write_i32(&(0..n as i32).collect::<Vec<_>>());
        backend.compute(&g)?;
        Ok(out.read_f32())
    }

    /// The guided velocity of `m` variations sharing one condition: the conditional and
    /// unconditional (zero-condition) branches of every variation in one batch
    /// (`batch`), or as two forwards.
    #[allow(clippy::too_many_arguments)]
    pub fn guided(
        &mut self,
        backend: &Backend,
        x: &[f32],
        cond: &[f32],
        frames: usize,
        m: usize,
        t: f32,
        cfg: f32,
        batch: bool,
    ) -> Result<Vec<f32>, GgmlError> {
        let per = frames * self.cfg.in_channels;
        let zero = vec![0f32; cond.len()];
        let conds: Vec<f32> = (0..m).flat_map(|_| cond.iter().copied()).collect();
        let zeros: Vec<f32> = (0..m).flat_map(|_| zero.iter().copied()).collect();
        let (vc, vu) = if batch {
            let xs: Vec<f32> = [x, x].concat();
            let v = self.velocity(backend, &xs, &[conds, zeros].concat(), frames, 2 * m, t)?;
            let (a, b) = v.split_at(m * per);
            (a.to_vec(), b.to_vec())
        } else {
            (self.velocity(backend, x, &conds, frames, m, t)?, self.velocity(backend, x, &zeros, frames, m, t)?)
        };
        Ok(vc.iter().zip(&vu).map(|(c, u)| u + (c - u) * cfg).collect())
    }
}

fn linear<'a>(ctx: &'a Context, w: &'a TensorStore, x: Tensor<'a>, name: &str) -> Tensor<'a> {
    ctx.add(ctx.mul_mat(w.get(&format!("{name}.weight")), x), w.get(&format!("{name}.bias")))
}

fn layer_norm<'a>(ctx: &'a Context, w: &'a TensorStore, x: Tensor<'a>, name: &str) -> Tensor<'a> {
    ctx.add(ctx.mul(ctx.norm(x, LN_EPS), w.get(&format!("{name}.weight"))), w.get(&format!("{name}.bias")))
}
