//! A worker node: today's single-node pipeline (scheduler, stages, hub, results folder)
//! fed from the cluster instead of from HTTP.
//!
//! Per free slot it pulls one job, fairly between clients (the client whose jobs were
//! served longest ago first; one durable consumer per client subject). It claims the job
//! in the state bucket with compare-and-set (owner, attempt), runs it in its own pipeline
//! under the cluster's job id and with the codes the state already holds (a job resumed
//! after another worker died takes the replay path), and while it runs:
//! - forwards the job's stream to the tile bus (tiles deduplicate by their place);
//! - every heartbeat tells the server the job is in progress (so it is not redelivered),
//!   and writes its progress and any new codes into the state, as long as it still owns
//!   the job: a worker that finds another owner stops the job and writes nothing more;
//! - listens for the job's cancel.
//!
//! At the end it uploads the result to the object store, writes the final state, publishes
//! the terminal event and acknowledges the message. A worker that dies does none of that:
//! the server redelivers the job after `ack_wait`, and the worker that claims it next finds
//! the dead one still its owner and counts a death; after `max_attempts` of them the job
//! fails with a message that says why. A worker that stops, or cannot take a job, hands it
//! back (no owner, queued again) before it lets go of the message: that costs no attempt, so
//! a rolling restart never fails a long job. The server's own delivery count is no limit.
use crate::metrics::ClusterMetrics;
use crate::record::{self, Change, ClusterJob, Patience};
use crate::{key_safe, retry, tiles, Cluster, RETRY_WITHIN};
use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use yued_contract::results::{now_ms, ResultPart, ResultStore};
use yued_contract::stream::HubItem;
use yued_contract::{NodeRunner, Submission, UploadTask};
use yued_protocol::{Family, JobId, JobState, StreamEvent};

/// What a worker reports of itself in the workers bucket at every heartbeat.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub node: String,
    pub jobs: Vec<JobId>,
    pub slots: usize,
    pub at_ms: u64,
    /// The families its stages run (empty from an older worker).
    #[serde(default)]
    pub families: Vec<yued_protocol::Family>,
}

pub struct Worker {
    c: Arc<Cluster>,
    /// This node's own pipeline, which runs the cluster's jobs.
    node: Arc<dyn NodeRunner>,
    results: Arc<ResultStore>,
    uploads: PathBuf,
    slots: usize,
    running: Mutex<HashSet<JobId>>,
    metrics: ClusterMetrics,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Dropped with the last task that holds the worker: [`StopHandle::stop`] waits for it.
    _alive: tokio::sync::mpsc::Sender<()>,
}

/// Stops a worker: it takes no new job, and hands its running ones back to the cluster at
/// once (another worker resumes them).
pub struct StopHandle {
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::sync::mpsc::Receiver<()>,
}

/// How long a stop waits for the worker's tasks to hand their jobs back.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl StopHandle {
    /// Stops the worker and returns once every task of it has ended (its running jobs
    /// handed back, its heartbeat entry deleted), or after [`STOP_WAIT`].
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(STOP_WAIT, self.done.recv()).await.is_err() {
            tracing::warn!("the worker's tasks did not all end in time");
        }
    }
}

/// Starts the worker's loops on the current runtime.
pub fn start(
    c: Arc<Cluster>,
    node: Arc<dyn NodeRunner>,
    results: Arc<ResultStore>,
    uploads: PathBuf,
    metrics: ClusterMetrics,
) -> StopHandle {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (alive, done) = tokio::sync::mpsc::channel(1);
    let running = Mutex::new(HashSet::new());
    let w = Arc::new(Worker { c, node, results, uploads, slots: 1, running, metrics, stop: rx, _alive: alive });
    tokio::spawn(w.clone().pull_loop());
    tokio::spawn(w.heartbeat_loop());
    StopHandle { stop: tx, done }
}

/// Whether this worker still owns the job it writes.
enum Own {
    Kept { cancel: bool },
    Lost,
}

impl Worker {
    fn node(&self) -> &str {
        &self.c.cfg.node
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        let key = key_safe(self.node());
        loop {
            let jobs: Vec<JobId> = self.running.lock().unwrap().iter().cloned().collect();
            let families = [Family::Yue2, Family::Mm3].into_iter().filter(|f| self.node.serves(*f)).collect::<Vec<_>>();
            let info = WorkerInfo { node: self.node().to_string(), jobs, slots: self.slots, at_ms: now_ms(), families };
            if self.stopping() {
                let _ = self.c.workers.delete(&key).await;
                return;
            }
            if let Err(e) = self.c.workers.put(&key, Bytes::from(serde_json::to_vec(&info).expect("serializes"))).await
            {
                tracing::warn!(error = %e, "the worker's heartbeat did not reach the cluster");
            }
            tokio::time::sleep(crate::HEARTBEAT).await;
        }
    }

    async fn pull_loop(self: Arc<Self>) {
        tracing::info!(node = %self.node(), slots = self.slots, "worker pulling jobs");
        // A new job's message is also seen on the plain subject: it wakes an idle worker at
        // once instead of at its next poll.
        let mut wake = match self.c.client.subscribe("yued.jobs.*").await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no wake-up subscription: the worker polls");
                None
            }
        };
        loop {
            if self.stopping() {
                return;
            }
            if self.running.lock().unwrap().len() >= self.slots {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            match self.next_message().await {
                Ok(Some(msg)) => {
                    let id = std::str::from_utf8(&msg.payload).ok().and_then(|s| JobId::parse(s).ok());
                    let Some(id) = id else {
                        tracing::error!("a message in the jobs stream that is not a job id: dropped");
                        let _ = msg.ack_with(jetstream::AckKind::Term).await;
                        continue;
                    };
                    if !self.running.lock().unwrap().insert(id.clone()) {
                        // Its message came back to the worker that runs it (the server was away
                        // past ack_wait): the run goes on; the message is looked at again later.
                        tracing::info!(job = %id, "the message of a job running here came back: the run goes on");
                        let _ = msg.ack_with(jetstream::AckKind::Nak(Some(OWNER_GRACE))).await;
                        continue;
                    }
                    let me = self.clone();
                    tokio::spawn(async move {
                        let span = tracing::info_span!("job", job = %id);
                        let _ = tracing::Instrument::instrument(me.clone().run(id.clone(), msg), span).await;
                        me.running.lock().unwrap().remove(&id);
                    });
                }
                Ok(None) => {
                    let woken = async {
                        match wake.as_mut() {
                            Some(w) => {
                                w.next().await;
                            }
                            None => std::future::pending().await,
                        }
                    };
                    // The poll stays, slower, for what no message announces: a redelivery.
                    tokio::select! {
                        _ = woken => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "pulling from the cluster's job queue");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// The next job for this worker: the clients with messages in the stream, the one
    /// served longest ago first (round-robin over clients, FIFO within one).
    async fn next_message(&self) -> Result<Option<jetstream::Message>, String> {
        let mut subjects = Vec::new();
        let mut info = self.c.jobs.info_with_subjects("yued.jobs.*").await.map_err(|e| e.to_string())?;
        while let Some(s) = info.next().await {
            let (subject, count) = s.map_err(|e| e.to_string())?;
            if count > 0 {
                subjects.push(subject);
            }
        }
        let mut order = Vec::new();
        for subject in subjects {
            let token = subject.rsplit('.').next().unwrap_or_default().to_string();
            let served = match self.c.state.get(format!("fair.{token}")).await {
                Ok(Some(v)) => std::str::from_utf8(&v).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0),
                _ => 0,
            };
            // A client joins the round at the back, as the single node's fair queue has it:
            // its turn is the later of its last service and its oldest waiting message's
            // arrival (a client never served before does not go ahead of one that has waited
            // since). Between equal turns, the older message first.
            let (first, queued_ms) = match self.c.jobs.get_first_raw_message_by_subject(&subject, 0).await {
                Ok(m) => (m.sequence, (m.time.unix_timestamp_nanos() / 1_000_000).max(0) as u64),
                Err(_) => (u64::MAX, 0),
            };
            order.push((served.max(queued_ms), first, subject, token));
        }
        order.sort();
        for (_, _, subject, token) in order {
            let name = format!("w-{token}");
            let consumer: consumer::PullConsumer = self
                .c
                .jobs
                .get_or_create_consumer(
                    &name,
                    consumer::pull::Config {
                        durable_name: Some(name.clone()),
                        filter_subject: subject,
                        ack_policy: consumer::AckPolicy::Explicit,
                        ack_wait: self.c.cfg.ack_wait,
                        // No limit from the server: it counts hand-backs too. The claim
                        // counts the starts that died (see the module's doc).
                        max_deliver: -1,
                        inactive_threshold: Duration::from_secs(3600),
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            // A consumer made by an older yued (a delivery limit) loses the limit; its other
            // settings are its creator's.
            let mut consumer = consumer;
            let have = &consumer.cached_info().config;
            if have.max_deliver != -1 {
                let mut config =
                    <consumer::pull::Config as consumer::FromConsumer>::try_from_consumer_config(have.clone())
                        .map_err(|e| e.to_string())?;
                config.max_deliver = -1;
                consumer = self.c.jobs.create_consumer(config).await.map_err(|e| e.to_string())?;
            }
            let mut batch = consumer.fetch().max_messages(1).messages().await.map_err(|e| e.to_string())?;
            if let Some(m) = batch.next().await {
                let m = m.map_err(|e| e.to_string())?;
                let _ = self.c.state.put(format!("fair.{token}"), Bytes::from(now_ms().to_string())).await;
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// Writes the job's state if this worker still owns it (same owner, same attempt).
    async fn write_own(&self, id: &JobId, attempt: u32, mut f: impl FnMut(&mut ClusterJob)) -> Result<Own, String> {
        let me = self.node().to_string();
        let r = record::update(&self.c.state, id, Patience::Worker, |j| {
            // An ended job (failed by a claim that found too many deaths, say) is no owner's.
            if j.owner.as_deref() != Some(me.as_str()) || j.attempt != attempt || j.record.state.is_terminal() {
                return Change::Keep(Own::Lost);
            }
            f(j);
            Change::Write(Own::Kept { cancel: j.cancel })
        })
        .await?;
        Ok(r.unwrap_or(Own::Lost))
    }

    /// Claims the job in the state bucket for this worker: `None` when it is not to run
    /// here (already ended, cancelled, out of attempts, or the claim failed), every such
    /// case answered to the server. With the job, whether its last worker stopped answering.
    async fn claim(&self, id: &JobId, msg: &jetstream::Message) -> Option<(Box<ClusterJob>, bool)> {
        let max = self.c.cfg.max_attempts;
        let me = self.node().to_string();
        let mark = claim_mark();
        enum Claim {
            Run(Box<ClusterJob>, bool),
            Skip,
            Ended(StreamEvent),
            /// Its owner may be alive: look again after [`OWNER_GRACE`].
            Later,
        }
        let claim = record::update(&self.c.state, id, Patience::Worker, |j| {
            if j.claim_mark == mark && j.owner.as_deref() == Some(me.as_str()) {
                // This claim's own write, which timed out but landed.
                return Change::Keep(Claim::Run(Box::new(j.clone()), false));
            }
            if j.record.state.is_terminal() {
                return Change::Keep(Claim::Skip);
            }
            if j.cancel {
                j.record.state = JobState::Cancelled;
                return Change::Write(Claim::Ended(StreamEvent::Cancelled {}));
            }
            // Its message came back while a worker still owns it: that worker stopped
            // answering (a worker that lets go of a job hands it back first), or the server
            // was away past ack_wait and the owner is still at it. Taken for dead only when no
            // beat of its came for the grace after the first sight.
            let died = j.owner.is_some() && j.record.state == JobState::Running;
            if died {
                // No clock is compared: the second sight comes OWNER_GRACE after the first, as
                // the server redelivers the message.
                if j.suspected != Some(j.beats) {
                    // First sight, or the owner beat since the last: it lives.
                    j.suspected = Some(j.beats);
                    return Change::Write(Claim::Later);
                }
                j.deaths += 1;
            }
            j.suspected = None;
            if j.refusals >= MAX_REFUSALS {
                let error = format!(
                    "no worker could take the job ({} times; the last was {}: see its log)",
                    j.refusals,
                    j.owner.as_deref().unwrap_or("unknown")
                );
                j.record.state = JobState::Failed;
                j.record.error = Some(error.clone());
                j.owner = None;
                return Change::Write(Claim::Ended(StreamEvent::Failed { error }));
            }
            if j.deaths >= max.max(1) {
                let error = format!(
                    "the job was started {} times and each time the worker running it stopped answering (killed, \
                        crashed or cut off; the last was {}); it is not started again",
                    j.deaths,
                    j.owner.as_deref().unwrap_or("unknown")
                );
                j.record.state = JobState::Failed;
                j.record.error = Some(error.clone());
                j.owner = None;
                return Change::Write(Claim::Ended(StreamEvent::Failed { error }));
            }
            j.owner = Some(me.clone());
            j.beats = 0;
            j.claim_mark = mark;
            j.attempt += 1;
            j.record.state = JobState::Running;
            j.progress = None;
            Change::Write(Claim::Run(Box::new(j.clone()), died))
        })
        .await;
        match claim {
            Err(e) => {
                // Not acknowledged: the cluster gives it to a worker again later.
                tracing::error!(error = %e, "claiming a job");
                None
            }
            Ok(None) => {
                tracing::warn!("a queued job without a state (expired?): dropped");
                let _ = msg.ack().await;
                None
            }
            Ok(Some(Claim::Skip)) => {
                let _ = msg.ack().await;
                None
            }
            Ok(Some(Claim::Ended(event))) => {
                tracing::info!(event = %event.to_text(), "job ended without running");
                self.finish_message(id, event, msg, None).await;
                None
            }
            Ok(Some(Claim::Later)) => {
                tracing::info!("the job's message came back while its worker holds it: looking again in a while");
                let _ = msg.ack_with(jetstream::AckKind::Nak(Some(OWNER_GRACE))).await;
                None
            }
            Ok(Some(Claim::Run(job, died))) => Some((job, died)),
        }
    }

    /// Lets go of a job without running it to its end: the state says queued and no owner
    /// (so the next claim counts no death), then the message goes back to the server: at
    /// once from a stopping worker, after [`REFUSED_AGAIN`] (and counted) from one that could
    /// not take it.
    async fn hand_back(&self, id: &JobId, attempt: u32, msg: &jetstream::Message, why: HandBack) {
        self.node.cancel(id);
        let refused = why == HandBack::Refused;
        let delay = refused.then_some(REFUSED_AGAIN);
        let written = self
            .write_own(id, attempt, |j| {
                j.owner = None;
                j.record.state = JobState::Queued;
                j.progress = None;
                j.refusals += u32::from(refused);
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "the hand-back could not be written: the next start counts it as lost");
        }
        let _ = msg.ack_with(jetstream::AckKind::Nak(delay)).await;
    }

    /// Starts the claimed job on this node (a `/vae` job's upload fetched from the object
    /// store first) and taps its stream; `None` when it could not start (handed back, or
    /// failed when its upload is gone).
    async fn start_local(
        &self,
        id: &JobId,
        job: &ClusterJob,
        attempt: u32,
        msg: &jetstream::Message,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<HubItem>> {
        let upload = match (&job.record.upload, &job.upload) {
            (Some(task), Some(object)) => match self.fetch_upload(id, object).await {
                Ok(path) => Some(UploadTask { op: task.op, input: path }),
                Err(e) => {
                    let why = format!("the job's upload could not be fetched from the cluster: {e}");
                    self.fail(id, attempt, msg, why).await;
                    return None;
                }
            },
            _ => None,
        };
        let r = &job.record;
        let submit = Submission {
            client: r.client.clone(),
            request: r.request.clone(),
            upload,
            id: Some(id.clone()),
            songs: r.songs.clone(),
            // The queue wait is the first start's (a job resumed elsewhere waited once).
            submitted_ms: (attempt == 1).then_some(r.submitted_ms),
        };
        if let Err(e) = self.node.run(submit).await {
            tracing::error!(error = %e, "the local pipeline did not take the job: handing it back");
            self.hand_back(id, attempt, msg, HandBack::Refused).await;
            return None;
        }
        let tap = self.node.tap(id).await;
        if tap.is_none() {
            tracing::error!("the local stream of the job is gone: handing it back");
            self.hand_back(id, attempt, msg, HandBack::Refused).await;
        }
        tap
    }

    /// Forwards the node's stream of the job to the tile bus until its terminal event (the
    /// event), the stream's end without one (`Some(None)`), or this worker's stop (`None`:
    /// the job is handed back). A cancel from the cluster cancels the local job.
    async fn forward(
        &self,
        id: &JobId,
        attempt: u32,
        tap: &mut tokio::sync::mpsc::UnboundedReceiver<HubItem>,
        mut cancels: Option<async_nats::Subscriber>,
        beat_now: &tokio::sync::Notify,
    ) -> Option<Option<StreamEvent>> {
        let mut stop = self.stop.clone();
        let mut n = 0u64;
        loop {
            tokio::select! {
                item = tap.recv() => match item {
                    None => return Some(None),
                    Some(HubItem::Event(StreamEvent::Queued { .. })) => {}
                    Some(HubItem::Event(e)) if e.is_terminal() => return Some(Some(e)),
                    Some(item) => {
                        if matches!(item, HubItem::Event(StreamEvent::Codes { .. })) {
                            // A song's codes are complete: into the cluster now, not at the
                            // next beat (a worker lost in between would leave them unjournaled).
                            beat_now.notify_one();
                        }
                        n += 1;
                        let msg_id = tiles::message_id(id, &item, &format!("a{attempt}.{n}"));
                        if let Err(e) = tiles::publish(&self.c.js, id, &item, &msg_id).await {
                            tracing::error!(error = %e, "a stream item was lost");
                        }
                    }
                },
                Some(_) = async { match cancels.as_mut() { Some(s) => s.next().await,
                    None => std::future::pending().await } } => {
                    tracing::info!("cancel received");
                    self.node.cancel(id);
                }
                _ = stop.changed() => return None,
            }
        }
    }

    /// The job's end in the cluster: its result uploaded, its final state written (while
    /// this worker still owns it), the terminal event published and the message acked.
    async fn conclude(&self, id: &JobId, job: &ClusterJob, attempt: u32, msg: &jetstream::Message, event: StreamEvent) {
        // The local record holds the outcome (written before the event was published).
        let record = self.node.record(id).await.map(|(r, _)| r);
        let mut parts = Vec::new();
        if matches!(event, StreamEvent::Done { .. }) {
            match self.upload_result(id).await {
                Ok(p) => parts = p,
                Err(e) => {
                    self.fail(id, attempt, msg, format!("the result could not be stored in the cluster: {e}")).await;
                    return;
                }
            }
        }
        let state = match &event {
            StreamEvent::Done { .. } => JobState::Done,
            StreamEvent::Cancelled {} => JobState::Cancelled,
            _ => JobState::Failed,
        };
        let own = self
            .write_own(id, attempt, |j| {
                j.record.state = state;
                j.progress = None;
                j.parts = parts.clone();
                if let Some(r) = &record {
                    j.record.songs = r.songs.clone();
                    j.record.metrics = r.metrics.clone();
                    j.record.tracks = r.tracks;
                    j.record.audio_seconds = r.audio_seconds;
                    j.record.error = r.error.clone();
                    j.record.resumed = r.resumed;
                }
                if let StreamEvent::Failed { error } = &event {
                    j.record.error = Some(error.clone());
                }
            })
            .await;
        match own {
            Ok(Own::Kept { .. }) => {}
            Ok(Own::Lost) => {
                self.metrics.jobs_lost_total.inc();
                tracing::warn!("the job was taken over before its end was written: this worker's outcome is dropped");
                self.results.remove(id);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "the job's final state could not be written: it will run again elsewhere");
                return;
            }
        }
        self.results.remove(id);
        tracing::info!(state = state.as_str(), "job finished in the cluster");
        self.finish_message(id, event, msg, job.upload.as_deref()).await;
    }

    /// One job from its message to its end: claimed, run on this node with its stream
    /// forwarded and its heartbeat beating, concluded.
    async fn run(self: Arc<Self>, id: JobId, msg: jetstream::Message) {
        let msg = Arc::new(msg);
        // The message stays this worker's for the whole run, not only while the job's own
        // heartbeat beats: claiming it, fetching its upload and writing its results (retried
        // for minutes while the server is away) may take longer than ack_wait, and a message
        // taken over then would be rendered again and this one's finished result thrown away.
        let _claimed = self.keep_claimed(msg.clone());
        if !self.family_here(&id, &msg).await {
            return;
        }
        let Some((job, died)) = self.claim(&id, &msg).await else { return };
        let (attempt, codes) = (job.attempt, job.record.songs.len());
        // The owner beats from its claim to its last write (its results' upload included, which
        // a server that was away makes long): a worker that finds the message back meanwhile
        // sees the count move and leaves the job alone.
        let beaten = Beaten::new();
        let _beating = self.beating(id.clone(), attempt, beaten.clone());
        if died {
            self.metrics.redeliveries_total.inc();
            tracing::warn!(attempt, deaths = job.deaths, codes, "resuming a job whose worker stopped answering");
        } else if attempt > 1 {
            tracing::info!(attempt, codes, "resuming a job handed back to the cluster");
        } else {
            tracing::info!("job claimed");
        }
        let cancels = match self.c.client.subscribe(format!("yued.cancel.{id}")).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cancel subscription (the heartbeat still reads the flag)");
                None
            }
        };
        // A job of a family this worker's stages do not run goes back for a worker that runs it
        // (after as many refusals as the bound, it fails saying so).
        let family = job.record.request.family();
        if !self.node.serves(family) {
            tracing::warn!(%family, "this worker does not serve the job's family: handing it back");
            self.hand_back(&id, attempt, &msg, HandBack::Refused).await;
            return;
        }
        let Some(mut tap) = self.start_local(&id, &job, attempt, &msg).await else { return };
        let lost = Arc::new(AtomicBool::new(false));
        let beat_now = Arc::new(tokio::sync::Notify::new());
        let beat = Beat { id: id.clone(), attempt, beaten, lost: lost.clone(), now: beat_now.clone() };
        let beat = tokio::spawn(self.clone().job_heartbeat(beat, codes));
        let terminal = self.forward(&id, attempt, &mut tap, cancels, &beat_now).await;
        beat.abort();
        if lost.load(Ordering::Acquire) {
            self.metrics.jobs_lost_total.inc();
            tracing::warn!("another worker owns the job now: this one stopped it and writes nothing");
            return;
        }
        let Some(terminal) = terminal else {
            // This node is stopping: the job goes back to the cluster at once.
            tracing::info!("worker stopping: job handed back to the cluster");
            self.hand_back(&id, attempt, &msg, HandBack::Stopping).await;
            return;
        };
        let Some(event) = terminal else {
            tracing::error!("the local stream ended without a final event: handing the job back");
            self.hand_back(&id, attempt, &msg, HandBack::Refused).await;
            return;
        };
        self.conclude(&id, &job, attempt, &msg, event).await;
    }

    /// The job's last word: its terminal event on the tile bus, then the acknowledgement
    /// that takes its message out of the queue.
    async fn finish_message(&self, id: &JobId, event: StreamEvent, msg: &jetstream::Message, upload: Option<&str>) {
        let item = HubItem::Event(event);
        if let Err(e) = tiles::publish(&self.c.js, id, &item, &tiles::message_id(id, &item, "final")).await {
            tracing::error!(job = %id, error = %e, "the final event could not be published");
        }
        if let Err(e) = retry("acknowledging a job", RETRY_WITHIN, || msg.double_ack()).await {
            tracing::error!(job = %id, error = %e, "the job's message could not be acknowledged (it may be delivered \
                again, and then skipped)");
        }
        if let Some(object) = upload {
            let _ = self.c.results.delete(object).await;
        }
    }

    async fn fail(&self, id: &JobId, attempt: u32, msg: &jetstream::Message, error: String) {
        tracing::error!(job = %id, %error, "job failed");
        self.node.cancel(id);
        let e2 = error.clone();
        if let Ok(Own::Kept { .. }) = self
            .write_own(id, attempt, |j| {
                j.record.state = JobState::Failed;
                j.record.error = Some(e2.clone());
            })
            .await
        {
            self.finish_message(id, StreamEvent::Failed { error }, msg, None).await;
        }
    }

    /// Reports the message in progress every third of ack_wait until the guard is dropped.
    /// Counts this run's beats in the job's state every heartbeat until dropped, unless the
    /// job's own heartbeat landed one lately (it counts them in its progress write: one write
    /// a heartbeat, not two). When that write fails or stalls (the server away, a state too
    /// big to write), the beats go on from here within a heartbeat and a half.
    fn beating(self: &Arc<Self>, id: JobId, attempt: u32, beaten: Arc<Beaten>) -> KeepClaimed {
        let me = self.clone();
        let period = (self.c.cfg.ack_wait / 3).min(crate::HEARTBEAT).max(Duration::from_millis(200));
        KeepClaimed(tokio::spawn(async move {
            loop {
                if !beaten.within(period * 3 / 2) {
                    if let Ok(Own::Lost) = me.write_own(&id, attempt, |j| j.beats += 1).await {
                        return;
                    }
                }
                tokio::time::sleep(period).await;
            }
        }))
    }

    /// Whether this worker's stages run the job's family, or no live worker's do (then the
    /// claim takes it, and refuses it, counted, so that it fails in the end). A job of a family
    /// another live worker runs goes back without a write, for that worker.
    async fn family_here(&self, id: &JobId, msg: &jetstream::Message) -> bool {
        let Ok(Some((job, _))) = record::read(&self.c.state, id, Patience::Worker).await else { return true };
        let family = job.record.request.family();
        if self.node.serves(family) {
            return true;
        }
        let elsewhere = self
            .c
            .live_workers()
            .await
            .is_ok_and(|ws| ws.iter().any(|w| w.node != self.node() && w.families.contains(&family)));
        if !elsewhere {
            return true;
        }
        tracing::info!(%family, "this worker does not serve the job's family: it goes back for one that does");
        let _ = msg.ack_with(jetstream::AckKind::Nak(Some(REFUSED_AGAIN))).await;
        false
    }

    fn keep_claimed(&self, msg: Arc<jetstream::Message>) -> KeepClaimed {
        let period = (self.c.cfg.ack_wait / 3).min(crate::HEARTBEAT).max(Duration::from_millis(200));
        KeepClaimed(tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let _ = msg.ack_with(jetstream::AckKind::Progress).await;
            }
        }))
    }

    /// Every beat while the job runs (and at once when a song's codes are complete): the
    /// owner's beat, progress and new codes to the state, in one write (the message is kept
    /// in progress for the whole run by [`Worker::keep_claimed`]); a cancel flag or a new owner
    /// stops the local job.
    async fn job_heartbeat(self: Arc<Self>, beat: Beat, mut songs_known: usize) {
        let Beat { id, attempt, beaten, lost, now } = beat;
        let period = (self.c.cfg.ack_wait / 3).min(crate::HEARTBEAT).max(Duration::from_millis(200));
        let mut cancelled = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = now.notified() => {}
            }
            // Written even before the local job has a record: the beat must not skip.
            let local = self.node.record(&id).await;
            let new_songs = local
                .as_ref()
                .and_then(|(record, _)| (record.songs.len() != songs_known).then(|| record.songs.clone()));
            let own = self
                .write_own(&id, attempt, |j| {
                    j.beats += 1;
                    if let Some((_, progress)) = &local {
                        j.progress = progress.map(|(s, d, t)| (s, d as u64, t as u64));
                    }
                    if let Some(songs) = &new_songs {
                        // The codes are journaled in the cluster: a worker that takes the job
                        // over resumes from them.
                        j.record.songs = songs.clone();
                    }
                })
                .await;
            match own {
                Ok(Own::Kept { cancel }) => {
                    beaten.now();
                    if let Some(songs) = &new_songs {
                        songs_known = songs.len();
                        tracing::info!(job = %id, codes = songs_known, "codes journaled in the cluster");
                    }
                    if cancel && !cancelled {
                        cancelled = true;
                        self.node.cancel(&id);
                    }
                }
                Ok(Own::Lost) => {
                    lost.store(true, Ordering::Release);
                    self.node.cancel(&id);
                    return;
                }
                Err(e) => tracing::warn!(job = %id, error = %e, "the job's progress could not be written"),
            }
        }
    }

    async fn fetch_upload(&self, id: &JobId, object: &str) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.uploads).map_err(|e| e.to_string())?;
        let path = self.uploads.join(format!("{id}.cluster-upload"));
        let mut obj = self.c.results.get(object).await.map_err(|e| e.to_string())?;
        let mut f = tokio::fs::File::create(&path).await.map_err(|e| e.to_string())?;
        tokio::io::copy(&mut obj, &mut f).await.map_err(|e| e.to_string())?;
        f.flush().await.map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// Puts each file of the local result in the object store; their names and types.
    async fn upload_result(&self, id: &JobId) -> Result<Vec<ResultPart>, String> {
        let parts = self.results.parts(id).ok_or("the local result is missing")?;
        let mut out = Vec::new();
        for (path, content_type) in parts {
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let name = record::result_object(id, &file);
            retry("storing a result file", RETRY_WITHIN, || async {
                let mut f = tokio::fs::File::open(&path).await.map_err(|e| e.to_string())?;
                self.c.results.put(name.as_str(), &mut f).await.map(|_| ()).map_err(|e| e.to_string())
            })
            .await?;
            out.push(ResultPart { file, content_type });
        }
        Ok(out)
    }
}

/// What a running job's heartbeat needs: whose beat, its claim, where it says it landed a
/// beat, the flag it raises when another worker owns the job, and the bell that asks for a beat
/// at once.
struct Beat {
    id: JobId,
    attempt: u32,
    beaten: Arc<Beaten>,
    lost: Arc<AtomicBool>,
    now: Arc<tokio::sync::Notify>,
}

/// When the job's own heartbeat last landed a beat (see [`Worker::beating`]).
struct Beaten {
    epoch: std::time::Instant,
    /// Milliseconds from `epoch` to that beat, plus one; 0: none yet.
    at_ms: std::sync::atomic::AtomicU64,
}

impl Beaten {
    fn new() -> Arc<Self> {
        Arc::new(Beaten { epoch: std::time::Instant::now(), at_ms: std::sync::atomic::AtomicU64::new(0) })
    }

    fn since_epoch_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// A beat landed now.
    fn now(&self) {
        self.at_ms.store(self.since_epoch_ms(), Ordering::Release);
    }

    /// Whether a beat landed within `span`.
    fn within(&self, span: Duration) -> bool {
        let at = self.at_ms.load(Ordering::Acquire);
        at > 0 && self.since_epoch_ms() - at < span.as_millis() as u64
    }
}

/// How long a job this worker could not take waits before the server offers it again (to
/// this worker or another): a refusal is not retried in a tight loop.
const REFUSED_AGAIN: Duration = Duration::from_secs(2);

/// How long a job's owner may go without a beat, after a worker found the job's message back,
/// before it is taken for dead (four heartbeats: a server that comes back after an outage
/// hears from every live owner within one).
pub const OWNER_GRACE: Duration = Duration::from_secs(4 * crate::HEARTBEAT.as_secs());

/// Refusals after which a job fails (about three minutes of them at [`REFUSED_AGAIN`]).
const MAX_REFUSALS: u32 = 90;

/// Why a worker lets go of a job it claimed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HandBack {
    /// The worker stops: another takes the job at once.
    Stopping,
    /// The worker could not take it (its pipeline refused it, or lost its stream).
    Refused,
}

/// A claim's random mark (see [`ClusterJob::claim_mark`]): 64 bits of the job ids' own
/// source, never 0 (a state written before marks holds 0).
fn claim_mark() -> u64 {
    JobId::random().map(|id| id.to_u64()).unwrap_or_else(|_| now_ms()) | 1
}

/// A message kept from redelivery while it lives (see [`Worker::keep_claimed`]).
struct KeepClaimed(tokio::task::JoinHandle<()>);

impl Drop for KeepClaimed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim's beating writes unless the job's heartbeat landed a beat lately: never before
    /// the first, not after a heartbeat and a half without one.
    #[test]
    fn a_beat_counts_as_recent_for_its_span_only() {
        let b = Beaten::new();
        assert!(!b.within(Duration::from_secs(3)), "no beat yet");
        b.now();
        assert!(b.within(Duration::from_secs(3)));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!b.within(Duration::from_millis(50)), "a beat older than the span");
        assert!(b.within(Duration::from_secs(3)));
    }
}
