//! The RVQ depth decoder: a small causal transformer over the codebook positions of one
//! 25 Hz frame.
//!
//! The sequence of a frame is `[proj(LM last hidden), proj(LM_embed(semantic)),
//! proj(audio_emb(c_1)), ...]` with the learned position embedding added after the
//! projection; 4 pre-norm layers of causal multi-head attention without RoPE (scale
//! `1 / sqrt(head_dim)`) and a SwiGLU MLP; a final RMSNorm. A sequence of length S predicts
//! acoustic code S-1 through `audio_heads[S-2]`. Like the reference, every step runs the
//! whole sequence again (S is at most 8: there is no cache to keep).
use crate::ggml::{Backend, Context, GgmlError, GgmlType, GraphCache, Tensor, TensorStore};
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
        let graphs = (0..4 * (cfg.num_codebooks + 1)).map(|_| GraphCache::new(backend, "depth decoder step")).collect();
        Ok(DepthModel { cfg, weights, graphs })
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
        let g = self.graphs[slot].get((s, b, all), &[&self.weights], n_nodes, |ctx, graph, stores| {
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
    let scale = 1.0 / (hd as f32).sqrt();
    for l in 0..c.num_layers {
        let t = |n: &str| w.get(&format!("layers.{l}.{n}"));
        let n = ctx.reshape_2d(rms_norm(ctx, x, t("input_layernorm.weight"), DEPTH_EPS), h, si * bi);
        // [hd, S, heads, B] each.
        let heads = |wt: Tensor<'a>| ctx.permute(ctx.reshape_4d(ctx.mul_mat(wt, n), hd, nh, si, bi), [0, 2, 1, 3]);
        let (q, k, v) = (heads(t("attn.to_q.weight")), heads(t("attn.to_k.weight")), heads(t("attn.to_v.weight")));
        let kq = ctx.soft_max_ext(ctx.mul_mat(ctx.cont(k), ctx.cont(q)), Some(mask), scale); // [S_k, S_q, heads, B]
        let vt = ctx.cont(ctx.permute(v, [1, 0, 2, 3])); // [S, hd, heads, B]
        let a = ctx.mul_mat(vt, kq); // [hd, S_q, heads, B]
        let a = ctx.reshape_2d(ctx.cont(ctx.permute(a, [0, 2, 1, 3])), h, si * bi);
        x = ctx.add(x, ctx.reshape_3d(ctx.mul_mat(t("attn.to_out.weight"), a), h, si, bi));
        let n = rms_norm(ctx, x, t("post_attention_layernorm.weight"), DEPTH_EPS);
        let mlp = ctx.mul_mat(
            t("down_proj.weight"),
            ctx.swiglu(ctx.mul_mat(t("gate_proj.weight"), n), ctx.mul_mat(t("up_proj.weight"), n)),
        );
        x = ctx.add(x, mlp);
    }
    let y = rms_norm(ctx, x, w.get("norm.weight"), DEPTH_EPS); // [h, S, B]
    let last = ctx.cont(ctx.view_2d(y, h, bi, y.nb()[2], (s - 1) * y.nb()[1]));
    let logits =
        ctx.mul_mat(w.get(&format!("audio_heads.{}.weight", s - 2)), last).set_name("depth_logits").set_output();
    let hidden = if all { ctx.cont(y) } else { last }.set_name("depth_hidden").set_output();
    vec![input, mask, hidden, logits]
}
