//! What the actors and the stage threads send each other, in one leaf module: the
//! scheduler's dispatch, the hand-offs between the stages and their reports back. Every
//! actor module depends on it and it on none of them, so no two actors import each other.
use actix::Message;
use std::sync::Arc;
use std::time::Instant;
use yued_audio::Pcm;
use yued_contract::{SongCodes, UploadTask};
use yued_engine::cancel::CancelToken;
use yued_protocol::{JobId, JobMetrics, Request, Stage, Yue2Request};

// ---- the stages to the scheduler

/// Outcome the worker reports.
#[derive(Debug)]
pub enum Outcome {
    /// `metrics` is the schema-1 object of a synthesis job; other jobs have none.
    Done {
        tracks: u32,
        audio_seconds: f64,
        metrics: Option<JobMetrics>,
    },
    Failed(String),
    Cancelled,
}

/// Progress of the running job (from the worker).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Progress {
    pub id: JobId,
    pub stage: Stage,
    pub done: usize,
    pub total: usize,
}

/// A song's semantic stream is known: journal it so a restart resumes from it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CodesReady {
    pub id: JobId,
    pub song: SongCodes,
}

/// The worker finished a job.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Finished {
    pub id: JobId,
    pub outcome: Outcome,
    /// The run's token: a report of an earlier run of the same id (a cluster job back on a
    /// worker that ran it before) is not this run's end.
    pub run: CancelToken,
}

impl Finished {
    pub fn of(job: &JobCtx, outcome: Outcome) -> Self {
        Finished { id: job.id.clone(), outcome, run: job.cancel.clone() }
    }
}

/// The entry stage handed a job on (or ended it): the next job may start.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EntryFree {
    pub id: JobId,
}

/// The entry stage cannot start a job now (it cannot join the running batch): it goes back
/// to the head of the queue, queued again, and the entry stays taken until the batch has
/// drained (the entry stage then sends [`EntryFree`] for it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Requeue {
    pub id: JobId,
}

/// The entry stage resumes a job from its journaled codes (the replay path): journaled as
/// a marker on the record.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resumed {
    pub id: JobId,
}

/// The worker loaded its models (or failed to).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerReady;

// ---- the scheduler to the entry stage

pub enum WorkerCmd {
    Run(Box<RunJob>),
    Shutdown,
}

/// A job as the scheduler dispatches it.
pub struct RunJob {
    pub id: JobId,
    /// The request of the job's family.
    pub request: Request,
    /// Songs whose codes the journal already holds (a resumed job).
    pub known_songs: Vec<SongCodes>,
    pub cancel: CancelToken,
    pub queue_seconds: f64,
    /// When it was submitted (the journal's clock), for the wait to its first audio; `None`
    /// where that wait is not this node's to measure (a cluster's job on a later attempt).
    pub submitted_ms: Option<u64>,
    /// A job of an upload (`/vae`, `/tokenize`) instead of a song.
    pub upload: Option<UploadTask>,
}

// ---- between the stages

/// A job in flight, shared by the stages that work on it.
pub struct JobCtx {
    pub id: JobId,
    pub request: Request,
    pub known_songs: Vec<SongCodes>,
    pub cancel: CancelToken,
    pub queue_seconds: f64,
    /// See [`RunJob::submitted_ms`].
    pub submitted_ms: Option<u64>,
    /// When the job left the queue.
    pub started: Instant,
    /// The store's load counter then: the job's own loads are the difference.
    pub loads_at_start: u64,
}

impl JobCtx {
    /// The YuE2 request of a job the YuE2 stages work on.
    pub fn yue2(&self) -> &Yue2Request {
        self.request.as_yue2().unwrap_or_else(|| panic!("a YuE2 stage got a {} job", self.request.family()))
    }

    /// The text the test-only faults match: a YuE2 style, a MiniMax caption.
    #[cfg(feature = "test-faults")]
    pub fn fault_tag(&self) -> &str {
        match &self.request {
            Request::Yue2(r) => &r.style,
            Request::Mm3(r) => &r.caption,
        }
    }
}

pub enum EncCmd {
    /// Track `index` of the job's `of`.
    Track {
        job: Arc<JobCtx>,
        index: usize,
        of: usize,
        track: Box<TrackOut>,
    },
    /// The audio of a `/vae` decode: one file in the request's format.
    Audio {
        job: Arc<JobCtx>,
        pcm: Pcm,
    },
    Shutdown,
}

/// A finished track of any family, as the Encoder packages it.
pub struct TrackOut {
    /// Full range, not normalised.
    pub audio: Pcm,
    /// The request that renders exactly this track again.
    pub replay: serde_json::Value,
    /// Its latents (YuE2's `[frames, 64]`), written beside it when there are.
    pub latents: Vec<f32>,
    /// The budget cut the song before the model ended it.
    pub truncated: bool,
}
