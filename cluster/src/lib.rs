//! yued as a cluster on NATS JetStream. The four things one node keeps in its own process
//! move to one NATS server (or cluster), shared by every yued node:
//!
//! | what       | single node                | cluster                                                         |
//! |------------|----------------------------|-----------------------------------------------------------------|
//! | job queue  | the scheduler's fair queue | `YUED_JOBS`: work-queue stream, a subject per client, capped     |
//! | job states | the sled journal           | `yued_jobstate`: a KV bucket, written with compare-and-set       |
//! | tile bus   | the in-process stream hub  | `YUED_TILES`: a stream, a subject per job, tiles deduplicated    |
//! | results    | the results folder         | `yued_results`: the object store                                 |
//!
//! An API node ([`api::NatsBackend`]) implements the job contract's traits on them; a
//! worker node ([`worker`]) runs today's single-node pipeline and bridges it: it pulls a
//! job per free slot, claims it in the state bucket, runs it locally, forwards its stream
//! and uploads its result. A worker that dies stops acknowledging; after `ack_wait` the job
//! goes to another worker, which resumes from the codes the state bucket holds.
#![forbid(unsafe_code)]
pub use async_nats;
pub mod api;
pub mod metrics;
pub mod record;
pub mod tiles;
pub mod worker;

use async_nats::jetstream::{self, kv, object_store, stream};
use std::time::Duration;

/// The work-queue stream of jobs (`yued.jobs.<client hash>`).
pub const JOBS_STREAM: &str = "YUED_JOBS";
/// The stream of live tiles and events (`yued.tiles.<job id>`).
pub const TILES_STREAM: &str = "YUED_TILES";
/// Job states and the fairness clock.
pub const STATE_BUCKET: &str = "yued_jobstate";
/// One key per live worker, expiring when it stops reporting.
pub const WORKERS_BUCKET: &str = "yued_workers";
/// Results (and `/vae` uploads on their way to a worker).
pub const RESULTS_BUCKET: &str = "yued_results";
/// MCP export links (token -> job), expiring with the links.
pub const LINKS_BUCKET: &str = "yued_links";

/// How often a worker reports itself and its jobs.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A node's part in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The HTTP routes; no compute.
    Api,
    /// Compute; only `/health` and `/metrics` over HTTP.
    Worker,
    /// Both.
    All,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "api" => Some(Role::Api),
            "worker" => Some(Role::Worker),
            "all" => Some(Role::All),
            _ => None,
        }
    }
    pub fn serves_api(self) -> bool {
        self != Role::Worker
    }
    pub fn computes(self) -> bool {
        self != Role::Api
    }
}

/// What a node needs to join.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub url: String,
    pub node: String,
    pub role: Role,
    /// A worker silent on a job this long loses it.
    pub ack_wait: Duration,
    /// Starts of a job whose worker stopped answering before it fails (a job handed back
    /// does not count).
    pub max_attempts: u32,
    /// Jobs queued and running, cluster-wide.
    pub admission_cap: usize,
    /// ... and of one principal.
    pub admission_share: usize,
    pub result_ttl: Duration,
    pub result_max_bytes: u64,
    /// How long an MCP export link works.
    pub link_ttl: Duration,
}

/// This node's default name: the host's and the process id.
pub fn default_node_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node".into());
    key_safe(&format!("{host}-{}", std::process::id()))
}

/// A text as a KV key / subject token: letters, digits, `-` and `_` only.
pub fn key_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The subject token of a principal id (FNV-1a, 64 bits, hex): names and addresses never
/// appear in subjects (and keys appear nowhere).
pub fn client_token(client: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in client.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The connection and the JetStream objects every node uses.
pub struct Cluster {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub jobs: stream::Stream,
    pub state: kv::Store,
    pub workers: kv::Store,
    pub results: object_store::ObjectStore,
    /// MCP export links, so that a link made on one API node works on every other.
    pub links: kv::Store,
    pub cfg: ClusterConfig,
}

impl Cluster {
    /// Connects (retrying for a minute while the server comes up) and creates or updates
    /// the streams, buckets and object store.
    pub async fn connect(cfg: ClusterConfig) -> anyhow::Result<Cluster> {
        let client = connect_retrying(&cfg).await?;
        let js = jetstream::new(client.clone());
        create_streams(&js, &cfg).await?;
        let jobs = js.get_stream(JOBS_STREAM).await.map_err(|e| anyhow::anyhow!("{JOBS_STREAM}: {e}"))?;
        // A record outlives its result by a day (a queued job is rewritten when it starts,
        // a running one at every heartbeat).
        let state = key_value(&js, STATE_BUCKET, cfg.result_ttl + Duration::from_secs(24 * 3600)).await?;
        let workers = key_value(&js, WORKERS_BUCKET, 5 * HEARTBEAT).await?;
        let results = results_store(&js, &cfg).await?;
        let links = key_value(&js, LINKS_BUCKET, cfg.link_ttl.max(Duration::from_secs(1))).await?;
        tracing::info!(url = %cfg.url, node = %cfg.node, role = ?cfg.role, "joined the cluster");
        Ok(Cluster { client, js, jobs, state, workers, results, links, cfg })
    }

    /// The workers that reported within their expiry.
    pub async fn live_workers(&self) -> Result<Vec<worker::WorkerInfo>, String> {
        use futures_util::StreamExt;
        let mut keys = self.workers.keys().await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            let Ok(k) = k else { continue };
            if let Ok(Some(v)) = self.workers.get(k).await {
                if let Ok(w) = serde_json::from_slice::<worker::WorkerInfo>(&v) {
                    out.push(w);
                }
            }
        }
        Ok(out)
    }

    /// Whether a live worker already reports under this node's name: its entry is there and
    /// moves within two heartbeats (an entry left by a killed worker of this name does not).
    pub async fn name_in_use(&self) -> anyhow::Result<bool> {
        let key = key_safe(&self.cfg.node);
        let at = |v: Option<bytes::Bytes>| {
            v.and_then(|v| serde_json::from_slice::<worker::WorkerInfo>(&v).ok()).map(|w| w.at_ms)
        };
        let Some(first) = at(self.workers.get(&key).await.map_err(|e| anyhow::anyhow!("{e}"))?) else {
            return Ok(false);
        };
        tokio::time::sleep(2 * HEARTBEAT + Duration::from_millis(500)).await;
        let then = at(self.workers.get(&key).await.map_err(|e| anyhow::anyhow!("{e}"))?);
        Ok(then.is_some_and(|t| t != first))
    }
}

/// The NATS connection, retried for a minute while the server comes up.
async fn connect_retrying(cfg: &ClusterConfig) -> anyhow::Result<async_nats::Client> {
    let mut tries = 0;
    loop {
        let opts = async_nats::ConnectOptions::new().name(format!("yued {}", cfg.node)).max_reconnects(None::<usize>);
        match opts.connect(&cfg.url).await {
            Ok(c) => return Ok(c),
            // What waiting does not mend: said at once.
            Err(e)
                if matches!(
                    e.kind(),
                    async_nats::ConnectErrorKind::ServerParse
                        | async_nats::ConnectErrorKind::Authentication
                        | async_nats::ConnectErrorKind::AuthorizationViolation
                        | async_nats::ConnectErrorKind::Tls
                ) =>
            {
                anyhow::bail!("--cluster {}: {e}", cfg.url)
            }
            Err(e) if tries < 60 => {
                tries += 1;
                tracing::warn!(url = %cfg.url, error = %e, "NATS not reachable yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => anyhow::bail!("--cluster {}: {e}", cfg.url),
        }
    }
}

/// The jobs work queue (bounded by the admission cap) and the tiles stream.
async fn create_streams(js: &jetstream::Context, cfg: &ClusterConfig) -> anyhow::Result<()> {
    js.create_or_update_stream(stream::Config {
        name: JOBS_STREAM.into(),
        subjects: vec!["yued.jobs.*".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        max_messages: cfg.admission_cap as i64,
        discard: stream::DiscardPolicy::New,
        duplicate_window: Duration::from_secs(600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("creating the {JOBS_STREAM} stream: {e}"))?;
    js.create_or_update_stream(stream::Config {
        name: TILES_STREAM.into(),
        subjects: vec!["yued.tiles.*".into()],
        retention: stream::RetentionPolicy::Limits,
        max_age: Duration::from_secs(3600),
        // Bounded in bytes too (as the results are): a busy hour must not fill the server's
        // disk, where the job states and the queue live as well. Past it the oldest tiles go
        // (a late listener of an old song then starts where the stream does).
        max_bytes: tiles_max_bytes(cfg.result_max_bytes),
        discard: stream::DiscardPolicy::Old,
        // A tile re-sent by the worker that took over a job is a duplicate for as long as
        // the stream keeps tiles.
        duplicate_window: Duration::from_secs(3600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("creating the {TILES_STREAM} stream: {e}"))?;
    Ok(())
}

/// The tiles stream's bound in bytes: a quarter of the results' bound (a song's live tiles are
/// its PCM and its Opus, kept an hour), at least 256 MiB.
fn tiles_max_bytes(result_max_bytes: u64) -> i64 {
    (result_max_bytes / 4).clamp(256 << 20, i64::MAX as u64) as i64
}

/// A key-value bucket keeping one value a key for `max_age`.
async fn key_value(js: &jetstream::Context, bucket: &str, max_age: Duration) -> anyhow::Result<kv::Store> {
    js.create_or_update_key_value(kv::Config {
        bucket: bucket.into(),
        history: 1,
        max_age,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("creating the {bucket} bucket: {e}"))
}

/// The results object store (opened when it exists, else created).
async fn results_store(js: &jetstream::Context, cfg: &ClusterConfig) -> anyhow::Result<object_store::ObjectStore> {
    if let Ok(s) = js.get_object_store(RESULTS_BUCKET).await {
        return Ok(s);
    }
    let config = |max_bytes: i64| object_store::Config {
        bucket: RESULTS_BUCKET.into(),
        max_age: cfg.result_ttl,
        max_bytes,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    match js.create_object_store(config(cfg.result_max_bytes as i64)).await {
        Ok(s) => Ok(s),
        // A server reserves a bucket's bound on its disk up front: one with less room than
        // --result-max-bytes still keeps results, bounded by their age and by the server's
        // own store limit.
        Err(e) if e.to_string().contains("insufficient storage") => {
            tracing::warn!(
                max_bytes = cfg.result_max_bytes,
                "the NATS server has less storage than result_max_bytes: the results bucket is bounded by \
                    result_ttl_secs and the server's own limit"
            );
            js.create_object_store(config(-1))
                .await
                .map_err(|e| anyhow::anyhow!("creating the {RESULTS_BUCKET} object store: {e}"))
        }
        Err(e) => anyhow::bail!("creating the {RESULTS_BUCKET} object store: {e}"),
    }
}

/// Runs `f` until it succeeds, for up to `within` (a NATS server restarting, a leader
/// election): the error of the last try after that.
pub async fn retry<T, E: std::fmt::Display, F, Fut>(what: &str, within: Duration, mut f: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            // A message over the server's size limit stays over it.
            Err(e) if start.elapsed() < within && !e.to_string().contains("max payload") => {
                tracing::debug!(what, error = %e, "retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long a cluster write is retried before the node gives up on it.
pub const RETRY_WITHIN: Duration = Duration::from_secs(120);
