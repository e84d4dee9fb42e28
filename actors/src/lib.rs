//! The single node's actor system, behind [`node::Node`]. Each actor is the single owner of
//! its resource:
//!
//! - `scheduler::Scheduler`: the job table, the fair FIFO queue, the admission cap, and
//!   the sled journal (`journal`) it writes every state change to before acknowledging it;
//! - `model_store::ModelStore`: the module instances and their residency (STRICT /
//!   NEVER), leased to the compute stages;
//! - `worker`: the wiring of the compute stages, each a thread fed by a crossbeam channel,
//!   never the HTTP executor: `compose_stage` -> `synth_stage` -> `decode_stage` -> `encoder`;
//!   what they send each other is in `messages`, a leaf module; the stages drive each job
//!   through its family's traits in `family` (`yue2`, `mm3`); the listening tools' jobs
//!   (`listen`) run on the decode stage like a `/vae` job;
//! - `hub::StreamHub`: per-job listener queues for the WebSocket streams.
//!
//! What the routes and the cluster see of all this is the job contract (`yued-contract`):
//! [`node::Node::backend`] and [`node::Node::runner`]. The tools of `yued codec` use
//! [`codec`]; requests become the engine's settings in [`settings`].
#![forbid(unsafe_code)]
pub mod codec;
mod compose_stage;
mod decode_stage;
mod encoder;
mod fair_queue;
mod family;
mod hub;
mod journal;
mod kinds;
mod listen;
mod messages;
mod mm3;
mod model_store;
pub mod node;
mod scheduler;
pub mod settings;
mod stage;
mod synth_stage;
mod worker;
mod yue2;

pub use hub::HistoryBudget;
pub use node::{Node, NodeConfig};
pub use stage::WorkerConfig;
