//! What every stage thread holds and uses: the links to the actors, the job-failure
//! reports, the stage backend, and the progress sink.
use crate::hub::{Publish, StreamHub};
use crate::messages::{Finished, JobCtx, Outcome, Progress};
use crate::model_store::ModelStore;
use crate::scheduler::Scheduler;
use actix::Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use yued_contract::metrics::Metrics;
use yued_engine::ggml::Backend;
use yued_protocol::{Family, JobId, Stage, StreamEvent};

/// How the compute stages run: the model files, the device and its threads, the
/// residency policy, and what MiniMax Music 3 and the adapters need.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub model: PathBuf,
    pub vae: PathBuf,
    pub device: String,
    pub threads: usize,
    pub priority: yued_engine::ggml::ComputePriority,
    pub options: yued_engine::models::yue2::pipeline::PipelineOptions,
    pub keep_loaded: bool,
    /// `--parallel`, resolved: the most rows of the AR half's shared decode step.
    pub parallel: usize,
    /// The model registry when MiniMax Music 3 is served (its requests name files of it).
    pub mm3: Option<yued_engine::registry::Registry>,
    /// The `--adapters` directory, scanned against the backbone (YuE2 requests stack them).
    pub adapters: Option<Arc<yued_engine::models::yue2::adapter::AdapterDir>>,
    /// `--companion`: a NAR-only adapter merged under every YuE2 render at the request's
    /// `companion_scale`.
    pub companion: Option<Arc<yued_engine::models::yue2::adapter::Adapter>>,
    /// `--tokenizer`: the audio tokenizer head (MERT-v2 beside it), when `/tokenize` is served.
    pub tokenizer: Option<PathBuf>,
    /// `--transcriber`: the SheetSage2 head (MERT-v2 beside it), when `/transcribe` is served.
    pub transcriber: Option<PathBuf>,
}

/// What every stage thread holds.
#[derive(Clone)]
pub(crate) struct Links {
    pub scheduler: Addr<Scheduler>,
    pub hub: Addr<StreamHub>,
    pub metrics: Metrics,
    pub store: Arc<ModelStore>,
    pub cfg: WorkerConfig,
    /// One graph at a time on the CPU across the stages (see `CpuTurns`).
    pub cpu_turns: Arc<yued_engine::ggml::CpuTurns>,
}

impl Links {
    /// Reports a failure (first, so it wins over the cancellations it causes), then
    /// cancels the job so the other stages drop its work.
    pub fn fail(&self, job: &JobCtx, msg: String) {
        tracing::error!(job = %job.id, error = %msg, "job failed");
        self.scheduler.do_send(Finished::of(job, Outcome::Failed(msg)));
        job.cancel.cancel();
    }

    pub fn cancelled(&self, job: &JobCtx) {
        self.scheduler.do_send(Finished::of(job, Outcome::Cancelled));
    }

    /// The backend of a stage thread. The thread (and the ggml workers it starts, which
    /// inherit it) first takes the configured compute priority (default: lower than the
    /// HTTP and WebSocket threads, which then still answer at once on saturated cores).
    pub fn backend(&self) -> Result<Backend, String> {
        yued_engine::ggml::set_thread_priority(self.cfg.priority);
        let mut b = Backend::new(&self.cfg.device).map_err(|e| e.to_string())?;
        b.set_threads(self.cfg.threads);
        b.share_cpu(self.cpu_turns.clone());
        Ok(b)
    }
}

/// Stage progress to the scheduler (for `/job`) and the stream (for listeners), at most
/// one message per percent, and the per-stage duration histogram.
pub(crate) struct ProgressSink {
    links: Links,
    id: JobId,
    family: Family,
    last: Option<(Stage, usize)>,
    /// The last report, shown or not: whether the running stage got to its end.
    reported: Option<(Stage, usize, usize)>,
    stage_started: Option<(Stage, Instant)>,
}

impl ProgressSink {
    pub fn new(links: &Links, job: &JobCtx) -> Self {
        ProgressSink {
            links: links.clone(),
            id: job.id.clone(),
            family: job.request.family(),
            last: None,
            reported: None,
            stage_started: None,
        }
    }

    pub fn report(&mut self, stage: Stage, done: usize, total: usize) {
        self.begin(stage);
        self.reported = Some((stage, done, total));
        self.show(stage, done, total);
    }

    /// A job handed to a stage that has not begun it (it waits behind other jobs' work
    /// there): the stage shows, at 0, and its clock has not started.
    pub fn waiting(&mut self, stage: Stage) {
        self.show(stage, 0, 1);
    }

    fn show(&mut self, stage: Stage, done: usize, total: usize) {
        let step = (total / 100).max(1);
        let pass = match self.last {
            Some((s, d)) => s != stage || done >= d + step || done == total,
            None => true,
        };
        if !pass {
            return;
        }
        self.last = Some((stage, done));
        self.links.scheduler.do_send(Progress { id: self.id.clone(), stage, done, total });
        let progress = if total > 0 { done as f32 / total as f32 } else { 0.0 };
        self.links.hub.do_send(Publish::Event(
            self.id.clone(),
            StreamEvent::Stage { stage, progress, done: done as u64, total: total as u64 },
        ));
    }

    /// Starts the stage's clock without a report: a stage that works on a job before it has
    /// progress to show (the decode stage, on its first latents) counts from then.
    pub fn begin(&mut self, stage: Stage) {
        if self.stage_started.map(|(s, _)| s) != Some(stage) {
            self.close();
            self.stage_started = Some((stage, Instant::now()));
        }
    }

    /// Records the running stage's duration.
    pub fn close(&mut self) {
        if let Some((s, at)) = self.stage_started.take() {
            let labels = [self.family.as_str(), s.as_str()];
            self.links.metrics.stage_seconds.with_label_values(&labels).observe(at.elapsed().as_secs_f64());
        }
    }
}

impl Drop for ProgressSink {
    /// The running stage counts if it got to its end (a stage that shows no progress counts
    /// as it ends): a cancelled or failed job's half stage is not a stage's duration.
    fn drop(&mut self) {
        let ended = match (self.stage_started, self.reported) {
            (Some((s, _)), Some((r, done, total))) if r == s => done >= total,
            _ => true,
        };
        if ended {
            self.close();
        }
    }
}

/// Runs one work item of a stage so that a panic fails its job instead of the stage: the
/// job fails with the panic's message (logged in the job's span), whatever the work held
/// (KV sets, leases, pins) is dropped by the unwinding, and the stage goes on with its next
/// item. `None` when it panicked (the job is already reported failed).
pub(crate) fn guarded<T>(links: &Links, job: &JobCtx, stage: &str, work: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(v) => Some(v),
        Err(payload) => {
            let msg = panic_message(payload);
            tracing::error!(stage, panic = %msg, "the stage panicked on this job; failing it and going on");
            links.fail(job, format!("internal error in the {stage} stage: {msg}"));
            None
        }
    }
}

/// What a caught panic said.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Test-only fault of the stage-panic tests (`test-faults` builds): a job whose style is
/// the part after the colon of `$YUED_TEST_PANIC=<stage>:<style>` panics in that stage.
#[cfg(feature = "test-faults")]
pub(crate) fn test_fault(stage: &str, job: &JobCtx) {
    if let Ok(v) = std::env::var("YUED_TEST_PANIC") {
        if v.split_once(':').is_some_and(|(s, style)| s == stage && style == job.fault_tag()) {
            panic!("test fault (YUED_TEST_PANIC) in the {stage} stage");
        }
    }
}

#[cfg(not(feature = "test-faults"))]
pub(crate) fn test_fault(_: &str, _: &JobCtx) {}

/// Test-only fault of the crash-loop test (`test-faults` builds): a job whose style is
/// `$YUED_TEST_ABORT_STYLE` aborts the process as it enters the entry stage, as a C abort
/// in ggml would.
#[cfg(feature = "test-faults")]
pub(crate) fn test_abort(job: &JobCtx) {
    if std::env::var("YUED_TEST_ABORT_STYLE").is_ok_and(|s| !s.is_empty() && s == job.fault_tag()) {
        tracing::error!("test fault (YUED_TEST_ABORT_STYLE): aborting the process on this job");
        std::process::abort();
    }
}

#[cfg(not(feature = "test-faults"))]
pub(crate) fn test_abort(_: &JobCtx) {}

/// Sampled tokens per AR stage, from the progress counts: `yued_ar_tokens_total` as they
/// come, and each stage's tokens per second of wall time when the job leaves the stage.
pub(crate) struct TokenMeter {
    family: Family,
    last: std::collections::HashMap<(Stage, u32), usize>,
    stages: Vec<(Stage, Instant, u64)>,
}

impl TokenMeter {
    pub fn new(family: Family) -> Self {
        TokenMeter { family, last: Default::default(), stages: Vec::new() }
    }

    pub fn count(&mut self, links: &Links, stage: Stage, song: u32, done: usize) {
        let prev = self.last.insert((stage, song), done).unwrap_or(0);
        let delta = done.saturating_sub(prev) as u64;
        if delta == 0 {
            return;
        }
        links.metrics.ar_tokens_total.with_label_values(&[self.family.as_str(), stage.as_str()]).inc_by(delta);
        match self.stages.iter_mut().find(|s| s.0 == stage) {
            Some(s) => s.2 += delta,
            None => self.stages.push((stage, Instant::now(), delta)),
        }
    }

    pub fn finish(&self, links: &Links) {
        for (stage, at, tokens) in &self.stages {
            let secs = at.elapsed().as_secs_f64();
            if secs > 0.0 {
                let labels = [self.family.as_str(), stage.as_str()];
                links.metrics.ar_tokens_per_second.with_label_values(&labels).observe(*tokens as f64 / secs);
            }
        }
    }
}

/// The wait for a job's first sound: from its submission (the journal's clock, so a job
/// restored after a restart counts its whole wait) to its first audio tile, observed once.
pub(crate) struct FirstAudio {
    /// The family's histogram and the submission, until the first tile.
    pending: Option<(prometheus::Histogram, u64)>,
}

impl FirstAudio {
    /// A song's render: its first tile is observed.
    pub fn of_song(links: &Links, job: &JobCtx) -> Self {
        let metric = links.metrics.first_audio_seconds.with_label_values(&[job.request.family().as_str()]);
        FirstAudio { pending: job.submitted_ms.map(|ms| (metric, ms)) }
    }

    /// Audio that is not a song's render (a `/vae` decode): not observed.
    pub fn unobserved() -> Self {
        FirstAudio { pending: None }
    }

    /// A tile goes out: the first one is the job's first audio.
    pub fn tile(&mut self) {
        if let Some((metric, submitted_ms)) = self.pending.take() {
            metric.observe(yued_contract::results::now_ms().saturating_sub(submitted_ms) as f64 / 1000.0);
        }
    }
}
