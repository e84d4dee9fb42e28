//! The actor system of the daemon. Each actor is the single owner of its resource:
//!
//! - [`scheduler::Scheduler`]: the job table, the fair FIFO queue, the admission cap, and
//!   the sled journal it writes every state change to before acknowledging it;
//! - [`model_store::ModelStore`]: the module instances and their residency (STRICT /
//!   NEVER), leased to the compute stages;
//! - [`worker`]: the wiring of the compute stages, each a thread fed by a crossbeam channel,
//!   never the HTTP executor: [`ar_decoder`] -> [`nar_renderer`] -> [`vae_tiler`] ->
//!   [`encoder`]; what they send each other is in [`messages`], a leaf module; the stages
//!   drive each job through its family's traits in `family` ([`yue2`], [`mm3`]);
//! - [`hub::StreamHub`]: per-job listener queues for the WebSocket streams;
//! - [`results::ResultStore`]: finished results on disk, with expiry;
//! - [`metrics::Metrics`]: the Prometheus registry;
//! - [`backend`]: what the routes need of all this, as four traits (queue, job states, tile
//!   bus, results), so a cluster can stand in for the single node, and the one principal's
//!   view through which a route reaches a job;
//! - [`tenancy`]: principals (who owns a job), roles and the API keys, held as hashes.
#![forbid(unsafe_code)]
pub mod ar_decoder;
pub mod backend;
pub mod codec;
pub mod encoder;
pub mod fair_queue;
pub(crate) mod family;
pub mod hub;
pub mod journal;
pub mod messages;
pub mod metrics;
pub mod mm3;
pub mod model_store;
pub mod nar_renderer;
pub mod results;
pub mod scheduler;
pub(crate) mod stage;
pub mod tenancy;
pub mod vae_tiler;
pub mod worker;
pub mod yue2;
