//! The Scheduler: the job table, a FIFO queue that is fair between clients (round-robin
//! over principals, FIFO within one), the admission cap shared by every route with each
//! principal's share of it, and the journal, to which every state change is written before
//! it is acknowledged.
use crate::fair_queue::FairQueue;
use crate::hub::{Publish, StreamHub};
use crate::journal::{Journal, JournalError};
use crate::messages::{
    CodesReady, EntryFree, Finished, Outcome, Progress, Requeue, Resumed, RunJob, WorkerCmd, WorkerReady,
};
use actix::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;
use yued_contract::metrics::Metrics;
use yued_contract::record::{StageProgress, MAX_CRASHES};
use yued_contract::results::{now_ms, ResultStore};
use yued_contract::{JobRecord, QueueSnapshot, Submission, SubmitError, RECORD_VERSION};
use yued_engine::cancel::CancelToken;
use yued_protocol::{JobId, JobState, JobStatus, Stage, StreamEvent};

struct Entry {
    record: JobRecord,
    progress: Option<StageProgress>,
    cancel: CancelToken,
    submitted: Instant,
    /// Its wait is in the queue-wait histogram, or is not this node's to measure: measured
    /// at its first start (not again when it goes back to wait for the AR batch), never for
    /// a cluster's job (the cluster's queue held it; this node's is an instant).
    wait_measured: bool,
    /// Not a cluster job's later attempt (whose first attempt's worker measured its waits).
    first_try: bool,
}

pub struct Scheduler {
    journal: Journal,
    jobs: HashMap<JobId, Entry>,
    /// Queued jobs, round-robin over clients.
    queue: FairQueue<JobId>,
    /// The job in the entry stage (the compose stage); the next one is dispatched when it
    /// hands its songs on.
    entry: Option<JobId>,
    /// Every job in the compute stages (the entry one included).
    active: BTreeSet<JobId>,
    worker: crossbeam_channel::Sender<WorkerCmd>,
    worker_ready: bool,
    hub: Addr<StreamHub>,
    results: Arc<ResultStore>,
    metrics: Metrics,
    cap: usize,
    /// The most active jobs one principal may hold (its share of `cap`).
    share: usize,
    accepting: bool,
    /// The last journal write failed (and why): `/health` reports the daemon unhealthy
    /// until a write succeeds again.
    journal_error: Option<String>,
    /// When the journal was last opened again after an I/O error (see `with_journal`).
    journal_reopened: Option<Instant>,
}

/// A journal whose write failed for I/O is opened again at most this often.
const JOURNAL_REOPEN_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl Scheduler {
    /// Restores the table from the journal: queued and interrupted jobs go back in the
    /// queue in id order (an interrupted job with journaled codes resumes from them). A job
    /// found running for the [`MAX_CRASHES`]th time is failed, not resumed: a job that
    /// crashes the process (a C abort) would otherwise crash every start.
    pub fn new(
        journal: Journal,
        worker: crossbeam_channel::Sender<WorkerCmd>,
        hub: Addr<StreamHub>,
        results: Arc<ResultStore>,
        metrics: Metrics,
        cap: usize,
        share: usize,
    ) -> Result<Self, crate::journal::JournalError> {
        let mut s = Scheduler {
            journal,
            jobs: HashMap::new(),
            queue: FairQueue::new(),
            entry: None,
            active: BTreeSet::new(),
            worker,
            worker_ready: false,
            hub,
            results,
            metrics,
            cap,
            share: share.clamp(1, cap.max(1)),
            accepting: true,
            journal_error: None,
            journal_reopened: None,
        };
        let mut restored = 0;
        // Ids are random: the queue is restored in submission order.
        let mut records = s.journal.load()?;
        records.sort_by(|a, b| (a.submitted_ms, &a.id).cmp(&(b.submitted_ms, &b.id)));
        for mut r in records {
            let id = r.id.clone();
            if r.state == JobState::Running {
                r.crashes += 1;
            }
            if !r.state.is_terminal() && r.cancel_asked {
                // Its cancel was answered before the daemon stopped: it stays cancelled.
                tracing::info!(job = %id, "a job cancelled while it ran stays cancelled after the restart");
                r.state = JobState::Cancelled;
                s.journal.put(&r)?;
            } else if !r.state.is_terminal() && r.crashes >= MAX_CRASHES {
                let msg = format!(
                    "the daemon stopped unexpectedly {} times while running this job (a crash or a \
                    kill); it is not resumed again",
                    r.crashes
                );
                tracing::error!(job = %id, crashes = r.crashes, "{msg}");
                r.state = JobState::Failed;
                r.error = Some(msg);
                s.journal.put(&r)?;
            } else if !r.state.is_terminal() {
                if r.state == JobState::Running {
                    tracing::info!(job = %id, codes = r.songs.len(), crashes = r.crashes, "resuming a job interrupted \
                        by a restart");
                }
                r.state = JobState::Queued;
                s.journal.put(&r)?;
                s.enqueue(&id, &r.client);
                restored += 1;
            }
            // A job that had started before the stop (it crashed running, or a shutdown put it
            // back) waited once already.
            let started = r.crashes > 0 || r.resumed > 0 || r.interrupted || !r.songs.is_empty();
            s.jobs.insert(
                id,
                Entry {
                    record: r,
                    progress: None,
                    cancel: CancelToken::new(),
                    submitted: Instant::now(),
                    wait_measured: started,
                    // Its first audio may have gone out before the stop: its waits count once.
                    first_try: !started,
                },
            );
        }
        if restored > 0 {
            tracing::info!(restored, "jobs restored from the journal");
        }
        // Each will be counted finished in this process's counters: count it taken, too.
        s.metrics.jobs_submitted_total.inc_by(restored);
        // Opens the restored jobs' streams (a stream starts with its queued event).
        s.publish_positions();
        s.metrics.queue_depth.set(s.queued_count() as i64);
        Ok(s)
    }

    /// Removes the files of `dir` that no waiting or running job reads.
    pub fn sweep_uploads(&self, dir: &std::path::Path) {
        // By name: uploads have random names, and the journal may hold the folder's path
        // spelt another way.
        let wanted: std::collections::HashSet<&std::ffi::OsStr> = self
            .jobs
            .values()
            .filter(|e| !e.record.state.is_terminal())
            .filter_map(|e| e.record.upload.as_ref().and_then(|u| u.input.file_name()))
            .collect();
        let Ok(files) = std::fs::read_dir(dir) else { return };
        let mut removed = 0;
        for f in files.flatten() {
            let path = f.path();
            if path.is_file() && !wanted.contains(f.file_name().as_os_str()) && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, dir = %dir.display(), "uploads no job reads removed");
        }
    }

    fn enqueue(&mut self, id: &JobId, client: &str) {
        self.queue.push(client, id.clone());
    }

    fn queued_count(&self) -> usize {
        self.queue.len()
    }

    /// Active work: queued plus in the compute stages.
    fn active_count(&self) -> usize {
        self.queued_count() + self.active.len()
    }

    /// The dispatch order of the queued jobs (round-robin over clients).
    fn order(&self) -> Vec<JobId> {
        self.queue.order()
    }

    fn position(&self, id: &JobId) -> u32 {
        self.queue.position(id).unwrap_or(0) as u32
    }

    fn pop_next(&mut self) -> Option<JobId> {
        self.queue.pop()
    }

    /// Runs a journal operation. One that fails for I/O (a full disk: sled then fails every
    /// later write with the same error, space freed or not) opens the journal again, at most
    /// every [`JOURNAL_REOPEN_EVERY`], and is tried once more.
    fn with_journal<T>(&mut self, op: impl Fn(&Journal) -> Result<T, JournalError>) -> Result<T, JournalError> {
        let due = self.journal_reopened.is_none_or(|t| t.elapsed() >= JOURNAL_REOPEN_EVERY);
        match op(&self.journal) {
            // Failed for I/O, or closed by a reopening that failed (the disk still full).
            Err(err) if due && (matches!(err, JournalError::Io(_)) || !self.journal.is_open()) => {
                self.journal_reopened = Some(Instant::now());
                tracing::warn!(%err, "a journal operation failed: opening the journal again");
                self.journal.reopen()?;
                tracing::info!("the journal is open again");
                op(&self.journal)
            }
            r => r,
        }
    }

    /// Writes a job's record; `false` (and the daemon unhealthy until a write succeeds)
    /// when the journal refused it.
    fn persist(&mut self, id: &JobId) -> bool {
        let Some(e) = self.jobs.get(id) else { return true };
        let record = e.record.clone();
        let r = self.with_journal(|j| j.put(&record));
        self.journaled(r.map_err(|err| {
            tracing::error!(job = %id, %err, "journal write failed");
            err
        }))
    }

    /// Records the outcome of a journal write for `/health`. The first write that succeeds
    /// after failures writes every record again (and drops those of forgotten jobs): a
    /// change that failed to be written is then on disk too before the daemon says it is
    /// healthy.
    fn journaled<E: std::fmt::Display>(&mut self, r: Result<(), E>) -> bool {
        match r {
            Ok(()) if self.journal_error.is_none() => true,
            Ok(()) => {
                // This write itself landed, whatever the others do.
                self.recover_journal();
                true
            }
            Err(e) => {
                self.journal_failed(Some(e.to_string()));
                false
            }
        }
    }

    /// Why the journal refuses writes (`None`: it takes them), and the gauge that says so.
    fn journal_failed(&mut self, why: Option<String>) {
        self.metrics.journal_healthy.set(i64::from(why.is_none()));
        self.journal_error = why;
    }

    /// After failed writes: every record written again (a change that failed to be written
    /// is then on disk too); the daemon is healthy once that succeeds.
    fn recover_journal(&mut self) {
        match self.resync_journal() {
            Ok(()) => {
                self.journal_failed(None);
                tracing::info!("journal writes succeed again (every record written again)");
            }
            Err(e) => self.journal_failed(Some(e.to_string())),
        }
    }

    /// Writes every job's record again, and removes the records of jobs no longer held.
    fn resync_journal(&mut self) -> Result<(), JournalError> {
        let records: Vec<JobRecord> = self.jobs.values().map(|e| e.record.clone()).collect();
        for r in &records {
            self.with_journal(|j| j.put(r))?;
        }
        for r in self.with_journal(Journal::load)? {
            if !self.jobs.contains_key(&r.id) {
                self.with_journal(|j| j.remove(&r.id))?;
            }
        }
        self.with_journal(Journal::flush)
    }

    fn dispatch(&mut self) {
        if self.entry.is_some() || !self.worker_ready || !self.accepting {
            return;
        }
        // A job that was running when the daemon died runs alone, so that a second crash
        // is its own: every job in the stages at a crash is counted, and a job that merely
        // shared the stages with a poison one must not reach the limit with it.
        let crashed = |s: &Self, id: &JobId| s.jobs.get(id).is_some_and(|e| e.record.crashes > 0);
        if self.active.iter().any(|id| crashed(self, id)) {
            return;
        }
        if self.queue.peek().is_some_and(|next| crashed(self, next)) && !self.active.is_empty() {
            return;
        }
        let Some(id) = self.pop_next() else { return };
        let Some(e) = self.jobs.get_mut(&id) else { return };
        e.record.state = JobState::Running;
        let run = RunJob {
            id: id.clone(),
            request: e.record.request.clone(),
            known_songs: e.record.songs.clone(),
            cancel: e.cancel.clone(),
            queue_seconds: e.submitted.elapsed().as_secs_f64(),
            submitted_ms: e.first_try.then_some(e.record.submitted_ms),
            upload: e.record.upload.clone(),
        };
        if !self.persist(&id) {
            // A start the journal cannot record is not made: the job fails loudly now rather
            // than run unrecorded (a crash would then lose what it did).
            let why = self.journal_error.clone().unwrap_or_default();
            tracing::error!(job = %id, "the journal could not record the job's start: failing it");
            self.finish(
                &id,
                JobState::Failed,
                &Outcome::Failed(format!("the journal could not record the job's start ({why})")),
            );
            self.metrics.queue_depth.set(self.queued_count() as i64);
            self.dispatch();
            return;
        }
        self.entry = Some(id.clone());
        self.active.insert(id.clone());
        self.metrics.queue_depth.set(self.queued_count() as i64);
        self.metrics.jobs_running.set(self.active.len() as i64);
        tracing::info!(job = %id, "job started");
        if self.worker.send(WorkerCmd::Run(Box::new(run))).is_err() {
            tracing::error!("the compute worker is gone");
        }
        self.publish_positions();
    }

    fn publish_positions(&self) {
        for (i, j) in self.order().into_iter().enumerate() {
            self.hub.do_send(Publish::Event(j, StreamEvent::Queued { position: i as u32 }));
        }
    }

    /// Forgets ended jobs as their results go, so the journal and the job table stay
    /// bounded: a done job when its result has expired or was evicted (the result store
    /// bounds those); a failed or cancelled one (no result) once older than the results'
    /// TTL, or beyond the results' count limit among its own principal's (a client that
    /// cancels many jobs pushes out only its own, never another's finished songs). Their
    /// records leave the journal; asking for them is a 404 like any unknown job.
    fn prune(&mut self) {
        let gone = self.results.sweep();
        if !gone.is_empty() {
            tracing::info!(expired = gone.len(), "results expired");
        }
        let r = self.results.retention();
        let now = now_ms();
        let mut ended: Vec<(u64, JobId, JobState, &str)> = self
            .jobs
            .iter()
            .filter(|(_, e)| e.record.state.is_terminal())
            .map(|(id, e)| (e.record.submitted_ms, id.clone(), e.record.state, e.record.client.as_str()))
            .collect();
        // Newest first (ids are random), so that a principal's count keeps its newest.
        ended.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        // Each principal's kept jobs without a result, newest first.
        let mut held: HashMap<&str, Vec<JobId>> = HashMap::new();
        let mut forget = Vec::new();
        for (submitted, id, state, client) in ended {
            let expired = match state {
                JobState::Done => !self.results.exists(&id),
                _ => {
                    let mine = held.entry(client).or_default();
                    let over = mine.len() >= r.max_count || now.saturating_sub(submitted) > r.ttl_secs * 1000;
                    if !over {
                        mine.push(id.clone());
                    }
                    over
                }
            };
            if expired {
                forget.push(id);
            }
        }
        // And all of them together stay under four times the count limit (many principals,
        // each under its own): the oldest of the principal holding most go first.
        let mut total: usize = held.values().map(Vec::len).sum();
        while total > r.max_count.saturating_mul(4) {
            let Some(mine) = held.values_mut().max_by_key(|v| v.len()) else { break };
            let Some(oldest) = mine.pop() else { break };
            forget.push(oldest);
            total -= 1;
        }
        for id in &forget {
            if let Err(err) = self.with_journal(|j| j.remove(id)) {
                tracing::error!(job = %id, %err, "journal remove failed");
                self.journaled(Err(err));
                continue;
            }
            self.jobs.remove(id);
        }
        if !forget.is_empty() {
            tracing::info!(
                forgotten = forget.len(),
                known = self.jobs.len(),
                "ended jobs forgotten with their results"
            );
        }
    }

    fn finish(&mut self, id: &JobId, state: JobState, outcome: &Outcome) {
        let Some(e) = self.jobs.get_mut(id) else { return };
        e.record.state = state;
        e.progress = None;
        let event = match outcome {
            Outcome::Done { tracks, audio_seconds, metrics } => {
                e.record.tracks = *tracks;
                e.record.audio_seconds = *audio_seconds;
                e.record.metrics = metrics.clone();
                StreamEvent::Done { tracks: *tracks, audio_seconds: *audio_seconds }
            }
            Outcome::Failed(msg) => {
                e.record.error = Some(msg.clone());
                StreamEvent::Failed { error: msg.clone() }
            }
            Outcome::Cancelled => StreamEvent::Cancelled {},
        };
        // A /vae upload is no longer needed once the job has ended.
        if let Some(v) = &e.record.upload {
            let _ = std::fs::remove_file(&v.input);
        }
        self.persist(id);
        self.metrics.jobs_finished_total.with_label_values(&[state.as_str()]).inc();
        self.hub.do_send(Publish::Event(id.clone(), event));
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Self::Context) {
        // Results expire in the background, and the records of ended jobs with them.
        self.prune();
        ctx.run_interval(std::time::Duration::from_secs(60), |s, _| s.prune());
        // A journal that refused writes is tried again on its own, so an idle daemon turns
        // healthy once the disk has room (a submission need not come first).
        ctx.run_interval(JOURNAL_REOPEN_EVERY, |s, _| {
            if s.journal_error.is_some() {
                s.recover_journal();
            }
        });
    }
}

/// Admits a job: its id, or why not.
#[derive(Message)]
#[rtype(result = "Result<JobId, SubmitError>")]
pub struct Submit(pub Submission);

impl Handler<Submit> for Scheduler {
    type Result = Result<JobId, SubmitError>;
    fn handle(&mut self, Submit(m): Submit, _: &mut Self::Context) -> Self::Result {
        if !self.accepting {
            return Err(SubmitError::ShuttingDown);
        }
        if self.active_count() >= self.cap {
            self.metrics.admission_rejections_total.inc();
            return Err(SubmitError::Full(self.cap));
        }
        let held = self.jobs.values().filter(|e| e.record.client == m.client && !e.record.state.is_terminal()).count();
        if held >= self.share {
            self.metrics.admission_rejections_total.inc();
            return Err(SubmitError::OverShare(self.share));
        }
        if m.id.is_none() && yued_contract::queue::keeps_last_place(held, self.share, self.cap, self.active_count()) {
            self.metrics.admission_rejections_total.inc();
            return Err(SubmitError::KeptForOthers);
        }
        // A cluster's job (its id given) was submitted, and counted, on an API node.
        let cluster = m.id.is_some();
        // A cluster job may come back to a worker that ran it before (it lost the job to
        // another worker, which then died): the ended local run gives way to the new one.
        let id = match m.id {
            Some(id) if self.jobs.get(&id).is_some_and(|e| !e.record.state.is_terminal()) => {
                return Err(SubmitError::Journal(format!("job {id} is already running here")))
            }
            Some(id) => {
                if self.jobs.remove(&id).is_some() {
                    self.results.remove(&id);
                }
                Ok(id)
            }
            None => self.with_journal(Journal::new_id).map_err(|e| SubmitError::Journal(e.to_string())),
        };
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                self.journaled(Err(&e));
                return Err(e);
            }
        };
        let record = JobRecord {
            version: RECORD_VERSION,
            id: id.clone(),
            client: m.client.clone(),
            request: m.request,
            state: JobState::Queued,
            submitted_ms: m.submitted_ms.unwrap_or_else(now_ms),
            songs: m.songs,
            error: None,
            metrics: None,
            tracks: 0,
            audio_seconds: 0.0,
            upload: m.upload,
            crashes: 0,
            resumed: 0,
            cancel_asked: false,
            interrupted: false,
        };
        let put = self.with_journal(|j| j.put(&record));
        if !self.journaled(put.as_ref().map(|_| ()).map_err(|e| e.to_string())) {
            return Err(SubmitError::Journal(put.unwrap_err().to_string()));
        }
        tracing::info!(job = %id, client = %m.client, "job queued");
        self.jobs.insert(
            id.clone(),
            Entry {
                record,
                progress: None,
                cancel: CancelToken::new(),
                submitted: Instant::now(),
                // A cluster job's wait is measured by its first start's worker only.
                wait_measured: cluster && m.submitted_ms.is_none(),
                first_try: !(cluster && m.submitted_ms.is_none()),
            },
        );
        self.enqueue(&id, &m.client);
        if !cluster {
            self.metrics.jobs_submitted_total.inc();
        }
        self.metrics.queue_depth.set(self.queued_count() as i64);
        self.hub.do_send(Publish::Event(id.clone(), StreamEvent::Queued { position: self.position(&id) }));
        self.dispatch();
        Ok(id)
    }
}

/// The status reply of a job, `None` when unknown.
#[derive(Message)]
#[rtype(result = "Option<JobStatus>")]
pub struct GetStatus(pub JobId);

impl Handler<GetStatus> for Scheduler {
    type Result = Option<JobStatus>;
    fn handle(&mut self, m: GetStatus, _: &mut Self::Context) -> Self::Result {
        let e = self.jobs.get(&m.0)?;
        Some(match e.record.state {
            JobState::Queued => JobStatus::queued(self.position(&m.0)),
            JobState::Running => {
                let mut s = match e.progress {
                    Some((stage, done, total)) => {
                        let mut s = JobStatus::running(stage, if total > 0 { done as f32 / total as f32 } else { 0.0 });
                        if matches!(stage, Stage::Plan | Stage::Semantic) {
                            s.tokens_done = Some(done as u64);
                            s.tokens_budget = Some(total as u64);
                        }
                        s
                    }
                    None => JobStatus::new(JobState::Running, 0),
                };
                s.queue_position = 0;
                s
            }
            JobState::Done => JobStatus::done(e.record.metrics.clone()),
            JobState::Failed => JobStatus::failed(e.record.error.clone().unwrap_or_default()),
            JobState::Cancelled => JobStatus::cancelled(),
        })
    }
}

/// Cancels a job; `None` when unknown, else its state after the request.
#[derive(Message)]
#[rtype(result = "Option<JobState>")]
pub struct Cancel(pub JobId);

impl Handler<Cancel> for Scheduler {
    type Result = Option<JobState>;
    fn handle(&mut self, m: Cancel, _: &mut Self::Context) -> Self::Result {
        let state = self.jobs.get(&m.0)?.record.state;
        match state {
            JobState::Queued => {
                self.queue.remove(&m.0);
                self.finish(&m.0, JobState::Cancelled, &Outcome::Cancelled);
                self.metrics.queue_depth.set(self.queued_count() as i64);
                self.publish_positions();
                tracing::info!(job = %m.0, "queued job cancelled");
                Some(JobState::Cancelled)
            }
            JobState::Running => {
                // Journaled before it is answered: a daemon killed before the stages stop the
                // job finds it cancelled at its next start, not running.
                if let Some(e) = self.jobs.get_mut(&m.0) {
                    e.record.cancel_asked = true;
                    e.cancel.cancel();
                }
                self.persist(&m.0);
                tracing::info!(job = %m.0, "cancel requested for the running job");
                Some(JobState::Cancelled)
            }
            s => Some(s),
        }
    }
}

impl Handler<Progress> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: Progress, _: &mut Self::Context) {
        if let Some(e) = self.jobs.get_mut(&m.id) {
            e.progress = Some((m.stage, m.done, m.total));
            // The queue wait ends where work on the job begins: its first progress (a job sent
            // back behind a batch of the other family, or restored after a restart, waited
            // all along), counted from its submission.
            if !std::mem::replace(&mut e.wait_measured, true) {
                let waited = now_ms().saturating_sub(e.record.submitted_ms) as f64 / 1000.0;
                self.metrics.queue_wait_seconds.observe(waited);
            }
        }
    }
}

impl Handler<Resumed> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: Resumed, _: &mut Self::Context) {
        if let Some(e) = self.jobs.get_mut(&m.id) {
            e.record.resumed += 1;
            self.persist(&m.id);
        }
    }
}

impl Handler<CodesReady> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: CodesReady, _: &mut Self::Context) {
        if let Some(e) = self.jobs.get_mut(&m.id) {
            e.record.songs.retain(|s| s.song != m.song.song);
            e.record.songs.push(m.song);
            self.persist(&m.id);
        }
    }
}

impl Handler<Finished> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: Finished, _: &mut Self::Context) {
        // Several stages may notice a cancellation or a failure: the first report wins. A
        // late report of an earlier run of this id (one it replaced) ends nothing.
        if !self.jobs.get(&m.id).is_some_and(|e| e.cancel.same(&m.run)) || !self.active.remove(&m.id) {
            return;
        }
        let state = match &m.outcome {
            Outcome::Done { .. } => JobState::Done,
            Outcome::Failed(_) => JobState::Failed,
            Outcome::Cancelled => JobState::Cancelled,
        };
        let asked = self.jobs.get(&m.id).is_some_and(|e| e.record.cancel_asked);
        if !self.accepting && state == JobState::Cancelled && !asked {
            // Shutdown interrupted it: it stays queued in the journal and resumes later.
            if let Some(e) = self.jobs.get_mut(&m.id) {
                e.record.state = JobState::Queued;
                e.record.interrupted = true;
                e.progress = None;
            }
            self.persist(&m.id);
            tracing::info!(job = %m.id, "job interrupted by shutdown; it resumes at the next start");
        } else {
            match &m.outcome {
                Outcome::Failed(error) => tracing::warn!(job = %m.id, state = state.as_str(), %error, "job finished"),
                _ => tracing::info!(job = %m.id, state = state.as_str(), "job finished"),
            }
            self.finish(&m.id, state, &m.outcome);
            self.prune();
        }
        self.metrics.jobs_running.set(self.active.len() as i64);
        self.dispatch();
    }
}

impl Handler<EntryFree> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: EntryFree, _: &mut Self::Context) {
        if self.entry.as_ref() == Some(&m.id) {
            self.entry = None;
        }
        self.dispatch();
    }
}

impl Handler<Requeue> for Scheduler {
    type Result = ();
    fn handle(&mut self, m: Requeue, _: &mut Self::Context) {
        let Some(e) = self.jobs.get_mut(&m.id) else { return };
        if e.record.state != JobState::Running || !self.active.remove(&m.id) {
            return;
        }
        e.record.state = JobState::Queued;
        e.progress = None;
        let client = e.record.client.clone();
        self.queue.push_front(&client, m.id.clone());
        self.persist(&m.id);
        tracing::info!(job = %m.id, "back in the queue until the AR batch drains");
        self.metrics.queue_depth.set(self.queued_count() as i64);
        self.metrics.jobs_running.set(self.active.len() as i64);
        self.publish_positions();
    }
}

impl Handler<WorkerReady> for Scheduler {
    type Result = ();
    fn handle(&mut self, _: WorkerReady, _: &mut Self::Context) {
        self.worker_ready = true;
        self.dispatch();
    }
}

/// Queue snapshot for /health, /status and /system/queue.
#[derive(Message)]
#[rtype(result = "QueueSnapshot")]
pub struct Snapshot;

impl Handler<Snapshot> for Scheduler {
    type Result = MessageResult<Snapshot>;
    fn handle(&mut self, _: Snapshot, _: &mut Self::Context) -> Self::Result {
        let (bytes, count) = self.results.usage();
        MessageResult(QueueSnapshot {
            queued: self.queued_count(),
            running: self.active.iter().map(|j| j.to_string()).collect(),
            cap: self.cap,
            share: self.share,
            worker_ready: self.worker_ready,
            accepting: self.accepting,
            jobs_known: Some(self.jobs.len()),
            clients_waiting: self.queue.clients(),
            results_stored: Some(count),
            results_bytes: Some(bytes),
            journal_error: self.journal_error.clone(),
        })
    }
}

/// Stop accepting, cancel the running jobs (each lands within one step and stays queued in
/// the journal), flush.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl Handler<Shutdown> for Scheduler {
    type Result = ();
    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) {
        self.accepting = false;
        for id in &self.active {
            if let Some(e) = self.jobs.get(id) {
                e.cancel.cancel();
            }
        }
        let _ = self.worker.send(WorkerCmd::Shutdown);
    }
}

/// The jobs of one principal, or (`None`) every job with its owner, oldest first.
#[derive(Message)]
#[rtype(result = "yued_protocol::JobList")]
pub struct ListJobs(pub Option<String>);

impl Handler<ListJobs> for Scheduler {
    type Result = MessageResult<ListJobs>;
    fn handle(&mut self, m: ListJobs, _: &mut Self::Context) -> Self::Result {
        let mut jobs: Vec<yued_protocol::JobListEntry> = self
            .jobs
            .values()
            .filter(|e| m.0.as_ref().is_none_or(|owner| &e.record.client == owner))
            .map(|e| e.record.list_entry(m.0.is_none()))
            .collect();
        jobs.sort_by(|a, b| (a.submitted_ms, &a.id).cmp(&(b.submitted_ms, &b.id)));
        MessageResult(yued_protocol::JobList { jobs })
    }
}

/// A job's record as journaled, with its progress while it runs (stage, done, total):
/// what a cluster worker reports of the job it runs.
#[derive(Message)]
#[rtype(result = "Option<(JobRecord, Option<StageProgress>)>")]
pub struct GetRecord(pub JobId);

impl Handler<GetRecord> for Scheduler {
    type Result = Option<(JobRecord, Option<StageProgress>)>;
    fn handle(&mut self, m: GetRecord, _: &mut Self::Context) -> Self::Result {
        self.jobs.get(&m.0).map(|e| (e.record.clone(), e.progress))
    }
}

/// Whether the job exists and is done (the result route checks the store itself).
#[derive(Message)]
#[rtype(result = "Option<JobState>")]
pub struct GetState(pub JobId);

impl Handler<GetState> for Scheduler {
    type Result = Option<JobState>;
    fn handle(&mut self, m: GetState, _: &mut Self::Context) -> Self::Result {
        self.jobs.get(&m.0).map(|e| e.record.state)
    }
}

/// A job's family (its result's multipart boundary and the stream's rates depend on it).
#[derive(Message)]
#[rtype(result = "Option<yued_protocol::Family>")]
pub struct GetFamily(pub JobId);

impl Handler<GetFamily> for Scheduler {
    type Result = Option<yued_protocol::Family>;
    fn handle(&mut self, m: GetFamily, _: &mut Self::Context) -> Self::Result {
        self.jobs.get(&m.0).map(|e| e.record.request.family())
    }
}

/// The principal a job belongs to.
#[derive(Message)]
#[rtype(result = "Option<String>")]
pub struct GetOwner(pub JobId);

impl Handler<GetOwner> for Scheduler {
    type Result = Option<String>;
    fn handle(&mut self, m: GetOwner, _: &mut Self::Context) -> Self::Result {
        self.jobs.get(&m.0).map(|e| e.record.client.clone())
    }
}

/// Answers once every message sent before it is handled (the shutdown's acknowledgement:
/// the stages' last reports are journaled), after a flush of the journal.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct Flush;

impl Handler<Flush> for Scheduler {
    type Result = Result<(), String>;
    fn handle(&mut self, _: Flush, _: &mut Self::Context) -> Self::Result {
        // The handle that took the writes flushes them: a reopened one would have nothing
        // to flush, and answer that all is well.
        self.journal.flush().map_err(|e| {
            tracing::error!(error = %e, "flushing the journal");
            format!("the journal's last writes may be lost: {e}")
        })
    }
}
