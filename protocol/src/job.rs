//! Job identity, lifecycle and the replies of the job routes (`/synth`, `/job`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Version of the [`JobMetrics`] layout; bumped when a field changes meaning.
pub const JOB_METRICS_SCHEMA: u32 = 1;

/// A job identifier: exactly 16 lowercase hex digits.
///
/// The fixed spelling makes ids safe to use as file and sled key names and lets the daemon
/// reject a malformed `?id=` before any lookup. Deserialization enforces the format.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

/// A string that is not 16 lowercase hex digits.
impl schemars::JsonSchema for JobId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JobId".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "a job id: 16 lowercase \
            hex digits"})
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job id must be 16 lowercase hex digits, got {0:?}")]
pub struct InvalidJobId(pub String);

impl JobId {
    /// Length of every id, in characters.
    pub const LEN: usize = 16;

    /// The id of a 64-bit number (a counter or a random draw), zero padded.
    pub fn from_u64(n: u64) -> Self {
        Self(format!("{n:016x}"))
    }

    /// A fresh id of 64 bits from the operating system's CSPRNG: ids cannot be walked or
    /// guessed (an id alone is still never enough to reach another principal's job).
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b)?;
        Ok(Self::from_u64(u64::from_le_bytes(b)))
    }

    /// Checks the spelling; uppercase digits are refused so one job has one id.
    pub fn parse(s: &str) -> Result<Self, InvalidJobId> {
        let ok = s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidJobId(s.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The number the id spells, the inverse of [`from_u64`](Self::from_u64).
    pub fn to_u64(&self) -> u64 {
        u64::from_str_radix(&self.0, 16).expect("a JobId always holds 16 hex digits")
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for JobId {
    type Err = InvalidJobId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for JobId {
    type Error = InvalidJobId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<JobId> for String {
    fn from(id: JobId) -> String {
        id.0
    }
}

impl AsRef<str> for JobId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lifecycle of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    /// A terminal job never changes state again, so pollers and listeners can stop.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed | JobState::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pipeline stage a running job is in, in pipeline order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Autoregressive score (ABC) stage.
    Plan,
    /// Autoregressive semantic code stage.
    Semantic,
    /// Flow matching of the acoustic latents.
    Synth,
    /// VAE decode, tile by tile.
    Decode,
    /// Normalisation and container encoding.
    Encode,
    /// A listening job's one stage: MERT's chunks, then the tokenizer head's windows.
    Tokenize,
    /// A transcription's one stage: each window's encoding, then its decoding.
    Transcribe,
}

impl Stage {
    pub const ALL: [Stage; 7] =
        [Stage::Plan, Stage::Semantic, Stage::Synth, Stage::Decode, Stage::Encode, Stage::Tokenize, Stage::Transcribe];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Plan => "plan",
            Stage::Semantic => "semantic",
            Stage::Synth => "synth",
            Stage::Decode => "decode",
            Stage::Encode => "encode",
            Stage::Tokenize => "tokenize",
            Stage::Transcribe => "transcribe",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reply of `GET /jobs`: the caller's jobs (those submitted with its API key, or from its
/// address without one) that the daemon still knows, oldest first; with `?all=1` (an admin
/// key) every principal's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobListEntry>,
}

/// One job of [`JobList`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobListEntry {
    pub id: JobId,
    pub family: crate::Family,
    pub status: JobState,
    /// Unix milliseconds.
    pub submitted_ms: u64,
    /// The request as journaled (seeds resolved); absent for a job of an upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<serde_json::Value>,
    /// What a job of an upload does: `encode` or `decode` (`/vae`), `tokenize` (`/tokenize`),
    /// `transcribe` or `transcribe_melody` (`/transcribe`); absent for a song.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["encode", "decode", "tokenize", "transcribe", "transcribe_melody"]))]
    pub upload: Option<String>,
    /// The principal the job belongs to (a key's name or hash id, or an address); only in
    /// an admin's `?all=1` list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Reply of `GET /job?id=N`. Optional fields are left out of the JSON when unknown, so
/// a queued job reads exactly `{"status":"queued","queue_position":N}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobStatus {
    pub status: JobState,
    /// Jobs ahead of this one in the queue; 0 once it is next, running or finished.
    pub queue_position: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// Progress of the current stage, in `[0, 1]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f32>,
    /// Tokens sampled so far by an autoregressive stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_done: Option<u64>,
    /// Token budget of that stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_budget: Option<u64>,
    /// Why a job failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only on completed synthesis jobs; never partial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<JobMetrics>,
}

impl JobStatus {
    /// A status with every optional field unset.
    pub fn new(status: JobState, queue_position: u32) -> Self {
        Self {
            status,
            queue_position,
            stage: None,
            progress: None,
            tokens_done: None,
            tokens_budget: None,
            error: None,
            metrics: None,
        }
    }

    pub fn queued(position: u32) -> Self {
        Self::new(JobState::Queued, position)
    }

    /// A running job in `stage`; `progress` is clamped into `[0, 1]`.
    pub fn running(stage: Stage, progress: f32) -> Self {
        let progress = if progress.is_nan() { 0.0 } else { progress.clamp(0.0, 1.0) };
        Self { stage: Some(stage), progress: Some(progress), ..Self::new(JobState::Running, 0) }
    }

    pub fn done(metrics: Option<JobMetrics>) -> Self {
        Self { metrics, ..Self::new(JobState::Done, 0) }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        Self { error: Some(error.into()), ..Self::new(JobState::Failed, 0) }
    }

    pub fn cancelled() -> Self {
        Self::new(JobState::Cancelled, 0)
    }
}

/// Timings and residency of a completed synthesis job, captured by the compute worker
/// before it publishes `done` (schema 1). Timings come from a monotonic clock and exclude
/// HTTP polling and transfers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobMetrics {
    /// Always [`JOB_METRICS_SCHEMA`] for this layout.
    pub schema: u32,
    /// Submission to start of work.
    pub queue_seconds: f64,
    /// Native generation stages (plan, semantic, synth, decode).
    pub pipeline_seconds: f64,
    /// Normalisation, container encoding and result packaging.
    pub encoding_packaging_seconds: f64,
    /// Pipeline plus encoding and packaging.
    pub worker_seconds: f64,
    /// Total length of the rendered tracks.
    pub audio_seconds: f64,
    /// Flow matching steps run.
    pub steps: u32,
    /// Whether a token budget or the duration cut the song before its end token.
    pub truncated: bool,
    /// Whether the daemon runs with `--keep-loaded` (no eviction).
    pub keep_loaded: bool,
    /// Module loads the job caused (cache hits excluded).
    pub module_loads: u64,
    /// Number of modules resident when the snapshot was taken.
    pub resident_modules: u32,
    /// Bytes of model weight buffers resident then (not total device memory).
    pub resident_weight_bytes: u64,
}

impl Default for JobMetrics {
    fn default() -> Self {
        Self {
            schema: JOB_METRICS_SCHEMA,
            queue_seconds: 0.0,
            pipeline_seconds: 0.0,
            encoding_packaging_seconds: 0.0,
            worker_seconds: 0.0,
            audio_seconds: 0.0,
            steps: 0,
            truncated: false,
            keep_loaded: false,
            module_loads: 0,
            resident_modules: 0,
            resident_weight_bytes: 0,
        }
    }
}

/// Reply of every job submission route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SubmitReply {
    pub id: JobId,
    /// The body's top-level fields the request does not read (taken and ignored, as the
    /// references' contracts do): a misspelt `duraton` shows here instead of passing unseen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

impl SubmitReply {
    pub fn new(id: JobId) -> SubmitReply {
        SubmitReply { id, ignored: Vec::new() }
    }
}

/// Reply of `POST /job?id=N&cancel=1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CancelReply {
    pub status: JobState,
}

impl CancelReply {
    pub fn cancelled() -> Self {
        Self { status: JobState::Cancelled }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_format() {
        let id = JobId::from_u64(0x1a2b);
        assert_eq!(id.as_str(), "0000000000001a2b");
        assert_eq!(id.to_u64(), 0x1a2b);
        assert_eq!(JobId::from_u64(u64::MAX).as_str(), "ffffffffffffffff");
        assert_eq!("00000000deadbeef".parse::<JobId>().unwrap().to_u64(), 0xdead_beef);
        for bad in ["", "1a2b", "00000000DEADBEEF", "00000000deadbeeg", "00000000deadbeef0"] {
            assert_eq!(JobId::parse(bad), Err(InvalidJobId(bad.into())), "{bad}");
        }
    }

    #[test]
    fn job_id_serde_checks_format() {
        let reply = SubmitReply::new(JobId::from_u64(0xabc));
        assert_eq!(serde_json::to_string(&reply).unwrap(), r#"{"id":"0000000000000abc"}"#);
        let back: SubmitReply = serde_json::from_str(r#"{"id":"0000000000000abc"}"#).unwrap();
        assert_eq!(back, reply);
        assert!(serde_json::from_str::<SubmitReply>(r#"{"id":"xyz"}"#).is_err());
    }

    #[test]
    fn states_and_stages_spell_lowercase() {
        let states = [JobState::Queued, JobState::Running, JobState::Done, JobState::Failed, JobState::Cancelled];
        let spelled: Vec<String> = states.iter().map(|s| serde_json::to_string(s).unwrap()).collect();
        assert_eq!(spelled, [r#""queued""#, r#""running""#, r#""done""#, r#""failed""#, r#""cancelled""#]);
        let terminal: Vec<bool> = states.iter().map(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [false, false, true, true, true]);
        let stages: Vec<String> = Stage::ALL.iter().map(|s| serde_json::to_string(s).unwrap()).collect();
        assert_eq!(
            stages,
            [
                r#""plan""#,
                r#""semantic""#,
                r#""synth""#,
                r#""decode""#,
                r#""encode""#,
                r#""tokenize""#,
                r#""transcribe""#
            ]
        );
        assert_eq!(Stage::Decode.to_string(), "decode");
    }

    #[test]
    fn status_skips_unset_fields() {
        assert_eq!(serde_json::to_string(&JobStatus::queued(3)).unwrap(), r#"{"status":"queued","queue_position":3}"#);
        assert_eq!(
            serde_json::to_string(&JobStatus::running(Stage::Synth, 0.25)).unwrap(),
            r#"{"status":"running","queue_position":0,"stage":"synth","progress":0.25}"#
        );
        assert_eq!(JobStatus::running(Stage::Plan, 1.5).progress, Some(1.0));
        assert_eq!(JobStatus::running(Stage::Plan, f32::NAN).progress, Some(0.0));
        let semantic =
            JobStatus { tokens_done: Some(120), tokens_budget: Some(9000), ..JobStatus::running(Stage::Semantic, 0.5) };
        assert_eq!(
            serde_json::to_string(&semantic).unwrap(),
            concat!(
                r#"{"status":"running","queue_position":0,"stage":"semantic","progress":0.5,"#,
                r#""tokens_done":120,"tokens_budget":9000}"#
            )
        );
        assert_eq!(
            serde_json::to_string(&JobStatus::failed("out of memory")).unwrap(),
            r#"{"status":"failed","queue_position":0,"error":"out of memory"}"#
        );
        assert_eq!(serde_json::to_string(&CancelReply::cancelled()).unwrap(), r#"{"status":"cancelled"}"#);
        let back: JobStatus = serde_json::from_str(r#"{"status":"done","queue_position":0}"#).unwrap();
        assert_eq!(back, JobStatus::done(None));
    }

    #[test]
    fn metrics_schema_one() {
        let m = JobMetrics {
            queue_seconds: 0.5,
            pipeline_seconds: 12.25,
            encoding_packaging_seconds: 1.0,
            worker_seconds: 13.25,
            audio_seconds: 64.8,
            steps: 8,
            truncated: false,
            keep_loaded: true,
            module_loads: 3,
            resident_modules: 2,
            resident_weight_bytes: 2_195_100_000,
            ..JobMetrics::default()
        };
        let text = serde_json::to_string(&JobStatus::done(Some(m.clone()))).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"status":"done","queue_position":0,"metrics":{"schema":1,"queue_seconds":0.5,"#,
                r#""pipeline_seconds":12.25,"encoding_packaging_seconds":1.0,"worker_seconds":13.25,"#,
                r#""audio_seconds":64.8,"steps":8,"truncated":false,"keep_loaded":true,"module_loads":3,"#,
                r#""resident_modules":2,"resident_weight_bytes":2195100000}}"#
            )
        );
        let back: JobStatus = serde_json::from_str(&text).unwrap();
        assert_eq!(back.metrics, Some(m));
        assert_eq!(JobMetrics::default().schema, 1);
    }
}
