//! MERT-v2-FullSong, the audio encoder YuE2's listening tools run on (yue2.cpp's architecture
//! reference, "Audio tokenizer"; `docs/design/listening-part1.md`): 24 kHz mono in, 25 Hz
//! hidden states out. Its configuration ([`config`]), its front end ([`frontend`], the
//! log-mel spectrogram, on the host), the encoder's graph ([`model`]) and the checkpoint's
//! converter ([`convert`]).
pub mod config;
pub mod convert;
pub mod frontend;
pub mod model;

#[cfg(test)]
pub(crate) mod fixture;
