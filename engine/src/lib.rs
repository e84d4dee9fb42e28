//! yued's numeric engine: everything that computes, on GGML, with no actix and no HTTP.
//!
//! Shared by every family:
//! - [`ggml`]: the one safe layer over the C API (every `unsafe` of the project is there);
//! - [`gguf`]: reading and writing model files; [`weights`]: loading tensors onto a backend;
//! - [`nn`]: the building blocks the families' graphs share (the Qwen3 decoder layer);
//! - [`kv_cache`]: KV cache sets; [`tokenizer`]: the byte-level BPE of a GGUF;
//! - [`rng`], [`sampling`]: the random streams and the token sampler;
//! - [`latent`]: latent files;
//! - [`registry`]: the model files of a directory, by architecture.
//!
//! One folder per model family under [`models`].
// Every unsafe block is in the ggml layer; nothing else may have one.
#![deny(unsafe_code)]

pub mod cancel;
#[allow(unsafe_code)]
pub mod ggml;
pub mod gguf;
pub mod kv_cache;
pub mod latent;
pub mod models;
pub mod nn;
pub mod registry;
pub mod rng;
pub mod sampling;
#[cfg(test)]
mod test_util;
pub mod tokenizer;
pub mod weights;
