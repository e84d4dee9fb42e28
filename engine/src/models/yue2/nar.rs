//! The non-autoregressive half of the backbone and its flow-matching solver.
//!
//! The NAR layers (nar_input_layernorm, nar_self_attn with q/k norms, nar_pre_mlp_layernorm,
//! nar_mlp) share the 28-layer shape, the embeddings and the final norm with the AR half.
//! A latent block `[LATENT_START, frames..., LATENT_END]` of `n + 2` rows, the markers being
//! zero rows of the *latent input*: row r is `vae2llm(x_r) + time_embedding(t) + pe[r]` for
//! every r, markers included (so they carry vae2llm's bias), the frame table indexed over
//! the whole block (LATENT_START = 0, frame j = j + 1, LATENT_END = n + 1). The block is
//! attended over the AR window of a completed KV set: fresh K/V of the block are
//! concatenated behind the cached ones, which are only read, with an explicit all-zero mask
//! (every block row sees every key). RoPE positions continue the sequence. `llm2vae` turns
//! the frame rows into velocities. M noise variations of a song run side by side in one
//! graph.
//!
//! These three readings of yue2.cpp's architecture reference (markers through `vae2llm`, the block-wide frame index,
//! and the timestep below) are the reference implementation's (yue2.cpp `src/nar.h`, checked
//! against the PyTorch model); yue2.cpp's prose allows others.
//!
//! The sinusoidal frame table is computed in f64 and rounded to F32 for the rows a block
//! needs, rather than stored (the checkpoint's BF16 table is dropped by the converter).
use crate::cancel::CancelToken;
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::models::yue2::config::{backbone_tensor_shapes, is_nar_tensor, names, BackboneInfo, Yue2Config};
use crate::nn::qwen3::Qwen3Layer;
use crate::nn::rms_norm;
use crate::weights::LoadError;

/// Frequency channels of the timestep sinusoid.
pub const TIME_FREQ_DIM: usize = 256;

/// Names and shapes of the NAR tensors (316 at the published dimensions), plus the shared
/// final norm.
pub fn nar_tensors(cfg: &Yue2Config, latent: usize) -> Vec<(String, Vec<i64>)> {
    backbone_tensor_shapes(cfg, latent, TIME_FREQ_DIM)
        .into_iter()
        .filter(|(n, _)| is_nar_tensor(n) || n == names::NORM)
        .collect()
}

/// The timestep the embedder sees: the raw value `logit(t)` saturated at +-20, then the
/// release curve `shift * s / (1 + (shift - 1) * s)` of `s = sigmoid(raw)` (at shift 1.0,
/// `t` itself up to the saturation).
pub fn shifted_timestep(t: f64, shift: f64) -> f64 {
    let raw = if t >= 1.0 {
        20.0
    } else if t <= 0.0 {
        -20.0
    } else {
        (t / (1.0 - t)).ln().clamp(-20.0, 20.0)
    };
    let s = 1.0 / (1.0 + (-raw).exp());
    shift * s / (1.0 + (shift - 1.0) * s)
}

/// The timestep sinusoid of [`shifted_timestep`]: [cos, sin] of 128 frequencies
/// `exp(-ln(1e4) i / 128)`.
pub fn time_sinusoid(t: f64, shift: f64) -> Vec<f32> {
    let tau = shifted_timestep(t, shift);
    let half = TIME_FREQ_DIM / 2;
    let args: Vec<f64> = (0..half).map(|i| tau * (-(10000f64.ln()) * i as f64 / half as f64).exp()).collect();
    args.iter().map(|a| a.cos() as f32).chain(args.iter().map(|a| a.sin() as f32)).collect()
}

/// Rows `0..n` of the interleaved sin/cos frame table of width `h`, row-major.
pub fn frame_table(n: usize, h: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * h);
    for p in 0..n {
        for i in 0..h / 2 {
            let w = (-(10000f64.ln()) * (2 * i) as f64 / h as f64).exp();
            out.push((p as f64 * w).sin() as f32);
            out.push((p as f64 * w).cos() as f32);
        }
    }
    out
}

/// Frames per acoustic chunk: the context must hold the prefix, the chunk's codes and
/// their latent block (codes and frames count twice) plus the three markers.
pub fn chunk_frames(context: usize, prefix_len: usize) -> usize {
    context.saturating_sub(prefix_len + 3) / 2
}

/// One acoustic chunk of a song: frames `start..end` are kept; `context..start` (a few of
/// the previous chunk's frames, under `stream_chunk_seconds`) are painted with it as left
/// context and cropped. The chunk's KV set holds `prefix + codes[context..end] + music_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    pub context: usize,
    pub start: usize,
    pub end: usize,
}

impl ChunkSpan {
    /// Frames the NAR paints (context included).
    pub fn painted(&self) -> usize {
        self.end - self.context
    }
}

/// Where a song's chunks fall: a fixed grid from frame 0, so chunk `c` is known from the
/// frames written so far, before the song's length is (what lets the daemon render chunk
/// `c` while the AR half writes chunk `c + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Kept frames per chunk.
    pub step: usize,
    /// Left-context frames of every chunk but the first.
    pub context: usize,
}

impl ChunkPlan {
    /// yue2.cpp's rule (`stream` None: one chunk per context window, no left context), or
    /// streaming chunks of `stream` frames behind `context` frames of left context, never
    /// more than the context window holds. `None` when the prefix leaves no room.
    pub fn new(context_window: usize, prefix_len: usize, stream: Option<(usize, usize)>) -> Option<ChunkPlan> {
        let room = chunk_frames(context_window, prefix_len);
        let plan = match stream {
            None => ChunkPlan { step: room, context: 0 },
            Some((frames, context)) => {
                let context = context.min(room / 2);
                ChunkPlan { step: frames.max(1).min(room - context), context }
            }
        };
        (plan.step > 0).then_some(plan)
    }

    /// Chunk `c` of a song of `frames` frames (`None` past its end).
    pub fn span(&self, c: usize, frames: usize) -> Option<ChunkSpan> {
        let start = c * self.step;
        (start < frames).then(|| ChunkSpan {
            context: start.saturating_sub(self.context),
            start,
            end: (start + self.step).min(frames),
        })
    }

    /// Every chunk of a song of `frames` frames.
    pub fn spans(&self, frames: usize) -> Vec<ChunkSpan> {
        (0..).map_while(|c| self.span(c, frames)).collect()
    }
}

pub struct NarModel {
    pub cfg: Yue2Config,
    pub latent: usize,
    weights: TensorStore,
    alloc: Allocator,
    /// Whether the Q8_0 products of two rows or more take `ggml::q8`'s (on a CPU backend:
    /// the bits of ggml's products, each weight block loaded once for a tile of rows).
    q8_rows: bool,
}

impl NarModel {
    pub fn load(f: &GgufFile, info: &BackboneInfo, backend: &Backend) -> Result<Self, LoadError> {
        Self::load_with(f, info, backend, &Default::default())
    }

    /// [`NarModel::load`] with adapter terms merged into the NAR tensors they name.
    pub fn load_with(
        f: &GgufFile,
        info: &BackboneInfo,
        backend: &Backend,
        terms: &std::collections::HashMap<String, Vec<crate::models::yue2::adapter::Term>>,
    ) -> Result<Self, LoadError> {
        let latent = f.require_tensor(names::VAE2LLM_W)?.ne4()[0] as usize;
        let weights = crate::weights::load_tensors_merged(
            f,
            &nar_tensors(&info.config, latent),
            backend,
            "NAR weights",
            |_, _| false,
            terms,
        )?;
        Ok(NarModel {
            cfg: info.config.clone(),
            latent,
            weights,
            alloc: Allocator::new(backend),
            q8_rows: backend.is_cpu(),
        })
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

    /// Velocities of `m` variations of `n` frames (`x`: [m, n, latent]) at time `t`, over
    /// the complete sequence held in `kv`.
    pub fn velocity(
        &mut self,
        backend: &Backend,
        kv: &KvSet,
        x: &[f32],
        n: usize,
        m: usize,
        t: f64,
    ) -> Result<Vec<f32>, GgmlError> {
        let c = &self.cfg;
        let lat = self.latent as i64;
        assert_eq!(x.len(), m * n * self.latent, "state of {} values for {m} x {n} frames", x.len());
        assert!(!kv.is_empty(), "the NAR needs a completed AR sequence");
        assert_eq!(kv.streams(), 1, "the NAR reads a single-sequence set");
        let h = c.hidden_size as i64;
        let (nf, nb, mm) = (n as i64, n as i64 + 2, m as i64);
        let rows = nb * mm;
        let ar_len = kv.len() as i64;
        let eps = c.rms_norm_eps as f32;
        let n_nodes = 512 + c.num_hidden_layers * (64 + 24 * m);
        let ctx = Context::for_graph(n_nodes)?;
        ctx.set_q8_row_products(self.q8_rows);
        let mut g = ctx.new_graph("NAR velocity", n_nodes);
        let w = &self.weights;

        // The whole block of every variation, marker rows (zeros) included.
        let xin = ctx.new_tensor(GgmlType::F32, &[lat, nb, mm]).set_input();
        let tin = ctx.new_tensor(GgmlType::F32, &[TIME_FREQ_DIM as i64, 1]).set_input();
        let pe = ctx.new_tensor(GgmlType::F32, &[h, nb, 1]).set_input();
        let pos = ctx.new_tensor(GgmlType::I32, &[rows]).set_input();
        // Spare zero rows behind the block's: ggml-vulkan's attention reads a little past
        // the last mask row when the row count is not a multiple of its tile (found on
        // lavapipe: the velocities then depended on whatever followed the mask in memory).
        let mask_rows = (nb + 64) / 64 * 64;
        let mask = ctx.new_tensor(GgmlType::F16, &[ar_len + nb, mask_rows]).set_input();

        let temb = ctx.add(ctx.mul_mat(w.get(names::TIME_MLP0_W), tin), w.get(names::TIME_MLP0_B));
        let temb = ctx.add(ctx.mul_mat(w.get(names::TIME_MLP2_W), ctx.silu(temb)), w.get(names::TIME_MLP2_B));
        let temb = ctx.reshape_3d(temb, h, 1, 1);
        let block =
            ctx.add(ctx.mul_mat(w.get(names::VAE2LLM_W), ctx.reshape_2d(xin, lat, rows)), w.get(names::VAE2LLM_B));
        let block = ctx.add(ctx.add(ctx.reshape_3d(block, h, nb, mm), temb), pe); // [h, nb, m]
        let mut xb = ctx.reshape_2d(block, h, rows);
        let dims = c.qwen3_dims();
        for l in 0..c.num_hidden_layers {
            let layer = Qwen3Layer::from_fn(|role| w.get(&names::layer_role(l, true, role)));
            xb = layer.forward(&ctx, &dims, xb, pos, |q, k, v| attend_block(&ctx, kv, l, mask, nb, mm, q, k, v));
        }
        let y = rms_norm(&ctx, xb, w.get(names::NORM), eps);
        let y = ctx.reshape_3d(y, h, nb, mm);
        let y = ctx.cont(ctx.view_3d(y, h, nf, mm, y.nb()[1], y.nb()[2], y.nb()[1]));
        let vel = ctx
            .add(ctx.mul_mat(w.get(names::LLM2VAE_W), ctx.reshape_2d(y, h, nf * mm)), w.get(names::LLM2VAE_B))
            .set_output();
        g.expand(vel);
        self.alloc.alloc_graph(&g)?;

        let lw = self.latent;
        let mut block = vec![0f32; m * (n + 2) * lw];
        for (v, frames) in x.chunks(n * lw).enumerate() {
            let at = (v * (n + 2) + 1) * lw;
            block[at..at + n * lw].copy_from_slice(frames);
        }
        xin.write_f32(&block);
        tin.write_f32(&time_sinusoid(t, c.timestep_shift));
        pe.write_f32(&frame_table(n + 2, h as usize));
        let positions: Vec<i32> = (0..mm).flat_map(|_| (0..nb).map(|r| (ar_len + r) as i32)).collect();
        pos.write_i32(&positions);
        // The explicit all-zero mask: every query sees every key. Zeroed in place, not
        // built on the host (5000 frames behind a 5000-token window would be 100 MB per call).
        mask.fill_zero();
        backend.compute(&g)?;
        Ok(vel.read_f32())
    }

    /// Flow matching from noise (t = 1) to latents (t = 0) in `steps` steps of `solver`
    /// ([`Solver`]); `progress(step, steps)` after each step; the cancel token is checked
    /// between steps.
    #[allow(clippy::too_many_arguments)]
    pub fn solve(
        &mut self,
        backend: &Backend,
        kv: &KvSet,
        noise: &[f32],
        n: usize,
        m: usize,
        steps: usize,
        solver: Solver,
        cancel: &CancelToken,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<f32>, NarError> {
        assert!(steps >= 1, "at least one ODE step");
        let dt = 1.0 / steps as f64;
        let mut x = noise.to_vec();
        // AB2's velocity of the step before (its first step's start velocity at first).
        let mut prev: Option<Vec<f32>> = None;
        for s in 0..steps {
            if cancel.is_cancelled() {
                return Err(NarError::Cancelled);
            }
            let t = 1.0 - s as f64 * dt;
            let v = self.velocity(backend, kv, &x, n, m, t)?;
            match &prev {
                Some(vp) => {
                    for ((a, v), vp) in x.iter_mut().zip(&v).zip(vp) {
                        *a -= dt as f32 * (1.5 * v - 0.5 * vp);
                    }
                }
                None => {
                    let mid: Vec<f32> = x.iter().zip(&v).map(|(a, v)| a - v * (dt as f32) / 2.0).collect();
                    let v2 = self.velocity(backend, kv, &mid, n, m, t - dt / 2.0)?;
                    for (a, v) in x.iter_mut().zip(&v2) {
                        *a -= v * dt as f32;
                    }
                }
            }
            if solver == Solver::Ab2 {
                prev = Some(v);
            }
            progress(s + 1, steps);
        }
        Ok(x)
    }
}

/// The ODE solver of the flow matching (the request's `solver`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Solver {
    /// `mid = x - v(x, t) dt / 2; x -= v(mid, t - dt / 2) dt`: two evaluations a step
    /// (yue2.cpp's solver).
    #[default]
    Midpoint,
    /// Adams-Bashforth 2: the first step a midpoint step, each later one a single
    /// evaluation, `x -= dt (1.5 v_n - 0.5 v_{n-1})` with `v_n = v(x_n, t_n)` and `v_0` the
    /// first step's start velocity: `steps + 1` evaluations instead of `2 steps`.
    Ab2,
}

impl Solver {
    /// Velocity evaluations of a solve of `steps` steps.
    pub fn evaluations(self, steps: usize) -> usize {
        match self {
            Solver::Midpoint => 2 * steps,
            Solver::Ab2 => steps + 1,
        }
    }
}

/// The NAR attention of layer `l`: each variation's block rows (`nb` of the `q`, `k`, `v`
/// rows) attend over the AR window of `kv`'s only stream followed by their own K/V, which
/// are never written to the cache; `mask` is all zeros. Returns [heads x head_dim, rows].
#[allow(clippy::too_many_arguments)]
fn attend_block<'a>(
    ctx: &'a Context,
    kv: &'a KvSet,
    l: usize,
    mask: Tensor<'a>,
    nb: i64,
    mm: i64,
    q: Tensor<'a>,
    k: Tensor<'a>,
    v: Tensor<'a>,
) -> Tensor<'a> {
    let (hd, nh, nkv) = (q.ne()[0], q.ne()[1], k.ne()[1]);
    let scale = 1.0 / (hd as f32).sqrt();
    let (kc, vc) = (kv.k(l), kv.v(l));
    let ar_len = kv.len() as i64;
    // [head_dim, positions, kv heads] of the set's only stream.
    let kw = ctx.view_3d(kc, hd, ar_len, nkv, kc.nb()[1], kc.nb()[2], 0);
    let vw = ctx.view_3d(vc, hd, ar_len, nkv, vc.nb()[1], vc.nb()[2], 0);
    let mut outs: Option<Tensor<'_>> = None;
    for vi in 0..mm {
        let qm = variation_rows(ctx, q, nh, nb, vi);
        let km = ctx.cast(variation_rows(ctx, k, nkv, nb, vi), kc.ty());
        let vm = ctx.cast(variation_rows(ctx, v, nkv, nb, vi), vc.ty());
        let a = ctx.flash_attn_ext(qm, ctx.concat(kw, km, 1), ctx.concat(vw, vm, 1), Some(mask), scale); // [hd, nh, nb]
        let a = ctx.reshape_2d(a, hd * nh, nb);
        outs = Some(match outs {
            None => a,
            Some(p) => ctx.concat(p, a, 1),
        });
    }
    outs.expect("at least one variation")
}

/// The `nb` block rows of variation `vi` of a [hd, heads, rows] tensor, as [hd, nb, heads].
fn variation_rows<'a>(ctx: &'a Context, t: Tensor<'a>, heads: i64, nb: i64, vi: i64) -> Tensor<'a> {
    let hd = t.ne()[0];
    let s = ctx.view_3d(t, hd, heads, nb, t.nb()[1], t.nb()[2], (vi * nb) as usize * t.nb()[2]);
    ctx.permute(s, [0, 2, 1, 3])
}

#[derive(Debug, thiserror::Error)]
pub enum NarError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("cancelled")]
    Cancelled,
}

#[cfg(test)]
mod tests;
