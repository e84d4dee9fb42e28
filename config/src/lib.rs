//! The daemon's configuration: one struct, every default written once here.
//!
//! Layering, lowest to highest: built-in defaults, a TOML file (`--config`), `YUED_*`
//! environment variables (the upper-cased field name, e.g. `YUED_PORT=9000`), then
//! command-line flags, which the daemon applies last through [`Config::set`].
#![forbid(unsafe_code)]
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Value { key: String, message: String },
}

/// Everything `yued serve` can be told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Listen address.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Where the demo model, the journal and the results live.
    pub data_dir: PathBuf,
    /// Backbone GGUF; empty = the tiny demo model in the data directory.
    pub model: Option<PathBuf>,
    /// VAE GGUF; empty = the demo VAE.
    pub vae: Option<PathBuf>,
    /// A directory of model files sorted by architecture (`--model`/`--vae` win over it).
    pub models: Option<PathBuf>,
    /// A directory of LoRA adapters YuE2 requests may stack.
    pub adapters: Option<PathBuf>,
    /// A NAR-only adapter (safetensors file or folder) merged under every YuE2 render at the
    /// request's `companion_scale` (yue2.cpp's companion: `nar_lora_joint_v9` beside the tokenizer).
    pub companion: Option<PathBuf>,
    /// The audio tokenizer head GGUF (MERT-v2 beside it): serves `/tokenize`. Empty with no
    /// `model`: the tiny listening demo in the data directory; empty with one: not served.
    pub tokenizer: Option<PathBuf>,
    /// The SheetSage2 transcriber head GGUF (MERT-v2 beside it): serves `/transcribe`. Empty
    /// with no `model`: the tiny listening demo's; empty with one: not served.
    pub transcriber: Option<PathBuf>,
    /// Compute device (`auto`, `CPU`, `CUDA0`, `Vulkan0`, ...).
    pub device: String,
    /// CPU threads for ggml (0 = every core).
    pub threads: usize,
    /// Scheduling priority of the compute threads: `low` (nice 10), `idle` (SCHED_IDLE:
    /// they run only when nothing else wants the core) or `normal`.
    pub compute_priority: String,
    /// Largest `lm_batch_size` a request may ask for (one KV set each).
    pub max_batch: u32,
    /// KV cache length bound (0 = the model context).
    pub max_seq: u32,
    /// Keep every module resident (EVICT_NEVER) instead of one group at a time. Neither
    /// this nor `strict`: every group stays resident when the device's free memory holds
    /// them with the KV budget and a margin, else STRICT.
    pub keep_loaded: bool,
    /// One coexistence group resident at a time (STRICT), whatever the memory.
    pub strict: bool,
    /// Rows of the AR half's shared decode step: the songs (two rows each under guidance)
    /// of different jobs that decode together. 0: 8 on a CPU, 16 on a GPU; 1: one job at a
    /// time.
    pub parallel: usize,
    /// Tokens a prompt is prefilled in at most per forward: how long a song joining a
    /// running batch holds the others up.
    pub prefill_chunk: usize,
    /// Jobs admitted at once across routes, active work included.
    pub admission_cap: usize,
    /// The most of those one principal (an API key, or an address without keys) may hold;
    /// 0: half the cap, rounded up.
    pub admission_share: usize,
    /// VAE tile core frames.
    pub vae_core: u32,
    /// VAE tile halo frames.
    pub vae_halo: u32,
    /// API keys, each a keys-file line (`KEY [name=NAME] [admin|metrics]`); none at all
    /// (here, in `admin_keys` and in `api_keys_file`) = no authentication, one user.
    pub api_keys: Vec<String>,
    /// Admin keys (every job, `/logs`, `/metrics`), each a key or a keys-file line.
    pub admin_keys: Vec<String>,
    /// A keys file (one `KEY [name=NAME] [admin|metrics]` a line), re-read on SIGHUP.
    pub api_keys_file: Option<PathBuf>,
    /// A second listen address (`HOST:PORT`) that serves `/metrics` and `/health` without a
    /// key, for a scraper on an internal network; empty: none.
    pub metrics_listen: String,
    /// Host names (as a browser's `Host` header gives them, without the port) a box without
    /// keys on a loopback address also answers, besides localhost and addresses: a reverse
    /// proxy's name, when it forwards its own `Host`.
    pub allowed_hosts: Vec<String>,
    /// The address clients reach the daemon at (`https://music.example.com`), for the links
    /// it hands out (MCP's export links); empty: the request's own host.
    pub public_url: String,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// A WebSocket listener that has been sent nothing for this many seconds gets a Ping;
    /// one that has answered nothing for three times as long is closed.
    pub ws_ping_secs: u64,
    /// Bytes of the running jobs' tiles the stream hub keeps in memory for listeners who join
    /// late; beyond them, a job's tiles wait in a spool file under the data directory.
    pub stream_memory_bytes: usize,
    /// Memory the upload bodies being read at once share (at least three times `max_upload_bytes`):
    /// one that finds no room within seconds is refused with a 503.
    pub upload_memory_bytes: usize,
    /// Largest accepted `/vae` upload (audio or latents), in bytes.
    pub max_upload_bytes: usize,
    /// Results expire after this many seconds.
    pub result_ttl_secs: u64,
    /// Results are evicted oldest first beyond this many bytes.
    pub result_max_bytes: u64,
    /// ... or beyond this many results.
    pub result_max_count: usize,
    /// `text` or `json` log lines.
    pub log_format: String,
    /// The most flow-matching steps a request may ask for.
    pub max_steps: u32,
    /// Songs longer than this many seconds are cut to it (0: each family's own bound).
    pub max_duration: f64,
    /// An MCP export link (`/links/{token}`) works for this many seconds.
    pub link_ttl_secs: u64,
    /// The longest song the MCP tool `compose_song` takes, in seconds.
    pub mcp_max_seconds: f64,
    /// A NATS server with JetStream (`nats://HOST:PORT`): the queue, the job states, the
    /// live tiles and the results live there and several yued nodes share them. Empty: one
    /// node, all of it in this process (sled, memory, the results folder).
    pub cluster: String,
    /// In a cluster: `api` (the HTTP routes, no compute), `worker` (compute, with
    /// `/health` and `/metrics` only) or `all` (both).
    pub role: String,
    /// In a cluster: a worker that has not reported on a job for this many seconds is
    /// taken for dead and the job goes to another worker.
    pub cluster_ack_wait_secs: u64,
    /// In a cluster: how many times a job is started before it fails (each start after
    /// the first follows a worker that died while running it).
    pub cluster_max_attempts: u32,
    /// In a cluster: this node's name (in the job states and logs); empty: host and pid.
    pub node_name: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8087,
            data_dir: PathBuf::from("yued-data"),
            model: None,
            vae: None,
            models: None,
            adapters: None,
            tokenizer: None,
            transcriber: None,
            companion: None,
            device: "auto".into(),
            threads: 0,
            compute_priority: "low".into(),
            max_batch: 1,
            max_seq: 0,
            keep_loaded: false,
            strict: false,
            parallel: 0,
            prefill_chunk: 512,
            admission_cap: 8,
            admission_share: 0,
            vae_core: 512,
            vae_halo: 16,
            api_keys: vec![],
            admin_keys: vec![],
            api_keys_file: None,
            metrics_listen: String::new(),
            allowed_hosts: vec![],
            public_url: String::new(),
            max_body_bytes: 4 << 20,
            ws_ping_secs: 10,
            stream_memory_bytes: 256 << 20,
            upload_memory_bytes: 1 << 30,
            max_upload_bytes: 256 << 20,
            result_ttl_secs: 24 * 3600,
            result_max_bytes: 10 << 30,
            result_max_count: 256,
            log_format: "text".into(),
            max_steps: 1000,
            max_duration: 0.0,
            link_ttl_secs: 3600,
            mcp_max_seconds: 300.0,
            cluster: String::new(),
            role: "all".into(),
            cluster_ack_wait_secs: 30,
            cluster_max_attempts: 3,
            node_name: String::new(),
        }
    }
}

const KEYS: &[&str] = &[
    "host",
    "port",
    "data_dir",
    "model",
    "vae",
    "models",
    "adapters",
    "tokenizer",
    "transcriber",
    "companion",
    "device",
    "threads",
    "compute_priority",
    "max_batch",
    "max_seq",
    "keep_loaded",
    "strict",
    "parallel",
    "prefill_chunk",
    "admission_cap",
    "admission_share",
    "vae_core",
    "vae_halo",
    "api_keys",
    "admin_keys",
    "api_keys_file",
    "metrics_listen",
    "allowed_hosts",
    "public_url",
    "max_body_bytes",
    "ws_ping_secs",
    "stream_memory_bytes",
    "upload_memory_bytes",
    "max_upload_bytes",
    "result_ttl_secs",
    "result_max_bytes",
    "result_max_count",
    "log_format",
    "max_steps",
    "max_duration",
    "link_ttl_secs",
    "mcp_max_seconds",
    "cluster",
    "role",
    "cluster_ack_wait_secs",
    "cluster_max_attempts",
    "node_name",
];

/// A boolean setting's text form.
fn boolean(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

impl Config {
    /// One principal's share of the admission cap.
    pub fn share(&self) -> usize {
        if self.admission_share == 0 {
            self.admission_cap.div_ceil(2)
        } else {
            self.admission_share
        }
    }

    /// Defaults, then the TOML file if given, then the environment, checked.
    pub fn load(
        file: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let c = Self::gather(file, env)?;
        c.check()?;
        Ok(c)
    }

    /// [`Config::load`] without the checks across fields: for a caller that applies its own
    /// settings on top (the command line's flags) and checks the result (`check`).
    pub fn gather(
        file: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut c = match file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| ConfigError::File { path: p.into(), message: e.to_string() })?;
                toml::from_str(&text).map_err(|e| ConfigError::File { path: p.into(), message: e.to_string() })?
            }
            None => Config::default(),
        };
        // Host names compare lower case, however the file spells them.
        c.allowed_hosts = c.allowed_hosts.iter().map(|h| h.to_lowercase()).collect();
        for (k, v) in env {
            if let Some(name) = k.strip_prefix("YUED_") {
                let key = name.to_ascii_lowercase();
                if KEYS.contains(&key.as_str()) {
                    c.set(&key, &v)?;
                }
            }
        }
        Ok(c)
    }

    /// The `YUED_*` variables of `env` that name no setting (a misspelling is silently
    /// ignored otherwise), each with the setting's variable it may have meant. The test,
    /// benchmark and script variables (`YUED_TEST_*`, `YUED_GPU_*`, `YUED_BIN`, ...) are not
    /// settings and not reported.
    pub fn unknown_env(env: impl IntoIterator<Item = (String, String)>) -> Vec<(String, Option<String>)> {
        const OTHERS: &[&str] = &["BIN", "DATA", "JOBS", "NATS_SERVER", "QWEN_TIKTOKEN", "CACHE_DIR"];
        const OTHER_PREFIXES: &[&str] = &["TEST_", "REQUIRE_", "GPU_", "PYCLIENTS_", "CUDA_"];
        let mut out = Vec::new();
        for (k, _) in env {
            let Some(name) = k.strip_prefix("YUED_") else { continue };
            let key = name.to_ascii_lowercase();
            if KEYS.contains(&key.as_str())
                || OTHERS.contains(&name)
                || OTHER_PREFIXES.iter().any(|p| name.starts_with(p))
            {
                continue;
            }
            let near = KEYS
                .iter()
                .map(|c| (strsim::levenshtein(c, &key), c))
                .filter(|(d, _)| *d <= 2)
                .min()
                .map(|(_, c)| format!("YUED_{}", c.to_ascii_uppercase()));
            out.push((k, near));
        }
        out
    }

    /// Sets one field from its text form (environment values and flags use this).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |m: &str| ConfigError::Value { key: key.into(), message: format!("{m}: {value:?}") };
        fn num<T: std::str::FromStr>(v: &str, bad: impl Fn(&str) -> ConfigError) -> Result<T, ConfigError> {
            v.trim().parse().map_err(|_| bad("not a number"))
        }
        match key {
            "host" => self.host = value.into(),
            "port" => self.port = num(value, bad)?,
            "data_dir" => self.data_dir = value.into(),
            "model" => self.model = (!value.is_empty()).then(|| value.into()),
            "vae" => self.vae = (!value.is_empty()).then(|| value.into()),
            "models" => self.models = (!value.is_empty()).then(|| value.into()),
            "adapters" => self.adapters = (!value.is_empty()).then(|| value.into()),
            "tokenizer" => self.tokenizer = (!value.is_empty()).then(|| value.into()),
            "transcriber" => self.transcriber = (!value.is_empty()).then(|| value.into()),
            "companion" => self.companion = (!value.is_empty()).then(|| value.into()),
            "device" => self.device = value.into(),
            "threads" => self.threads = num(value, bad)?,
            "max_batch" => self.max_batch = num(value, bad)?,
            "max_seq" => self.max_seq = num(value, bad)?,
            "keep_loaded" => self.keep_loaded = boolean(value).ok_or_else(|| bad("not a boolean"))?,
            "strict" => self.strict = boolean(value).ok_or_else(|| bad("not a boolean"))?,
            "parallel" => self.parallel = num(value, bad)?,
            "prefill_chunk" => self.prefill_chunk = num(value, bad)?,
            "admission_cap" => self.admission_cap = num(value, bad)?,
            "admission_share" => self.admission_share = num(value, bad)?,
            "vae_core" => self.vae_core = num(value, bad)?,
            "vae_halo" => self.vae_halo = num(value, bad)?,
            "api_keys" => {
                self.api_keys = value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
            }
            "admin_keys" => {
                self.admin_keys = value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
            }
            "api_keys_file" => self.api_keys_file = (!value.is_empty()).then(|| value.into()),
            "metrics_listen" => self.metrics_listen = value.trim().into(),
            "public_url" => self.public_url = value.trim().trim_end_matches('/').into(),
            "allowed_hosts" => {
                self.allowed_hosts =
                    value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_lowercase).collect()
            }
            "max_body_bytes" => self.max_body_bytes = num(value, bad)?,
            "ws_ping_secs" => self.ws_ping_secs = num(value, bad)?,
            "stream_memory_bytes" => self.stream_memory_bytes = num(value, bad)?,
            "upload_memory_bytes" => self.upload_memory_bytes = num(value, bad)?,
            "max_upload_bytes" => self.max_upload_bytes = num(value, bad)?,
            "result_ttl_secs" => self.result_ttl_secs = num(value, bad)?,
            "result_max_bytes" => self.result_max_bytes = num(value, bad)?,
            "result_max_count" => self.result_max_count = num(value, bad)?,
            "log_format" => self.log_format = value.into(),
            "max_steps" => self.max_steps = num(value, bad)?,
            "max_duration" => self.max_duration = num(value, bad)?,
            "link_ttl_secs" => self.link_ttl_secs = num(value, bad)?,
            "mcp_max_seconds" => self.mcp_max_seconds = num(value, bad)?,
            "compute_priority" => self.compute_priority = value.trim().to_ascii_lowercase(),
            "cluster" => self.cluster = value.trim().into(),
            "role" => self.role = value.trim().to_ascii_lowercase(),
            "cluster_ack_wait_secs" => self.cluster_ack_wait_secs = num(value, bad)?,
            "cluster_max_attempts" => self.cluster_max_attempts = num(value, bad)?,
            "node_name" => self.node_name = value.trim().into(),
            _ => return Err(ConfigError::Value { key: key.into(), message: "unknown setting".into() }),
        }
        Ok(())
    }

    /// Cross-field checks.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |k: &str, m: &str| Err(ConfigError::Value { key: k.into(), message: m.into() });
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1");
        }
        if self.admission_cap == 0 {
            return bad("admission_cap", "must be at least 1");
        }
        if self.admission_share > self.admission_cap {
            return bad("admission_share", "must be at most admission_cap (0: half of it)");
        }
        if !self.metrics_listen.is_empty() && self.metrics_listen.parse::<std::net::SocketAddr>().is_err() {
            return bad("metrics_listen", "must be HOST:PORT with an IP address, e.g. 127.0.0.1:9187");
        }
        if self.ws_ping_secs == 0 {
            return bad("ws_ping_secs", "must be at least 1");
        }
        let web = self.public_url.starts_with("http://") || self.public_url.starts_with("https://");
        if !self.public_url.is_empty() && !web {
            return bad("public_url", "must start with http:// or https:// (e.g. https://music.example.com)");
        }
        if self.max_steps < 2 {
            return bad("max_steps", "must be at least 2 (MiniMax Music 3's fewest)");
        }
        if !(self.max_duration.is_finite() && self.max_duration >= 0.0) {
            return bad("max_duration", "must be 0 (no bound) or a positive number of seconds");
        }
        if !(self.mcp_max_seconds.is_finite() && self.mcp_max_seconds > 0.0) {
            return bad("mcp_max_seconds", "must be a positive number of seconds");
        }
        if self.vae_core == 0 {
            return bad("vae_core", "must be at least 1");
        }
        if self.keep_loaded && self.strict {
            return bad("strict", "keep_loaded and strict force opposite residencies: give one");
        }
        if self.prefill_chunk == 0 {
            return bad("prefill_chunk", "must be at least 1");
        }
        if !["text", "json"].contains(&self.log_format.as_str()) {
            return bad("log_format", "must be text or json");
        }
        if !["low", "idle", "normal"].contains(&self.compute_priority.as_str()) {
            return bad("compute_priority", "must be low, idle or normal");
        }
        if !["api", "worker", "all"].contains(&self.role.as_str()) {
            return bad("role", "must be api, worker or all");
        }
        if self.role != "all" && self.cluster.is_empty() {
            return bad("role", "api and worker are cluster roles: give --cluster nats://HOST:PORT");
        }
        if !(self.cluster.is_empty() || self.cluster.starts_with("nats://") || self.cluster.starts_with("tls://")) {
            return bad("cluster", "must be a NATS address, nats://HOST:PORT");
        }
        if self.cluster_ack_wait_secs < 2 {
            return bad("cluster_ack_wait_secs", "must be at least 2");
        }
        if self.cluster_max_attempts == 0 {
            return bad("cluster_max_attempts", "must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y.toml");
        std::fs::write(&p, "port = 9000\nmax_batch = 4\nhost = \"0.0.0.0\"\n").unwrap();
        let env = vec![
            ("YUED_PORT".to_string(), "9100".to_string()),
            ("YUED_API_KEYS".into(), "a, b".into()),
            ("OTHER".into(), "x".into()),
        ];
        let mut c = Config::load(Some(&p), env).unwrap();
        assert_eq!(c.port, 9100);
        assert_eq!(c.max_batch, 4);
        assert_eq!(c.host, "0.0.0.0");
        assert_eq!(c.api_keys, vec!["a", "b"]);
        assert_eq!((c.admission_cap, c.share()), (8, 4), "half the cap by default");
        c.set("admission_share", "8").unwrap();
        assert_eq!(c.share(), 8);
        c.set("admission_share", "9").unwrap();
        assert!(c.check().unwrap_err().to_string().starts_with("admission_share:"));
        c.set("port", "9200").unwrap();
        assert_eq!(c.port, 9200);
    }

    #[test]
    fn misspelt_environment_variables_are_named_with_what_they_may_mean() {
        let env = |pairs: &[&str]| pairs.iter().map(|k| (k.to_string(), "1".to_string())).collect::<Vec<_>>();
        let got = Config::unknown_env(env(&["YUED_PRT", "YUED_MAXBATCH", "YUED_PORT", "YUED_TEST_PANIC", "PATH"]));
        assert_eq!(
            got,
            vec![
                ("YUED_PRT".to_string(), Some("YUED_PORT".to_string())),
                ("YUED_MAXBATCH".to_string(), Some("YUED_MAX_BATCH".to_string()))
            ]
        );
        assert_eq!(Config::unknown_env(env(&["YUED_WHATEVER_ELSE"])), vec![("YUED_WHATEVER_ELSE".to_string(), None)]);
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = Config::load(None, vec![("YUED_PORT".to_string(), "http".to_string())]).unwrap_err().to_string();
        assert!(e.starts_with("port:"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y.toml");
        std::fs::write(&p, "prot = 1\n").unwrap();
        let e = Config::load(Some(&p), vec![]).unwrap_err().to_string();
        assert!(e.contains("y.toml") && e.contains("prot"), "{e}");
        let e = Config::load(None, vec![("YUED_MAX_BATCH".to_string(), "0".to_string())]).unwrap_err().to_string();
        assert!(e.contains("max_batch"), "{e}");
        assert!(Config::default().set("nope", "1").is_err());
        let e = Config::load(None, vec![("YUED_COMPUTE_PRIORITY".to_string(), "realtime".to_string())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("compute_priority"), "{e}");
        let c = Config::load(None, vec![("YUED_COMPUTE_PRIORITY".to_string(), " Idle".to_string())]).unwrap();
        assert_eq!(c.compute_priority, "idle");
        assert_eq!(Config::default().compute_priority, "low");
        let e = Config::load(None, vec![("YUED_PUBLIC_URL".to_string(), "music.lan".to_string())]).unwrap_err();
        assert!(e.to_string().starts_with("public_url:"), "{e}");
        let c = Config::load(None, vec![("YUED_PUBLIC_URL".to_string(), "https://music.lan/".to_string())]).unwrap();
        assert_eq!(c.public_url, "https://music.lan");
        let e = Config::load(None, vec![("YUED_ROLE".to_string(), "worker".to_string())]).unwrap_err().to_string();
        assert!(e.starts_with("role:") && e.contains("--cluster"), "{e}");
        let e = Config::load(None, vec![("YUED_CLUSTER".to_string(), "localhost:4222".to_string())])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cluster:"), "{e}");
        let c = Config::load(
            None,
            vec![
                ("YUED_CLUSTER".to_string(), "nats://127.0.0.1:4222".to_string()),
                ("YUED_ROLE".to_string(), "API".to_string()),
            ],
        )
        .unwrap();
        assert_eq!((c.cluster.as_str(), c.role.as_str()), ("nats://127.0.0.1:4222", "api"));
    }
}
