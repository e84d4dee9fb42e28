//! MiniMax Music 3 (minimaxmusic.cpp's architecture reference): a Qwen3 LM writes a semantic code per 25 Hz frame, an
//! RVQ
//! depth decoder the frame's 7 acoustic codes; a condition encoder, a flow-matching DiT and
//! a flow VAE turn their hidden states into 44.1 kHz stereo. One module per file: the
//! configuration, the prompt, the LM, the depth decoder, the AR loop (`compose`), the
//! checkpoint converter and the demo weights.
pub mod compose;
pub mod cond;
pub mod config;
pub mod convert;
pub mod demo;
pub mod depth;
pub mod dit;
pub mod lm;
pub mod pipeline;
pub mod prompt;
pub mod synth;
pub mod vae;
pub mod vae_enc;

#[cfg(test)]
mod parity;
#[cfg(test)]
mod synth_parity;
#[cfg(test)]
mod tests;
