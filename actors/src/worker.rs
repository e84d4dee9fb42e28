//! The compute stages and their wiring. Each stage is a dedicated thread fed by a
//! crossbeam channel, never the HTTP executor, and owns nothing but its backend; modules
//! come from the ModelStore on lease, KV sets travel with the work:
//!
//! ```text
//! Scheduler ─RunJob─▶ ArDecoder ─songs + KV sets─▶ NarRenderer ─latent chunks─▶ VaeTiler ─tracks─▶ Encoder ─▶ ResultStore
//!                     (plan, semantic,             (flow matching               (tiles to the       (normalise,
//!                      chunk prefills)              per chunk)                   StreamHub)          containers)
//! ```
//!
//! A job leaves the entry stage (ArDecoder) as soon as its songs are handed on, so under
//! `--keep-loaded` the next job's AR runs while this one renders; under STRICT the next
//! AR lease waits until the synthesis group is released. Any stage that fails a job reports
//! it to the scheduler first, then cancels the job's token so the others drop its work.
use crate::hub::{Publish, StreamHub};
use crate::journal::{SongCodes, VaeTask};
use crate::metrics::Metrics;
use crate::model_store::{Loader, ModelStore, Module, ModuleKey, Policy};
use crate::results::ResultStore;
use crate::scheduler::{Finished, Outcome, Progress, Scheduler, WorkerReady};
use actix::Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::generate::CancelToken;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::pipeline::{PipelineOptions, Shared};
use yued_engine::models::yue2::vae::VaeModel;
use yued_protocol::{JobId, OutputFormat, Stage, StreamEvent, Yue2Request};

pub enum WorkerCmd {
    Run(Box<RunJob>),
    Shutdown,
}

/// A job as the scheduler dispatches it.
pub struct RunJob {
    pub id: JobId,
    pub request: Yue2Request,
    /// Songs whose codes the journal already holds (a resumed job).
    pub known_songs: Vec<SongCodes>,
    pub cancel: CancelToken,
    pub queue_seconds: f64,
    /// A `/vae` job instead of a song.
    pub vae: Option<VaeTask>,
}

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub model: PathBuf,
    pub vae: PathBuf,
    pub device: String,
    pub threads: usize,
    pub priority: yued_engine::ggml::ComputePriority,
    pub options: PipelineOptions,
    pub keep_loaded: bool,
}

/// Whether this build can write the format.
pub fn format_supported(f: OutputFormat) -> bool {
    yued_audio::encode::supported(f)
}

/// A job in flight, shared by the stages that work on it.
pub struct JobCtx {
    pub id: JobId,
    pub request: Yue2Request,
    pub known_songs: Vec<SongCodes>,
    pub cancel: CancelToken,
    pub queue_seconds: f64,
    /// When the job left the queue.
    pub started: Instant,
    /// The store's load counter then: the job's own loads are the difference.
    pub loads_at_start: u64,
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
        self.scheduler.do_send(Finished { id: job.id.clone(), outcome: Outcome::Failed(msg) });
        job.cancel.cancel();
    }

    pub fn cancelled(&self, job: &JobCtx) {
        self.scheduler.do_send(Finished { id: job.id.clone(), outcome: Outcome::Cancelled });
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
    last: Option<(Stage, usize)>,
    stage_started: Option<(Stage, Instant)>,
}

impl ProgressSink {
    pub fn new(links: &Links, id: &JobId) -> Self {
        ProgressSink { links: links.clone(), id: id.clone(), last: None, stage_started: None }
    }

    pub fn report(&mut self, stage: Stage, done: usize, total: usize) {
        if self.stage_started.map(|(s, _)| s) != Some(stage) {
            self.close();
            self.stage_started = Some((stage, Instant::now()));
        }
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
        self.links.hub.do_send(Publish::Event(self.id.clone(), StreamEvent::Stage { stage, progress, done: done as u64, total: total as u64 }));
    }

    /// Records the running stage's duration.
    pub fn close(&mut self) {
        if let Some((s, at)) = self.stage_started.take() {
            self.links.metrics.stage_seconds.with_label_values(&[s.as_str()]).observe(at.elapsed().as_secs_f64());
        }
    }
}

impl Drop for ProgressSink {
    fn drop(&mut self) {
        self.close();
    }
}

/// The running stage threads.
pub struct Stages {
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Stages {
    /// Waits for every stage to stop (after `WorkerCmd::Shutdown` reached the entry).
    pub fn join(self) {
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a compute stage panicked");
            }
        }
    }
}

fn loader(cfg: &WorkerConfig, shared: Option<Arc<Shared>>) -> Box<Loader> {
    let (model, vae) = (cfg.model.clone(), cfg.vae.clone());
    Box::new(move |key, backend| {
        let shared = shared.as_ref().ok_or("the backbone file did not load; see the daemon log")?;
        let f = GgufFile::open(if key == ModuleKey::Vae { &vae } else { &model }).map_err(|e| e.to_string())?;
        Ok(match key {
            ModuleKey::Ar => Module::Ar(ArModel::load(&f, &shared.info, backend).map_err(|e| e.to_string())?),
            ModuleKey::Nar => Module::Nar(NarModel::load(&f, &shared.info, backend).map_err(|e| e.to_string())?),
            ModuleKey::Vae => Module::Vae(VaeModel::load(&f, backend).map_err(|e| e.to_string())?),
        })
    })
}

/// Starts the four stage threads; `rx` is the scheduler's dispatch channel.
pub fn spawn(cfg: WorkerConfig, rx: crossbeam_channel::Receiver<WorkerCmd>, scheduler: Addr<Scheduler>, hub: Addr<StreamHub>, results: Arc<ResultStore>, metrics: Metrics) -> Stages {
    let shared = match Shared::open(&cfg.model, &cfg.options) {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            tracing::error!(error = %e, "the backbone failed to load: every job will fail");
            None
        }
    };
    let policy = if cfg.keep_loaded { Policy::Never } else { Policy::Strict };
    let store = ModelStore::new(policy, loader(&cfg, shared.clone()), metrics.clone());
    let waited = metrics.cpu_turn_wait_seconds_total.clone();
    let cpu_turns = yued_engine::ggml::CpuTurns::with_wait_hook(move |d| waited.inc_by(d.as_secs_f64()));
    let links = Links { scheduler: scheduler.clone(), hub, metrics, store: store.clone(), cfg: cfg.clone(), cpu_turns };
    // The AR -> NAR hand-off holds one job: with the one rendering, at most two jobs' KV
    // sets are alive beside the AR's own.
    let (nar_tx, nar_rx) = crossbeam_channel::bounded(1);
    let (vae_tx, vae_rx) = crossbeam_channel::unbounded();
    let (enc_tx, enc_rx) = crossbeam_channel::unbounded();
    let mut threads = Vec::new();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| std::thread::Builder::new().name(name.into()).spawn(f).expect("spawn a compute stage");
    {
        let (l, s) = (links.clone(), shared.clone());
        let vae_tx = vae_tx.clone();
        threads.push(spawn("yued-ar", Box::new(move || crate::ar_decoder::run(l, s, rx, nar_tx, vae_tx))));
    }
    {
        let (l, s) = (links.clone(), shared.clone());
        threads.push(spawn("yued-nar", Box::new(move || crate::nar_renderer::run(l, s, nar_rx, vae_tx))));
    }
    {
        let (l, r) = (links.clone(), results.clone());
        threads.push(spawn("yued-vae", Box::new(move || crate::vae_tiler::run(l, vae_rx, enc_tx, r))));
    }
    {
        let l = links.clone();
        threads.push(spawn("yued-encode", Box::new(move || crate::encoder::run(l, enc_rx, results))));
    }
    // Under --keep-loaded every module is loaded before the daemon reports ready; under
    // STRICT they load at the first request that needs them.
    let ready_links = links;
    threads.push(spawn(
        "yued-warmup",
        Box::new(move || {
            if policy == Policy::Never && shared.is_some() {
                match ready_links.backend() {
                    Ok(b) => {
                        for k in [ModuleKey::Ar, ModuleKey::Nar, ModuleKey::Vae] {
                            if let Err(e) = store.lease(k, &b) {
                                tracing::error!(error = %e, "warm-up load failed");
                            }
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "no backend for the warm-up"),
                }
            }
            scheduler.do_send(WorkerReady);
        }),
    ));
    Stages { threads }
}
