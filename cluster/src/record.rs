//! A job's state in the cluster: one KV entry (`job.<id>`), read by any API node and
//! written with compare-and-set, so that of two writers racing (a cancel and a claim, two
//! workers after a redelivery) one wins and the other reads again; a worker that has lost
//! a job to another finds its owner changed and stops writing it.
use crate::{retry, RETRY_WITHIN};
use async_nats::jetstream::kv;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use yued_contract::results::ResultPart;
use yued_contract::JobRecord;
use yued_protocol::{JobId, Stage};

/// Everything the cluster keeps about a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterJob {
    /// What a single node journals: request, state, codes, outcome.
    pub record: JobRecord,
    /// The job's message in the jobs stream (a queued job's cancel deletes it).
    #[serde(default)]
    pub seq: u64,
    /// The worker that runs (or last ran) it.
    #[serde(default)]
    pub owner: Option<String>,
    /// Its claim count: the owner's claim (a worker that finds another number has lost it).
    #[serde(default)]
    pub attempt: u32,
    /// Its starts whose worker stopped answering (killed, crashed, cut off past `ack_wait`);
    /// a job handed back (a worker stopping, or not able to take it) does not count.
    #[serde(default)]
    pub deaths: u32,
    /// The claim's own mark (random): a claim whose write timed out but landed finds its
    /// own mark when it reads again, and is not taken for a worker that died.
    #[serde(default)]
    pub claim_mark: u64,
    /// Hand-backs of workers that could not take the job (a stopping worker's do not
    /// count): past a bound the job fails instead of going round forever.
    #[serde(default)]
    pub refusals: u32,
    /// The running job's stage and its step count.
    #[serde(default)]
    pub progress: Option<(Stage, u64, u64)>,
    /// Cancel asked while it runs: its worker stops it.
    #[serde(default)]
    pub cancel: bool,
    /// A done job's result files in the object store (`result.<id>.<file>`).
    #[serde(default)]
    pub parts: Vec<ResultPart>,
    /// A `/vae` upload waiting in the object store for its worker.
    #[serde(default)]
    pub upload: Option<String>,
    /// The owner's heartbeats of this run, counted: a worker that finds the job's message back
    /// while an owner holds it tells a live owner (whose count moves) from a dead one.
    #[serde(default)]
    pub beats: u64,
    /// The count of beats at which a worker found the message back while the owner held the
    /// job: a worker that finds it back again (the message returns [`crate::worker::OWNER_GRACE`]
    /// later, by the server's clock) with no beat since takes the owner for dead (a server that
    /// was away longer than `ack_wait` gives back the messages of live owners too).
    #[serde(default)]
    pub suspected: Option<u64>,
}

pub fn key(id: &JobId) -> String {
    format!("job.{id}")
}

/// The object name of one result file.
pub fn result_object(id: &JobId, file: &str) -> String {
    format!("result.{id}.{file}")
}

/// How long a read waits out the cluster: an HTTP answer gives up soon (a 503); a worker
/// holding a job it has rendered waits out a NATS restart.
#[derive(Clone, Copy)]
pub enum Patience {
    Answer,
    Worker,
}

impl Patience {
    fn within(self) -> std::time::Duration {
        match self {
            Patience::Answer => std::time::Duration::from_secs(5),
            Patience::Worker => RETRY_WITHIN,
        }
    }
}

/// A job's entry and its revision; `None` when unknown (or expired).
pub async fn read(kv: &kv::Store, id: &JobId, patience: Patience) -> Result<Option<(ClusterJob, u64)>, String> {
    let e = retry("reading a job state", patience.within(), || kv.entry(key(id)))
        .await
        .map_err(|e| format!("the cluster's job states: {e}"))?;
    match e {
        Some(e) if e.operation == kv::Operation::Put => {
            let job: ClusterJob = serde_json::from_slice(&e.value)
                .map_err(|err| format!("job {id}: an unreadable state in the cluster: {err}"))?;
            Ok(Some((job, e.revision)))
        }
        _ => Ok(None),
    }
}

/// What a compare-and-set change decided.
pub enum Change<T> {
    /// Write the changed job, then answer `T`.
    Write(T),
    /// Leave it as it is, answer `T`.
    Keep(T),
}

/// Reads the job, lets `f` change it, writes it if the revision is still the one read;
/// on a lost race reads again. `Ok(None)`: the job is unknown.
pub async fn update<T>(
    kv: &kv::Store,
    id: &JobId,
    patience: Patience,
    mut f: impl FnMut(&mut ClusterJob) -> Change<T>,
) -> Result<Option<T>, String> {
    for _ in 0..64 {
        let Some((mut job, rev)) = read(kv, id, patience).await? else { return Ok(None) };
        match f(&mut job) {
            Change::Keep(t) => return Ok(Some(t)),
            Change::Write(t) => {
                let value = Bytes::from(serde_json::to_vec(&job).expect("a job state serializes"));
                match kv.update(key(id), value, rev).await {
                    Ok(_) => return Ok(Some(t)),
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
                    Err(e) => {
                        // A timeout may still have landed: read again and decide again.
                        tracing::debug!(job = %id, error = %e, "a job state write failed; reading again");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
            }
        }
    }
    Err(format!("job {id}: the cluster's job state kept changing under this write"))
}

/// Writes a new job's first state.
pub async fn create(kv: &kv::Store, job: &ClusterJob) -> Result<(), String> {
    let value = Bytes::from(serde_json::to_vec(job).expect("a job state serializes"));
    kv.create(key(&job.record.id), value).await.map(|_| ()).map_err(|e| format!("the cluster's job states: {e}"))
}
