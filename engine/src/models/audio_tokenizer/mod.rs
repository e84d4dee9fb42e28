//! The audio tokenizer (Mothersuperior's v9 head on MERT-v2's 21st conformer state, yue2.cpp's
//! architecture reference, "Audio tokenizer"; `docs/design/listening-part1.md`, section 5): a
//! recording in, the 25 Hz semantic codes a YuE2 request's `semantic_tokens` or
//! `source_tokens` take out. The host side of its pipeline ([`plan`]: the MERT chunks, the
//! resampling onto the code grid, the standardisation, the head's windows), the head's graph
//! ([`head`]), the two run step by step ([`pipeline`]), the head's converter ([`convert`]) and
//! the random-weight demo ([`demo`]).
pub mod convert;
pub mod demo;
pub mod head;
pub mod pipeline;
pub mod plan;
