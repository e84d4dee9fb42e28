//! The entry stage (the compose stage): runs each job's AR half, then pins the family's
//! synthesis group and hands the [`Synthesis`](crate::family::Synthesis) on to the synthesis
//! stage. `/vae` jobs pass straight through to the decode stage.
//!
//! Jobs of a family that batches ([`ModelFamily::batch`](crate::family::ModelFamily)) share
//! one decode step, up to `--parallel` rows: a job the scheduler dispatches joins the
//! running [`Batch`] at the next step boundary when it fits (same AR module, rows to spare),
//! and the scheduler is told the entry is free as long as rows are left, so the fair queue
//! decides who joins next. A job that cannot join (another module, a resumed job, a `/vae`
//! job, a family that composes alone) goes back to the head of the queue, queued again
//! ([`Requeue`]); no one else joins, and once the batch has drained the entry is free and
//! that job starts first.
//!
//! Where the synthesis halves run: under `--keep-loaded` a member's hand-off goes to the
//! synthesis stage the step it leaves, so its songs render while the batch decodes on. That
//! stage renders one job at a time and queues one more; a hand-off it has no room for waits
//! here, in order, while the batch steps on (the job it renders may be a streamed member
//! that needs the batch's next steps), and no one joins until it is sent. A member streams
//! only when its hand-off can go at once ([`Handoff::can_stream`]).
//! Under STRICT the synthesis group cannot load while the batch holds the AR half: a
//! finished member's hand-off waits, no one joins any more, and once the batch has drained
//! the hand-offs go in the order the members finished; the next batch starts when they have
//! rendered (the AR lease waits for their pins).
use crate::decode_stage::VaeCmd;
use crate::family::{send_waiting, Batch, Handoff, NarCmd, StageError, Synthesis};
use crate::kinds::Families;
use crate::messages::{EntryFree, JobCtx, Requeue, RunJob, WorkerCmd};
use crate::model_store::Policy;
use crate::stage::{guarded, panic_message, test_abort, test_fault, Links};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use yued_contract::UploadTask;
use yued_engine::ggml::Backend;
use yued_engine::models::yue2::pipeline::Shared;
use yued_protocol::JobId;

pub(crate) fn run(
    links: Links,
    shared: Option<Arc<Shared>>,
    rx: Receiver<WorkerCmd>,
    nar_tx: Sender<NarCmd>,
    vae_tx: Sender<VaeCmd>,
) {
    let backend = links.backend();
    if let Err(e) = &backend {
        tracing::error!(error = %e, "the AR stage has no backend: every job will fail");
    }
    let families = Families::new(&links, shared);
    let rows = links.cfg.parallel.max(1);
    tracing::info!(rows, "AR stage: up to {rows} rows in one decode step");
    let mut entry = Entry {
        links,
        backend,
        families,
        nar_tx,
        vae_tx,
        rows,
        batch: None,
        deferred: Vec::new(),
        waiting: VecDeque::new(),
        draining: false,
        owed: None,
    };
    let mut stopping = false;
    loop {
        // The hand-offs the synthesis stage has room for; all of them, waiting for room, when
        // no batch runs (nothing the synthesis stage renders needs this stage then).
        send_waiting(&entry.links, &entry.nar_tx, &mut entry.waiting, entry.batch.is_none());
        if !stopping && entry.room() {
            if let Some(id) = entry.owed.take() {
                entry.links.scheduler.do_send(EntryFree { id });
            }
            // Waits for work only when there is nothing to step.
            let cmd = if entry.batch.is_none() {
                Some(rx.recv().ok())
            } else {
                match rx.try_recv() {
                    Ok(c) => Some(Some(c)),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => Some(None),
                }
            };
            match cmd {
                Some(None | Some(WorkerCmd::Shutdown)) => stopping = true,
                Some(Some(WorkerCmd::Run(job))) => entry.take(*job),
                None => {}
            }
        }
        if entry.batch.is_some() {
            entry.step();
        } else if stopping {
            break;
        }
    }
    send_waiting(&entry.links, &entry.nar_tx, &mut entry.waiting, true);
    let _ = entry.nar_tx.send(NarCmd::Shutdown);
    tracing::info!("AR stage stopped");
}

/// The entry stage's state between steps.
struct Entry {
    links: Links,
    backend: Result<Backend, String>,
    families: Families,
    nar_tx: Sender<NarCmd>,
    vae_tx: Sender<VaeCmd>,
    /// `--parallel`: the most rows of one decode step.
    rows: usize,
    batch: Option<Box<dyn Batch>>,
    /// Finished members' hand-offs waiting for the batch to drain (STRICT).
    deferred: Vec<(Arc<JobCtx>, Box<dyn Synthesis>)>,
    /// Hand-offs sent while a batch runs that the synthesis stage had no room for yet, in
    /// order: the batch goes on stepping meanwhile (a streamed member being rendered needs
    /// its steps), and no one joins until they are sent.
    waiting: VecDeque<NarCmd>,
    /// A job went back to the queue: no one joins until the batch has drained.
    draining: bool,
    /// The job whose [`EntryFree`] is owed to the scheduler: sent once another job may come.
    owed: Option<JobId>,
}

impl Entry {
    /// Whether another job may be taken now.
    fn room(&self) -> bool {
        match &self.batch {
            None => true,
            Some(b) => !self.draining && self.deferred.is_empty() && self.waiting.is_empty() && b.rows() < self.rows,
        }
    }

    /// Sends a job that cannot join the running batch back to the queue; the entry stays
    /// taken (its [`EntryFree`] is owed) until the batch has drained.
    fn requeue(&mut self, ctx: &JobCtx) {
        if ctx.cancel.is_cancelled() {
            return self.links.cancelled(ctx);
        }
        tracing::info!(rows = self.batch.as_ref().map_or(0, |b| b.rows()), "waits for the AR batch to drain");
        self.links.scheduler.do_send(Requeue { id: ctx.id.clone() });
        self.draining = true;
    }

    fn take(&mut self, job: RunJob) {
        let id = job.id.clone();
        let ctx = Arc::new(JobCtx {
            id: id.clone(),
            request: job.request,
            known_songs: job.known_songs,
            cancel: job.cancel,
            queue_seconds: job.queue_seconds,
            submitted_ms: job.submitted_ms,
            started: Instant::now(),
            loads_at_start: self.links.store.residency().loads,
        });
        let span = tracing::info_span!("job", job = %id);
        let _g = span.enter();
        test_abort(&ctx);
        self.owed = Some(id);
        if let Some(task) = job.upload {
            if self.batch.is_some() {
                self.requeue(&ctx);
            } else {
                self.upload(ctx, task);
            }
            return;
        }
        if let Some(b) = &self.batch {
            if b.admits(&ctx) && b.rows() + b.rows_of(&ctx) <= self.rows {
                self.join(ctx);
            } else {
                self.requeue(&ctx);
            }
            return;
        }
        let batch = match self.families.get(ctx.request.family()) {
            Ok(f) => f.batch(&self.links, &ctx),
            Err(e) => return e.report(&self.links, &ctx),
        };
        match batch {
            Some(b) if self.backend.is_ok() => {
                self.batch = Some(b);
                self.join(ctx);
            }
            _ => self.run_alone(ctx),
        }
    }

    /// A job of an upload, on the decode stage: a `/vae` job on the family's decoder (its
    /// synthesis group), a listening job on its tool (the listening group). The group is
    /// taken before the next job may start, so under STRICT the next AR cannot slip in ahead
    /// of this job's work.
    fn upload(&mut self, ctx: Arc<JobCtx>, task: UploadTask) {
        // Its stage shows from here: it may wait behind other uploads' work on that stage.
        crate::stage::ProgressSink::new(&self.links, &ctx).waiting(task.op.stage());
        if !task.op.is_vae() {
            let pin = self.links.store.pin(crate::listen::group());
            let _ = self.vae_tx.send(VaeCmd::UploadJob(ctx, task, pin, crate::listen::run_job));
            return;
        }
        match self.families.get(ctx.request.family()) {
            Ok(f) => {
                let pin = self.links.store.pin(f.synthesis_group());
                let _ = self.vae_tx.send(VaeCmd::UploadJob(ctx, task, pin, f.vae_job()));
            }
            Err(e) => e.report(&self.links, &ctx),
        }
    }

    /// Adds a job to the running batch (a refusal fails it alone).
    fn join(&mut self, ctx: Arc<JobCtx>) {
        let (links, nar_tx, waiting) = (&self.links, &self.nar_tx, &mut self.waiting);
        let (Some(batch), Ok(backend)) = (self.batch.as_mut(), self.backend.as_ref()) else { return };
        let group = match self.families.get(ctx.request.family()) {
            Ok(f) => f.synthesis_group(),
            Err(e) => return e.report(links, &ctx),
        };
        let result = guarded(links, &ctx, "ar", || {
            test_fault("ar", &ctx);
            let mut out = Handoff::queued(links, nar_tx, ctx.clone(), group, waiting);
            batch.join(links, backend, ctx.clone(), &mut out)
        });
        if let Some(Err(e)) = result {
            e.report(links, &ctx);
        }
        if batch.is_empty() {
            self.batch = None;
            self.draining = false;
        }
    }

    /// One decode step of the batch; the members that left are handed over or reported.
    fn step(&mut self) {
        let (Some(batch), Ok(backend)) = (self.batch.as_mut(), self.backend.as_ref()) else { return };
        let links = &self.links;
        let left = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| batch.step(links, backend))) {
            Ok(left) => left,
            Err(payload) => {
                let msg = panic_message(payload);
                tracing::error!(panic = %msg, "the AR stage panicked in a batched step; failing its jobs");
                for job in batch.jobs() {
                    links.fail(&job, format!("internal error in the ar stage: {msg}"));
                }
                self.batch = None;
                self.draining = false;
                self.flush();
                return;
            }
        };
        let overlap = links.store.policy() == Policy::Never;
        for (ctx, how) in left {
            match how {
                Err(e) => e.report(&self.links, &ctx),
                Ok(None) => {}
                Ok(Some(synthesis)) if overlap => self.hand_over(ctx, synthesis),
                Ok(Some(synthesis)) => self.deferred.push((ctx, synthesis)),
            }
        }
        if self.batch.as_ref().is_some_and(|b| b.is_empty()) {
            self.batch = None;
            self.draining = false;
            self.flush();
        }
    }

    /// The deferred hand-offs, once the batch (and its AR lease) is gone.
    fn flush(&mut self) {
        for (ctx, synthesis) in std::mem::take(&mut self.deferred) {
            self.hand_over(ctx, synthesis);
        }
    }

    fn hand_over(&mut self, ctx: Arc<JobCtx>, synthesis: Box<dyn Synthesis>) {
        let span = tracing::info_span!("job", job = %ctx.id);
        let _g = span.enter();
        match self.families.group_of(ctx.request.family()) {
            Some(group) => Handoff::queued(&self.links, &self.nar_tx, ctx, group, &mut self.waiting).send(synthesis),
            None => self.links.fail(&ctx, format!("{} is not served here", ctx.request.family())),
        }
    }

    /// A job on its own: its family's whole AR half (in the job's span, which `take` entered).
    fn run_alone(&mut self, ctx: Arc<JobCtx>) {
        let (links, nar_tx, backend, families) = (&self.links, &self.nar_tx, &self.backend, &mut self.families);
        let result = guarded(links, &ctx, "ar", || {
            test_fault("ar", &ctx);
            let family = families.get(ctx.request.family())?;
            let mut out = Handoff::new(links, nar_tx, ctx.clone(), family.synthesis_group());
            match backend {
                Ok(b) => family.compose(links, b, &ctx, &mut out)?,
                Err(e) => return Err(StageError::Failed(format!("no compute backend: {e}"))),
            };
            if !out.sent() {
                return Err(StageError::Failed(format!(
                    "{} composed the job without handing it over",
                    ctx.request.family()
                )));
            }
            Ok(())
        });
        if let Some(Err(e)) = result {
            e.report(links, &ctx);
        }
    }
}
