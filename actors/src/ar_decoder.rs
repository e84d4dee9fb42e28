//! The ArDecoder stage: the entry of the compute pipeline. Leases the AR half, writes the
//! scores and the semantic streams (or takes the replayed / journaled ones), prefills one
//! KV set per acoustic chunk, releases the AR half, and hands the songs with their KV sets
//! to the NarRenderer. `/vae` jobs pass straight through to the VaeTiler.
use crate::hub::Publish;
use crate::journal::SongCodes;
use crate::messages::{CodesReady, EntryFree, JobCtx, NarCmd, NarWork, Resumed, VaeCmd, WorkerCmd};
use crate::stage::{guarded, test_fault, Links, ProgressSink};
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;
use yued_engine::ggml::Backend;
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::pipeline::{Event, PipelineError, Shared, SongWork};
use yued_protocol::{Family, Stage, StreamEvent};

pub(crate) fn run(links: Links, shared: Option<Arc<Shared>>, rx: Receiver<WorkerCmd>, nar_tx: Sender<NarCmd>, vae_tx: Sender<VaeCmd>) {
    let backend = links.backend();
    let mut mm3 = links.cfg.mm3.clone().map(crate::mm3::Mm3State::new);
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
        // Test-only fault of the crash-loop test: a job whose style is
        // $YUED_TEST_ABORT_STYLE aborts the process here, as a C abort in ggml would.
        if std::env::var("YUED_TEST_ABORT_STYLE").is_ok_and(|s| !s.is_empty() && s == ctx.fault_tag()) {
            tracing::error!("test fault (YUED_TEST_ABORT_STYLE): aborting the process on this job");
            std::process::abort();
        }
        if ctx.request.family() == Family::Mm3 {
            // A MiniMax Music 3 job: its AR half here, its synthesis half on the NAR stage
            // (see `mm3`), so the next job's AR may run while this one renders.
            let result = guarded(&links, &ctx, "ar", || {
                test_fault("ar", &ctx);
                match (&backend, mm3.as_mut()) {
                    (Ok(b), Some(st)) => crate::mm3::compose_job(&links, b, st, &ctx),
                    (Err(e), _) => Err(crate::mm3::Mm3Error::Failed(format!("no compute backend: {e}"))),
                    (_, None) => Err(crate::mm3::Mm3Error::Failed("MiniMax Music 3 is not served by this daemon".into())),
                }
            });
            match result {
                Some(Ok((songs, files))) => {
                    let pin = links.store.pin(crate::mm3::synthesis_group());
                    if nar_tx.send(NarCmd::Mm3(Box::new(crate::mm3::Mm3Work { job: ctx.clone(), songs, files, pin }))).is_err() {
                        tracing::error!("the NAR stage is gone");
                    }
                }
                Some(Err(crate::mm3::Mm3Error::Cancelled)) => links.cancelled(&ctx),
                Some(Err(crate::mm3::Mm3Error::Failed(e))) => links.fail(&ctx, e),
                None => {}
            }
            links.scheduler.do_send(EntryFree { id });
            continue;
        }
        if let Some(task) = job.vae {
            // The synthesis group is taken for the job before the next one may start, so
            // under STRICT the next AR cannot slip in ahead of this job's VAE work.
            let pin = links.store.pin(crate::yue2::synthesis_group());
            let _ = vae_tx.send(VaeCmd::VaeJob(ctx, task, pin));
            links.scheduler.do_send(EntryFree { id });
            continue;
        }
        let result = guarded(&links, &ctx, "ar", || {
            test_fault("ar", &ctx);
            match (&shared, &backend) {
                (Some(shared), Ok(backend)) => compose(&links, shared, backend, &ctx),
                (None, _) => Err(PipelineError::Other("the model failed to load; see the daemon log".into())),
                (_, Err(e)) => Err(PipelineError::Other(format!("no compute backend: {e}"))),
            }
        });
        match result {
            None => {}
            Some(Ok(songs)) => {
                let sets: usize = songs.iter().map(|s| s.chunks.len()).sum();
                links.metrics.kv_sets_in_use.add(sets as i64);
                tracing::info!(songs = songs.len(), kv_sets = sets, kv_bytes = songs.iter().map(SongWork::kv_bytes).sum::<usize>(), "codes ready: handing over to the NAR");
                // The AR lease is released (compose returned): pin the synthesis group for
                // this job now, before the next job may lease the AR half, so under STRICT
                // the stages run in job order. Then hand over; the send blocks while the NAR
                // has a job waiting (bounded memory, in order).
                let pin = links.store.pin(crate::yue2::synthesis_group());
                if nar_tx.send(NarCmd::Render(NarWork { job: ctx, songs, pin })).is_err() {
                    tracing::error!("the NAR stage is gone");
                }
            }
            Some(Err(PipelineError::Cancelled)) => links.cancelled(&ctx),
            Some(Err(e)) => links.fail(&ctx, e.to_string()),
        }
        links.scheduler.do_send(EntryFree { id });
    }
    let _ = nar_tx.send(NarCmd::Shutdown);
    tracing::info!("AR stage stopped");
}

fn compose(links: &Links, shared: &Shared, backend: &Backend, ctx: &JobCtx) -> Result<Vec<SongWork>, PipelineError> {
    let req = ctx.yue2();
    let mut lease = links.store.lease(&crate::yue2::ar(&links.cfg), backend).map_err(PipelineError::Other)?;
    let mut sink = ProgressSink::new(links, &ctx.id);
    let resume = !ctx.known_songs.is_empty() && (ctx.known_songs.len() as u32 == req.lm_batch_size.max(1) || !req.semantic_tokens.is_empty());
    let mut meter = TokenMeter::default();
    let mut events = |e: Event<'_>, journal: bool| match e {
        Event::Progress { stage, song, done, total } => {
            meter.count(links, stage, song, done);
            sink.report(stage, done, total)
        }
        Event::Score { abc, .. } => links.hub.do_send(Publish::Event(ctx.id.clone(), StreamEvent::Score { abc: abc.to_string() })),
        Event::Codes { song, abc, codes } => {
            if journal {
                links.scheduler.do_send(CodesReady { id: ctx.id.clone(), song: SongCodes { song, abc: abc.to_string(), codes: codes.to_vec() } });
            }
            links.hub.do_send(Publish::Event(ctx.id.clone(), StreamEvent::Codes { frames: codes.len() as u32 }));
        }
        _ => {}
    };
    if !resume {
        let r = shared.compose(lease.get::<ArModel>(), backend, req, &ctx.cancel, &mut |e| events(e, true));
        meter.finish(links);
        return r;
    }
    // Resume from the journaled codes: every song through the replay path, under its own
    // index and score (the replay requests of its tracks come out as the first run's).
    tracing::info!(songs = ctx.known_songs.len(), "resuming from journaled codes");
    links.scheduler.do_send(Resumed { id: ctx.id.clone() });
    let mut known = ctx.known_songs.clone();
    known.sort_by_key(|s| s.song);
    let mut out = Vec::with_capacity(known.len());
    for s in known {
        let mut r = req.clone();
        r.semantic_tokens = s.codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        r.abc = s.abc.clone();
        r.source_tokens.clear();
        r.lm_batch_size = 1;
        r.lm_seed = req.lm_seed + s.song as i64;
        for mut w in shared.compose(lease.get::<ArModel>(), backend, &r, &ctx.cancel, &mut |e| events(e, false))? {
            w.meta.index = s.song;
            w.meta.abc = s.abc.clone();
            out.push(w);
        }
    }
    meter.finish(links);
    Ok(out)
}

/// Sampled tokens per AR stage, from the progress counts: `yued_ar_tokens_total` as they
/// come, and each stage's tokens per second of wall time when the job leaves the stage.
#[derive(Default)]
struct TokenMeter {
    last: std::collections::HashMap<(Stage, u32), usize>,
    stages: Vec<(Stage, Instant, u64)>,
}

impl TokenMeter {
    fn count(&mut self, links: &Links, stage: Stage, song: u32, done: usize) {
        let prev = self.last.insert((stage, song), done).unwrap_or(0);
        let delta = done.saturating_sub(prev) as u64;
        if delta == 0 {
            return;
        }
        links.metrics.ar_tokens_total.with_label_values(&[stage.as_str()]).inc_by(delta);
        match self.stages.iter_mut().find(|s| s.0 == stage) {
            Some(s) => s.2 += delta,
            None => self.stages.push((stage, Instant::now(), delta)),
        }
    }

    fn finish(&self, links: &Links) {
        for (stage, at, tokens) in &self.stages {
            let secs = at.elapsed().as_secs_f64();
            if secs > 0.0 {
                links.metrics.ar_tokens_per_second.with_label_values(&[stage.as_str()]).observe(*tokens as f64 / secs);
            }
        }
    }
}
