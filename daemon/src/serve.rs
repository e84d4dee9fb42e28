//! `yued serve`: the HTTP daemon. This first cut loads (or creates) the model pair,
//! validates it, and answers `/health` and `/props`; the job routes arrive with the actor
//! system.
use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::Context;
use std::path::PathBuf;
use yued_config::Config;
use yued_engine::demo::{write_demo, Preset, DEMO_KEY};
use yued_engine::gguf::GgufFile;
use yued_engine::model::BackboneInfo;
use yued_engine::tokenizer::BpeTokenizer;

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
    /// Listen address (default 127.0.0.1).
    #[arg(long)]
    pub host: Option<String>,
    /// Listen port (default 8087).
    #[arg(long)]
    pub port: Option<u16>,
    /// Data directory: demo model, journal, results (default ./yued-data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Compute device: auto, CPU, CUDA0, Vulkan0, MTL0.
    #[arg(long)]
    pub device: Option<String>,
    /// Largest lm_batch_size a request may use (one KV set per song).
    #[arg(long)]
    pub max_batch: Option<u32>,
    /// KV cache length bound in tokens (0 = the model context).
    #[arg(long)]
    pub max_seq: Option<u32>,
    /// Keep every module resident instead of one group at a time.
    #[arg(long)]
    pub keep_loaded: bool,
    /// `text` or `json` log lines.
    #[arg(long)]
    pub log_format: Option<String>,
}

impl ServeArgs {
    fn config(&self) -> anyhow::Result<Config> {
        let mut c = Config::load(self.config.as_deref(), std::env::vars())?;
        let mut set = |k: &str, v: Option<String>| -> anyhow::Result<()> {
            if let Some(v) = v {
                c.set(k, &v)?;
            }
            Ok(())
        };
        set("model", self.model.as_ref().map(|p| p.display().to_string()))?;
        set("vae", self.vae.as_ref().map(|p| p.display().to_string()))?;
        set("host", self.host.clone())?;
        set("port", self.port.map(|p| p.to_string()))?;
        set("data_dir", self.data_dir.as_ref().map(|p| p.display().to_string()))?;
        set("device", self.device.clone())?;
        set("max_batch", self.max_batch.map(|v| v.to_string()))?;
        set("max_seq", self.max_seq.map(|v| v.to_string()))?;
        set("log_format", self.log_format.clone())?;
        if self.keep_loaded {
            c.keep_loaded = true;
        }
        c.check()?;
        Ok(c)
    }
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

/// Model paths after resolving the demo default.
struct Models {
    model: PathBuf,
    vae: PathBuf,
    info: BackboneInfo,
    demo: Option<String>,
}

fn resolve_models(c: &Config) -> anyhow::Result<Models> {
    let (model, vae) = match (&c.model, &c.vae) {
        (Some(m), Some(v)) => (m.clone(), v.clone()),
        (None, None) => {
            let dir = c.data_dir.join("models");
            let (m, v) = (dir.join("yue2-demo-tiny.gguf"), dir.join("yue2-demo-tiny-vae.gguf"));
            if !(m.exists() && v.exists()) {
                tracing::warn!(dir = %dir.display(), "no --model given: writing the tiny demo model (random weights)");
                write_demo(&dir, Preset::Tiny, 0, &mut |_, _| {}).context("writing the demo model")?;
            }
            (m, v)
        }
        _ => anyhow::bail!("--model and --vae go together (or neither, for the demo model)"),
    };
    let f = GgufFile::open(&model)?;
    let info = BackboneInfo::from_gguf(&f)?;
    BpeTokenizer::from_gguf(&f)?;
    let vf = GgufFile::open(&vae)?;
    let arch = vf.get_str("general.architecture")?;
    anyhow::ensure!(arch == yued_engine::model::VAE_ARCH, "{}: general.architecture is '{arch}', expected 'yue2-vae'", vae.display());
    let demo = f.get(DEMO_KEY).and_then(|v| v.as_str()).map(String::from);
    Ok(Models { model, vae, info, demo })
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let c = a.config()?;
    init_tracing(&c.log_format);
    let models = resolve_models(&c)?;
    if let Some(preset) = &models.demo {
        for _ in 0..3 {
            tracing::warn!(preset, "THE MODEL HAS RANDOM WEIGHTS (yued demo model): songs will be noise; pass --model/--vae for real weights");
        }
    }
    let props = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "model": models.model.display().to_string(),
        "vae": models.vae.display().to_string(),
        "demo_weights": models.demo.is_some(),
        "sample_rate": 48000,
        "frame_rate": 25,
        "context": if c.max_seq > 0 { (c.max_seq as usize).min(models.info.config.max_position_embeddings) } else { models.info.config.max_position_embeddings },
        "max_batch": c.max_batch,
        "adapters": [],
    });
    let props = web::Data::new(props);
    let addr = (c.host.clone(), c.port);
    tracing::info!(host = %c.host, port = c.port, model = %models.model.display(), "yued listening");
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(move || {
            App::new()
                .app_data(props.clone())
                .route("/health", web::get().to(|| async { HttpResponse::Ok().json(serde_json::json!({"status": "ok"})) }))
                .route("/props", web::get().to(|p: web::Data<serde_json::Value>| async move { HttpResponse::Ok().json(p.get_ref()) }))
        })
        .bind(addr)?
        .run()
        .await
    })?;
    Ok(())
}
