//! `yued serve`: the daemon. Wires the actors (scheduler with its journal, compute worker,
//! stream hub, result store, metrics) to the HTTP routes, and shuts down cleanly on
//! SIGINT/SIGTERM: stop accepting, cancel the running job through its token (it stays
//! queued in the journal and resumes at the next start), flush, exit.
use crate::http::{self, AppState};
use crate::logs::LogRing;
use crate::{links, mcp, openai, tickets, webui, ws};
use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::middleware::{from_fn, Compress, ErrorHandlerResponse, ErrorHandlers};
use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use yued_actors::{Node, NodeConfig, WorkerConfig};
use yued_cluster::api::NatsBackend;
use yued_cluster::metrics::ClusterMetrics;
use yued_cluster::{Cluster, ClusterConfig, Role};
use yued_config::Config;
use yued_contract::metrics::Metrics;
use yued_contract::results::{ResultStore, Retention};
use yued_engine::gguf::GgufFile;
use yued_engine::models::audio_tokenizer::pipeline::AudioTokenizer;
use yued_engine::models::sheetsage2::pipeline::Transcriber;
use yued_engine::models::yue2::adapter::{shapes_of, Adapter, AdapterDir};
use yued_engine::models::yue2::config::BackboneInfo;
use yued_engine::models::yue2::demo::{write_demo, Preset, DEMO_KEY};
use yued_engine::models::yue2::pipeline::PipelineOptions;
use yued_engine::registry::{Bucket, Registry};
use yued_engine::tokenizer::BpeTokenizer;
use yued_protocol::props::AdapterInfo;
use yued_protocol::{Limits, Props};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file (flags and YUED_* variables override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Backbone GGUF (default: the tiny demo model, created in the data directory).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// VAE GGUF (default: the demo VAE).
    #[arg(long)]
    pub vae: Option<PathBuf>,
    /// A directory of model files: every GGUF is sorted by its `general.architecture`
    /// (yue2, yue2-vae; MiniMax Music 3's mm3-lm, mm3-depth, mm3-cond, mm3-dit, mm3-vae) and
    /// the first of each bucket in name order is served; --model/--vae name YuE2's pair
    /// over it (MiniMax Music 3 still comes from the directory).
    #[arg(long)]
    pub models: Option<PathBuf>,
    /// A directory of LoRA adapters for YuE2 (every .safetensors file and every folder holding
    /// one; PEFT, ComfyUI, native, slider and bundled layouts): a request stacks them with
    /// `adapters: [{name, scale}]`, merged into the backbone halves each changes at load.
    #[arg(long)]
    pub adapters: Option<PathBuf>,
    /// The audio tokenizer head GGUF (`yue2-tokenizer`), with its MERT-v2 file beside it in
    /// the same quant: serves `POST /tokenize` (a recording to the 25 Hz semantic codes a
    /// YuE2 request's semantic_tokens or source_tokens take). Default: the tiny listening demo
    /// when no --model is given, else not served.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// The SheetSage2 transcriber head GGUF (`sheetsage2`), with its MERT-v2 file beside it
    /// in the same quant: serves `POST /transcribe` and `POST /v1/audio/transcriptions` (a
    /// recording to the ABC score a YuE2 request's abc takes). Default: the tiny listening
    /// demo's when no --model is given, else not served.
    #[arg(long)]
    pub transcriber: Option<PathBuf>,
    /// A NAR-only adapter (a .safetensors file, or a folder holding one) merged into YuE2's
    /// NAR half under every render at the request's companion_scale (0 to 2, default 1): the
    /// adapter trained with the audio tokenizer (nar_lora_joint_v9), so re-rendered recordings
    /// sound right. A request naming the same file in its adapters merges it once.
    #[arg(long)]
    pub companion: Option<PathBuf>,
    /// Listen address (default 127.0.0.1).
    #[arg(long)]
    pub host: Option<String>,
    /// Listen port (default 8087).
    #[arg(long)]
    pub port: Option<u16>,
    /// Data directory: demo model, journal, results (default ./yued-data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Compute device: auto (default: the first GPU the build has, else the CPU), CPU, CUDA0,
    /// Vulkan0, MTL0 (a GPU needs a build with its feature, e.g. `--features cuda`).
    #[arg(long)]
    pub device: Option<String>,
    /// Largest lm_batch_size a request may use (one KV set per song; default 1).
    #[arg(long)]
    pub max_batch: Option<u32>,
    /// KV cache length bound in tokens (0 = the model context).
    #[arg(long)]
    pub max_seq: Option<u32>,
    /// Keep every module resident instead of one group at a time (default: every group
    /// stays resident when the device's free memory holds the weights, the KV cache of
    /// --parallel rows at the full context and a margin; else one group at a time).
    #[arg(long, conflicts_with = "strict")]
    pub keep_loaded: bool,
    /// One coexistence group resident at a time (STRICT: the AR half and the synthesis
    /// group swap for every job), whatever the memory.
    #[arg(long)]
    pub strict: bool,
    /// Rows of the AR half's shared decode step, as llama.cpp's slots: songs of different
    /// jobs and clients decode together (a song takes two rows under guidance; a job joins
    /// when its rows fit). Default 0: 8 on a CPU, 16 on a GPU; 1: one job at a time. The KV
    /// memory it implies is in /props.
    #[arg(long)]
    pub parallel: Option<usize>,
    /// Tokens a prompt is prefilled in at most per forward (default 512): a song joining a
    /// running batch holds the others up by one such piece at a time (a piece costs its
    /// tokens' prefill: on a CPU-only box at the full size, 64 keeps it to seconds).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Jobs admitted at once across routes, active work included (default 8).
    #[arg(long)]
    pub admission_cap: Option<usize>,
    /// The most of those one principal (an API key, or an address on a box without keys)
    /// may hold at once; past it that client gets 429 while others still get in (default
    /// 0: half the cap, rounded up).
    #[arg(long)]
    pub admission_share: Option<usize>,
    /// An API key clients must present (repeatable): `KEY` or a keys-file line `KEY
    /// name=NAME`. A key sees only its own jobs. No key at all (here, --admin-key,
    /// --api-keys-file) = a single-user box, open to whoever reaches the port (an
    /// --api-keys-file that holds no key refuses to start). A key on the command line is
    /// visible to local users in `ps`: prefer --api-keys-file.
    #[arg(long = "api-key")]
    pub api_keys: Vec<String>,
    /// An admin key (repeatable): every principal's jobs, /logs, /jobs?all=1 and /metrics.
    #[arg(long = "admin-key")]
    pub admin_keys: Vec<String>,
    /// A keys file, one `KEY [name=NAME] [admin|metrics]` a line (`#` comments), re-read on
    /// SIGHUP: added keys work and removed ones get 401 from then on, without a restart.
    /// A job belongs to its key's name (else a short hash of the key). A `metrics` key may
    /// only scrape /metrics.
    #[arg(long)]
    pub api_keys_file: Option<PathBuf>,
    /// Also listen on HOST:PORT for /metrics and /health only, without a key: for a
    /// Prometheus on an internal network (the main port's /metrics needs an admin or a
    /// metrics key whenever keys are configured).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// A host name (repeatable) a daemon without keys on a loopback --host also answers, e.g. a
    /// reverse proxy's that forwards its own Host. Otherwise such a daemon answers only
    /// localhost and addresses: a web page that points its own name at 127.0.0.1 (DNS
    /// rebinding) must not read a box that has no keys.
    #[arg(long = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// The address clients reach this daemon at, e.g. https://music.example.com behind a
    /// reverse proxy: the links it hands out (MCP's song_result) start with it. Default: the
    /// request's own host (from its Host or X-Forwarded-Host header).
    #[arg(long)]
    pub public_url: Option<String>,
    /// CPU threads for ggml (default 0: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Scheduling priority of the compute threads: low (nice 10, default), idle
    /// (SCHED_IDLE: lowest HTTP latency while rendering on a CPU-only box; other busy
    /// programs slow the songs down) or normal.
    #[arg(long, value_parser = ["low", "idle", "normal"])]
    pub compute_priority: Option<String>,
    /// VAE tile core frames (default 512): the latent frames each decoded tile contributes
    /// to the song. Smaller tiles stream sooner and take less memory; each tile costs its
    /// halo again.
    #[arg(long)]
    pub vae_core: Option<u32>,
    /// VAE tile halo frames (default 16): context decoded on each side of a tile's core and
    /// thrown away, so that tiles join without seams.
    #[arg(long)]
    pub vae_halo: Option<u32>,
    /// `text` (default) or `json` log lines.
    #[arg(long)]
    pub log_format: Option<String>,
    /// Largest upload in bytes (`/vae`, `/tokenize`, `/transcribe`,
    /// `/v1/audio/transcriptions`; default 256 MiB).
    #[arg(long)]
    pub max_upload_bytes: Option<usize>,
    /// Bytes of the running jobs' audio kept in memory for listeners who join late (default
    /// 256 MiB, across jobs); beyond them, each job's tiles wait in an unnamed file under
    /// <data-dir>/streams until the job ends (a job whose file cannot be written keeps them in
    /// memory, logged).
    #[arg(long)]
    pub stream_memory_bytes: Option<usize>,
    /// Memory the upload bodies being read at once share (default 1 GiB, and at least three
    /// times --max-upload-bytes): each takes three times its declared length (the bound when it
    /// declares none) until its job is stored; one that finds no room within 10 s is a 503
    /// with Retry-After, one that sends nothing for 30 s a 408.
    #[arg(long)]
    pub upload_memory_bytes: Option<usize>,
    /// Most flow-matching steps a request may ask for (default 1000): a bound on the work
    /// one request can queue.
    #[arg(long)]
    pub max_steps: Option<u32>,
    /// Songs longer than this many seconds are cut to it, as the families' own budgets cut
    /// them (default 0: no daemon bound).
    #[arg(long)]
    pub max_duration: Option<f64>,
    /// Join a cluster on this NATS server (JetStream on): `nats://HOST:PORT`. The queue, the
    /// job states, the live tiles and the results then live there, shared by every node;
    /// without it yued is one node with all of that in its own process.
    #[arg(long)]
    pub cluster: Option<String>,
    /// A cluster node's part: `api` (the HTTP routes, no compute), `worker` (compute; only
    /// /health, /metrics and /props over HTTP) or `all` (both; the default).
    #[arg(long, value_parser = ["api", "worker", "all"])]
    pub role: Option<String>,
    /// In a cluster: seconds a worker may stay silent on a job before the job goes to
    /// another worker (default 30; it reports every 2 s or a third of this).
    #[arg(long)]
    pub cluster_ack_wait_secs: Option<u64>,
    /// In a cluster: starts of a job whose worker stopped answering (killed, crashed, cut off)
    /// before it fails (default 3); a job a stopping worker hands back costs none.
    #[arg(long)]
    pub cluster_max_attempts: Option<u32>,
    /// In a cluster: this node's name (default: host name and process id).
    #[arg(long)]
    pub node_name: Option<String>,
}

impl ServeArgs {
    fn config(&self) -> anyhow::Result<Config> {
        // Checked once the flags are on top (a flag may settle what the file alone would not).
        let mut c = Config::gather(self.config.as_deref(), std::env::vars())?;
        let mut set = |k: &str, v: Option<String>| -> anyhow::Result<()> {
            if let Some(v) = v {
                c.set(k, &v)?;
            }
            Ok(())
        };
        set("model", self.model.as_ref().map(|p| p.display().to_string()))?;
        set("vae", self.vae.as_ref().map(|p| p.display().to_string()))?;
        set("models", self.models.as_ref().map(|p| p.display().to_string()))?;
        set("adapters", self.adapters.as_ref().map(|p| p.display().to_string()))?;
        set("tokenizer", self.tokenizer.as_ref().map(|p| p.display().to_string()))?;
        set("transcriber", self.transcriber.as_ref().map(|p| p.display().to_string()))?;
        set("companion", self.companion.as_ref().map(|p| p.display().to_string()))?;
        set("host", self.host.clone())?;
        set("port", self.port.map(|p| p.to_string()))?;
        set("data_dir", self.data_dir.as_ref().map(|p| p.display().to_string()))?;
        set("device", self.device.clone())?;
        set("max_batch", self.max_batch.map(|v| v.to_string()))?;
        set("max_seq", self.max_seq.map(|v| v.to_string()))?;
        set("parallel", self.parallel.map(|v| v.to_string()))?;
        set("prefill_chunk", self.prefill_chunk.map(|v| v.to_string()))?;
        set("log_format", self.log_format.clone())?;
        set("admission_cap", self.admission_cap.map(|v| v.to_string()))?;
        set("admission_share", self.admission_share.map(|v| v.to_string()))?;
        set("api_keys_file", self.api_keys_file.as_ref().map(|p| p.display().to_string()))?;
        set("metrics_listen", self.metrics_listen.clone())?;
        set("threads", self.threads.map(|v| v.to_string()))?;
        set("compute_priority", self.compute_priority.clone())?;
        set("vae_core", self.vae_core.map(|v| v.to_string()))?;
        set("vae_halo", self.vae_halo.map(|v| v.to_string()))?;
        set("max_upload_bytes", self.max_upload_bytes.map(|v| v.to_string()))?;
        set("stream_memory_bytes", self.stream_memory_bytes.map(|v| v.to_string()))?;
        set("upload_memory_bytes", self.upload_memory_bytes.map(|v| v.to_string()))?;
        set("max_steps", self.max_steps.map(|v| v.to_string()))?;
        set("max_duration", self.max_duration.map(|v| v.to_string()))?;
        set("cluster", self.cluster.clone())?;
        set("role", self.role.clone())?;
        set("cluster_ack_wait_secs", self.cluster_ack_wait_secs.map(|v| v.to_string()))?;
        set("cluster_max_attempts", self.cluster_max_attempts.map(|v| v.to_string()))?;
        set("node_name", self.node_name.clone())?;
        set("public_url", self.public_url.clone())?;
        if self.keep_loaded || self.strict {
            // The residency flag wins over the file's and the environment's (both flags at
            // once are refused by the check).
            c.keep_loaded = self.keep_loaded;
            c.strict = self.strict;
        }
        c.api_keys.extend(self.api_keys.iter().cloned());
        c.admin_keys.extend(self.admin_keys.iter().cloned());
        c.allowed_hosts.extend(self.allowed_hosts.iter().map(|h| h.to_lowercase()));
        c.check()?;
        Ok(c)
    }
}

fn init_tracing(format: &str, ring: &LogRing) {
    // symphonia's probe logs an upload that is no audio as an error of its own: the client's
    // 400 says it, the daemon's log need not.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,actix_server=warn,symphonia_core::probe=off".into());
    let registry = tracing_subscriber::registry().with(filter).with(ring.clone());
    if format == "json" {
        registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).init();
    } else {
        // Colours only on a terminal (a log file or journald gets plain text), and never
        // under NO_COLOR.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        registry.with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).init();
    }
}

/// Model paths after resolving the demo default.
struct Models {
    model: PathBuf,
    vae: PathBuf,
    info: BackboneInfo,
    demo: Option<String>,
    audio: yued_engine::models::AudioSpec,
    vae_has_encoder: bool,
    tokenizer: BpeTokenizer,
    instructions: yued_engine::models::yue2::prompt::Instructions,
    /// MiniMax Music 3, when its LM and depth decoder are in the registry.
    mm3: Option<crate::state::Mm3Check>,
    /// The audio tokenizer head (`--tokenizer`, or the listening demo's), checked.
    audio_tokenizer: Option<PathBuf>,
    /// The transcriber head (`--transcriber`, or the listening demo's), checked.
    transcriber: Option<PathBuf>,
}

/// The MiniMax Music 3 side of a registry: served when each of its five buckets has a file.
fn mm3_check(reg: &Registry) -> anyhow::Result<Option<crate::state::Mm3Check>> {
    use yued_engine::models::mm3::{config, lm};
    let missing: Vec<&str> = Bucket::MM3.iter().filter(|&&b| reg.entries(b).is_empty()).map(|b| b.arch()).collect();
    if missing.len() == Bucket::MM3.len() {
        return Ok(None);
    }
    if !missing.is_empty() {
        tracing::warn!(missing = %missing.join(", "), "MiniMax Music 3 files are registered but not all five \
            components: it is not served");
        return Ok(None);
    }
    let (lm_entry, depth_entry) = (
        reg.resolve(Bucket::Mm3Lm, "").map_err(|e| anyhow::anyhow!(e))?,
        reg.resolve(Bucket::Mm3Depth, "").map_err(|e| anyhow::anyhow!(e))?,
    );
    let f = GgufFile::open(&lm_entry.path)?;
    let info = config::LmInfo::read(&f)?;
    let tokenizer = lm::tokenizer(&f, &info)?;
    let df = GgufFile::open(&depth_entry.path)?;
    let depth = config::DepthConfig::from_gguf(&df)?;
    let codebooks =
        yued_protocol::Mm3Codebooks { semantic: info.tokens.semantic_size, acoustic: depth.audio_vocab_size as u32 };
    Ok(Some(crate::state::Mm3Check { registry: reg.clone(), tokenizer, tokens: info.tokens, codebooks }))
}

fn resolve_models(c: &Config) -> anyhow::Result<Models> {
    let mut mm3 = None;
    let mut audio_tokenizer = c.tokenizer.clone();
    let mut transcriber = c.transcriber.clone();
    // --models: the registry (MiniMax Music 3 from it; YuE2 too, unless --model/--vae name it).
    let registry = match &c.models {
        Some(dir) => {
            let (reg, skipped) = Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
            for s in &skipped {
                tracing::warn!(file = %s.path.display(), reason = %s.reason, "model file skipped");
            }
            for b in Bucket::ALL {
                for e in reg.entries(b) {
                    tracing::info!(bucket = b.arch(), file = %e.name, "model file");
                }
            }
            mm3 = mm3_check(&reg)?;
            Some((dir, reg))
        }
        None => None,
    };
    let (model, vae) = match (&c.model, &c.vae) {
        (Some(m), Some(v)) => (m.clone(), v.clone()),
        (None, None) if registry.is_some() => {
            let (dir, reg) = registry.as_ref().expect("checked");
            let pick = |b: Bucket| {
                reg.resolve(b, "").map(|e| e.path.clone()).map_err(|e| {
                    anyhow::anyhow!("--models {}: {e} (or name YuE2's pair with --model and --vae)", dir.display())
                })
            };
            (pick(Bucket::Yue2)?, pick(Bucket::Yue2Vae)?)
        }
        (None, None) => {
            let dir = c.data_dir.join("models");
            // What a start killed while it wrote the demo left behind.
            let partials = yued_engine::gguf::remove_partials(&dir);
            if partials > 0 {
                tracing::info!(partials, dir = %dir.display(), "removed partial model files of an interrupted start");
            }
            let (m, v) = (dir.join("yue2-demo-tiny.gguf"), dir.join("yue2-demo-tiny-vae.gguf"));
            if !(m.exists() && v.exists()) {
                tracing::warn!(dir = %dir.display(), "no --model given: writing the tiny demo model (random weights)");
                write_demo(&dir, Preset::Tiny, 0, &mut |_, _| {}).context("writing the demo model")?;
            }
            if !["lm", "depth", "cond", "dit", "vae"]
                .iter()
                .all(|c| dir.join(format!("mm3-demo-tiny-{c}.gguf")).exists())
            {
                tracing::warn!(dir = %dir.display(), "writing the tiny MiniMax Music 3 demo (random weights)");
                yued_engine::models::mm3::demo::write_demo(&dir, Preset::Tiny, 0, &mut |_, _| {})
                    .context("writing the MiniMax Music 3 demo")?;
            }
            let (reg, _) = Registry::scan(&dir).with_context(|| format!("scanning {}", dir.display()))?;
            mm3 = mm3_check(&reg)?;
            let (demo_tokenizer, demo_transcriber) = listening_demo(&dir)?;
            audio_tokenizer = audio_tokenizer.or(Some(demo_tokenizer));
            transcriber = transcriber.or(Some(demo_transcriber));
            (m, v)
        }
        _ => anyhow::bail!("--model and --vae go together (or neither, for the demo model)"),
    };
    let f = GgufFile::open(&model)?;
    for (path, file, want) in [(&model, &f, Bucket::Yue2), (&vae, &GgufFile::open(&vae)?, Bucket::Yue2Vae)] {
        let arch = file.get_str("general.architecture")?;
        anyhow::ensure!(
            arch == want.arch(),
            "{}: a '{arch}' model where a '{}' one belongs",
            path.display(),
            want.arch()
        );
    }
    let info = BackboneInfo::from_gguf(&f)?;
    let tokenizer = BpeTokenizer::from_gguf(&f)?;
    let instructions = yued_engine::models::yue2::prompt::Instructions::from_gguf(&f);
    let vf = GgufFile::open(&vae)?;
    let vae_info = yued_engine::models::yue2::vae::VaeModel::info(&vf)?;
    let demo = f.get(DEMO_KEY).and_then(|v| v.as_str()).map(String::from);
    if let Some(head) = &audio_tokenizer {
        let (_, mert) = AudioTokenizer::files(head).with_context(|| format!("--tokenizer {}", head.display()))?;
        tracing::info!(head = %head.display(), mert = %mert.display(), "audio tokenizer: /tokenize is served");
    }
    if let Some(head) = &transcriber {
        let (_, mert) = Transcriber::files(head).with_context(|| format!("--transcriber {}", head.display()))?;
        anyhow::ensure!(mert.is_file(), "--transcriber {}: expects {} beside it", head.display(), mert.display());
        tracing::info!(head = %head.display(), mert = %mert.display(), "transcriber: /transcribe is served");
    }
    Ok(Models {
        model,
        vae,
        info,
        demo,
        audio: vae_info.audio_spec(),
        vae_has_encoder: vae_info.has_encoder,
        tokenizer,
        instructions,
        mm3,
        audio_tokenizer,
        transcriber,
    })
}

/// The tiny listening demo in `dir` (written on first start): the tokenizer's and the
/// transcriber's heads.
fn listening_demo(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let head = dir.join("yue2-tokenizer-demo-tiny-F32.gguf");
    let transcriber = dir.join("SheetSage2-demo-tiny-F32.gguf");
    if !transcriber.exists() {
        tracing::warn!(dir = %dir.display(), "writing the tiny transcriber demo (a SheetSage2 head; random weights)");
        yued_engine::models::sheetsage2::demo::write_demo(dir, Preset::Tiny, 0)
            .context("writing the transcriber demo")?;
    }
    if !(head.exists() && dir.join("MERT-v2-demo-tiny-F32.gguf").exists()) {
        tracing::warn!(dir = %dir.display(), "writing the tiny listening demo (MERT-v2, a head; random weights)");
        let (_, written) = yued_engine::models::audio_tokenizer::demo::write_demo(dir, Preset::Tiny, 0, &mut |_, _| {})
            .context("writing the listening demo")?;
        anyhow::ensure!(
            written == head,
            "the listening demo wrote {} where {} was expected",
            written.display(),
            head.display()
        );
    }
    Ok((head, transcriber))
}

/// Errors produced by actix itself (oversized bodies, bad query strings) as JSON too.
fn json_error<B: MessageBody + 'static>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let status = res.status();
    let is_json = res
        .response()
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let msg = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "request body too large".to_string(),
        s => s.canonical_reason().unwrap_or("error").to_lowercase(),
    };
    let (req, _) = res.into_parts();
    let resp = if req.path().starts_with("/v1/") {
        // OpenAI's routes answer in OpenAI's shape (its SDKs read `error.message`).
        let kind = crate::openai::openai_type(status);
        HttpResponse::build(status)
            .json(serde_json::json!({"error": {"message": msg, "type": kind, "param": null, "code": null}}))
    } else {
        crate::reply::error(status, msg)
    };
    Ok(ErrorHandlerResponse::Response(ServiceResponse::new(req, resp).map_into_right_body()))
}

/// A 405 with the `Allow` header RFC 9110 requires: the methods the route takes.
fn method_not_allowed(allow: &'static str) -> actix_web::Route {
    web::to(move |req: actix_web::HttpRequest| async move {
        let msg = format!("method not allowed on this route (it takes {allow})");
        let mut r = if req.path().starts_with("/v1/") {
            openai::route_error(StatusCode::METHOD_NOT_ALLOWED, msg)
        } else {
            crate::reply::error(StatusCode::METHOD_NOT_ALLOWED, msg)
        };
        r.headers_mut()
            .insert(actix_web::http::header::ALLOW, actix_web::http::header::HeaderValue::from_static(allow));
        r
    })
}

/// Creates the data directory readable by this user only (results, the journal, the uploads
/// and the export links' tokens are there); one that exists open to others is named in a
/// warning (it may be shared on purpose).
fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let mode = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{:o}", mode & 0o777),
            "the data directory is open to other users of this machine: every tenant's results, the journal and the \
            export links' tokens are in it (chmod 700 it unless it is shared on purpose)"
        );
    }
    Ok(())
}

/// The routes: `/health`, `/metrics` and `/props` on every node; the rest where the node
/// serves the API (not on a cluster's worker-only node).
fn routes(s: &mut web::ServiceConfig, serves_api: bool) {
    s.service(web::resource("/health").route(web::get().to(http::health)).default_service(method_not_allowed("GET")));
    s.service(web::resource("/props").route(web::get().to(http::props)).default_service(method_not_allowed("GET")));
    s.service(web::resource("/metrics").route(web::get().to(http::metrics)).default_service(method_not_allowed("GET")));
    if !serves_api {
        return;
    }
    s.service(
        web::resource("/")
            .wrap(Compress::default())
            .route(web::get().to(webui::index))
            .default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/assets/{name}")
            .wrap(Compress::default())
            .route(web::get().to(webui::assets))
            .default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/docs")
            .wrap(Compress::default())
            .route(web::get().to(webui::docs))
            .default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/docs/{name}")
            .wrap(Compress::default())
            .route(web::get().to(webui::docs_assets))
            .default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/synth").route(web::post().to(http::post_synth)).default_service(method_not_allowed("POST")),
    );
    s.service(web::resource("/vae").route(web::post().to(http::post_vae)).default_service(method_not_allowed("POST")));
    s.service(
        web::resource("/tokenize")
            .route(web::post().to(http::post_tokenize))
            .default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/transcribe")
            .route(web::post().to(http::post_transcribe))
            .default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/job")
            .route(web::get().to(http::get_job))
            .route(web::post().to(http::post_job))
            .default_service(method_not_allowed("GET, POST")),
    );
    s.service(web::resource("/jobs").route(web::get().to(http::get_jobs)).default_service(method_not_allowed("GET")));
    s.service(web::resource("/status").route(web::get().to(http::status)).default_service(method_not_allowed("GET")));
    s.service(
        web::resource("/system/queue").route(web::get().to(http::status)).default_service(method_not_allowed("GET")),
    );
    s.service(web::resource("/logs").route(web::get().to(http::logs)).default_service(method_not_allowed("GET")));
    s.service(
        web::resource("/openapi.json").route(web::get().to(http::openapi)).default_service(method_not_allowed("GET")),
    );
    s.service(web::resource("/stream").route(web::get().to(ws::stream)).default_service(method_not_allowed("GET")));
    s.service(
        web::resource("/tickets").route(web::post().to(tickets::post)).default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/synth/stream")
            .route(web::get().to(ws::synth_stream))
            .default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/v1/models").route(web::get().to(openai::models)).default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/v1/models/{id}").route(web::get().to(openai::model)).default_service(method_not_allowed("GET")),
    );
    s.service(
        web::resource("/v1/audio/speech")
            .route(web::post().to(openai::speech))
            .default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/v1/audio/transcriptions")
            .route(web::post().to(openai::transcriptions))
            .default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/v1/audio/music")
            .route(web::post().to(openai::music))
            .default_service(method_not_allowed("POST")),
    );
    s.service(
        web::resource("/mcp")
            .route(web::post().to(mcp::post))
            .route(web::delete().to(mcp::delete))
            .default_service(method_not_allowed("POST, DELETE")),
    );
    s.service(
        web::resource("/links/{token}").route(web::get().to(mcp::link)).default_service(method_not_allowed("GET")),
    );
}

async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    if req.path().starts_with("/v1/") {
        return openai::route_error(StatusCode::NOT_FOUND, format!("no such route: {}", req.path()));
    }
    crate::reply::error(StatusCode::NOT_FOUND, "no such route")
}

/// The results folder's limits.
fn retention(c: &Config) -> Retention {
    Retention { ttl_secs: c.result_ttl_secs, max_bytes: c.result_max_bytes, max_count: c.result_max_count }
}

/// The API keys, with a word in the log on what they mean.
fn open_keys(c: &Config) -> anyhow::Result<(crate::auth::KeySource, yued_contract::tenancy::KeyTable)> {
    let source = crate::auth::KeySource {
        users: c.api_keys.clone(),
        admins: c.admin_keys.clone(),
        file: c.api_keys_file.clone(),
    };
    let table = source.load()?;
    if table.is_empty() {
        if let Some(file) = &c.api_keys_file {
            // Keys were asked for: a file without any must not open the box to anyone.
            anyhow::bail!(
                "{}: no keys in this file (one `KEY [name=NAME] [admin|metrics]` a line); without keys, give \
                no --api-keys-file",
                file.display()
            );
        }
        tracing::warn!(host = %c.host, "no API keys: a single-user box, every job open to whoever reaches the port");
    } else {
        let admins = table.principals().filter(|p| p.is_admin()).count();
        tracing::info!(keys = table.len(), admins, "API keys: each key sees only its own jobs");
    }
    Ok((source, table))
}

/// `/props`: the served files and bounds, MiniMax Music 3's section when it is served.
fn props_of(c: &Config, models: &Models, context: usize) -> Props {
    let mut props = Props::new(
        env!("CARGO_PKG_VERSION"),
        models.model.display().to_string(),
        models.vae.display().to_string(),
        c.max_batch,
    );
    props.context = context as u32;
    props.parallel = parallel_rows(c) as u32;
    props.batch_kv_bytes = (kv_bytes_per_row(models, context) * parallel_rows(c)) as u64;
    props.tokenizer = models.audio_tokenizer.as_ref().map(|p| p.display().to_string());
    props.transcriber = models.transcriber.as_ref().map(|p| p.display().to_string());
    if let Some(m) = &models.mm3 {
        props.families = Some(vec![yued_protocol::Family::Yue2, yued_protocol::Family::Mm3]);
        let files = Bucket::MM3
            .iter()
            .map(|&b| (b.arch().to_string(), m.registry.entries(b).iter().map(|e| e.name.clone()).collect()))
            .collect();
        props.mm3 = Some(yued_protocol::props::Mm3Props {
            models: files,
            sample_rate: yued_protocol::request::mm3::SAMPLE_RATE,
            frame_rate: yued_protocol::request::mm3::FRAME_RATE,
            defaults: yued_protocol::Mm3Request::default(),
        });
    }
    // A lower --max-steps is the default steps a request that names none gets.
    props.defaults.steps = props.defaults.steps.min(c.max_steps.max(1));
    if let Some(m) = props.mm3.as_mut() {
        m.defaults.steps = m.defaults.steps.min(c.max_steps.max(yued_protocol::request::mm3::MIN_STEPS));
    }
    props
}

/// The `--companion` adapter read against the backbone: NAR-only, listed in `/props`.
fn open_companion(c: &Config, models: &Models, props: &mut Props) -> anyhow::Result<Option<Arc<Adapter>>> {
    let Some(path) = &c.companion else { return Ok(None) };
    let a = yued_engine::models::yue2::adapter::open_companion(path, &models.model)
        .map_err(|e| anyhow::anyhow!("--companion {}: {e}", path.display()))?;
    tracing::info!(adapter = %a.name, rank = a.rank, tensors = a.tensors, "companion adapter (NAR, every render)");
    props.companion = Some(a.name.clone());
    Ok(Some(Arc::new(a)))
}

/// The `--adapters` directory scanned against the backbone, each adapter logged and listed
/// in `/props` (the unusable ones with why).
fn scan_adapters(c: &Config, models: &Models, props: &mut Props) -> anyhow::Result<Option<Arc<AdapterDir>>> {
    let Some(dir) = &c.adapters else { return Ok(None) };
    let d = AdapterDir::scan(dir, &shapes_of(&GgufFile::open(&models.model)?))
        .with_context(|| format!("--adapters {}", dir.display()))?;
    for a in &d.adapters {
        let layout = a.layouts.iter().map(|l| l.name()).collect::<Vec<_>>().join("+");
        tracing::info!(adapter = %a.name, layout = %layout, rank = a.rank, ar = a.ar, nar = a.nar, "adapter");
    }
    props.adapters =
        d.adapters.iter().map(|a| AdapterInfo { name: a.name.clone(), ar: a.ar, nar: a.nar, error: None }).collect();
    props.adapters.extend(d.unusable.iter().map(|u| AdapterInfo {
        name: u.name.clone(),
        ar: false,
        nar: false,
        error: Some(u.reason.clone()),
    }));
    Ok(Some(Arc::new(d)))
}

/// `--parallel`, resolved: 0 is 8 rows on a CPU and 16 on a GPU (`auto` takes a GPU when
/// ggml has one).
pub(crate) fn parallel_rows(c: &Config) -> usize {
    if c.parallel > 0 {
        return c.parallel;
    }
    let gpu = if c.device.eq_ignore_ascii_case("auto") || c.device.is_empty() {
        yued_engine::ggml::device_names().iter().any(|d| !d.eq_ignore_ascii_case("CPU"))
    } else {
        !c.device.eq_ignore_ascii_case("CPU")
    };
    if gpu {
        16
    } else {
        8
    }
}

/// The KV cache one row of the AR batch takes at most: a YuE2 row at the full `context`, or
/// a MiniMax Music 3 row at its LM's (a song's two rows keep a third stream beside them for
/// its replay states: 1.5 streams a row), whichever is larger. (MiniMax's depth decoder keeps
/// a frame's keys and values too, 1 MiB a row at the published shapes: inside the margin.)
fn kv_bytes_per_row(models: &Models, context: usize) -> usize {
    use yued_engine::kv_cache::KvSet;
    let yue2 = KvSet::bytes_for(models.info.config.kv_dims(), context);
    let mm3 = models
        .mm3
        .iter()
        .flat_map(|m| m.registry.entries(Bucket::Mm3Lm))
        .filter_map(|e| {
            let info = yued_engine::models::mm3::config::LmInfo::read(&GgufFile::open(&e.path).ok()?).ok()?;
            Some(KvSet::bytes_for(info.config.kv_dims(), info.config.max_position_embeddings) * 3 / 2)
        })
        .max()
        .unwrap_or(0);
    yue2.max(mm3)
}

/// The residency policy and why it was chosen.
pub(crate) struct Residency {
    pub keep_loaded: bool,
    pub reason: String,
}

/// `--keep-loaded` or `--strict` when given; else every group resident when the device's
/// free memory (the host's available memory for the CPU) holds every served file's weights,
/// the KV cache of `--parallel` rows at the full context, and a margin of a tenth of the
/// device (at least 512 MiB); else STRICT.
fn residency(c: &Config, models: &Models, context: usize) -> Residency {
    if c.keep_loaded {
        return Residency { keep_loaded: true, reason: "--keep-loaded".into() };
    }
    if c.strict {
        return Residency { keep_loaded: false, reason: "--strict".into() };
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut weights = size(&models.model) + size(&models.vae);
    if let Some(m) = &models.mm3 {
        weights +=
            Bucket::MM3.iter().filter_map(|&b| m.registry.entries(b).first()).map(|e| size(&e.path)).sum::<u64>();
    }
    let kv = kv_bytes_per_row(models, context) as u64 * parallel_rows(c) as u64;
    let (free, total) = match device_memory(&c.device) {
        Ok(m) => m,
        Err(e) => return Residency { keep_loaded: false, reason: format!("the device's memory is unknown ({e})") },
    };
    let margin = (total / 10).max(512 << 20);
    let need = weights + kv + margin;
    // Bytes as GiB, or MiB under one GiB (the demo's files are a few MiB).
    let shown = |b: u64| {
        if b >= 1 << 30 {
            format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
        } else {
            format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
        }
    };
    let rows = parallel_rows(c);
    let figures = format!(
        "weights {} + KV of {rows} rows at {context} positions {} + margin {} = {}, {} free",
        shown(weights),
        shown(kv),
        shown(margin),
        shown(need),
        shown(free)
    );
    if need <= free {
        Residency { keep_loaded: true, reason: format!("every group fits: {figures}") }
    } else {
        Residency { keep_loaded: false, reason: format!("one group at a time (STRICT): {figures}") }
    }
}

/// Free and total bytes of the compute device: the host's available memory for the CPU
/// (ggml calls all of a host's memory free), the device's own for a GPU.
fn device_memory(device: &str) -> anyhow::Result<(u64, u64)> {
    let backend = yued_engine::ggml::Backend::new(device)?;
    if !backend.is_cpu() {
        let (free, total) = backend.memory();
        return Ok((free as u64, total as u64));
    }
    let info = std::fs::read_to_string("/proc/meminfo")?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    match (field("MemAvailable:"), field("MemTotal:")) {
        (Some(free), Some(total)) => Ok((free, total)),
        _ => {
            let (free, total) = backend.memory();
            Ok((free as u64, total as u64))
        }
    }
}

/// How the compute stages run.
fn worker_config(
    c: &Config,
    models: &Models,
    residency: &Residency,
    adapters: Option<Arc<AdapterDir>>,
    companion: Option<Arc<Adapter>>,
) -> anyhow::Result<WorkerConfig> {
    Ok(WorkerConfig {
        model: models.model.clone(),
        vae: models.vae.clone(),
        device: c.device.clone(),
        threads: c.threads,
        priority: c.compute_priority.parse().map_err(|e: String| anyhow::anyhow!(e))?,
        options: PipelineOptions {
            max_seq: c.max_seq as usize,
            vae_core: c.vae_core as usize,
            vae_halo: c.vae_halo as usize,
            prefill_chunk: c.prefill_chunk,
        },
        keep_loaded: residency.keep_loaded,
        parallel: parallel_rows(c),
        mm3: models.mm3.as_ref().map(|m| m.registry.clone()),
        adapters,
        companion,
        tokenizer: models.audio_tokenizer.clone(),
        transcriber: models.transcriber.clone(),
    })
}

/// The cluster this node joins (`--cluster`), with its metrics; `None` for a single node.
async fn join_cluster(
    cfg: &Config,
    role: Role,
    metrics: &Metrics,
) -> anyhow::Result<Option<(Arc<Cluster>, ClusterMetrics)>> {
    if cfg.cluster.is_empty() {
        return Ok(None);
    }
    let node = if cfg.node_name.is_empty() {
        yued_cluster::default_node_name()
    } else {
        yued_cluster::key_safe(&cfg.node_name)
    };
    let cc = ClusterConfig {
        url: cfg.cluster.clone(),
        node,
        role,
        ack_wait: std::time::Duration::from_secs(cfg.cluster_ack_wait_secs),
        max_attempts: cfg.cluster_max_attempts,
        admission_cap: cfg.admission_cap,
        admission_share: cfg.share(),
        result_ttl: std::time::Duration::from_secs(cfg.result_ttl_secs),
        result_max_bytes: cfg.result_max_bytes,
        link_ttl: std::time::Duration::from_secs(cfg.link_ttl_secs),
    };
    let cm = ClusterMetrics::register(metrics);
    let cluster = Cluster::connect(cc).await?;
    if role.computes() && cluster.name_in_use().await? {
        anyhow::bail!(
            "--node-name {}: a live worker of the cluster already reports under this name (each worker needs its own)",
            cfg.node_name
        );
    }
    Ok(Some((Arc::new(cluster), cm)))
}

/// What `/openapi.json` states of this daemon.
fn openapi_facts(
    cfg: &Config,
    models: &Models,
    families: &[yued_protocol::Family],
    limits: Limits,
    props: &Props,
    adapters: Option<&AdapterDir>,
    api_keys: bool,
) -> crate::openapi::Facts {
    crate::openapi::Facts {
        families: families.to_vec(),
        limits,
        formats: yued_protocol::OutputFormat::all().to_vec(),
        mm3_models: match &models.mm3 {
            Some(m) => ["lm_model", "depth_model", "cond_model", "dit_model", "vae_model"]
                .into_iter()
                .zip(Bucket::MM3)
                .map(|(field, b)| (field, m.registry.entries(b).iter().map(|e| e.name.clone()).collect()))
                .collect(),
            None => vec![],
        },
        adapters: adapters.map(|d| d.adapters.iter().map(|a| a.name.clone()).collect()).unwrap_or_default(),
        model_ids: openai::model_ids(families, &props.model, models.mm3.as_ref()),
        api_keys,
        max_body_bytes: cfg.max_body_bytes,
        max_upload_bytes: cfg.max_upload_bytes,
        link_ttl_secs: cfg.link_ttl_secs,
        tokenize: models.audio_tokenizer.is_some(),
        transcribe: models.transcriber.is_some(),
    }
}

/// The daemon's listening sockets, bound first thing: a port in use or a host that is no
/// address stops the start in one line, before the data directory is touched. They listen
/// (take connections) only once the routes serve: a balancer's TCP probe does not see a node
/// that is still loading as up.
struct Sockets {
    /// Every address the host names (`localhost`: `::1` and `127.0.0.1`).
    main: Vec<socket2::Socket>,
    /// `--metrics-listen`'s.
    scrape: Option<socket2::Socket>,
}

/// Connections the kernel queues for a socket not yet accepted (actix's own default).
const BACKLOG: i32 = 1024;

impl Sockets {
    fn bind(cfg: &Config) -> anyhow::Result<Sockets> {
        let what = format!("binding {}:{}", cfg.host, cfg.port);
        let addrs: Vec<std::net::SocketAddr> =
            std::net::ToSocketAddrs::to_socket_addrs(&(cfg.host.as_str(), cfg.port)).context(what.clone())?.collect();
        let mut main = Vec::new();
        let mut first_err = None;
        for mut addr in addrs {
            // `--port 0`: the other addresses take the port the first one got.
            if let Some(port) = main.first().and_then(|s: &socket2::Socket| s.local_addr().ok()?.as_socket()) {
                addr.set_port(port.port());
            }
            match bind_one(addr) {
                Ok(s) => main.push(s),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if main.is_empty() {
            let e = first_err.map(anyhow::Error::from).unwrap_or_else(|| anyhow::anyhow!("the host names no address"));
            return Err(e.context(what));
        }
        let scrape = if cfg.metrics_listen.is_empty() {
            None
        } else {
            let addr: std::net::SocketAddr = cfg.metrics_listen.parse().context("--metrics-listen")?;
            Some(bind_one(addr).with_context(|| format!("binding --metrics-listen {}", cfg.metrics_listen))?)
        };
        Ok(Sockets { main, scrape })
    }
}

fn bind_one(addr: std::net::SocketAddr) -> std::io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // As std and actix bind: `::` takes IPv4 too where the system lets it.
        let _ = s.set_only_v6(false);
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// Puts a bound socket to listen, for the server.
fn to_listen(s: socket2::Socket) -> std::io::Result<std::net::TcpListener> {
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// Serves the routes until a signal stops the server (and the `--metrics-listen` port
/// beside it: either one stopping stops the other).
async fn serve_http(
    cfg: &Config,
    sockets: Sockets,
    state: web::Data<AppState>,
    keys: crate::auth::Keys,
    serves_api: bool,
) -> anyhow::Result<()> {
    let max_body = cfg.max_body_bytes;
    // The scrape port: /metrics and /health, no key (an internal address of the operator's).
    let scrape = if let Some(socket) = sockets.scrape {
        let socket = to_listen(socket)?;
        let addr = socket.local_addr()?;
        let st = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(st.clone())
                .service(web::resource("/metrics").route(web::get().to(http::metrics)))
                .service(web::resource("/health").route(web::get().to(http::health)))
                .default_service(web::to(not_found))
        })
        .workers(1)
        .shutdown_timeout(1)
        .listen(socket)
        .with_context(|| format!("listening on --metrics-listen {addr}"))?;
        tracing::info!(%addr, "metrics listening (no key: keep this address internal)");
        Some(server.run())
    } else {
        None
    };
    let keys = web::Data::new(keys);
    let listening = web::Data::new(crate::auth::Listening::of(&cfg.host, &cfg.allowed_hosts));
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(keys.clone())
            .app_data(listening.clone())
            .app_data(web::PayloadConfig::new(max_body))
            .wrap(ErrorHandlers::new().default_handler_client(json_error).default_handler_server(json_error))
            .wrap(from_fn(crate::auth::require_key))
            .wrap(from_fn(crate::auth::count_answers))
            .configure(move |s| routes(s, serves_api))
            .default_service(web::to(not_found))
    })
    .on_connect(crate::peer::on_connect)
    .shutdown_timeout(5);
    for socket in sockets.main {
        let socket = to_listen(socket)?;
        let addr = socket.local_addr()?;
        server = server.listen(socket).with_context(|| format!("listening on {addr}"))?;
        // The port really bound (`--port 0` takes a free one).
        tracing::info!(host = %addr.ip(), port = addr.port(), "yued listening");
    }
    let Some(scrape) = scrape else { return Ok(server.run().await?) };
    // Each server handles its commands (a stop among them) only while it is polled: both
    // run as tasks, so that the one still running when the other ends hears its stop.
    let (scrape_handle, main) = (scrape.handle(), server.run());
    let main_handle = main.handle();
    let (main, scrape) = (actix_web::rt::spawn(main), actix_web::rt::spawn(scrape));
    let (first, other) = match futures_util::future::select(main, scrape).await {
        futures_util::future::Either::Left((r, other)) | futures_util::future::Either::Right((r, other)) => (r, other),
    };
    scrape_handle.stop(true).await;
    main_handle.stop(true).await;
    let second = other.await;
    first??;
    Ok(second??)
}

/// Takes the data directory for this daemon (an advisory lock on `yued.lock`, which names
/// the holder's pid): a second daemon started on it by mistake stops here, before it
/// writes a model, sweeps the results' or the uploads' folder or opens the journal.
fn lock_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("yued.lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::Error(e)) => {
            // A file system without locks (some network mounts): the daemon runs unguarded.
            tracing::warn!(path = %path.display(), error = %e, "the data directory cannot be locked: nothing \
                stops a second daemon on it");
            return Ok(f);
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            anyhow::bail!(
                "the data directory {} is in use by another yued{who}: give each daemon its own --data-dir",
                dir.display()
            );
        }
    }
    f.set_len(0)?;
    f.rewind()?;
    write!(f, "{}", std::process::id())?;
    f.flush()?;
    Ok(f)
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let c = a.config()?;
    let ring = LogRing::new();
    init_tracing(&c.log_format, &ring);
    for (var, near) in Config::unknown_env(std::env::vars()) {
        match near {
            Some(near) => tracing::warn!("{var} is no setting of yued serve (ignored): did you mean {near}?"),
            None => tracing::warn!("{var} is no setting of yued serve (ignored)"),
        }
    }
    let (key_source, key_table) = open_keys(&c)?;
    let sockets = Sockets::bind(&c)?;
    private_data_dir(&c.data_dir)?;
    // Held until the process ends: nothing in the data directory is touched before it.
    let _data_lock = lock_data_dir(&c.data_dir)?;
    let models = resolve_models(&c)?;
    if let Some(preset) = &models.demo {
        for _ in 0..3 {
            tracing::warn!(
                preset,
                "THE MODEL HAS RANDOM WEIGHTS (yued demo model): songs will be noise; pass \
                --model/--vae for real weights"
            );
        }
    }
    let uploads = c.data_dir.join("uploads");
    std::fs::create_dir_all(&uploads).with_context(|| format!("creating {}", uploads.display()))?;
    let results = Arc::new(ResultStore::open(&c.data_dir.join("results"), retention(&c))?);
    let model_context = models.info.config.max_position_embeddings;
    let context = if c.max_seq > 0 { (c.max_seq as usize).min(model_context) } else { model_context };
    let limits = Limits {
        max_batch: c.max_batch,
        context: context as u32,
        codebook_size: models.info.tokens.codebook_size,
        max_steps: c.max_steps,
        ..Limits::default()
    };
    let mut props = props_of(&c, &models, context);
    let adapters = scan_adapters(&c, &models, &mut props)?;
    let companion = open_companion(&c, &models, &mut props)?;
    let links = links::Links::open(&c.data_dir.join("links"), std::time::Duration::from_secs(c.link_ttl_secs))
        .with_context(|| format!("creating {}", c.data_dir.join("links").display()))?;
    let metrics = Metrics::new();
    let residency = residency(&c, &models, context);
    tracing::info!("{}", yued_engine::ggml::CpuSimd::detect().describe());
    if !yued_engine::ggml::cpu_uses_openmp() {
        tracing::warn!(
            "ggml was built without OpenMP (its CMake found no OpenMP runtime): its CPU threads spin at every \
            barrier, and other work on these cores slows renders many times over; build with gcc (libgomp)"
        );
    }
    tracing::info!(keep_loaded = residency.keep_loaded, reason = %residency.reason, "residency");
    props.residency = if residency.keep_loaded { "keep-loaded" } else { "strict" }.into();
    let demo = if models.demo.is_some() { "true" } else { "false" };
    metrics.build_info.with_label_values(&[env!("CARGO_PKG_VERSION"), &c.device, &props.residency, demo]).set(1);
    props.residency_reason = residency.reason.clone();
    let worker_cfg = worker_config(&c, &models, &residency, adapters.clone(), companion)?;
    let cfg = c.clone();
    let role = Role::parse(&c.role).ok_or_else(|| anyhow::anyhow!("role: must be api, worker or all"))?;
    actix_web::rt::System::new().block_on(async move {
        let cluster = join_cluster(&cfg, role, &metrics).await?;
        let compute = Compute { cfg: &cfg, role, cluster: cluster.as_ref(), results: &results, uploads: &uploads };
        let local = compute.start(worker_cfg, &key_table, &metrics)?;
        let jobs = compute.jobs(local.as_ref().map(|(node, _)| node), &metrics)?;
        let serves_api = cluster.is_none() || role.serves_api();
        let families = if models.mm3.is_some() {
            vec![yued_protocol::Family::Yue2, yued_protocol::Family::Mm3]
        } else {
            vec![yued_protocol::Family::Yue2]
        };
        let facts = openapi_facts(&cfg, &models, &families, limits, &props, adapters.as_deref(), !key_table.is_empty());
        let openapi = serde_json::to_string(&crate::openapi::document(&facts)).expect("the document serializes");
        let keys = crate::auth::Keys::new(key_table);
        crate::auth::reload_on_sighup(keys.clone(), key_source);
        let links = match &cluster {
            Some((c, _)) => links.in_cluster(c.links.clone()),
            None => links,
        };
        let stopping = stopping_signal();
        let nats = cluster.as_ref().map(|(c, _)| c.client.clone());
        let served = Served {
            jobs,
            metrics,
            props,
            limits,
            families,
            openapi,
            logs: ring,
            links,
            adapters,
            uploads,
            stopping,
            nats,
        };
        let state = web::Data::new(app_state(&cfg, models, served));
        // The stages stop cleanly however the server ended (a failure to serve included).
        let served = serve_http(&cfg, sockets, state, keys, serves_api).await;
        let Some((node, stop)) = local else { return served };
        if let Some(stop) = stop {
            // The cluster's jobs this worker runs go back to the cluster at once.
            stop.stop().await;
        }
        tracing::info!("shutting down: stopping the running jobs (they run again at start), flushing the journal");
        node.shutdown().await.map_err(|e| anyhow::anyhow!(e))?;
        served
    })?;
    Ok(())
}

/// Where this node's jobs run: its own compute stages, the cluster, or both.
struct Compute<'a> {
    cfg: &'a Config,
    role: Role,
    cluster: Option<&'a (Arc<Cluster>, ClusterMetrics)>,
    results: &'a Arc<ResultStore>,
    uploads: &'a Path,
}

impl Compute<'_> {
    /// The compute side: the single node, or a cluster worker (fed by the cluster, with
    /// the handle that stops its pulls); `None` on an API-only cluster node.
    fn start(
        &self,
        worker: WorkerConfig,
        keys: &yued_contract::tenancy::KeyTable,
        metrics: &Metrics,
    ) -> anyhow::Result<Option<(Node, Option<yued_cluster::worker::StopHandle>)>> {
        if self.cluster.is_some() && !self.role.computes() {
            return Ok(None);
        }
        // A cluster worker's own journal only mirrors the job it runs: the cluster's job
        // states are the truth, and a job this node was running when it died is
        // redelivered by the cluster, not resumed from here.
        let in_cluster = self.cluster.is_some();
        let node_cfg = NodeConfig {
            worker,
            journal: self.cfg.data_dir.join(if in_cluster { "worker-journal" } else { "journal" }),
            fresh_journal: in_cluster,
            cap: if in_cluster { 1 } else { self.cfg.admission_cap },
            share: if in_cluster { 1 } else { self.cfg.share() },
            uploads: Some(self.uploads.to_path_buf()),
            stream_history: yued_actors::HistoryBudget {
                memory_bytes: self.cfg.stream_memory_bytes,
                spool_dir: Some(self.cfg.data_dir.join("streams")),
            },
        };
        let node =
            Node::start(node_cfg, keys, self.results.clone(), metrics.clone()).map_err(|e| anyhow::anyhow!(e))?;
        let stop = self.cluster.map(|(c, cm)| {
            let (results, uploads) = (self.results.clone(), self.uploads.to_path_buf());
            yued_cluster::worker::start(c.clone(), node.runner(), results, uploads, cm.clone())
        });
        Ok(Some((node, stop)))
    }

    /// The job system the routes reach: the cluster's on an API node of a cluster, else
    /// this node's.
    fn jobs(&self, node: Option<&Node>, metrics: &Metrics) -> anyhow::Result<yued_contract::Backend> {
        Ok(match (self.cluster, node) {
            (Some((c, cm)), _) if self.role.serves_api() => {
                let cache = ResultStore::open(&self.cfg.data_dir.join("cluster-results"), retention(self.cfg))?;
                let b = NatsBackend::new(c.clone(), cache, metrics.clone(), cm.clone());
                b.watch();
                b.backend()
            }
            (Some((c, cm)), Some(node)) => {
                // A worker-only node keeps the cluster's gauges current too (each node's
                // /metrics says what it sees of the cluster); its routes are its own node's.
                let cache = ResultStore::open(&self.cfg.data_dir.join("cluster-results"), retention(self.cfg))?;
                NatsBackend::new(c.clone(), cache, metrics.clone(), cm.clone()).watch();
                node.backend()
            }
            (_, Some(node)) => node.backend(),
            _ => anyhow::bail!("role: a node must serve the API or compute"),
        })
    }
}

/// What the routes share, besides the models and the configuration.
struct Served {
    jobs: yued_contract::Backend,
    metrics: Metrics,
    props: Props,
    limits: Limits,
    families: Vec<yued_protocol::Family>,
    openapi: String,
    logs: LogRing,
    links: links::Links,
    adapters: Option<Arc<AdapterDir>>,
    uploads: PathBuf,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// The cluster's connection, on a cluster node.
    nats: Option<yued_cluster::async_nats::Client>,
}

fn app_state(cfg: &Config, models: Models, s: Served) -> AppState {
    let refused = s.metrics.admission_rejections_total.clone();
    AppState {
        nats: s.nats,
        jobs: s.jobs,
        metrics: s.metrics,
        props: s.props,
        limits: s.limits,
        families: s.families,
        openapi: s.openapi,
        prompt: crate::state::PromptCheck {
            tokenizer: models.tokenizer,
            tokens: models.info.tokens,
            instructions: models.instructions,
        },
        mm3: models.mm3,
        audio_tokenizer: models.audio_tokenizer.is_some(),
        transcriber: models.transcriber.is_some(),
        logs: s.logs,
        started: std::time::Instant::now(),
        demo_weights: models.demo.is_some(),
        max_body_bytes: cfg.max_body_bytes,
        ws_ping: std::time::Duration::from_secs(cfg.ws_ping_secs),
        vae: crate::state::VaeLimits {
            uploads: s.uploads,
            max_upload_bytes: cfg.max_upload_bytes,
            upload_room: {
                crate::upload_room::UploadRoom::new(
                    cfg.upload_memory_bytes,
                    cfg.max_upload_bytes.saturating_add(crate::http::MULTIPART_SLACK),
                )
                .counting(move || refused.inc())
            },
            audio: models.audio,
            has_encoder: models.vae_has_encoder,
        },
        adapters: s.adapters,
        max_duration: cfg.max_duration,
        mcp: crate::mcp_sessions::Mcp::new(cfg.mcp_max_seconds)
            .with_public_url((!cfg.public_url.is_empty()).then(|| cfg.public_url.clone())),
        links: s.links,
        stopping: s.stopping,
    }
}

/// Turns true at the signal that stops the daemon (SIGTERM, SIGINT), which actix's servers
/// hear too: what streams can say goodbye before the servers close their connections.
fn stopping_signal() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    actix_web::rt::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    rx
}
