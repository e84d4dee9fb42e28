//! The convolution blocks of the Oobleck / DAC autoencoders both families decode with
//! (YuE2's VAE, MiniMax Music 3's flow VAE and its encoder): the snake activation, a
//! biased 1-D convolution, a transposed one cropped to the stride, and the dilated residual
//! unit. Time is the innermost dimension (`[T, C]`).
use crate::ggml::{Context, Tensor, TensorStore};

/// The blocks over one graph and one weight store. `snake_inv` names the snake's
/// precomputed inverse beta under a snake prefix (`inv_b` in YuE2's files, `inv` in
/// MiniMax's).
#[derive(Clone, Copy)]
pub struct Blocks<'a> {
    pub ctx: &'a Context,
    pub w: &'a TensorStore,
    pub snake_inv: &'static str,
}

impl<'a> Blocks<'a> {
    /// `x + sin²(αx) / β` per channel.
    pub fn snake(&self, p: &str, x: Tensor<'a>) -> Tensor<'a> {
        let (ctx, w) = (self.ctx, self.w);
        let s2 = ctx.sqr(ctx.sin(ctx.mul(x, w.get(&format!("{p}.a")))));
        ctx.add(x, ctx.mul(s2, w.get(&format!("{p}.{}", self.snake_inv))))
    }

    /// `{p}.weight` convolved over `x`, plus `{p}.bias`.
    pub fn conv(&self, p: &str, x: Tensor<'a>, stride: i32, pad: i32, dil: i32) -> Tensor<'a> {
        let (ctx, w) = (self.ctx, self.w);
        let y = ctx.conv_1d_f32(w.get(&format!("{p}.weight")), x, stride, pad, dil);
        let y = ctx.reshape_2d(y, y.ne()[0], y.ne()[1]);
        ctx.add(y, w.get(&format!("{p}.bias")))
    }

    /// The transposed convolution of stride `s`, cropped by `ceil(s / 2)` on each side.
    pub fn conv_t(&self, p: &str, x: Tensor<'a>, s: usize) -> Tensor<'a> {
        let (ctx, w) = (self.ctx, self.w);
        let full = ctx.conv_transpose_1d(w.get(&format!("{p}.weight")), x, s as i32);
        let crop = s.div_ceil(2);
        let len = full.ne()[0] - 2 * crop as i64;
        let v = ctx.view_2d(full, len, full.ne()[1], full.nb()[1], crop * full.nb()[0]);
        ctx.add(ctx.cont(v), w.get(&format!("{p}.bias")))
    }

    /// snake → conv k7 (dilation `d`) → snake → conv k1, added to `x`.
    pub fn res_unit(&self, p: &str, x: Tensor<'a>, d: usize) -> Tensor<'a> {
        let y = self.snake(&format!("{p}.snake1"), x);
        let y = self.conv(&format!("{p}.conv1"), y, 1, 3 * d as i32, d as i32);
        let y = self.snake(&format!("{p}.snake2"), y);
        let y = self.conv(&format!("{p}.conv2"), y, 1, 0, 1);
        self.ctx.add(x, y)
    }
}
