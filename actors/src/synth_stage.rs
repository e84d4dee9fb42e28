//! The synthesis stage : runs each job's [`Synthesis`] hand-off, whatever
//! its family: YuE2's flow matching over each song's chunks (latents on to the decode stage),
//! MiniMax Music 3's condition encoder, DiT and VAE per window. The job arrives with a pin
//! on its synthesis group (taken by the entry stage; STRICT keeps the AR half out until the
//! last tile is decoded).
use crate::decode_stage::VaeCmd;
use crate::family::{NarCmd, Outlets, StageError};
use crate::messages::EncCmd;
use crate::stage::{guarded, test_fault, Links};
use crossbeam_channel::{Receiver, Sender};

pub(crate) fn run(links: Links, rx: Receiver<NarCmd>, vae_tx: Sender<VaeCmd>, enc_tx: Sender<EncCmd>) {
    let backend = links.backend();
    let out = Outlets { vae: vae_tx, enc: enc_tx };
    while let Ok(cmd) = rx.recv() {
        let work = match cmd {
            NarCmd::Shutdown => break,
            NarCmd::Render(w) => w,
        };
        let job = work.job;
        let span = tracing::info_span!("job", job = %job.id);
        let _g = span.enter();
        let sets = work.synthesis.kv_sets();
        let (synthesis, pin) = (work.synthesis, work.pin);
        let result = guarded(&links, &job, "nar", || {
            test_fault("nar", &job);
            match &backend {
                Ok(b) => synthesis.render(&links, b, &job, pin, &out),
                Err(e) => Err(StageError::Failed(format!("no compute backend: {e}"))),
            }
        });
        links.metrics.kv_sets_in_use.sub(sets as i64);
        match result {
            Some(Ok(())) => {}
            // Panicked (the job is failed already): the decode stage drops what it holds of it.
            None => {
                let _ = out.vae.send(VaeCmd::Abort(job.id.clone()));
            }
            Some(Err(e)) => e.report(&links, &job),
        }
    }
    let _ = out.vae.send(VaeCmd::Shutdown);
    tracing::info!("synthesis stage stopped");
}
