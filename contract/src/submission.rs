//! A job as it is admitted, and why it may not be.
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use yued_protocol::{JobId, Request};

/// A new job. `request` is validated and its seeds resolved by the caller.
#[derive(Clone, Debug)]
pub struct Submission {
    /// The principal it belongs to ([`crate::tenancy::Principal::id`]): its owner, and its
    /// place in the fair queue. Never a key.
    pub client: String,
    pub request: Request,
    /// Set for a job of an upload (`/vae`, `/tokenize`); its upload is already on disk.
    pub upload: Option<UploadTask>,
    /// The id the job already has elsewhere (a cluster worker runs the cluster's job under
    /// its id); `None`: a random one is drawn.
    pub id: Option<JobId>,
    /// Songs whose codes are already known (a cluster job resumed on another worker).
    pub songs: Vec<SongCodes>,
    /// When the job was submitted (Unix ms) where that was elsewhere: a cluster job's first
    /// start measures its queue wait from it. `None`: now, or not to be measured again.
    pub submitted_ms: Option<u64>,
}

impl Submission {
    /// A new job of this process.
    pub fn new(client: String, request: Request, upload: Option<UploadTask>) -> Self {
        Submission { client, request, upload, id: None, songs: vec![], submitted_ms: None }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is at its admission cap of {0} jobs; retry later")]
    Full(usize),
    /// The principal already holds its share of the admission cap (others still get in).
    #[error("you have {0} jobs queued or running, your share of this server's admission cap; retry when one ends")]
    OverShare(usize),
    /// The cap's last free place is kept for a principal that holds no job, so that every
    /// principal that shows up gets in while any place is free.
    #[error(
        "this server's last free place under its admission cap is kept for a client that holds no job; retry when \
        one of yours ends"
    )]
    KeptForOthers,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("journal: {0}")]
    Journal(String),
    /// The job system is not answering (a stopped actor, a lost cluster connection).
    #[error("{0}")]
    Unavailable(String),
}

/// A song whose semantic stream is known (resume renders it through the replay path).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SongCodes {
    pub song: u32,
    pub abc: String,
    pub codes: Vec<u32>,
}

/// What a job of an upload does with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadOp {
    /// `/vae`: audio to latents.
    Encode,
    /// `/vae`: latents (raw f32 `[T, 64]`) to audio in the request's output format.
    Decode,
    /// `/tokenize`: a recording to the audio tokenizer's 25 Hz semantic codes.
    Tokenize,
    /// `/transcribe`: a recording to the SheetSage2 transcriber's ABC score.
    Transcribe,
    /// `/transcribe` with `melody_only`: the score's melodies without chord symbols.
    #[serde(rename = "transcribe_melody")]
    TranscribeMelody,
}

impl UploadOp {
    /// The stage its job shows while it runs (and while it waits for its tool).
    pub fn stage(self) -> yued_protocol::Stage {
        use yued_protocol::Stage;
        match self {
            UploadOp::Encode => Stage::Encode,
            UploadOp::Decode => Stage::Decode,
            UploadOp::Tokenize => Stage::Tokenize,
            UploadOp::Transcribe | UploadOp::TranscribeMelody => Stage::Transcribe,
        }
    }

    /// Whether the family's VAE runs it (else a listening tool does).
    pub fn is_vae(self) -> bool {
        matches!(self, UploadOp::Encode | UploadOp::Decode)
    }
}

/// A job of an upload (`/vae`, `/tokenize`, `/transcribe`): the upload, kept on disk under the data
/// directory until the job ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UploadTask {
    pub op: UploadOp,
    pub input: PathBuf,
}
