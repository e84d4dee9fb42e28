//! Everything kept about a job, as the single node's journal and the cluster's state
//! bucket store it.
use crate::submission::{SongCodes, UploadTask};
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
    /// Set for a job of an upload, `/vae` or `/tokenize` (the request then only carries a
    /// decode's output options). Journals before the listening tools named it `vae`.
    #[serde(default, alias = "vae")]
    pub upload: Option<UploadTask>,
    /// Starts of the daemon that found this job running: each is a crash (or a kill) while
    /// it ran, since a clean shutdown puts a running job back in the queue. A job that
    /// reaches [`MAX_CRASHES`] is failed instead of resumed into the same crash.
    #[serde(default)]
    pub crashes: u32,
    /// Times the job resumed from its journaled codes (the replay path: no sampling).
    #[serde(default)]
    pub resumed: u32,
    /// A cancel was asked while the job ran (journaled before it was answered): a job found
    /// running at a start with this set is cancelled, not resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_asked: bool,
    /// A clean shutdown put it back in the queue while it ran: its waits (in the queue, for
    /// its first audio) were measured then, not again at the next start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

impl JobRecord {
    /// The job as `GET /jobs` lists it; `owner`: naming its principal (an admin's list).
    pub fn list_entry(&self, owner: bool) -> yued_protocol::JobListEntry {
        let upload = self.upload.as_ref().and_then(|u| serde_json::to_value(u.op).ok());
        yued_protocol::JobListEntry {
            id: self.id.clone(),
            family: self.request.family(),
            status: self.state,
            submitted_ms: self.submitted_ms,
            request: if self.upload.is_some() { None } else { serde_json::to_value(&self.request).ok() },
            upload: upload.and_then(|v| v.as_str().map(str::to_string)),
            owner: owner.then(|| self.client.clone()),
        }
    }
}

/// Crashes while running after which a job is failed rather than resumed: the first
/// crash may be anything (a kill, a power cut), the resume's crash too says it is the job.
pub const MAX_CRASHES: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::submission::UploadOp;

    #[test]
    fn a_journal_of_before_the_listening_tools_reads_its_vae_jobs_as_uploads() {
        let old = r#"{"version": 3, "id": "00112233aabbccdd", "client": "k", "request": {"family": "yue2"},
            "state": "queued", "submitted_ms": 1, "vae": {"op": "encode", "input": "/d/x.upload"}}"#;
        let r: JobRecord = serde_json::from_str(old).unwrap();
        assert_eq!(r.upload.as_ref().map(|u| u.op), Some(UploadOp::Encode));
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["upload"]["op"], "encode");
        assert_eq!(r.list_entry(false).upload.as_deref(), Some("encode"));
        let tokenize = UploadTask { op: UploadOp::Tokenize, input: "/d/y.upload".into() };
        let r = JobRecord { upload: Some(tokenize), ..r };
        let entry = r.list_entry(true);
        assert_eq!(
            (entry.upload.as_deref(), entry.request, entry.owner.as_deref()),
            (Some("tokenize"), None, Some("k"))
        );
    }
}
