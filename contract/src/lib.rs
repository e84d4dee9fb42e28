//! The job contract: what the front doors (HTTP, WebSocket, OpenAI, MCP), the single node
//! and the cluster say to each other about jobs, as plain types and traits, with no actor
//! in sight (this crate does not depend on actix). The single node (`yued-actors`) and the
//! cluster (`yued-cluster`) each implement [`backend`]'s traits; the routes hold a
//! [`backend::Backend`] and reach a job only through one principal's [`backend::Jobs`].
//!
//! - [`submission`]: a job as it is admitted ([`submission::Submission`]) and why it may
//!   not be ([`submission::SubmitError`]);
//! - [`record`]: everything kept about a job ([`record::JobRecord`]), as the journal and
//!   the cluster's state bucket store it;
//! - [`queue`]: the queue's figures ([`queue::QueueSnapshot`]);
//! - [`stream`]: a job's live stream: the items published ([`stream::HubItem`]), what a
//!   listener receives ([`stream::StreamItem`]) and its end of it ([`stream::Subscription`]);
//! - [`results`]: finished results on disk;
//! - [`tenancy`]: principals, roles and API keys (held as hashes);
//! - [`metrics`]: the Prometheus registry every part registers on.
#![forbid(unsafe_code)]
pub mod backend;
pub mod metrics;
pub mod queue;
pub mod record;
pub mod results;
pub mod stream;
pub mod submission;
pub mod tenancy;

pub use backend::{Backend, JobQueue, JobStates, Jobs, NodeRunner, ResultFiles, TileBus, Unavailable};
pub use queue::QueueSnapshot;
pub use record::{JobRecord, StageProgress, RECORD_VERSION};
pub use submission::{SongCodes, Submission, SubmitError, UploadOp, UploadTask};
