//! YuE2 (yue2.cpp's architecture reference): a Qwen3 backbone whose AR half writes an ABC score and 25 Hz semantic
//! codes and whose NAR half paints latents by flow matching over that cache, then an Oobleck
//! VAE to 48 kHz stereo.
//!
//! - [`settings`]: what a job asks of the engine;
//! - [`config`]: the hyper-parameters and token layout read from a backbone GGUF;
//! - [`prompt`]: the id streams of each cot mode;
//! - [`ar`], [`nar`], [`vae`]: the modules; [`generate`]: the AR stages; [`pipeline`]: the song;
//! - [`demo`]: deterministic random-weight models of the exact architecture;
//! - [`convert`], [`export_qwen3`]: checkpoint conversion and the llama.cpp export;
//! - [`adapter`]: LoRA adapters merged into the halves they change.
pub mod abc_check;
pub mod adapter;
pub mod ar;
pub mod config;
pub mod convert;
pub mod demo;
pub mod export_qwen3;
pub mod generate;
pub mod nar;
pub mod pipeline;
pub mod prompt;
pub mod settings;
pub mod vae;
pub mod vae_layout;
