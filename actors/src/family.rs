//! The seam between the compute stages and the model families. The entry stage and the
//! synthesis stage drive a job through these two traits and never ask which family it is:
//!
//! - [`ModelFamily`], one value per served family, owned by the entry stage: the AR half
//!   ("compose": the request in, a [`Synthesis`] hand-off out: the codes and whatever the
//!   synthesis half needs with them, KV sets or frame states), and the coexistence group the
//!   hand-off needs pinned;
//! - [`Synthesis`], the hand-off, run by the synthesis stage: latents painted over the
//!   hand-off and decoded to PCM tiles, then the tracks to the Encoder. Where the decoder
//!   runs is the family's: YuE2 streams each chunk's latents to the decode stage, which
//!   decodes tile by tile as chunks arrive; MiniMax Music 3 decodes each window on this
//!   stage the moment it is denoised (its windows overlap and are cropped after decoding).
//!
//! A family's rates reach the hub, the encoder and the HTTP layer through the
//! [`AudioSpec`](yued_engine::models::AudioSpec) of its loaded decoder, never through a literal outside its folder.
//!
//! The families are in `yue2` and `mm3`; adding one is a module with its components and
//! loader, an implementation of each trait, and an entry in `kinds`.
use crate::decode_stage::{UploadJobFn, VaeCmd};
use crate::messages::{EncCmd, JobCtx};
use crate::model_store::{Group, GroupPin, Policy};
use crate::stage::Links;
use crossbeam_channel::{Sender, TrySendError};
use std::collections::VecDeque;
use std::sync::Arc;
use yued_engine::ggml::Backend;
use yued_protocol::Family;

/// How a job ended on a stage when it did not reach the Encoder.
#[derive(Debug)]
pub enum StageError {
    Cancelled,
    Failed(String),
}

impl From<String> for StageError {
    fn from(e: String) -> Self {
        StageError::Failed(e)
    }
}

/// An engine error that may say the job was cancelled: every other one fails the job
/// with its text.
pub(crate) trait EngineError: std::fmt::Display {
    fn is_cancelled(&self) -> bool;
}

impl<E: EngineError> From<E> for StageError {
    fn from(e: E) -> Self {
        if e.is_cancelled() {
            StageError::Cancelled
        } else {
            StageError::Failed(e.to_string())
        }
    }
}

/// [`EngineError`] for error enums whose `Cancelled` variant is the cancellation.
macro_rules! engine_error {
    ($($t:ty),* $(,)?) => {
        $(impl $crate::family::EngineError for $t {
            fn is_cancelled(&self) -> bool {
                matches!(self, Self::Cancelled)
            }
        })*
    };
}
pub(crate) use engine_error;

impl StageError {
    /// Reports the job's end to the scheduler.
    pub(crate) fn report(self, links: &Links, job: &JobCtx) {
        match self {
            StageError::Cancelled => links.cancelled(job),
            StageError::Failed(e) => links.fail(job, e),
        }
    }
}

/// A model family as the entry stage drives it.
pub(crate) trait ModelFamily: Send {
    fn family(&self) -> Family;

    /// The group the hand-off needs while it renders; the entry stage pins it for the job
    /// before the next job may lease anything, so under STRICT the stages run in job order.
    fn synthesis_group(&self) -> Group;

    /// The AR half of a job: the codes written (or replayed from the request or the
    /// journal), journaled and announced, and the [`Synthesis`] handed over through `out`:
    /// after the AR leases are released, or, when [`Handoff::can_overlap`], as soon as the
    /// first part of it can render (a streamed song's chunks then follow through the
    /// hand-off's own channel while this writes them).
    fn compose(
        &mut self,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError>;

    /// How the decode stage runs the family's `/vae` jobs (its own decoder).
    fn vae_job(&self) -> UploadJobFn;

    /// A batch for `job` when the family decodes its AR half beside other jobs' ([`Batch`]);
    /// `None`: the job composes alone ([`ModelFamily::compose`]).
    fn batch(&mut self, _links: &Links, _job: &JobCtx) -> Option<Box<dyn Batch>> {
        None
    }
}

/// The AR halves of several jobs in one decode step (llama.cpp's slots stepped together),
/// owned by the entry stage while it has members: it holds the AR module's lease, each
/// member's stepper, reports and hand-out channel. A member joins at a step boundary and
/// leaves when its codes are written, it fails, or it is cancelled (at the next step).
pub(crate) trait Batch {
    /// Whether `job` may share this batch's decode steps (same module, a job that batches).
    fn admits(&self, job: &JobCtx) -> bool;

    /// The most rows `job` takes in a step (its songs, twice under guidance).
    fn rows_of(&self, job: &JobCtx) -> usize;

    /// The most rows the members take.
    fn rows(&self) -> usize;

    fn is_empty(&self) -> bool;

    /// The members' jobs (a step that panicked fails them all).
    fn jobs(&self) -> Vec<Arc<JobCtx>>;

    /// Adds a job (refused: its error; nothing of it is left in the batch). A streamed
    /// job's hand-off goes out through `out` now.
    fn join(
        &mut self,
        links: &Links,
        backend: &Backend,
        job: Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError>;

    /// One decode step of every member; the members that left, each with its hand-off to
    /// send (`Some`), nothing left to send (`None`: its hand-off went at the join), or why
    /// it ended here.
    fn step(&mut self, links: &Links, backend: &Backend) -> Vec<(Arc<JobCtx>, Left)>;
}

/// How a member left a [`Batch`].
pub(crate) type Left = Result<Option<Box<dyn Synthesis>>, StageError>;

/// Where the entry stage's [`ModelFamily::compose`] hands its job's [`Synthesis`] over.
pub(crate) struct Handoff<'a> {
    links: &'a Links,
    nar: &'a Sender<NarCmd>,
    job: Arc<JobCtx>,
    group: Group,
    sent: bool,
    /// Where a hand-off waits, in order, while the synthesis stage has no room
    /// ([`send_waiting`]); `None`: the send blocks until it has.
    waiting: Option<&'a mut VecDeque<NarCmd>>,
}

impl<'a> Handoff<'a> {
    /// A hand-off whose send blocks while the synthesis stage has a job waiting (bounded
    /// memory, in order): for a job composed alone.
    pub fn new(links: &'a Links, nar: &'a Sender<NarCmd>, job: Arc<JobCtx>, group: Group) -> Self {
        Handoff { links, nar, job, group, sent: false, waiting: None }
    }

    /// A hand-off that never blocks: while the synthesis stage has no room it waits in
    /// `waiting`, behind the ones before it. A batch must not wait on the synthesis stage,
    /// which may be rendering a streamed member that needs the batch's next steps.
    pub fn queued(
        links: &'a Links,
        nar: &'a Sender<NarCmd>,
        job: Arc<JobCtx>,
        group: Group,
        waiting: &'a mut VecDeque<NarCmd>,
    ) -> Self {
        Handoff { links, nar, job, group, sent: false, waiting: Some(waiting) }
    }

    /// Whether the synthesis half may start while the AR half still holds its leases: every
    /// group resident at once (`--keep-loaded`). Under STRICT the synthesis group waits for
    /// the AR group to be released, so a hand-off before that would wait on itself.
    pub fn can_overlap(&self) -> bool {
        self.links.store.policy() == Policy::Never
    }

    /// Whether a hand-off sent now reaches the synthesis stage's queue at once (nothing
    /// waits before it and the queue has room): a streamed hand-off is only worth sending
    /// then, else its job hands over when its AR half is done.
    pub fn can_stream(&self) -> bool {
        self.can_overlap() && self.waiting.as_ref().is_none_or(|w| w.is_empty()) && !self.nar.is_full()
    }

    /// Pins the synthesis group for the job (before the next job may lease the AR half,
    /// so under STRICT the stages run in job order) and sends the hand-off to the synthesis
    /// stage (or queues it, for a [`Handoff::queued`]).
    pub fn send(&mut self, synthesis: Box<dyn Synthesis>) {
        assert!(!self.sent, "a job is handed over once");
        self.sent = true;
        let sets = synthesis.kv_sets();
        self.links.metrics.kv_sets_in_use.add(sets as i64);
        tracing::info!(work = %synthesis.describe(), "handing over to the synthesis stage");
        let pin = self.links.store.pin(self.group);
        let cmd = NarCmd::Render(NarWork { job: self.job.clone(), synthesis, pin });
        match self.waiting.as_mut() {
            Some(waiting) => {
                waiting.push_back(cmd);
                send_waiting(self.links, self.nar, waiting, false);
            }
            None => {
                if let Err(e) = self.nar.send(cmd) {
                    gone(self.links, e.into_inner());
                }
            }
        }
    }

    pub fn sent(&self) -> bool {
        self.sent
    }
}

/// Sends the waiting hand-offs in order: those the synthesis stage has room for, or
/// (`block`) all of them, each waiting for room.
pub(crate) fn send_waiting(links: &Links, nar: &Sender<NarCmd>, waiting: &mut VecDeque<NarCmd>, block: bool) {
    while let Some(cmd) = waiting.pop_front() {
        let refused = if block {
            nar.send(cmd).err().map(|e| e.into_inner())
        } else {
            match nar.try_send(cmd) {
                Ok(()) => None,
                Err(TrySendError::Full(cmd)) => {
                    waiting.push_front(cmd);
                    return;
                }
                Err(TrySendError::Disconnected(cmd)) => Some(cmd),
            }
        };
        if let Some(cmd) = refused {
            gone(links, cmd);
        }
    }
}

/// A hand-off the synthesis stage is gone for.
fn gone(links: &Links, cmd: NarCmd) {
    if let NarCmd::Render(w) = cmd {
        links.metrics.kv_sets_in_use.sub(w.synthesis.kv_sets() as i64);
    }
    tracing::error!("the synthesis stage is gone");
}

/// Where the synthesis half sends its output.
pub(crate) struct Outlets {
    /// The decode stage (a family whose decoder runs there).
    pub vae: Sender<VaeCmd>,
    /// The Encoder (the finished tracks of a family that decodes on the synthesis stage).
    pub enc: Sender<EncCmd>,
}

/// A job's hand-off from its AR half to its synthesis half.
pub(crate) trait Synthesis: Send {
    /// KV sets the hand-off holds (the `yued_kv_sets_in_use` gauge).
    fn kv_sets(&self) -> usize {
        0
    }

    /// What the hand-off holds, for the log line of the hand-over.
    fn describe(&self) -> String;

    /// The synthesis half and the decoder. `pin` keeps the synthesis group for the job
    /// until its last tile is decoded (handed on with the latents, or dropped on return).
    fn render(
        self: Box<Self>,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        pin: GroupPin,
        out: &Outlets,
    ) -> Result<(), StageError>;
}

/// A job's synthesis half, whatever its family.
pub struct NarWork {
    pub job: Arc<JobCtx>,
    pub(crate) synthesis: Box<dyn Synthesis>,
    /// Holds the synthesis group for the job until its last tile is decoded.
    pub pin: GroupPin,
}

pub enum NarCmd {
    Render(NarWork),
    Shutdown,
}
