//! The four things the front doors (HTTP, WebSocket, OpenAI, MCP) need of the job system,
//! as traits: the job queue (admission, fairness, cancel), the job-state store (status and
//! history), the tile bus (a job's live stream) and the result store (a finished job's
//! files). The single-node case is: the scheduler actor with its sled journal, the
//! in-process stream hub and the results folder (`yued-actors`). The cluster case (NATS
//! JetStream) lives in the `yued-cluster` crate and implements the same four; a cluster
//! worker drives its own node through [`NodeRunner`].
//!
//! Tenancy lives here too: a route reaches a job only through [`Backend::of`], the view of
//! one principal, which answers a job of another principal exactly as an unknown one.
use crate::queue::QueueSnapshot;
use crate::record::{JobRecord, StageProgress};
use crate::stream::{HubItem, Subscription};
use crate::submission::{Submission, SubmitError};
use crate::tenancy::Principal;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;
use yued_protocol::{Family, JobId, JobList, JobState, JobStatus, StreamCodec};

/// The part of the job system a route needs is not answering (a stopped actor, a lost
/// cluster connection): a 503 with this text.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Admission, fair order and cancellation.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Admits a validated job (its seeds resolved): its id, or why not (the admission cap,
    /// or its principal's share of it).
    async fn submit(&self, job: Submission) -> Result<JobId, SubmitError>;
    /// Cancels a job: `None` when unknown, else its state after the request.
    async fn cancel(&self, id: &JobId) -> Result<Option<JobState>, Unavailable>;
    /// The queue as `/health` shows it.
    async fn snapshot(&self) -> Result<QueueSnapshot, Unavailable>;
}

/// What is known of each job.
#[async_trait]
pub trait JobStates: Send + Sync {
    async fn status(&self, id: &JobId) -> Result<Option<JobStatus>, Unavailable>;
    async fn state(&self, id: &JobId) -> Result<Option<JobState>, Unavailable>;
    async fn family(&self, id: &JobId) -> Result<Option<Family>, Unavailable>;
    /// The principal a job belongs to.
    async fn owner(&self, id: &JobId) -> Result<Option<String>, Unavailable>;
    /// One principal's jobs, or (`None`) every job with its owner named, oldest first.
    async fn list(&self, owner: Option<&str>) -> Result<JobList, Unavailable>;
}

/// Live streams: a listener gets what was already published for the job, then the live
/// items, to the terminal event.
#[async_trait]
pub trait TileBus: Send + Sync {
    /// `None` when the bus holds no live stream for the job (it ended, or is unknown).
    async fn subscribe(&self, id: &JobId, codec: StreamCodec) -> Result<Option<Subscription>, Unavailable>;
}

/// Finished results.
#[async_trait]
pub trait ResultFiles: Send + Sync {
    /// The files of a done job's result, in multipart order, as local paths with their
    /// content types; `None` when it has expired.
    async fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>>;
}

/// A node's own pipeline as a cluster worker drives it: the cluster's job run here under
/// its cluster id, its record and progress read back, its stream copied out.
#[async_trait]
pub trait NodeRunner: Send + Sync {
    /// Runs a job (its `id` and known songs set by the cluster).
    async fn run(&self, job: Submission) -> Result<JobId, SubmitError>;
    /// The job's record and its progress while it runs; `None` when unknown here.
    async fn record(&self, id: &JobId) -> Option<(JobRecord, Option<StageProgress>)>;
    /// Cancels the job, without waiting.
    fn cancel(&self, id: &JobId);
    /// A raw copy of the job's stream (history, then live, to the terminal event); `None`
    /// when the node holds none for it.
    async fn tap(&self, id: &JobId) -> Option<mpsc::UnboundedReceiver<HubItem>>;
    /// Whether its stages run `family`'s jobs (a cluster worker hands another family's back).
    fn serves(&self, family: yued_protocol::Family) -> bool;
}

/// The four, as the routes hold them.
#[derive(Clone)]
pub struct Backend {
    queue: Arc<dyn JobQueue>,
    states: Arc<dyn JobStates>,
    tiles: Arc<dyn TileBus>,
    results: Arc<dyn ResultFiles>,
}

impl Backend {
    pub fn new(
        queue: Arc<dyn JobQueue>,
        states: Arc<dyn JobStates>,
        tiles: Arc<dyn TileBus>,
        results: Arc<dyn ResultFiles>,
    ) -> Self {
        Backend { queue, states, tiles, results }
    }

    /// Admits a job for `job.client` (a principal id).
    pub async fn submit(&self, job: Submission) -> Result<JobId, SubmitError> {
        self.queue.submit(job).await
    }

    /// The queue's state for `/health`, which tells anyone only its liveness (never a job id).
    pub async fn liveness(&self) -> Result<QueueSnapshot, Unavailable> {
        self.queue.snapshot().await
    }

    /// The job system as `who` sees it.
    pub fn of(&self, who: &Principal) -> Jobs {
        Jobs { backend: self.clone(), who: who.clone() }
    }

    /// The view of a route whose URL is its own capability (an export link's token): every
    /// job, as an admin sees it.
    pub fn by_capability(&self) -> Jobs {
        self.of(&Principal { id: "capability".into(), role: crate::tenancy::Role::Admin })
    }
}

/// One principal's view of the job system: a job it does not own (unless it is an admin)
/// is `None` everywhere, exactly as a job nobody knows, so an id reveals nothing.
#[derive(Clone)]
pub struct Jobs {
    backend: Backend,
    who: Principal,
}

impl Jobs {
    async fn visible(&self, id: &JobId) -> Result<bool, Unavailable> {
        if self.who.is_admin() {
            return Ok(true);
        }
        Ok(self.backend.states.owner(id).await?.is_some_and(|o| o == self.who.id))
    }

    pub async fn status(&self, id: &JobId) -> Result<Option<JobStatus>, Unavailable> {
        if !self.visible(id).await? {
            return Ok(None);
        }
        self.backend.states.status(id).await
    }

    pub async fn state(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        if !self.visible(id).await? {
            return Ok(None);
        }
        self.backend.states.state(id).await
    }

    pub async fn family(&self, id: &JobId) -> Result<Option<Family>, Unavailable> {
        if !self.visible(id).await? {
            return Ok(None);
        }
        self.backend.states.family(id).await
    }

    /// Cancels a job: `None` when unknown (or another's), else its state after the request.
    pub async fn cancel(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        if !self.visible(id).await? {
            return Ok(None);
        }
        self.backend.queue.cancel(id).await
    }

    pub async fn subscribe(&self, id: &JobId, codec: StreamCodec) -> Result<Option<Subscription>, Unavailable> {
        if !self.visible(id).await? {
            return Ok(None);
        }
        self.backend.tiles.subscribe(id, codec).await
    }

    /// A done job's result files; `None` when expired, unknown or another's.
    pub async fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>> {
        if !self.visible(id).await.ok()? {
            return None;
        }
        self.backend.results.parts(id).await
    }

    /// The principal's own jobs; with `all` (an admin's) every job, each naming its owner.
    pub async fn list(&self, all: bool) -> Result<JobList, Unavailable> {
        if all && self.who.is_admin() {
            return self.backend.states.list(None).await;
        }
        self.backend.states.list(Some(&self.who.id)).await
    }

    /// The queue as this principal may see it: the figures, and the running job ids it owns
    /// (an admin: all of them, and the stores' figures).
    pub async fn snapshot(&self) -> Result<QueueSnapshot, Unavailable> {
        let mut s = self.backend.queue.snapshot().await?;
        if !self.who.is_admin() {
            let mut own = Vec::new();
            for id in std::mem::take(&mut s.running) {
                if let Ok(j) = JobId::parse(&id) {
                    if self.visible(&j).await? {
                        own.push(id);
                    }
                }
            }
            s.running = own;
            (s.jobs_known, s.results_stored, s.results_bytes) = (None, None, None);
        }
        Ok(s)
    }
}
