//! An API node's job system: the actors' four backend traits on JetStream. Nothing here
//! computes: a submission is a state entry plus a message in the jobs stream, a status is a
//! read of the entry, a listener is a consumer of the job's tile subject, and a result is
//! fetched from the object store into a local cache the first time it is asked for.
use crate::metrics::ClusterMetrics;
use crate::record::{self, Change, ClusterJob, Patience};
use crate::worker::WorkerInfo;
use crate::{client_token, retry, tiles, Cluster};
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use yued_contract::metrics::Metrics;
use yued_contract::results::{now_ms, ResultStore};
use yued_contract::stream::{HubItem, Subscription};
use yued_contract::{JobQueue, JobRecord, JobStates, QueueSnapshot, ResultFiles, Submission, SubmitError, TileBus};
use yued_contract::{Unavailable, UploadTask, RECORD_VERSION};
use yued_protocol::{Family, JobId, JobList, JobState, JobStatus, Stage, StreamCodec, StreamEvent};

pub struct NatsBackend {
    c: Arc<Cluster>,
    /// Results fetched from the object store, kept under the data directory with the
    /// single node's expiry rules.
    cache: ResultStore,
    metrics: Metrics,
    cluster_metrics: ClusterMetrics,
}

/// What the cluster looks like from here.
struct View {
    workers: Vec<WorkerInfo>,
    /// Messages in the jobs stream: queued and running jobs.
    messages: u64,
    first_seq: u64,
    clients: usize,
}

impl View {
    fn running(&self) -> usize {
        self.workers.iter().map(|w| w.jobs.len()).sum()
    }
    fn queued(&self) -> usize {
        (self.messages as usize).saturating_sub(self.running())
    }
}

fn unavailable(e: impl std::fmt::Display) -> Unavailable {
    Unavailable(format!("the cluster is not answering: {e}"))
}

impl NatsBackend {
    pub fn new(c: Arc<Cluster>, cache: ResultStore, metrics: Metrics, cluster_metrics: ClusterMetrics) -> Arc<Self> {
        Arc::new(NatsBackend { c, cache, metrics, cluster_metrics })
    }

    pub fn backend(self: &Arc<Self>) -> yued_contract::Backend {
        yued_contract::Backend::new(self.clone(), self.clone(), self.clone(), self.clone())
    }

    /// The jobs the state bucket holds, asked of the server each time (the bucket's own status
    /// is what it was when it was opened): its `job.*` keys, not its fairness marks.
    async fn jobs_known(&self) -> Result<usize, String> {
        let subjects = format!("{}{}", self.c.state.prefix, "job.*");
        let mut info = self.c.state.stream.info_with_subjects(subjects).await.map_err(|e| e.to_string())?;
        let mut n = 0;
        while let Some(s) = info.next().await {
            s.map_err(|e| e.to_string())?;
            n += 1;
        }
        Ok(n)
    }

    async fn view(&self) -> Result<View, Unavailable> {
        let workers = self.c.live_workers().await.map_err(unavailable)?;
        let info = self.c.jobs.get_info().await.map_err(unavailable)?;
        let v = View {
            workers,
            messages: info.state.messages,
            first_seq: info.state.first_sequence,
            clients: info.state.subjects_count as usize,
        };
        self.cluster_metrics.workers_alive.set(v.workers.len() as i64);
        self.cluster_metrics.jobs_running.set(v.running() as i64);
        self.cluster_metrics.queue_depth.set(v.queued() as i64);
        Ok(v)
    }

    /// Keeps the cluster gauges current (every heartbeat).
    pub fn watch(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = me.view().await {
                    tracing::warn!(error = %e, "the cluster's figures could not be read");
                }
                tokio::time::sleep(crate::HEARTBEAT).await;
            }
        });
    }

    /// Publishes an event of the job's stream in the background (the answer to the
    /// client does not wait for it through a NATS outage).
    async fn publish_event(&self, id: &JobId, event: StreamEvent) {
        let item = HubItem::Event(event);
        let msg_id = tiles::message_id(id, &item, "api");
        let (js, id) = (self.c.js.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = tiles::publish(&js, &id, &item, &msg_id).await {
                tracing::error!(job = %id, error = %e, "the job's stream event could not be published");
            }
        });
    }

    /// Messages on one principal's subject of the jobs stream: its queued and running jobs.
    async fn held(&self, subject: &str) -> Result<usize, String> {
        let mut info = self.c.jobs.info_with_subjects(subject).await.map_err(|e| e.to_string())?;
        let mut held = 0;
        while let Some(item) = info.next().await {
            let (s, n) = item.map_err(|e| e.to_string())?;
            if s == subject {
                held += n;
            }
        }
        Ok(held)
    }

    /// Puts a `/vae` upload where a worker can fetch it; the task names the object.
    async fn ship_upload(&self, id: &JobId, task: &UploadTask) -> Result<String, String> {
        let name = format!("upload.{id}");
        retry("storing an upload", Duration::from_secs(10), || async {
            let mut f = tokio::fs::File::open(&task.input).await.map_err(|e| format!("the upload: {e}"))?;
            self.c.results.put(name.as_str(), &mut f).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await?;
        let _ = std::fs::remove_file(&task.input);
        Ok(name)
    }
}

/// How long the queue's figures wait for the cluster.
const SNAPSHOT_WITHIN: Duration = Duration::from_secs(3);

#[async_trait]
impl JobQueue for NatsBackend {
    async fn submit(&self, job: Submission) -> Result<JobId, SubmitError> {
        let cap = self.c.cfg.admission_cap;
        // A principal's share: its messages in the jobs stream are its queued and running
        // jobs (a message leaves when its job ends). Checked before queueing, so two API
        // nodes taking the same principal's jobs at one instant may each let one through.
        // A share as large as the cap leaves the stream's bound (the cap) to answer.
        let subject = format!("yued.jobs.{}", client_token(&job.client));
        let share = self.c.cfg.admission_share.clamp(1, cap.max(1));
        if share < cap {
            let held = self
                .held(&subject)
                .await
                .map_err(|e| SubmitError::Unavailable(format!("the cluster's job queue: {e}")))?;
            if held >= share {
                self.metrics.admission_rejections_total.inc();
                return Err(SubmitError::OverShare(share));
            }
            // The cap's last free place is kept for a principal that holds none.
            if held > 0 {
                let active = self
                    .c
                    .jobs
                    .get_info()
                    .await
                    .map_err(|e| SubmitError::Unavailable(format!("the cluster's job queue: {e}")))?
                    .state
                    .messages as usize;
                // None left: the stream's bound answers, as a full cap.
                if yued_contract::queue::keeps_last_place(held, share, cap, active) {
                    self.metrics.admission_rejections_total.inc();
                    return Err(SubmitError::KeptForOthers);
                }
            }
        }
        let id = JobId::random().map_err(|e| SubmitError::Unavailable(format!("no randomness for a job id: {e}")))?;
        let upload = match &job.upload {
            Some(task) => Some(self.ship_upload(&id, task).await.map_err(SubmitError::Unavailable)?),
            None => None,
        };
        let record = JobRecord {
            version: RECORD_VERSION,
            id: id.clone(),
            client: job.client.clone(),
            request: job.request,
            state: JobState::Queued,
            submitted_ms: now_ms(),
            songs: vec![],
            error: None,
            metrics: None,
            tracks: 0,
            audio_seconds: 0.0,
            upload: job.upload.map(|v| UploadTask { op: v.op, input: PathBuf::new() }),
            crashes: 0,
            resumed: 0,
            cancel_asked: false,
            interrupted: false,
        };
        let entry = ClusterJob {
            record,
            seq: 0,
            owner: None,
            attempt: 0,
            deaths: 0,
            claim_mark: 0,
            refusals: 0,
            progress: None,
            cancel: false,
            parts: vec![],
            upload,
            beats: 0,
            suspected: None,
        };
        record::create(&self.c.state, &entry).await.map_err(SubmitError::Journal)?;
        // The job id is the message id: a publish retried after a lost acknowledgement is
        // a duplicate, not a second song.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        let payload = Bytes::from(id.to_string());
        let published = retry("queueing a job", Duration::from_secs(10), || {
            let (subject, headers, payload) = (subject.clone(), headers.clone(), payload.clone());
            async move {
                match self.c.js.publish_with_headers(subject, headers, payload).await {
                    Ok(ack) => match ack.await {
                        Ok(a) => Ok(Ok(a.sequence)),
                        // A full stream is an answer, not a failure to retry.
                        Err(e) if e.to_string().contains("maximum messages") => Ok(Err(())),
                        Err(e) => Err(e.to_string()),
                    },
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await;
        let seq = match published {
            Ok(Ok(seq)) => seq,
            Ok(Err(())) => {
                let _ = self.c.state.delete(record::key(&id)).await;
                self.metrics.admission_rejections_total.inc();
                return Err(SubmitError::Full(cap));
            }
            Err(e) => {
                let _ = self.c.state.delete(record::key(&id)).await;
                return Err(SubmitError::Unavailable(format!("the cluster's job queue: {e}")));
            }
        };
        let _ = record::update(&self.c.state, &id, Patience::Answer, |j| {
            j.seq = seq;
            Change::Write(())
        })
        .await;
        self.metrics.jobs_submitted_total.inc();
        tracing::info!(job = %id, client = %job.client, seq, "job queued in the cluster");
        let position = self.view().await.map(|v| v.queued().saturating_sub(1) as u32).unwrap_or(0);
        self.publish_event(&id, StreamEvent::Queued { position }).await;
        Ok(id)
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        enum Did {
            Dequeued(u64),
            Flagged,
            Already(JobState),
        }
        let did = record::update(&self.c.state, id, Patience::Answer, |j| match j.record.state {
            JobState::Queued => {
                j.record.state = JobState::Cancelled;
                Change::Write(Did::Dequeued(j.seq))
            }
            JobState::Running if !j.cancel => {
                j.cancel = true;
                Change::Write(Did::Flagged)
            }
            JobState::Running => Change::Keep(Did::Flagged),
            s => Change::Keep(Did::Already(s)),
        })
        .await
        .map_err(unavailable)?;
        Ok(match did {
            None => None,
            Some(Did::Dequeued(seq)) => {
                // Its message leaves the queue (a worker that took it meanwhile sees the state).
                if seq > 0 {
                    let _ = self.c.jobs.delete_message(seq).await;
                }
                self.metrics.jobs_finished_total.with_label_values(&["cancelled"]).inc();
                self.publish_event(id, StreamEvent::Cancelled {}).await;
                tracing::info!(job = %id, "queued job cancelled");
                Some(JobState::Cancelled)
            }
            Some(Did::Flagged) => {
                // The worker that runs it hears this at once (and reads the flag at its
                // next heartbeat if it missed it).
                let _ = self.c.client.publish(format!("yued.cancel.{id}"), Bytes::new()).await;
                tracing::info!(job = %id, "cancel sent to the job's worker");
                Some(JobState::Cancelled)
            }
            Some(Did::Already(s)) => Some(s),
        })
    }

    async fn snapshot(&self) -> Result<QueueSnapshot, Unavailable> {
        // Bounded, so that a health probe gets its 503 in seconds while the server is away.
        let view = tokio::time::timeout(SNAPSHOT_WITHIN, self.view()).await.unwrap_or_else(|_| {
            Err(Unavailable(format!("the cluster did not answer within {} s", SNAPSHOT_WITHIN.as_secs())))
        });
        let v = match view {
            Ok(v) => v,
            Err(e) => {
                return Ok(QueueSnapshot {
                    queued: 0,
                    running: vec![],
                    cap: self.c.cfg.admission_cap,
                    share: self.c.cfg.admission_share,
                    worker_ready: false,
                    accepting: false,
                    jobs_known: None,
                    clients_waiting: 0,
                    results_stored: None,
                    results_bytes: None,
                    journal_error: Some(e.0),
                })
            }
        };
        let (bytes, count) = self.cache.usage();
        let jobs_known = self.jobs_known().await.unwrap_or(0);
        Ok(QueueSnapshot {
            queued: v.queued(),
            running: v.workers.iter().flat_map(|w| w.jobs.iter().map(|j| j.to_string())).collect(),
            cap: self.c.cfg.admission_cap,
            share: self.c.cfg.admission_share,
            worker_ready: !v.workers.is_empty(),
            accepting: true,
            jobs_known: Some(jobs_known),
            clients_waiting: v.clients,
            results_stored: Some(count),
            results_bytes: Some(bytes),
            journal_error: None,
        })
    }
}

#[async_trait]
impl JobStates for NatsBackend {
    async fn status(&self, id: &JobId) -> Result<Option<JobStatus>, Unavailable> {
        let Some((j, _)) = record::read(&self.c.state, id, Patience::Answer).await.map_err(Unavailable)? else {
            return Ok(None);
        };
        Ok(Some(match j.record.state {
            JobState::Queued => {
                // Jobs ahead of it in the stream, less those already running: an estimate
                // under the per-client fairness, exact for one client.
                let position = match self.view().await {
                    Ok(v) => (j.seq.saturating_sub(v.first_seq) as usize).saturating_sub(v.running()) as u32,
                    Err(_) => 0,
                };
                JobStatus::queued(position)
            }
            JobState::Running => {
                let mut s = match j.progress {
                    Some((stage, done, total)) => {
                        let mut s = JobStatus::running(stage, if total > 0 { done as f32 / total as f32 } else { 0.0 });
                        if matches!(stage, Stage::Plan | Stage::Semantic) {
                            s.tokens_done = Some(done);
                            s.tokens_budget = Some(total);
                        }
                        s
                    }
                    None => JobStatus::new(JobState::Running, 0),
                };
                s.queue_position = 0;
                s
            }
            JobState::Done => JobStatus::done(j.record.metrics.clone()),
            JobState::Failed => JobStatus::failed(j.record.error.clone().unwrap_or_default()),
            JobState::Cancelled => JobStatus::cancelled(),
        }))
    }

    async fn state(&self, id: &JobId) -> Result<Option<JobState>, Unavailable> {
        Ok(record::read(&self.c.state, id, Patience::Answer).await.map_err(Unavailable)?.map(|(j, _)| j.record.state))
    }

    async fn family(&self, id: &JobId) -> Result<Option<Family>, Unavailable> {
        Ok(record::read(&self.c.state, id, Patience::Answer)
            .await
            .map_err(Unavailable)?
            .map(|(j, _)| j.record.request.family()))
    }

    async fn owner(&self, id: &JobId) -> Result<Option<String>, Unavailable> {
        Ok(record::read(&self.c.state, id, Patience::Answer).await.map_err(Unavailable)?.map(|(j, _)| j.record.client))
    }

    async fn list(&self, owner: Option<&str>) -> Result<JobList, Unavailable> {
        let mut keys = self.c.state.keys().await.map_err(unavailable)?;
        let mut jobs = Vec::new();
        while let Some(k) = keys.next().await {
            let Some(id) = k.ok().and_then(|k| k.strip_prefix("job.").and_then(|s| JobId::parse(s).ok())) else {
                continue;
            };
            if let Ok(Some((j, _))) = record::read(&self.c.state, &id, Patience::Answer).await {
                if owner.is_none_or(|o| j.record.client == o) {
                    jobs.push(j.record.list_entry(owner.is_none()));
                }
            }
        }
        jobs.sort_by(|a, b| (a.submitted_ms, &a.id).cmp(&(b.submitted_ms, &b.id)));
        Ok(JobList { jobs })
    }
}

#[async_trait]
impl TileBus for NatsBackend {
    async fn subscribe(&self, id: &JobId, codec: StreamCodec) -> Result<Option<Subscription>, Unavailable> {
        match record::read(&self.c.state, id, Patience::Answer).await.map_err(Unavailable)? {
            // An ended job is answered from its result, as on a single node.
            Some((j, _)) if !j.record.state.is_terminal() => {
                tiles::listen(&self.c.js, id, codec, self.cluster_metrics.tile_latency_seconds.clone())
                    .await
                    .map(Some)
                    .map_err(Unavailable)
            }
            _ => Ok(None),
        }
    }
}

#[async_trait]
impl ResultFiles for NatsBackend {
    async fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>> {
        if let Some(p) = self.cache.parts(id) {
            return Some(p);
        }
        let (j, _) = record::read(&self.c.state, id, Patience::Answer).await.ok()??;
        if j.record.state != JobState::Done || j.parts.is_empty() {
            return None;
        }
        let mut files = Vec::new();
        for p in &j.parts {
            let mut obj = self
                .c
                .results
                .get(record::result_object(id, &p.file))
                .await
                .map_err(
                    |e| tracing::warn!(job = %id, file = %p.file, error = %e, "a result file is not in the cluster"),
                )
                .ok()?;
            let mut data = Vec::new();
            obj.read_to_end(&mut data)
                .await
                .map_err(
                    |e| tracing::warn!(job = %id, file = %p.file, error = %e, "reading a result file from the cluster"),
                )
                .ok()?;
            files.push((p.file.clone(), p.content_type.clone(), data));
        }
        self.cache.save(id, files).map_err(|e| tracing::warn!(job = %id, error = %e, "caching a result")).ok()?;
        self.cache.parts(id)
    }
}
