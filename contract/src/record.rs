//! Everything kept about a job, as the single node's journal and the cluster's state
//! bucket store it.
use crate::submission::{SongCodes, VaeTask};
use serde::{Deserialize, Serialize};
use yued_protocol::{JobId, JobMetrics, JobState, Request, Stage};

/// A running job's place: its stage, and the steps done of the stage's total.
pub type StageProgress = (Stage, usize, usize);

/// The record layout this release writes. 1 (no `version` key): the request was a YuE2
/// request's fields alone; 2: the request names its family (`"family": "yue2"`); 3: the
/// client is a principal id, never a raw API key.
pub const RECORD_VERSION: u32 = 3;

/// Everything the daemon keeps about a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The layout of the record ([`RECORD_VERSION`] when written by this release).
    pub version: u32,
    pub id: JobId,
    /// The principal the job belongs to (its owner and fairness key): a key's name or hash
    /// id, or the peer address on a box without keys. Never a key.
    pub client: String,
    /// The request with its seeds resolved, of its family.
    pub request: Request,
    pub state: JobState,
    /// Unix milliseconds.
    pub submitted_ms: u64,
    #[serde(default)]
    pub songs: Vec<SongCodes>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub metrics: Option<JobMetrics>,
    #[serde(default)]
    pub tracks: u32,
    #[serde(default)]
    pub audio_seconds: f64,
    /// Set for a `/vae` job (the request then only carries the decode's output options).
    #[serde(default)]
    pub vae: Option<VaeTask>,
    /// Starts of the daemon that found this job running: each is a crash (or a kill) while
    /// it ran, since a clean shutdown puts a running job back in the queue. A job that
    /// reaches [`MAX_CRASHES`] is failed instead of resumed into the same crash.
    #[serde(default)]
    pub crashes: u32,
    /// Times the job resumed from its journaled codes (the replay path: no sampling).
    #[serde(default)]
    pub resumed: u32,
}

/// Crashes while running after which a job is failed rather than resumed: the first
/// crash may be anything (a kill, a power cut), the resume's crash too says it is the job.
pub const MAX_CRASHES: u32 = 2;
