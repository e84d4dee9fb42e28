//! What the HTTP handlers share: the job system, the served kinds' submission checks, the
//! bounds and the daemon's own services (logs, MCP sessions, download links).
use crate::logs::LogRing;
use std::sync::Arc;
use yued_contract::metrics::Metrics;
use yued_engine::registry::Registry;
use yued_protocol::{Limits, Props};

/// Everything the handlers share.
pub struct AppState {
    /// The job system: this process's scheduler, hub and results, or a cluster's.
    pub jobs: yued_contract::Backend,
    /// The cluster's connection, on a cluster node: `/health` says `degraded` at once while it
    /// is down (a 503 to a readiness probe), where a worker's own stages would say ok and an
    /// API node's figures would wait on a timeout.
    pub nats: Option<yued_cluster::async_nats::Client>,
    pub metrics: Metrics,
    pub props: Props,
    pub limits: Limits,
    /// The families whose requests are routed to the stages.
    pub families: Vec<yued_protocol::Family>,
    /// Idle time after which a WebSocket listener is pinged (thrice that unanswered: closed).
    pub ws_ping: std::time::Duration,
    /// What the submission check of a YuE2 request's length needs.
    pub prompt: PromptCheck,
    /// The same for MiniMax Music 3, when it is served.
    pub mm3: Option<Mm3Check>,
    /// Whether `/tokenize` is served (`--tokenizer`, or the listening demo).
    pub audio_tokenizer: bool,
    /// Whether `/transcribe` is served (`--transcriber`, or the listening demo's).
    pub transcriber: bool,
    pub logs: LogRing,
    pub started: std::time::Instant,
    pub demo_weights: bool,
    pub max_body_bytes: usize,
    pub vae: VaeLimits,
    /// The `--adapters` directory YuE2 requests name adapters of.
    pub adapters: Option<Arc<yued_engine::models::yue2::adapter::AdapterDir>>,
    /// `--max-duration`: longer songs are cut to it (0: no bound).
    pub max_duration: f64,
    /// `/openapi.json`, built at start (`openapi::document`).
    pub openapi: String,
    /// The MCP endpoint's sessions and caps.
    pub mcp: crate::mcp_sessions::Mcp,
    /// Expiring download links (the MCP export).
    pub links: crate::links::Links,
    /// Turns true when SIGTERM or SIGINT asks the daemon to stop: open WebSockets close
    /// with 1001 and say the job resumes at the next start.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// What `/vae` needs to check and keep an upload.
/// The loaded backbone's tokenizer, token layout and instruction texts: a YuE2 request's
/// prompt length is known at submission, so one that cannot fit the KV cache is refused then.
pub struct PromptCheck {
    pub tokenizer: yued_engine::tokenizer::BpeTokenizer,
    pub tokens: yued_engine::models::yue2::config::TokenLayout,
    pub instructions: yued_engine::models::yue2::prompt::Instructions,
}

pub struct VaeLimits {
    /// Uploads wait here (under the data directory) until their job ends.
    pub uploads: std::path::PathBuf,
    pub max_upload_bytes: usize,
    /// The memory upload bodies being read at once share (`--upload-memory-bytes`).
    pub upload_room: crate::upload_room::UploadRoom,
    /// The loaded VAE's audio (rates, channels, latent width).
    pub audio: yued_engine::models::AudioSpec,
    pub has_encoder: bool,
}

impl AppState {
    /// A request's duration under `--max-duration` (a cut, like the families' own budgets).
    pub fn cap_duration(&self, seconds: f64) -> f64 {
        if self.max_duration > 0.0 {
            seconds.min(self.max_duration)
        } else {
            seconds
        }
    }

    /// The codes a request replays (`field`), `seconds` long, under `--max-duration`: codes
    /// are a song's length, so one too long is refused (the bound cut only `duration`).
    pub fn check_codes_length(&self, field: &str, seconds: f64) -> Result<(), String> {
        if self.max_duration > 0.0 && seconds > self.max_duration + 0.05 {
            return Err(format!(
                "{field}: the codes last {seconds:.2} s, over this daemon's --max-duration of {} s",
                self.max_duration
            ));
        }
        Ok(())
    }
}

/// What the submission check of a MiniMax Music 3 request needs: the registry its
/// component fields name files of, and the LM's tokenizer and codebooks.
pub struct Mm3Check {
    pub registry: Registry,
    pub tokenizer: yued_engine::tokenizer::BpeTokenizer,
    pub tokens: yued_engine::models::mm3::config::TokenLayout,
    pub codebooks: yued_protocol::Mm3Codebooks,
}
