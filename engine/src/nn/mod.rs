//! Building blocks the families share, written once: the causal Qwen3 LM over KV sets
//! ([`causal_lm`]) and its decode steps shared across jobs ([`batch`]), the Qwen3 decoder
//! layer and its Hugging Face tensor names ([`qwen3`]; the YuE2 AR half, the YuE2 NAR half
//! and the MiniMax LM are all Qwen3 stacks), the llama.cpp export of a Qwen3
//! ([`export_qwen3`]), the LoRA merge ([`lora`]), the Oobleck / DAC VAE blocks ([`oobleck`]),
//! the demo models' random weights ([`demo`]), the bidirectional encoders' linear maps,
//! LayerNorms and attention ([`encoder`]) and RMSNorm. No module here imports a family.
pub mod batch;
pub mod causal_lm;
pub mod demo;
pub mod encoder;
pub mod export_qwen3;
pub mod lora;
pub mod oobleck;
pub mod qwen3;

use crate::ggml::{Context, Tensor};

/// RMSNorm with a learned scale: `x / rms(x) * w` over the innermost dimension.
pub fn rms_norm<'a>(ctx: &'a Context, x: Tensor<'a>, w: Tensor<'a>, eps: f32) -> Tensor<'a> {
    ctx.mul(ctx.rms_norm(x, eps), w)
}
