//! The compute stages and their wiring. Each stage is a dedicated thread fed by a
//! crossbeam channel, never the HTTP executor, and owns nothing but its backend; modules
//! come from the ModelStore on lease, KV sets travel with the work:
//!
//! ```text
//! Scheduler ─RunJob─▶ ComposeStage ─songs + KV sets─▶ SynthStage ─latents─▶ DecodeStage ─tracks─▶ Encoder ─▶ results
//!                     (plan, semantic,             (flow matching          (tiles to the      (normalise,
//!                      chunk prefills)              per chunk)              StreamHub)         containers)
//! ```
//!
//! A job leaves the entry stage (the compose stage) as soon as its songs are handed on, so under
//! `--keep-loaded` the next job's AR runs while this one renders; under STRICT the next
//! AR lease waits until the synthesis group is released. Any stage that fails a job reports
//! it to the scheduler first, then cancels the job's token so the others drop its work.
use crate::hub::StreamHub;
use crate::messages::{WorkerCmd, WorkerReady};
use crate::model_store::{ModelStore, Policy};
use crate::scheduler::Scheduler;
use crate::stage::{Links, WorkerConfig};
use actix::Addr;
use std::sync::Arc;
use yued_contract::metrics::Metrics;
use yued_contract::results::ResultStore;
use yued_engine::models::yue2::pipeline::Shared;

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

/// Starts the four stage threads; `rx` is the scheduler's dispatch channel.
pub fn spawn(
    cfg: WorkerConfig,
    rx: crossbeam_channel::Receiver<WorkerCmd>,
    scheduler: Addr<Scheduler>,
    hub: Addr<StreamHub>,
    results: Arc<ResultStore>,
    metrics: Metrics,
) -> Stages {
    let shared = match Shared::open(&cfg.model, &cfg.options) {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            tracing::error!(error = %e, "the backbone failed to load: every job will fail");
            None
        }
    };
    let policy = if cfg.keep_loaded { Policy::Never } else { Policy::Strict };
    let store = ModelStore::new(
        policy,
        crate::kinds::loader(shared.clone(), cfg.adapters.clone(), cfg.companion.clone()),
        metrics.clone(),
    );
    let waited = metrics.cpu_turn_wait_seconds_total.clone();
    let cpu_turns = yued_engine::ggml::CpuTurns::with_wait_hook(move |d| waited.inc_by(d.as_secs_f64()));
    let links = Links { scheduler: scheduler.clone(), hub, metrics, store: store.clone(), cfg: cfg.clone(), cpu_turns };
    // The AR -> NAR hand-off holds one job: with the one rendering, at most two jobs' KV
    // sets are alive beside the AR's own.
    let (nar_tx, nar_rx) = crossbeam_channel::bounded(1);
    let (vae_tx, vae_rx) = crossbeam_channel::unbounded();
    let (enc_tx, enc_rx) = crossbeam_channel::unbounded();
    let mut threads = Vec::new();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new().name(name.into()).spawn(f).expect("spawn a compute stage")
    };
    {
        let (l, s) = (links.clone(), shared.clone());
        let vae_tx = vae_tx.clone();
        threads.push(spawn("yued-compose", Box::new(move || crate::compose_stage::run(l, s, rx, nar_tx, vae_tx))));
    }
    {
        let l = links.clone();
        let enc_tx = enc_tx.clone();
        threads.push(spawn("yued-synth", Box::new(move || crate::synth_stage::run(l, nar_rx, vae_tx, enc_tx))));
    }
    {
        let (l, r) = (links.clone(), results.clone());
        threads.push(spawn("yued-decode", Box::new(move || crate::decode_stage::run(l, vae_rx, enc_tx, r))));
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
                        for k in crate::kinds::warm_up(&ready_links.cfg) {
                            if let Err(e) = store.lease(&k, &b) {
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
