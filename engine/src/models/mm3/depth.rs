//! The RVQ depth decoder: a small causal transformer over the codebook positions of one
//! 25 Hz frame.
//!
//! The sequence of a frame is `[proj(LM last hidden), proj(LM_embed(semantic)),
//! proj(audio_emb(c_1)), ...]` with the learned position embedding added after the
//! projection; 4 pre-norm layers of causal multi-head attention without RoPE (scale
//! `1 / sqrt(head_dim)`) and a SwiGLU MLP; a final RMSNorm. A sequence of length S predicts
//! acoustic code S-1 through `audio_heads[S-2]`.
//!
//! Two ways to run it. [`DepthModel::forward`] runs whole sequences, as the reference runs
//! every one of a frame's seven steps (a replay's S = 8 forwards, the split-guidance path).
//! [`DepthModel::step`] runs a frame's steps the way a decoder with a cache does: the first
//! computes the frame's first two positions, each later one only its new position, reading
//! the keys and values of the others from [`FrameCache`]. A frame is then 8 positions a row
//! instead of 2 + 3 + ... + 8 = 35. In exact arithmetic the two are the same (attention is
//! causal: a position's keys and values do not depend on the positions after it). In floats
//! they agree to rounding, not bit for bit: ggml's CPU kernels choose their paths from the
//! shapes, so the whole-sequence forward itself rounds an earlier position a little
//! differently depending on how many positions follow it, and a step's single query takes
//! other kernels than a whole sequence's; on Q8_0 weights the quantized activations carry
//! such a difference further (docs/BENCHMARKS.md; `yued bench --family mm3 --only frame`
//! prints both ways side by side and how far apart their logits are). A song batched with
//! others still comes out as alone, bit for bit: both run the same steps.
use crate::ggml::{Backend, Context, GgmlError, GgmlType, Graph, GraphCache, Tensor, TensorStore};
use crate::gguf::GgufFile;
use crate::models::mm3::config::{expect_arch, DepthConfig, DEPTH_ARCH, DEPTH_EPS};
use crate::nn::causal_lm::read_rows;
use crate::nn::rms_norm;
use crate::weights::{load_tensors_upcast, LoadError};

pub struct DepthModel {
    pub cfg: DepthConfig,
    weights: TensorStore,
    /// One kept graph per (sequence length, batch, all positions): a frame's seven steps
    /// each reuse theirs from the previous frame.
    graphs: Vec<GraphCache<(usize, usize, bool)>>,
    /// One kept graph per step of a frame (sequence length 2..=8), keyed by its rows.
    steps: Vec<GraphCache<usize>>,
    /// The keys and values of the frame [`DepthModel::step`] is in; grown to the most rows
    /// a frame has had.
    cache: Option<FrameCache>,
}

/// Per layer the keys and values (`k{l}`, `v{l}`: F32 `[hidden, positions, rows]`) of the
/// positions a frame's steps have computed, for up to `capacity` rows. About 1 MiB a row at
/// the published shapes (4 layers x 2 x 8 positions x 4096 x 4 bytes).
struct FrameCache {
    store: TensorStore,
    capacity: usize,
    /// The rows of the frame in progress and the positions its steps have written.
    rows: usize,
    len: usize,
}

impl FrameCache {
    fn new(backend: &Backend, c: &DepthConfig, capacity: usize) -> Result<Self, GgmlError> {
        let shape = [c.hidden_size as i64, c.num_codebooks as i64, capacity as i64];
        let mut store = TensorStore::new(2 * c.num_layers)?;
        for l in 0..c.num_layers {
            store.declare(&format!("k{l}"), GgmlType::F32, &shape);
            store.declare(&format!("v{l}"), GgmlType::F32, &shape);
        }
        store.allocate(backend, "depth decoder frame cache", false)?;
        Ok(FrameCache { store, capacity, rows: 0, len: 0 })
    }
}

/// What one forward returns, per batch row: the final-normed hidden state(s) and the
/// logits of the head that predicts the next code.
#[derive(Debug)]
pub struct DepthOut {
    /// Per row: the last position's hidden state (`hidden` values), or every position's
    /// (`S * hidden`) when all were asked for.
    pub hidden: Vec<Vec<f32>>,
    /// Per row: `audio_vocab_size` logits of `audio_heads[S-2]` at the last position.
    pub logits: Vec<Vec<f32>>,
}

impl DepthModel {
    /// Loads a depth decoder file whose projection reads an LM of width `lm_hidden`.
    pub fn load(f: &GgufFile, lm_hidden: usize, backend: &Backend) -> Result<Self, LoadError> {
        expect_arch(f, DEPTH_ARCH)?;
        let cfg = DepthConfig::from_gguf(f)?;
        if cfg.hidden_size != lm_hidden {
            return Err(LoadError::Gguf(crate::gguf::GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: format!("depth decoder of width {} beside an LM of width {lm_hidden}", cfg.hidden_size),
            }));
        }
        // Norms and the position table in F32 (they are added and multiplied element-wise).
        let weights =
            load_tensors_upcast(f, &cfg.tensor_shapes(lm_hidden), backend, "depth decoder weights", |name, ne| {
                ne.len() == 1 || name == "pos_embedding.weight"
            })?;
        let graphs =
            (0..4 * (cfg.num_codebooks + 1)).map(|_| GraphCache::new(backend, "depth decoder forward")).collect();
        let steps = (2..=cfg.num_codebooks).map(|_| GraphCache::new(backend, "depth decoder step")).collect();
        Ok(DepthModel { cfg, weights, graphs, steps, cache: None })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Rows of the acoustic embedding table for code `code` of acoustic codebook `book`
    /// (0-based: the frame's second code is book 0), as f32 on the host.
    pub fn audio_embedding(&self, book: usize, code: u32) -> Vec<f32> {
        assert!(
            (code as usize) < self.cfg.audio_vocab_size && book < self.cfg.acoustic_codebooks(),
            "acoustic code {code} of book {book}"
        );
        read_rows(self.weights.get("audio_embeddings.weight"), &[(book * self.cfg.audio_vocab_size) as u32 + code])
    }

    /// Runs `b` sequences of `s` raw (unprojected) embeddings each (`input`: row-major
    /// `[b][s][hidden]`) and returns the hidden states and the logits of `audio_heads[s-2]`.
    pub fn forward(
        &mut self,
        backend: &Backend,
        input: &[f32],
        s: usize,
        b: usize,
        all: bool,
    ) -> Result<DepthOut, GgmlError> {
        let c = &self.cfg;
        let h = c.hidden_size;
        assert!((2..=c.num_codebooks).contains(&s), "depth sequence of {s} positions");
        assert_eq!(input.len(), b * s * h, "depth input of {} values for {b} x {s} x {h}", input.len());
        let slot = (s * 2 + usize::from(all)) % self.graphs.len();
        let n_nodes = 64 + c.num_layers * 40;
        let cfg = c.clone();
        // On the CPU the Q8_0 products of two rows or more take `mul_mat_q8_rows` (ggml's bits).
        let q8_rows = backend.is_cpu();
        let g = self.graphs[slot].get((s, b, all), &[&self.weights], n_nodes, |ctx, graph, stores| {
            ctx.set_q8_row_products(q8_rows);
            let kept = build(ctx, &cfg, stores[0], s, b, all);
            graph.expand(kept[2]);
            graph.expand(kept[3]);
            kept
        })?;
        g.tensor(0).write_f32(input);
        let mut mask = vec![0f32; s * s];
        for q in 0..s {
            mask[q * s + q + 1..(q + 1) * s].fill(f32::NEG_INFINITY);
        }
        g.tensor(1).write_f32(&mask);
        g.compute(backend)?;
        let hid = g.tensor(2).read_f32();
        let logits = g.tensor(3).read_f32();
        let per = hid.len() / b;
        Ok(DepthOut {
            hidden: hid.chunks(per).map(|r| r.to_vec()).collect(),
            logits: logits.chunks(c.audio_vocab_size).map(|r| r.to_vec()).collect(),
        })
    }

    /// Step `s` (the sequence's length, 2..=8) of a frame of `b` rows, computing only its new
    /// positions: at `s = 2` `input` holds each row's first two raw positions (`[b][2][hidden]`)
    /// and a new frame starts; at every later step the one new raw position of each row
    /// (`[b][hidden]`), the earlier ones read from the frame's cache. Steps come in order, on
    /// the same rows. Returns what [`DepthModel::forward`] of the whole sequences returns
    /// (`all = false`), to rounding (see the module's notes).
    pub fn step(&mut self, backend: &Backend, input: &[f32], s: usize, b: usize) -> Result<DepthOut, GgmlError> {
        let c = &self.cfg;
        let h = c.hidden_size;
        assert!((2..=c.num_codebooks).contains(&s), "depth step to {s} positions");
        let new = step_positions(s).len();
        assert_eq!(input.len(), b * new * h, "depth step input of {} values for {b} x {new} x {h}", input.len());
        if s == 2 && self.cache.as_ref().is_none_or(|k| k.capacity < b) {
            self.cache = None;
            self.cache = Some(FrameCache::new(backend, c, b)?);
        }
        let cache = self.cache.as_mut().expect("a frame starts at step 2");
        if s == 2 {
            (cache.rows, cache.len) = (b, 0);
        }
        assert!(
            cache.rows == b && cache.len == s - new,
            "depth step {s} of {b} rows after {} of {}",
            cache.len,
            cache.rows
        );
        let n_nodes = 64 + c.num_layers * 48;
        let q8_rows = backend.is_cpu();
        let g = self.steps[s - 2].get(b, &[&self.weights, &cache.store], n_nodes, |ctx, graph, stores| {
            ctx.set_q8_row_products(q8_rows);
            let kept = build_step(ctx, graph, c, stores[0], stores[1], s, b);
            graph.expand(kept[1]);
            graph.expand(kept[2]);
            kept
        })?;
        g.tensor(0).write_f32(input);
        if new == 2 {
            g.tensor(3).write_f32(&[0.0, f32::NEG_INFINITY, 0.0, 0.0]);
        }
        g.compute(backend)?;
        cache.len = s;
        let hid = g.tensor(1).read_f32();
        let logits = g.tensor(2).read_f32();
        Ok(DepthOut {
            hidden: hid.chunks(h).map(|r| r.to_vec()).collect(),
            logits: logits.chunks(c.audio_vocab_size).map(|r| r.to_vec()).collect(),
        })
    }

    /// Bytes of the frame cache (none before the first step).
    pub fn frame_cache_bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, |k| k.store.bytes())
    }
}

/// The positions step `s` of a frame computes: the first two at `s = 2`, after that the new
/// one (`s - 1`). What [`DepthModel::step`] takes of each row's sequence.
pub fn step_positions(s: usize) -> std::ops::Range<usize> {
    if s == 2 {
        0..2
    } else {
        s - 1..s
    }
}

/// The graph of step `s` over `b` rows: its new positions (2 at `s = 2`, else 1) written to
/// the frame cache `kv` layer by layer and attending over the cache's first `s` positions.
/// Kept tensors: input, hidden, logits, then the 2 x 2 causal mask of the first step.
fn build_step<'a>(
    ctx: &'a Context,
    graph: &mut Graph<'a>,
    c: &DepthConfig,
    w: &'a TensorStore,
    kv: &'a TensorStore,
    s: usize,
    b: usize,
) -> Vec<Tensor<'a>> {
    let (p0, new) = (step_positions(s).start, step_positions(s).len());
    let (h, ni, bi, si) = (c.hidden_size as i64, new as i64, b as i64, s as i64);
    let (hd, nh) = (c.head_dim() as i64, c.num_attention_heads as i64);
    let input = ctx.new_tensor(GgmlType::F32, &[h, ni * bi]).set_name("depth_step_in").set_input();
    let mask = (new == 2).then(|| ctx.new_tensor(GgmlType::F32, &[2, 2]).set_name("depth_mask").set_input());
    let x = ctx.reshape_3d(ctx.mul_mat(w.get("projection.weight"), input), h, ni, bi);
    let pe = w.get("pos_embedding.weight");
    let mut x = ctx.add(x, ctx.view_2d(pe, h, ni, pe.nb()[1], p0 * pe.nb()[1]));
    for l in 0..c.num_layers {
        let t = |n: &str| w.get(&format!("layers.{l}.{n}"));
        let n = ctx.reshape_2d(rms_norm(ctx, x, t("input_layernorm.weight"), DEPTH_EPS), h, ni * bi);
        // The new keys and values into the cache (`[hidden, positions, rows]`), then every
        // position's as `[hd, S, heads, B]`, as the whole sequence's graph has them.
        let mut cached = Vec::with_capacity(2);
        for (name, wt) in [("k", "attn.to_k.weight"), ("v", "attn.to_v.weight")] {
            let cache = kv.get(&format!("{name}{l}"));
            let [_, nb1, nb2, _] = cache.nb();
            let fresh = ctx.reshape_3d(ctx.mul_mat(t(wt), n), h, ni, bi);
            graph.expand(ctx.cpy(fresh, ctx.view_3d(cache, h, ni, bi, nb1, nb2, p0 * nb1)));
            let all = ctx.view_4d(cache, [hd, nh, si, bi], cache.ty().row_size(hd as usize), nb1, nb2, 0);
            cached.push(ctx.permute(all, [0, 2, 1, 3]));
        }
        let q = ctx.permute(ctx.reshape_4d(ctx.mul_mat(t("attn.to_q.weight"), n), hd, nh, ni, bi), [0, 2, 1, 3]);
        x = attend_and_mlp(ctx, w, l, x, [q, cached[0], cached[1]], mask);
    }
    let [_, last, logits] = norm_and_head(ctx, w, x, s);
    let hidden = last.set_name("depth_hidden").set_output();
    let mut kept = vec![input, hidden, logits];
    kept.extend(mask);
    kept
}

/// The graph of `b` sequences of `s` positions. Kept tensors: input, mask, hidden, logits.
fn build<'a>(ctx: &'a Context, c: &DepthConfig, w: &'a TensorStore, s: usize, b: usize, all: bool) -> Vec<Tensor<'a>> {
    let (h, si, bi) = (c.hidden_size as i64, s as i64, b as i64);
    let (hd, nh) = (c.head_dim() as i64, c.num_attention_heads as i64);
    let input = ctx.new_tensor(GgmlType::F32, &[h, si * bi]).set_name("depth_in").set_input();
    let mask = ctx.new_tensor(GgmlType::F32, &[si, si]).set_name("depth_mask").set_input();
    let x = ctx.reshape_3d(ctx.mul_mat(w.get("projection.weight"), input), h, si, bi);
    let pe = w.get("pos_embedding.weight");
    let mut x = ctx.add(x, ctx.view_2d(pe, h, si, pe.nb()[1], 0));
    for l in 0..c.num_layers {
        let t = |n: &str| w.get(&format!("layers.{l}.{n}"));
        let n = ctx.reshape_2d(rms_norm(ctx, x, t("input_layernorm.weight"), DEPTH_EPS), h, si * bi);
        // [hd, S, heads, B] each.
        let heads = |wt: Tensor<'a>| ctx.permute(ctx.reshape_4d(ctx.mul_mat(wt, n), hd, nh, si, bi), [0, 2, 1, 3]);
        let qkv = [heads(t("attn.to_q.weight")), heads(t("attn.to_k.weight")), heads(t("attn.to_v.weight"))];
        x = attend_and_mlp(ctx, w, l, x, qkv, Some(mask));
    }
    let [y, last, logits] = norm_and_head(ctx, w, x, s);
    let hidden = if all { ctx.cont(y) } else { last }.set_name("depth_hidden").set_output();
    vec![input, mask, hidden, logits]
}

/// The rest of layer `l` once its queries (`[hd, new, heads, B]`) and every position's keys
/// and values (`[hd, S, heads, B]`) are there: the attention (scale `1 / sqrt(hd)`), the output
/// projection and its residual onto `x` (`[hidden, new, B]`), then the MLP and its residual.
fn attend_and_mlp<'a>(
    ctx: &'a Context,
    w: &'a TensorStore,
    l: usize,
    x: Tensor<'a>,
    [q, k, v]: [Tensor<'a>; 3],
    mask: Option<Tensor<'a>>,
) -> Tensor<'a> {
    let t = |n: &str| w.get(&format!("layers.{l}.{n}"));
    let [hd, nq, nh, b] = q.ne();
    let scale = 1.0 / (hd as f32).sqrt();
    let kq = ctx.soft_max_ext(ctx.mul_mat(ctx.cont(k), ctx.cont(q)), mask, scale); // [S, new, heads, B]
    let vt = ctx.cont(ctx.permute(v, [1, 0, 2, 3])); // [S, hd, heads, B]
    let a = ctx.mul_mat(vt, kq); // [hd, new, heads, B]
    let a = ctx.reshape_2d(ctx.cont(ctx.permute(a, [0, 2, 1, 3])), hd * nh, nq * b);
    let x = ctx.add(x, ctx.reshape_3d(ctx.mul_mat(t("attn.to_out.weight"), a), hd * nh, nq, b));
    let n = rms_norm(ctx, x, t("post_attention_layernorm.weight"), DEPTH_EPS);
    let mlp = ctx.mul_mat(
        t("down_proj.weight"),
        ctx.swiglu(ctx.mul_mat(t("gate_proj.weight"), n), ctx.mul_mat(t("up_proj.weight"), n)),
    );
    ctx.add(x, mlp)
}

/// The final norm of `x` (`[hidden, n, B]`), its last position, and that position's logits of
/// `audio_heads[s-2]`.
fn norm_and_head<'a>(ctx: &'a Context, w: &'a TensorStore, x: Tensor<'a>, s: usize) -> [Tensor<'a>; 3] {
    let [h, n, b, _] = x.ne();
    let y = rms_norm(ctx, x, w.get("norm.weight"), DEPTH_EPS);
    let last = ctx.cont(ctx.view_2d(y, h, b, y.nb()[2], (n as usize - 1) * y.nb()[1]));
    let logits =
        ctx.mul_mat(w.get(&format!("audio_heads.{}.weight", s - 2)), last).set_name("depth_logits").set_output();
    [y, last, logits]
}
