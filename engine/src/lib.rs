//! yued's numeric engine: everything that computes, on GGML, with no actix and no HTTP.
//!
//! - [`ggml`]: the one safe layer over the C API (every `unsafe` of the project is there);
//! - [`gguf`]: reading and writing model files;
//! - [`tokenizer`]: the byte-level BPE built from a GGUF's `tokenizer.ggml.*` metadata;
//! - [`model`]: the YuE2 hyper-parameters and token layout read from a backbone GGUF;
//! - [`demo`]: deterministic random-weight models of the exact architecture;
//! - [`quantize`]: the per-tensor quantization policy of the seed.

pub mod abc_check;
pub mod ar;
pub mod convert;
pub mod demo;
pub mod export_qwen3;
pub mod ggml;
pub mod generate;
pub mod gguf;
pub mod kv_cache;
pub mod latent;
pub mod model;
pub mod nar;
pub mod pipeline;
pub mod prompt;
pub mod quantize;
pub mod rng;
pub mod sampling;
pub mod tokenizer;
pub mod weights;
pub mod vae;
pub mod vae_layout;
