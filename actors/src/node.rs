//! The single node behind one small façade: [`Node::start`] opens the journal, starts the
//! scheduler and stream hub actors and the compute stages; the routes get its
//! [`Backend`], a cluster worker its [`NodeRunner`]; [`Node::shutdown`] stops it and
//! returns once every interrupted job is journaled. What the actors say to each other
//! stays inside this crate.
use crate::hub::{StreamHub, Subscribe, Tap};
use crate::journal::Journal;
use crate::scheduler::{
    Cancel, Flush, GetFamily, GetOwner, GetRecord, GetState, GetStatus, ListJobs, Scheduler, Shutdown, Snapshot, Submit,
};
use crate::stage::WorkerConfig;
use crate::worker::Stages;
use actix::{Actor, Addr};
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;
use yued_contract::metrics::Metrics;
use yued_contract::results::ResultStore;
use yued_contract::stream::{HubItem, Subscription};
use yued_contract::tenancy::KeyTable;
use yued_contract::{
    Backend, JobQueue, JobRecord, JobStates, NodeRunner, QueueSnapshot, ResultFiles, StageProgress, Submission,
    SubmitError, TileBus, Unavailable,
};
use yued_protocol::{Family, JobId, JobList, JobState, JobStatus, StreamCodec};

/// How a node starts.
pub struct NodeConfig {
    pub worker: WorkerConfig,
    /// The journal's directory.
    pub journal: PathBuf,
    /// Start from an empty journal (a cluster worker's: the cluster's states are the truth,
    /// and a job it was running when it died is redelivered, not resumed from here).
    pub fresh_journal: bool,
    /// Jobs admitted at once, and the most one principal may hold.
    pub cap: usize,
    pub share: usize,
    /// The folder the jobs' uploads wait in: at the start, a file in it that no waiting or
    /// running job refers to goes (a daemon killed between storing an upload and admitting
    /// its job, or a job that ended while the daemon was down).
    pub uploads: Option<PathBuf>,
    /// What the stream hub keeps of the running jobs' tiles in memory for late joiners, and
    /// where the rest waits.
    pub stream_history: crate::hub::HistoryBudget,
}

/// A running single node.
pub struct Node {
    scheduler: Addr<Scheduler>,
    hub: Addr<StreamHub>,
    results: Arc<ResultStore>,
    stages: Stages,
    /// The families its stages run.
    families: Vec<Family>,
}

impl Node {
    /// Starts the node; call it inside an actix system. `keys` maps the raw keys an older
    /// release wrote into the journal to their principals.
    pub fn start(
        cfg: NodeConfig,
        keys: &KeyTable,
        results: Arc<ResultStore>,
        metrics: Metrics,
    ) -> Result<Node, String> {
        if cfg.fresh_journal {
            let _ = std::fs::remove_dir_all(&cfg.journal);
        }
        let journal = Journal::open(&cfg.journal, keys).map_err(|e| e.to_string())?;
        let hub = StreamHub::new(metrics.clone(), cfg.stream_history.clone()).start();
        let (tx, rx) = crossbeam_channel::unbounded();
        let scheduler = Scheduler::new(journal, tx, hub.clone(), results.clone(), metrics.clone(), cfg.cap, cfg.share)
            .map_err(|e| e.to_string())?;
        if let Some(dir) = &cfg.uploads {
            scheduler.sweep_uploads(dir);
        }
        let scheduler = scheduler.start();
        let mut families = vec![Family::Yue2];
        if cfg.worker.mm3.is_some() {
            families.push(Family::Mm3);
        }
        let stages = crate::worker::spawn(cfg.worker, rx, scheduler.clone(), hub.clone(), results.clone(), metrics);
        Ok(Node { scheduler, hub, results, stages, families })
    }

    /// The node's job system, as the routes hold it.
    pub fn backend(&self) -> Backend {
        let l = Arc::new(self.local());
        Backend::new(l.clone(), l.clone(), l.clone(), l)
    }

    /// The node as a cluster worker drives it.
    pub fn runner(&self) -> Arc<dyn NodeRunner> {
        Arc::new(self.local())
    }

    fn local(&self) -> Local {
        Local {
            scheduler: self.scheduler.clone(),
            hub: self.hub.clone(),
            results: self.results.clone(),
            families: self.families.clone(),
        }
    }

    /// Stops the node: no new job is admitted, the running ones are cancelled through their
    /// tokens (each stays queued in the journal and resumes at the next start), the stages
    /// stop, and this returns once the scheduler has journaled what they reported (an error
    /// when the journal could not flush it: the process should not exit as if all was well).
    pub async fn shutdown(self) -> Result<(), String> {
        let _ = self.scheduler.send(Shutdown).await;
        let stages = self.stages;
        if tokio::task::spawn_blocking(move || stages.join()).await.is_err() {
            tracing::error!("the compute stages did not stop cleanly");
        }
        // The stages' last reports are in the scheduler's mailbox ahead of this message.
        self.scheduler.send(Flush).await.unwrap_or(Ok(()))
    }
}

/// The records of a stopped node's journal (for tools and tests that inspect one).
pub fn journal_records(dir: &Path) -> Result<Vec<JobRecord>, String> {
    let journal = Journal::open(dir, &KeyTable::default()).map_err(|e| e.to_string())?;
    journal.load().map_err(|e| e.to_string())
}

/// The single node's job system: the scheduler actor (queue and states, journaled in
/// sled), the stream hub and the results folder of this process.
struct Local {
    scheduler: Addr<Scheduler>,
    hub: Addr<StreamHub>,
    results: Arc<ResultStore>,
    families: Vec<Family>,
}

fn gone<E>(_: E) -> Unavailable {
    Unavailable("the scheduler is not running".into())
}

#[async_trait]
impl JobQueue for Local {
    async fn submit(&self, job: Submission) -> Result<JobId, SubmitError> {
        let gone = |_| SubmitError::Unavailable("the scheduler is not running".into());
        self.scheduler.send(Submit(job)).await.map_err(gone)?
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
    async fn owner(&self, id: &JobId) -> Result<Option<String>, Unavailable> {
        self.scheduler.send(GetOwner(id.clone())).await.map_err(gone)
    }
    async fn list(&self, owner: Option<&str>) -> Result<JobList, Unavailable> {
        self.scheduler.send(ListJobs(owner.map(String::from))).await.map_err(gone)
    }
}

#[async_trait]
impl TileBus for Local {
    async fn subscribe(&self, id: &JobId, codec: StreamCodec) -> Result<Option<Subscription>, Unavailable> {
        let gone = |_| Unavailable("stream hub unavailable".into());
        self.hub.send(Subscribe { job: id.clone(), codec }).await.map_err(gone)
    }
}

#[async_trait]
impl ResultFiles for Local {
    async fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>> {
        self.results.parts(id)
    }
}

#[async_trait]
impl NodeRunner for Local {
    async fn run(&self, job: Submission) -> Result<JobId, SubmitError> {
        JobQueue::submit(self, job).await
    }
    async fn record(&self, id: &JobId) -> Option<(JobRecord, Option<StageProgress>)> {
        self.scheduler.send(GetRecord(id.clone())).await.ok().flatten()
    }
    fn cancel(&self, id: &JobId) {
        self.scheduler.do_send(Cancel(id.clone()));
    }
    async fn tap(&self, id: &JobId) -> Option<mpsc::UnboundedReceiver<HubItem>> {
        self.hub.send(Tap(id.clone())).await.ok().flatten()
    }
    fn serves(&self, family: Family) -> bool {
        self.families.contains(&family)
    }
}
