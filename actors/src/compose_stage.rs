//! The entry stage (the compose stage): runs each job's AR half through its family's
//! [`ModelFamily::compose`](crate::family::ModelFamily) (YuE2: scores, semantic streams and
//! one prefilled KV set per chunk; MiniMax Music 3: the frames' codes and states), then
//! pins the family's synthesis group and hands the [`Synthesis`](crate::family::Synthesis)
//! on to the synthesis stage. `/vae` jobs pass straight through to the decode stage.
use crate::family::{Handoff, NarCmd, StageError};
use crate::kinds::Families;
use crate::messages::{EntryFree, JobCtx, VaeCmd, WorkerCmd};
use crate::stage::{guarded, test_abort, test_fault, Links};
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;
use yued_engine::models::yue2::pipeline::Shared;

pub(crate) fn run(
    links: Links,
    shared: Option<Arc<Shared>>,
    rx: Receiver<WorkerCmd>,
    nar_tx: Sender<NarCmd>,
    vae_tx: Sender<VaeCmd>,
) {
    let backend = links.backend();
    let mut families = Families::new(&links, shared);
    if let Err(e) = &backend {
        tracing::error!(error = %e, "the AR stage has no backend: every job will fail");
    }
    while let Ok(cmd) = rx.recv() {
        let job = match cmd {
            WorkerCmd::Shutdown => break,
            WorkerCmd::Run(job) => job,
        };
        let id = job.id.clone();
        let span = tracing::info_span!("job", job = %id);
        let _g = span.enter();
        let ctx = Arc::new(JobCtx {
            id: id.clone(),
            request: job.request,
            known_songs: job.known_songs,
            cancel: job.cancel,
            queue_seconds: job.queue_seconds,
            started: Instant::now(),
            loads_at_start: links.store.residency().loads,
        });
        test_abort(&ctx);
        if let Some(task) = job.vae {
            // A `/vae` job: the family's decoder on the decode stage. Its synthesis group
            // is taken before the next job may start, so under STRICT the next AR cannot
            // slip in ahead of this job's VAE work.
            match families.get(ctx.request.family()) {
                Ok(f) => {
                    let pin = links.store.pin(f.synthesis_group());
                    let _ = vae_tx.send(VaeCmd::VaeJob(ctx, task, pin));
                }
                Err(e) => e.report(&links, &ctx),
            }
            links.scheduler.do_send(EntryFree { id });
            continue;
        }
        let result = guarded(&links, &ctx, "ar", || {
            test_fault("ar", &ctx);
            let family = families.get(ctx.request.family())?;
            let mut out = Handoff::new(&links, &nar_tx, ctx.clone(), family.synthesis_group());
            match &backend {
                Ok(b) => family.compose(&links, b, &ctx, &mut out)?,
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
            e.report(&links, &ctx);
        }
        links.scheduler.do_send(EntryFree { id });
    }
    let _ = nar_tx.send(NarCmd::Shutdown);
    tracing::info!("AR stage stopped");
}
