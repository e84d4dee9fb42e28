//! What the benchmark modules share: the flags of `yued bench`, the table's rows, the
//! timing of a repeated run, and the demo pair a run writes once.
use super::common::DeviceArgs;
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;
use yued_engine::models::yue2::demo::{write_demo, Preset};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The family measured: `yue2` (sections mem, prefill, decode, nar, solver, vae, e2e, stream)
    /// or `mm3` (MiniMax Music 3: frame, lm, dit, vae, e2e, stream).
    #[arg(long, default_value = "yue2")]
    pub family: yued_protocol::Family,
    /// Demo preset measured when no --model/--vae is given: `full` (the published YuE2
    /// dimensions, Q8_0, random weights, ~4 GB written once into --cache), `deep` (the
    /// published depth at tiny widths) or `tiny`.
    #[arg(long, default_value = "full")]
    pub preset: String,
    /// Backbone GGUF (with --vae) instead of a demo preset.
    #[arg(long, requires = "vae")]
    pub model: Option<PathBuf>,
    /// VAE GGUF (with --model).
    #[arg(long, requires = "model")]
    pub vae: Option<PathBuf>,
    /// MiniMax Music 3: the component files of this folder (as `yued serve --models` reads
    /// it: the first file of each architecture) instead of a demo preset; a section whose
    /// components are not there is skipped (scripts/bench/mm3-diffusers.sh writes a DiT,
    /// condition encoder and vocoder only).
    #[arg(long)]
    pub models: Option<PathBuf>,
    /// Where demo models are written and reused between runs.
    #[arg(long, default_value = "yued-data/bench-models")]
    pub cache: PathBuf,
    /// Repetitions per figure (median, min, max).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Sections to run, comma separated: mem, prefill, decode, nar, vae, e2e, stream, seam,
    /// batching (both families: 1, 2, 4 and 8 clients' songs in one decode step against one
    /// after another, the prefill stall of a joining song, the last client's first chunk),
    /// adapters (YuE2: each half's load with a rank-16 LoRA merged against a plain load),
    /// solver (YuE2: one song's synthesis half at 16 steps under midpoint and ab2, and the
    /// mel correlation of their audio), tokenize (the audio tokenizer, MERT-v2 and its head, at
    /// --preset's dimensions: seconds per minute of audio, beside PyTorch with --torch-python),
    /// transcribe (the SheetSage2 transcriber at --preset's dimensions on recordings of
    /// --transcribe-seconds: seconds a run, tokens, ms a decoder step, seconds a window's
    /// encoding, beside PyTorch with --torch-python)
    /// (YuE2: stream is the time to first audio on a daemon this bench starts, STRICT and
    /// --keep-loaded, with and without streaming chunks; seam, not in the default, reads
    /// the chunk boundaries of one song painted on several grids); frame, lm, dit, vae, e2e,
    /// stream (MiniMax Music 3). The default runs every section of the family but seam,
    /// adapters, batching, tokenize and transcribe.
    #[arg(long, default_value = "mem,prefill,decode,nar,solver,vae,e2e,stream")]
    pub only: String,
    /// Smaller points (cache lengths, frames) for a quick look or a smoke test.
    #[arg(long)]
    pub quick: bool,
    /// AR decode cache lengths instead of the defaults (0, 2048, 8192; --quick: 0, 512),
    /// comma separated.
    #[arg(long, value_delimiter = ',')]
    pub cache_lengths: Option<Vec<usize>>,
    /// NAR block sizes in frames instead of the defaults (250, 1500, 5000; --quick: 50,
    /// 250), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub nar_frames: Option<Vec<usize>>,
    /// Seconds of audio of the end-to-end run (and of the stream section's songs).
    #[arg(long, default_value_t = 30.0)]
    pub e2e_seconds: f64,
    /// Seconds of each client's song in the batching section (not in the default; at the
    /// full shapes on a CPU it is some minutes a client count).
    #[arg(long, default_value_t = 10.0)]
    pub batching_seconds: f64,
    /// Client counts of the batching section, comma separated (default 1,2,4,8; --quick:
    /// 1,2,4).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batching_clients: Option<Vec<usize>>,
    /// Times the batching section writes each client count's songs both ways, one way then
    /// the other in turn (a noisy host moves both alike); its rows are the medians.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batching_reps: usize,
    /// `stream_chunk_seconds` of the stream section's streaming rows (and the first chunk
    /// the batching section times).
    #[arg(long, default_value_t = 5.0)]
    pub stream_seconds: f64,
    /// The stream section's residency policies: `both` (STRICT and --keep-loaded, side by
    /// side), `strict` or `keep-loaded` (a full-shape song on a CPU is many minutes a row).
    #[arg(long, value_enum, default_value = "both")]
    pub stream_policy: StreamPolicy,
    /// Side by side: llama.cpp's own decode (libllama from the same build as our ggml) on
    /// the same AR weights, exported as a standard qwen3 GGUF next to the model, at equal
    /// batch, cache length and threads; each decode row gets a yued / llama.cpp ratio.
    #[arg(long)]
    pub llama_cpp: bool,
    /// Seconds of the recording the tokenize section turns into codes.
    #[arg(long, default_value_t = 60.0)]
    pub tokenize_seconds: f64,
    /// Seconds of the recordings the transcribe section transcribes, comma separated (at the
    /// published 300 s window: 60 s is one window, 400 s two); the flag alone, none: the
    /// section times its decoder steps only.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "60,400")]
    pub transcribe_seconds: Vec<f64>,
    /// The tokenize and transcribe sections also time the PyTorch reference
    /// (scripts/bench/tokenize_torch.py, scripts/bench/transcribe_torch.py; float32, the same
    /// configuration and threads) with this Python, which must have torch.
    #[arg(long)]
    pub torch_python: Option<PathBuf>,
    /// Also write the table as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Which residency policies `--only stream` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamPolicy {
    Both,
    Strict,
    KeepLoaded,
}

/// Median, min and max of a set of timings.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Stats { median, min: v[0], max: v[n - 1] }
}

impl Stats {
    pub fn map(self, f: impl Fn(f64) -> f64) -> Stats {
        let (a, b) = (f(self.min), f(self.max));
        Stats { median: f(self.median), min: a.min(b), max: a.max(b) }
    }
}

/// One line of the table.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub section: &'static str,
    pub what: String,
    pub unit: &'static str,
    #[serde(flatten)]
    pub stats: Stats,
    pub note: String,
}

/// The rows of a run: each printed as it comes, then the table (and `--json`) at the end.
#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn push(&mut self, section: &'static str, what: String, unit: &'static str, stats: Stats, note: String) {
        let r = Row { section, what, unit, stats, note };
        eprintln!(
            "  {:<8} {:<46} {:>10.3} {:<8} [{:.3} .. {:.3}] {}",
            r.section, r.what, r.stats.median, r.unit, r.stats.min, r.stats.max, r.note
        );
        self.rows.push(r);
    }

    /// A row another module measured.
    pub fn add(&mut self, r: Row) {
        self.push(r.section, r.what, r.unit, r.stats, r.note)
    }

    /// The table on stdout, and the rows as JSON with `--json`.
    pub fn report(&self, a: &BenchArgs, label: &str, device: &str, threads: usize) -> anyhow::Result<()> {
        // What the CPU kernels were compiled for moves every compute-bound row.
        let simd = yued_engine::ggml::CpuSimd::detect();
        println!("# {label}, device {device}, {threads} threads; {}", simd.describe());
        println!("{:<8} {:<46} {:>10} {:>10} {:>10}  {:<10} note", "section", "what", "median", "min", "max", "unit");
        for r in &self.rows {
            println!(
                "{:<8} {:<46} {:>10.3} {:>10.3} {:>10.3}  {:<10} {}",
                r.section, r.what, r.stats.median, r.stats.min, r.stats.max, r.unit, r.note
            );
        }
        if let Some(path) = &a.json {
            let doc = serde_json::json!({ "model": label, "device": device, "threads": threads, "reps": a.reps,
                "cpu_kernels": simd.built, "cpu_unused": simd.unused, "rows": self.rows });
            std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// The batching section's client counts.
pub fn batching_clients(a: &BenchArgs) -> Vec<usize> {
    match &a.batching_clients {
        Some(c) => c.clone(),
        None if a.quick => vec![1, 2, 4],
        None => vec![1, 2, 4, 8],
    }
}

/// The compute threads of a run (`--threads 0`: every core).
pub fn threads_of(a: &BenchArgs) -> usize {
    if a.device.threads == 0 {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    } else {
        a.device.threads
    }
}

/// A warm-up run longer than this counts as the first repetition: what a warm-up pays
/// (first-touch page faults, the compute buffer's first allocation) is lost in it, and a
/// full-size NAR block on a CPU takes minutes per run.
const LONG_RUN_S: f64 = 20.0;

/// Runs `f` once to warm up, then `reps` times; seconds per run.
pub fn time(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Stats> {
    let t = Instant::now();
    f()?;
    let warm = t.elapsed().as_secs_f64();
    let mut v = Vec::with_capacity(reps);
    if warm > LONG_RUN_S {
        v.push(warm);
    }
    while v.len() < reps.max(1) {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(stats(v))
}

/// The YuE2 demo pair of `tag` in `cache`, written once.
pub fn demo_pair(cache: &std::path::Path, tag: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let preset: Preset = tag.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    let dir = cache.join(tag);
    let (m, v) = (dir.join(format!("yue2-demo-{tag}.gguf")), dir.join(format!("yue2-demo-{tag}-vae.gguf")));
    if !m.exists() || !v.exists() {
        eprintln!("writing the {tag} demo model into {} (once)", dir.display());
        let pb = super::progress_bar(100, "demo model");
        write_demo(&dir, preset, 0, &mut |done, total| pb.set_position((done * 100 / total.max(1)) as u64))
            .context("writing the demo model")?;
        pb.finish_and_clear();
    }
    Ok((m, v))
}
