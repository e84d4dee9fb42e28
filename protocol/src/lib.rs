//! Wire types shared by the `yued` daemon and its clients.
//!
//! Everything that crosses the HTTP or WebSocket boundary is defined here once, so the
//! daemon, the Rust client and the tests cannot drift apart. The crate carries no HTTP or
//! actor code: it is plain serde types plus the request validation both sides rely on.
#![forbid(unsafe_code)]

pub mod error;
pub mod job;
pub mod props;
pub mod request;
pub mod stream;

pub use error::ErrorBody;
pub use job::{
    CancelReply, InvalidJobId, JobId, JobList, JobListEntry, JobMetrics, JobState, JobStatus, Stage, SubmitReply,
    JOB_METRICS_SCHEMA,
};
pub use props::{AdapterInfo, OutputFormatInfo, Props};
pub use request::{
    parse_codes, AdapterRef, CotMode, Family, Limits, Mm3Codebooks, Mm3Request, OutputFormat, Request, RequestError,
    SamplingPreset, Yue2Request, CODEBOOK_SIZE, DEFAULT_CONTEXT, MAX_PLAN_RETRIES, MAX_SYNTH_BATCH, MP3_BITRATE_MAX,
    MP3_BITRATE_MIN, PEAK_CLIP_MAX, RANDOM_SEED, RANDOM_SEED_LIMIT,
};
pub use stream::{StreamCodec, StreamCommand, StreamEvent};

pub use request::yue2::{FRAME_RATE, LATENT_CHANNELS, SAMPLES_PER_FRAME, SAMPLE_RATE};

/// Boundary of the `multipart/mixed` body returned by `GET /job?id=N&result=1`.
pub const MULTIPART_BOUNDARY: &str = "yue2-batch-boundary";
/// The boundary of a MiniMax Music 3 job's result (minimaxmusic.cpp's server).
pub const MM3_MULTIPART_BOUNDARY: &str = "mm3-batch-boundary";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_constants_agree() {
        assert_eq!(SAMPLE_RATE / FRAME_RATE, SAMPLES_PER_FRAME);
        assert_eq!(SAMPLES_PER_FRAME, 1920);
        assert_eq!(LATENT_CHANNELS, 64);
        assert_eq!(MULTIPART_BOUNDARY, "yue2-batch-boundary");
    }
}
