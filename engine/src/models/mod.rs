//! The model families, one folder each: config, prompt, each module, the pipeline; and what
//! spans them: the quantizer with each architecture's policy ([`quantize`]).
pub mod audio_tokenizer;
pub mod checkpoint;
pub mod mert;
pub mod mm3;
pub mod pth;
pub mod quantize;
pub mod sheetsage2;
pub mod yue2;

/// A family's audio as the stages see it, read from the loaded files: the stages, the hub,
/// the encoder and the HTTP layer take rates from here, never from a family's literals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AudioSpec {
    /// Output sample rate, in Hz.
    pub sample_rate: u32,
    /// Output channels.
    pub channels: usize,
    /// Width of one latent frame.
    pub latent_channels: usize,
    /// Output samples per latent frame (the decoder's hop).
    pub samples_per_latent: usize,
    /// Codes the AR half writes per second (YuE2: one per latent frame, 25 Hz; MiniMax Music
    /// 3: 25 Hz codes beside 86.13 Hz latents).
    pub code_rate: f64,
}

impl AudioSpec {
    /// Latent frames per second.
    pub fn latent_rate(&self) -> f64 {
        self.sample_rate as f64 / self.samples_per_latent as f64
    }
    /// Seconds of audio of `frames` latent frames.
    pub fn latent_seconds(&self, frames: usize) -> f64 {
        frames as f64 / self.latent_rate()
    }
    /// Seconds of audio of `codes` AR codes.
    pub fn code_seconds(&self, codes: usize) -> f64 {
        codes as f64 / self.code_rate
    }
}
