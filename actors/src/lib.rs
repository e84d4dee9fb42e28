//! The actor system of the daemon. Each actor is the single owner of its resource:
//!
//! - [`scheduler::Scheduler`]: the job table, the fair FIFO queue, the admission cap, and
//!   the sled journal it writes every state change to before acknowledging it;
//! - [`worker`]: the compute thread (fed by a crossbeam channel) that owns the models
//!   and runs the pipeline, never on the HTTP executor;
//! - [`hub::StreamHub`]: per-job listener queues for the WebSocket streams;
//! - [`results::ResultStore`]: finished results on disk, with expiry;
//! - [`metrics::Metrics`]: the Prometheus registry.
pub mod codec;
pub mod hub;
pub mod journal;
pub mod metrics;
pub mod results;
pub mod scheduler;
pub mod worker;
