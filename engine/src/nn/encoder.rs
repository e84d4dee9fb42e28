//! Blocks of the bidirectional encoders (MERT-v2's conformer and ConvNeXt stages, the audio
//! tokenizer's head): an affine linear map and a LayerNorm read from a weight store by their
//! checkpoint names, and softmax attention without a mask. Activations are channel-innermost,
//! `[C, T]`, so a linear map is one matrix product over every frame.
use crate::ggml::{Context, Tensor, TensorStore};

/// Weights by name, over one graph.
#[derive(Clone, Copy)]
pub struct Blocks<'a> {
    pub ctx: &'a Context,
    pub w: &'a TensorStore,
}

impl<'a> Blocks<'a> {
    /// `{p}.weight · x`, plus `{p}.bias` when the store holds one.
    pub fn linear(&self, p: &str, x: Tensor<'a>) -> Tensor<'a> {
        let y = self.ctx.mul_mat(self.w.get(&format!("{p}.weight")), x);
        let bias = format!("{p}.bias");
        if self.w.contains(&bias) {
            self.ctx.add(y, self.w.get(&bias))
        } else {
            y
        }
    }

    /// LayerNorm over the channels with `{p}.weight` and `{p}.bias`.
    pub fn layer_norm(&self, p: &str, x: Tensor<'a>, eps: f32) -> Tensor<'a> {
        let ctx = self.ctx;
        ctx.add(ctx.mul(ctx.norm(x, eps), self.w.get(&format!("{p}.weight"))), self.w.get(&format!("{p}.bias")))
    }
}

/// Softmax attention of every frame over every frame, `1 / sqrt(head_dim)` scaled: `q`, `k`,
/// `v` [head_dim, heads, T] -> [head_dim * heads, T].
pub fn attention<'a>(ctx: &'a Context, q: Tensor<'a>, k: Tensor<'a>, v: Tensor<'a>) -> Tensor<'a> {
    let [hd, heads, t, _] = q.ne();
    let per_head = |x| ctx.cont(ctx.permute(x, [0, 2, 1, 3])); // [hd, T, heads]
    let (q, k) = (per_head(q), per_head(k));
    let vt = ctx.cont(ctx.permute(v, [1, 2, 0, 3])); // [T, hd, heads]
    let scores = ctx.soft_max_ext(ctx.mul_mat(k, q), None, 1.0 / (hd as f32).sqrt()); // [T_k, T_q, heads]
    let out = ctx.mul_mat(vt, scores); // [hd, T_q, heads]
    ctx.reshape_2d(ctx.cont(ctx.permute(out, [0, 2, 1, 3])), hd * heads, t)
}
