//! `yued bench --only transcribe`: the SheetSage2 transcriber (MERT-v2 with the head's LoRA
//! merged, the layer mix, the memory, greedy decoding under the event grammar, the window
//! plan) on synthetic recordings of `--transcribe-seconds` at `--preset`'s dimensions (`full`:
//! the published ones, random weights written once into the cache beside the tokenize
//! section's MERT). Each length gets seconds per run, its windows and tokens, milliseconds
//! per decoder step and seconds of encoding per window; with `--torch-python`, the PyTorch
//! reference on the same configuration and threads beside them (float32). Random weights
//! decode different token counts in the two implementations, so the ratios compare the
//! per-token and per-window figures as well as the totals.
use super::bench_common::{stats, time, BenchArgs, Stats, Table};
use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::sheetsage2::pipeline::{TranscribeError, Transcriber, SAMPLE_RATE};

const SECTION: &str = "transcribe";

/// The SheetSage2 demo head of `--preset` in the tokenize section's `listen-{preset}` folder,
/// with the listening demo's MERT beside it (each written once).
fn head_file(a: &BenchArgs) -> anyhow::Result<PathBuf> {
    let (dir, preset) = super::bench_listen::listen_demo(a)?;
    let head = dir.join(format!("SheetSage2-demo-{}-F32.gguf", preset.name()));
    if !head.exists() {
        eprintln!("writing the {} SheetSage2 demo head into {} (once)", preset.name(), dir.display());
        yued_engine::models::sheetsage2::demo::write_demo(&dir, preset, 0).context("writing the demo head")?;
    }
    Ok(head)
}

/// A recording of `seconds`: a slow sweep (restarting every minute) and a fixed tone over a little noise.
fn recording(seconds: f64) -> Vec<f32> {
    super::bench_listen::recording(seconds, |t| 220.0 + 0.5 * (t % 60.0))
}

/// One run of a recording: where its time went and what it decoded.
#[derive(Clone, Debug)]
struct Breakdown {
    total: f64,
    /// Seconds encoding windows (MERT, the mix, the memory).
    encode: f64,
    /// Seconds feeding and drawing tokens (the prefix, the drawn tokens, the stitching).
    decode: f64,
    /// Decoder steps: the tokens fed, prefix included (the final eos is never fed).
    steps: usize,
    /// Tokens drawn in each window, the final eos included.
    tokens: Vec<usize>,
    /// Why the run stopped before its last window, when it did: the reference's rule refuses a
    /// window whose overlap prefix fills the context (random weights can decode a window to
    /// its budget), on both sides alike.
    refused: Option<String>,
    /// The windows of the recording's plan.
    planned: usize,
}

/// One transcription of `mono`, each step timed as an encoding or as decoding.
fn run_once(tr: &mut Transcriber, backend: &Backend, mono: &[f32], label: &str) -> anyhow::Result<Breakdown> {
    let mut job = tr.start(mono.to_vec())?;
    let (mut encode, mut decode, mut opening, mut window_decode) = (0.0, 0.0, true, 0.0);
    let (t0, n) = (Instant::now(), job.windows().len());
    let mut refused = None;
    loop {
        let (t, closed) = (Instant::now(), job.log().len());
        let more = match job.step(tr, backend) {
            Err(e @ TranscribeError::PrefixFull(..)) => {
                eprintln!("  {label}: window {}/{n} refused: {e}", closed + 1);
                refused = Some(format!("window {} refused: {e}", closed + 1));
                break;
            }
            r => r?,
        };
        let dt = t.elapsed().as_secs_f64();
        if opening {
            encode += dt;
            window_decode = 0.0;
            eprintln!("  {label}: window {}/{n} encoded in {dt:.1} s", closed + 1);
        } else {
            decode += dt;
            window_decode += dt;
        }
        opening = job.log().len() > closed;
        if let Some(w) = job.log().last().filter(|_| opening) {
            let drawn = w.tokens.len() - w.prefix_len;
            eprintln!("  {label}: window {}/{n}: {drawn} tokens in {window_decode:.1} s", w.window.index + 1);
        }
        if !more {
            break;
        }
    }
    let log = job.log();
    Ok(Breakdown {
        total: t0.elapsed().as_secs_f64(),
        encode,
        decode,
        steps: log.iter().map(|w| w.tokens.len() - 1).sum(),
        tokens: log.iter().map(|w| w.tokens.len() - w.prefix_len).collect(),
        refused,
        planned: n,
    })
}

/// The figures of a set of runs (the medians of each), and of the last run's windows.
struct Measured {
    total: Stats,
    ms_per_step: Stats,
    encode_per_window: Stats,
    windows: usize,
    tokens: Vec<usize>,
    steps: usize,
    refused: Option<String>,
    planned: usize,
}

impl Measured {
    fn of(runs: &[Breakdown]) -> Measured {
        let last = runs.last().expect("at least one run");
        let windows = last.tokens.len().max(1);
        let pick = |f: &dyn Fn(&Breakdown) -> f64| stats(runs.iter().map(f).collect());
        Measured {
            total: pick(&|b| b.total),
            ms_per_step: pick(&|b| 1e3 * b.decode / b.steps.max(1) as f64),
            encode_per_window: pick(&|b| b.encode / b.tokens.len().max(1) as f64),
            windows,
            tokens: last.tokens.clone(),
            steps: last.steps,
            refused: last.refused.clone(),
            planned: last.planned,
        }
    }

    fn tokens_text(&self) -> String {
        let total = self.tokens.iter().sum::<usize>();
        let refused = self.refused.as_deref().map(|r| format!("; {r}")).unwrap_or_default();
        if self.tokens.len() > 8 {
            let most = self.tokens.iter().max().unwrap_or(&0);
            return format!("{total} tokens over {} windows (at most {most} a window){refused}", self.tokens.len());
        }
        let each: Vec<String> = self.tokens.iter().map(|t| t.to_string()).collect();
        format!("{total} tokens ({}){refused}", each.join(" + "))
    }
}

/// Times the transcriber on `mono`; the warm-up counts as in [`time`] (a run longer than 20 s
/// is the first repetition), and the breakdowns of the counted runs are kept.
fn measure(a: &BenchArgs, tr: &mut Transcriber, backend: &Backend, mono: &[f32]) -> anyhow::Result<Measured> {
    let mut runs = Vec::new();
    let label = format!("{:.0} s", mono.len() as f64 / SAMPLE_RATE as f64);
    time(a.reps, || {
        runs.push(run_once(tr, backend, mono, &label)?);
        Ok(())
    })?;
    let counted = runs.len().min(a.reps.max(1));
    Ok(Measured::of(&runs[runs.len() - counted..]))
}

/// The rows of one recording length measured by yued.
fn push_ours(t: &mut Table, seconds: f64, m: &Measured) {
    let windows = match (m.windows, m.planned) {
        (1, 1) => "1 window".to_string(),
        (w, p) if w == p => format!("{w} windows"),
        (w, p) => format!("{w} of {p} windows"),
    };
    let what = format!("{seconds:.0} s recording, {windows}, F32 files");
    let note = format!("{} decoded, {} decoder steps", m.tokens_text(), m.steps);
    t.push(SECTION, what, "s", m.total, note);
    t.push(SECTION, "  a decoder step (fed or drawn token)".into(), "ms", m.ms_per_step, String::new());
    t.push(SECTION, "  a window's encoding (MERT, mix, memory)".into(), "s", m.encode_per_window, String::new());
}

/// The same rows for the PyTorch reference, with yued's ratios in the notes.
fn push_torch(t: &mut Table, threads: usize, ours: &Measured, torch: &Measured) {
    let what = format!("  PyTorch reference, float32, {threads} threads");
    let run = if (ours.windows, ours.planned) == (torch.windows, torch.planned) {
        format!("yued {:.2}x as fast a run", torch.total.median / ours.total.median)
    } else {
        format!("runs not compared: {} of {} windows here", torch.windows, torch.planned)
    };
    let note = format!("{run}; {} decoded (random weights: counts differ)", torch.tokens_text());
    t.push(SECTION, what, "s", torch.total, note);
    let note = format!("yued {:.2}x as fast a step", torch.ms_per_step.median / ours.ms_per_step.median);
    t.push(SECTION, "  PyTorch: a decoder step".into(), "ms", torch.ms_per_step, note);
    let ratio = torch.encode_per_window.median / ours.encode_per_window.median;
    let note = format!("yued {ratio:.2}x as fast a window");
    t.push(SECTION, "  PyTorch: a window's encoding".into(), "s", torch.encode_per_window, note);
}

/// Decoder steps timed apart from the window loop, at a full window's memory: how soon random
/// weights draw eos does not move the per-token figure.
const STEPS: usize = 128;

/// Milliseconds a decoder step over [`STEPS`] tokens fed from an empty cache (each the last
/// step's argmax) at the memory of a window of zeros; the window's frames.
fn step_ms(a: &BenchArgs, tr: &mut Transcriber, backend: &Backend) -> anyhow::Result<(Stats, usize)> {
    let frames = tr.mert.cfg.frames(tr.head.cfg.window_samples());
    let mem = tr.head.memory(backend, &vec![0.0; frames * tr.mert.cfg.hidden_size], frames, false)?;
    let mut ms = Vec::new();
    for _ in 0..=a.reps.max(1) {
        let (mut dec, mut token) = (tr.head.decoder(backend)?, tr.head.vocab.sos);
        let t = Instant::now();
        for _ in 0..STEPS {
            let logits = tr.head.step(backend, &mut dec, &mem, token)?;
            token = (0..logits.len()).max_by(|&x, &y| logits[x].total_cmp(&logits[y])).unwrap_or(0) as u32;
        }
        ms.push(1e3 * t.elapsed().as_secs_f64() / STEPS as f64);
    }
    Ok((stats(ms.split_off(1)), frames)) // the first run warms up
}

/// The configurations of the files yued times, as the PyTorch script reads them.
fn configs_json(head: &Path) -> anyhow::Result<Value> {
    let cfg =
        |p: &Path, key: &str| -> anyhow::Result<Value> { Ok(serde_json::from_str(GgufFile::open(p)?.get_str(key)?)?) };
    let (_, mert) = Transcriber::files(head)?;
    Ok(serde_json::json!({
        "mert": cfg(&mert, yued_engine::models::mert::config::CONFIG_KEY)?,
        "head": cfg(head, yued_engine::models::sheetsage2::config::CONFIG_KEY)?,
    }))
}

/// Runs `scripts/bench/transcribe_torch.py` with `args` after the configurations, threads and
/// reps; its JSON.
fn torch(a: &BenchArgs, py: &Path, configs: &Path, threads: usize, args: &[String]) -> anyhow::Result<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench/transcribe_torch.py");
    let out = std::process::Command::new(py)
        .arg(&script)
        .args(["--configs", &configs.display().to_string()])
        .args(["--threads", &threads.to_string(), "--reps", &a.reps.to_string()])
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {} {}", py.display(), script.display()))?;
    anyhow::ensure!(out.status.success(), "the PyTorch reference failed ({})", out.status);
    serde_json::from_slice(&out.stdout).context("the PyTorch reference's JSON")
}

/// The PyTorch reference's decoder steps at `frames` of memory, as [`step_ms`] times them.
fn torch_step_ms(a: &BenchArgs, py: &Path, configs: &Path, threads: usize, frames: usize) -> anyhow::Result<Stats> {
    eprintln!("timing the PyTorch reference's decoder steps ({threads} threads)");
    let args = ["--steps".to_string(), STEPS.to_string(), "--frames".into(), frames.to_string()];
    let v = torch(a, py, configs, threads, &args)?;
    let ms: Vec<f64> = v["step_ms"].as_array().context("no step_ms")?.iter().filter_map(|x| x.as_f64()).collect();
    anyhow::ensure!(!ms.is_empty(), "the PyTorch reference timed no step");
    Ok(stats(ms))
}

/// The PyTorch reference's window loop on a `seconds` recording: its runs as breakdowns.
fn torch_runs(a: &BenchArgs, py: &Path, configs: &Path, seconds: f64, threads: usize) -> anyhow::Result<Measured> {
    eprintln!("timing the PyTorch reference on {seconds:.0} s ({threads} threads)");
    let v = torch(a, py, configs, threads, &["--seconds".to_string(), seconds.to_string()])?;
    let runs = v["runs"].as_array().context("no runs")?;
    let runs: Vec<Breakdown> = runs.iter().map(breakdown_of).collect::<Option<_>>().context("a malformed run")?;
    anyhow::ensure!(!runs.is_empty(), "the PyTorch reference timed nothing");
    Ok(Measured::of(&runs))
}

fn breakdown_of(r: &Value) -> Option<Breakdown> {
    Some(Breakdown {
        total: r["total"].as_f64()?,
        encode: r["encode"].as_f64()?,
        decode: r["decode"].as_f64()?,
        steps: r["steps"].as_u64()? as usize,
        tokens: r["tokens"].as_array()?.iter().map(|t| t.as_u64().map(|t| t as usize)).collect::<Option<_>>()?,
        refused: r["refused"].as_str().map(str::to_string),
        planned: r["windows"].as_u64()? as usize,
    })
}

/// What yued measured: the decoder steps, the frames of a window, and each recording's runs.
struct Ours {
    steps: Stats,
    frames: usize,
    runs: Vec<(f64, Measured)>,
}

fn step_row(frames: usize) -> String {
    format!("decoder step ({STEPS} from empty, {frames} frames)")
}

/// Times yued: the decoder steps, then each recording of `--transcribe-seconds`.
fn measure_ours(a: &BenchArgs, head: &Path, backend: &Backend) -> anyhow::Result<Ours> {
    let mut tr = Transcriber::open(head, backend).with_context(|| format!("loading {}", head.display()))?;
    eprintln!("timing {STEPS} decoder steps");
    let (steps, frames) = step_ms(a, &mut tr, backend)?;
    let mut runs = Vec::new();
    for &seconds in &a.transcribe_seconds {
        anyhow::ensure!(seconds >= 1.0, "--transcribe-seconds: at least one second, not {seconds}");
        eprintln!("transcribing {seconds:.0} s ({} reps)", a.reps);
        runs.push((seconds, measure(a, &mut tr, backend, &recording(seconds))?));
    }
    Ok(Ours { steps, frames, runs })
}

/// Times the PyTorch reference on the same work and pushes both sides' rows.
fn push_beside_torch(
    a: &BenchArgs,
    py: &Path,
    configs: &Path,
    threads: usize,
    ours: &Ours,
    t: &mut Table,
) -> anyhow::Result<()> {
    let theirs = torch_step_ms(a, py, configs, threads, ours.frames)?;
    t.push(SECTION, step_row(ours.frames), "ms", ours.steps, String::new());
    let note = format!("yued {:.2}x as fast a step", theirs.median / ours.steps.median);
    t.push(SECTION, format!("  PyTorch reference, float32, {threads} threads"), "ms", theirs, note);
    for (seconds, m) in &ours.runs {
        let torch = torch_runs(a, py, configs, *seconds, threads)?;
        push_ours(t, *seconds, m);
        push_torch(t, threads, m, &torch);
    }
    Ok(())
}

pub fn run(a: &BenchArgs, backend: &Backend, threads: usize, t: &mut Table) -> anyhow::Result<()> {
    let head = head_file(a)?;
    // yued's models and their buffers are gone before PyTorch builds its own.
    let ours = measure_ours(a, &head, backend)?;
    let Some(py) = &a.torch_python else {
        t.push(SECTION, step_row(ours.frames), "ms", ours.steps, String::new());
        ours.runs.iter().for_each(|(seconds, m)| push_ours(t, *seconds, m));
        return Ok(());
    };
    let configs = std::env::temp_dir().join(format!("yued-bench-transcribe-{}.json", std::process::id()));
    std::fs::write(&configs, configs_json(&head)?.to_string())?;
    let result = push_beside_torch(a, py, &configs, threads, &ours, t);
    let _ = std::fs::remove_file(&configs);
    result
}
