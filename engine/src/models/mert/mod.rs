//! MERT-v2-FullSong, the audio encoder YuE2's listening tools run on (yue2.cpp's architecture
//! reference, "Audio tokenizer"; `docs/design/listening-part1.md`): 24 kHz mono in, 25 Hz
//! hidden states out. So far its configuration ([`config`]) and its front end ([`frontend`]),
//! the log-mel spectrogram the encoder reads.
pub mod config;
pub mod frontend;
