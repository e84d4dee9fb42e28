//! The four things the front doors (HTTP, WebSocket, OpenAI, MCP) need of the job system,
//! as traits: the job queue (admission, fairness, cancel), the job-state store (status and
//! history), the tile bus (a job's live stream) and the result store (a finished job's
//! files). [`Local`] is the single-node case: the scheduler actor with its sled journal, the
//! in-process stream hub and the results folder. The cluster case (NATS JetStream) lives in
//! the `yued-cluster` crate and implements the same four.
use crate::hub::{StreamHub, Subscribe, Subscription};
use crate::results::ResultStore;
use crate::scheduler::{Cancel, GetFamily, GetState, GetStatus, ListJobs, QueueSnapshot, Scheduler, Snapshot, Submit, SubmitError};
use actix::Addr;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;
use yued_protocol::{Family, JobId, JobList, JobState, JobStatus, StreamCodec};

/// The part of the job system a route needs is not answering (a stopped actor, a lost
/// cluster connection): a 503 with this text.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Admission, fair order and cancellation.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Admits a validated job (its seeds resolved): its id, or why not.
    async fn submit(&self, job: Submit) -> Result<JobId, SubmitError>;
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
    /// One client's jobs (its fairness key), oldest first.
    async fn list(&self, client: &str) -> Result<JobList, Unavailable>;
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

/// The four, as the routes hold them.
#[derive(Clone)]
pub struct Backend {
    pub queue: Arc<dyn JobQueue>,
    pub states: Arc<dyn JobStates>,
    pub tiles: Arc<dyn TileBus>,
    pub results: Arc<dyn ResultFiles>,
}

impl Backend {
    /// The single-node job system.
    pub fn local(scheduler: Addr<Scheduler>, hub: Addr<StreamHub>, results: Arc<ResultStore>) -> Self {
        let l = Arc::new(Local { scheduler, hub, results });
        Backend { queue: l.clone(), states: l.clone(), tiles: l.clone(), results: l }
    }
}

/// Single node: the scheduler actor (queue and states, journaled in sled), the stream hub
/// and the results folder of this process.
pub struct Local {
    pub scheduler: Addr<Scheduler>,
    pub hub: Addr<StreamHub>,
    pub results: Arc<ResultStore>,
}

fn gone<E>(_: E) -> Unavailable {
    Unavailable("the scheduler is not running".into())
}

#[async_trait]
impl JobQueue for Local {
    async fn submit(&self, job: Submit) -> Result<JobId, SubmitError> {
        self.scheduler.send(job).await.map_err(|_| SubmitError::Unavailable("the scheduler is not running".into()))?
    }
    async fn cancel(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        self.scheduler.send(Cancel(id.clone())).await.map_err(gone)
    }
    async fn snapshot(&self) -> Result<QueueSnapshot, Unavailable> {
        self.scheduler.send(Snapshot).await.map_err(gone)
    }
}

#[async_trait]
impl JobStates for Local {
    async fn status(&self, id: &JobId) -> Result<Option<JobStatus>, Unavailable> {
        self.scheduler.send(GetStatus(id.clone())).await.map_err(gone)
    }
    async fn state(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        self.scheduler.send(GetState(id.clone())).await.map_err(gone)
    }
    async fn family(&self, id: &JobId) -> Result<Option<Family>, Unavailable> {
        self.scheduler.send(GetFamily(id.clone())).await.map_err(gone)
    }
    async fn list(&self, client: &str) -> Result<JobList, Unavailable> {
        self.scheduler.send(ListJobs(client.to_string())).await.map_err(gone)
    }
}

#[async_trait]
impl TileBus for Local {
    async fn subscribe(&self, id: &JobId, codec: StreamCodec) -> Result<Option<Subscription>, Unavailable> {
        self.hub.send(Subscribe { job: id.clone(), codec }).await.map_err(|_| Unavailable("stream hub unavailable".into()))
    }
}

#[async_trait]
impl ResultFiles for Local {
    async fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>> {
        self.results.parts(id)
    }
}
