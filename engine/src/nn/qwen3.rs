//! The Qwen3 decoder layer: pre-norm attention with RMS-normalised q and k (before NeoX
//! RoPE) over grouped KV heads, then a pre-norm SwiGLU MLP, each added to the residual.
//!
//! The attention itself is the caller's: the YuE2 AR half writes the new K/V into a KV set
//! and attends over a masked window of it, the NAR half attends over the cached window and
//! its own block without writing. [`Qwen3Layer::forward`] hands the projected, normalised,
//! rotated q, k and v to a closure and adds its output, through `o_proj`, to the residual.
use super::rms_norm;
use crate::ggml::{Context, Tensor};

/// The dimensions a layer's graph needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen3Dims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub rope_theta: f32,
}

/// What each tensor of a layer is, for a family's name map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    AttnNorm,
    Q,
    K,
    V,
    O,
    QNorm,
    KNorm,
    MlpNorm,
    Gate,
    Up,
    Down,
}

impl Role {
    pub const ALL: [Role; 11] = [
        Role::AttnNorm,
        Role::Q,
        Role::K,
        Role::V,
        Role::O,
        Role::QNorm,
        Role::KNorm,
        Role::MlpNorm,
        Role::Gate,
        Role::Up,
        Role::Down,
    ];
}

/// The tensor names of a Hugging Face Qwen3 checkpoint (both families keep them verbatim
/// in their GGUFs).
pub mod hf {
    use super::Role;
    pub const EMBED: &str = "model.embed_tokens.weight";
    pub const NORM: &str = "model.norm.weight";
    pub const LM_HEAD: &str = "lm_head.weight";
    /// Per-layer tensors after `model.layers.{l}.`, in the order of [`Role::ALL`].
    pub const LAYER: [&str; 11] = [
        "input_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ];

    /// Layer `l`'s tensor of `role`.
    pub fn layer_role(l: usize, role: Role) -> String {
        format!("model.layers.{l}.{}", LAYER[role as usize])
    }
}

/// One layer's weights (handles into a loaded store).
#[derive(Clone, Copy)]
pub struct Qwen3Layer<'a> {
    pub attn_norm: Tensor<'a>,
    pub q: Tensor<'a>,
    pub k: Tensor<'a>,
    pub v: Tensor<'a>,
    pub o: Tensor<'a>,
    pub q_norm: Tensor<'a>,
    pub k_norm: Tensor<'a>,
    pub mlp_norm: Tensor<'a>,
    pub gate: Tensor<'a>,
    pub up: Tensor<'a>,
    pub down: Tensor<'a>,
}

impl<'a> Qwen3Layer<'a> {
    /// The layer whose tensors `get` returns by role.
    pub fn from_fn(get: impl Fn(Role) -> Tensor<'a>) -> Self {
        Qwen3Layer {
            attn_norm: get(Role::AttnNorm),
            q: get(Role::Q),
            k: get(Role::K),
            v: get(Role::V),
            o: get(Role::O),
            q_norm: get(Role::QNorm),
            k_norm: get(Role::KNorm),
            mlp_norm: get(Role::MlpNorm),
            gate: get(Role::Gate),
            up: get(Role::Up),
            down: get(Role::Down),
        }
    }

    /// `x` ([hidden, rows]) through the layer; `pos` ([rows] I32) are the RoPE positions and
    /// `attend(q, k, v)` ([head_dim, heads|kv_heads, rows] each) returns the attention output
    /// as [heads x head_dim, rows].
    pub fn forward(
        &self,
        ctx: &'a Context,
        d: &Qwen3Dims,
        x: Tensor<'a>,
        pos: Tensor<'a>,
        attend: impl FnOnce(Tensor<'a>, Tensor<'a>, Tensor<'a>) -> Tensor<'a>,
    ) -> Tensor<'a> {
        let (q, k, v) = self.qkv(ctx, d, rms_norm(ctx, x, self.attn_norm, d.eps), pos);
        let x = ctx.add(x, ctx.mul_mat(self.o, attend(q, k, v)));
        let h = rms_norm(ctx, x, self.mlp_norm, d.eps);
        ctx.add(x, self.mlp(ctx, h))
    }

    /// The projections of `h` ([hidden, rows]): q, k with their RMS norms and NeoX RoPE at
    /// `pos`, and v; each [head_dim, heads, rows].
    pub fn qkv(
        &self,
        ctx: &'a Context,
        d: &Qwen3Dims,
        h: Tensor<'a>,
        pos: Tensor<'a>,
    ) -> (Tensor<'a>, Tensor<'a>, Tensor<'a>) {
        let rows = h.ne()[1];
        let (hd, nh, nkv) = (d.head_dim as i64, d.heads as i64, d.kv_heads as i64);
        let q = ctx.reshape_3d(ctx.mul_mat(self.q, h), hd, nh, rows);
        let k = ctx.reshape_3d(ctx.mul_mat(self.k, h), hd, nkv, rows);
        let v = ctx.reshape_3d(ctx.mul_mat(self.v, h), hd, nkv, rows);
        let q = ctx.rope_neox(rms_norm(ctx, q, self.q_norm, d.eps), pos, hd as i32, d.rope_theta);
        let k = ctx.rope_neox(rms_norm(ctx, k, self.k_norm, d.eps), pos, hd as i32, d.rope_theta);
        (q, k, v)
    }

    /// The SwiGLU MLP: `down(silu(gate(h)) * up(h))`.
    pub fn mlp(&self, ctx: &'a Context, h: Tensor<'a>) -> Tensor<'a> {
        ctx.mul_mat(self.down, ctx.swiglu(ctx.mul_mat(self.gate, h), ctx.mul_mat(self.up, h)))
    }
}
