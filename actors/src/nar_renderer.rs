//! The NarRenderer stage: flow matching over each song's chunks, every variation in one
//! graph per chunk. The job arrives with a pin on the synthesis group (taken by the
//! ArDecoder; STRICT keeps the AR half out until the VaeTiler has decoded the last tile),
//! which goes on to the VaeTiler with the announcement of the job's tracks; each chunk's
//! latents follow the moment its solve ends.
use crate::messages::{EncCmd, NarCmd, NarWork, TrackPlan, VaeCmd};
use crate::stage::{guarded, test_fault, Links, ProgressSink};
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use yued_engine::ggml::Backend;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::pipeline::{Event, PipelineError, Shared};

pub(crate) fn run(links: Links, shared: Option<Arc<Shared>>, rx: Receiver<NarCmd>, vae_tx: Sender<VaeCmd>, enc_tx: Sender<EncCmd>) {
    let backend = links.backend();
    while let Ok(cmd) = rx.recv() {
        let work = match cmd {
            NarCmd::Shutdown => break,
            NarCmd::Render(w) => w,
            NarCmd::Mm3(w) => {
                // MiniMax Music 3: condition encoder, DiT and VAE per window, here; the
                // synthesis group stays pinned for the job until the work is dropped.
                let job = w.job.clone();
                let span = tracing::info_span!("job", job = %job.id);
                let _g = span.enter();
                let result = guarded(&links, &job, "nar", || {
                    test_fault("nar", &job);
                    match &backend {
                        Ok(b) => crate::mm3::render_job(&links, b, &w, &enc_tx),
                        Err(e) => Err(crate::mm3::Mm3Error::Failed(format!("no compute backend: {e}"))),
                    }
                });
                match result {
                    Some(Err(crate::mm3::Mm3Error::Cancelled)) => links.cancelled(&job),
                    Some(Err(crate::mm3::Mm3Error::Failed(e))) => links.fail(&job, e),
                    _ => {}
                }
                continue;
            }
        };
        let job = work.job.clone();
        let span = tracing::info_span!("job", job = %job.id);
        let _g = span.enter();
        let sets: usize = work.songs.iter().map(|s| s.chunks.len()).sum();
        let result = guarded(&links, &job, "nar", || {
            test_fault("nar", &job);
            match (&shared, &backend) {
                (Some(shared), Ok(backend)) => render(&links, shared, backend, work, &vae_tx),
                _ => Err(PipelineError::Other("the NAR stage has no model or backend".into())),
            }
        });
        links.metrics.kv_sets_in_use.sub(sets as i64);
        match result {
            Some(Ok(())) => {}
            None => {
                let _ = vae_tx.send(VaeCmd::Abort(job.id.clone()));
            }
            Some(Err(e)) => {
                if matches!(e, PipelineError::Cancelled) {
                    links.cancelled(&job);
                } else {
                    links.fail(&job, e.to_string());
                }
                let _ = vae_tx.send(VaeCmd::Abort(job.id.clone()));
            }
        }
    }
    let _ = vae_tx.send(VaeCmd::Shutdown);
    tracing::info!("NAR stage stopped");
}

fn render(links: &Links, shared: &Shared, backend: &Backend, work: NarWork, vae_tx: &Sender<VaeCmd>) -> Result<(), PipelineError> {
    let job = work.job;
    if job.cancel.is_cancelled() {
        return Err(PipelineError::Cancelled);
    }
    let req = job.yue2();
    let m = req.synth_batch_size.max(1) as usize;
    let pin = work.pin;
    let tracks: Vec<TrackPlan> = work.songs.iter().flat_map(|s| (0..m).map(move |j| TrackPlan { meta: s.meta.clone(), variation: j as u32 })).collect();
    let _ = vae_tx.send(VaeCmd::Begin { job: job.clone(), tracks, pin });
    let mut lease = links.store.lease(&crate::yue2::nar(&links.cfg), backend).map_err(PipelineError::Other)?;
    let mut sink = ProgressSink::new(links, &job.id);
    let mut first = 0;
    for song in work.songs {
        shared.render(lease.get::<NarModel>(), backend, song, req, &job.cancel, &mut |e| match e {
            Event::Progress { stage, done, total, .. } => sink.report(stage, done, total),
            Event::Latents { variation, start_frame, latents, .. } => {
                let track = first + variation as usize;
                let _ = vae_tx.send(VaeCmd::Latents { id: job.id.clone(), track, start_frame, latents: latents.to_vec() });
            }
            _ => {}
        })?;
        first += m;
    }
    Ok(())
}
