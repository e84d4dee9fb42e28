//! `yued bench --only stream`: time to first audio as a listener hears it, on the real
//! daemon. The bench starts `yued serve` on the measured model pair (this very binary, a
//! free loopback port, a scratch data directory), sends each song over `/synth/stream`
//! (the request in, the job's events and PCM frames out, one socket) and times submission
//! to the first binary frame and to `done`: under the default STRICT policy and under
//! `--keep-loaded`, each with yue2.cpp's chunk rule (`stream_chunk_seconds` 0) and with
//! streaming chunks, side by side in one run.
use super::bench_common::{demo_pair, stats, BenchArgs, Row, StreamPolicy};
use anyhow::{bail, Context};
use futures_util::{SinkExt, StreamExt};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// A daemon of this binary serving the bench's models; killed when dropped.
struct Served {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    /// `models`: the model flags of `yued serve` (`--model M --vae V`, or `--models DIR`).
    fn start(a: &BenchArgs, models: &[std::ffi::OsString], keep_loaded: bool) -> anyhow::Result<Served> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = dir.path().join("daemon.log");
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("serve").args(models).arg("--data-dir").arg(dir.path().join("data"));
        cmd.args([
            "--port",
            &port.to_string(),
            "--device",
            &a.device.device,
            "--threads",
            &a.device.threads.to_string(),
        ]);
        cmd.arg(if keep_loaded { "--keep-loaded" } else { "--strict" });
        let child =
            cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log)?).spawn().context("starting yued serve")?;
        let mut s = Served { child, port, log, _dir: dir };
        let t0 = Instant::now();
        while !s.get("/health").is_ok_and(|b| b.contains("\"ready\":true")) {
            if let Some(status) = s.child.try_wait()? {
                bail!("yued serve exited ({status}): {}", std::fs::read_to_string(&s.log).unwrap_or_default());
            }
            if t0.elapsed() > Duration::from_secs(1800) {
                bail!("yued serve did not become ready in 30 minutes");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(s)
    }

    /// A plain HTTP/1.0 GET on loopback: the body.
    fn get(&self, path: &str) -> std::io::Result<String> {
        let mut c = TcpStream::connect(("127.0.0.1", self.port))?;
        write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut s = String::new();
        c.read_to_string(&mut s)?;
        Ok(s.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    }

    /// One song over `/synth/stream`: seconds from sending the request to the first
    /// binary frame and to `done`.
    fn song(&self, rt: &tokio::runtime::Runtime, body: &str) -> anyhow::Result<(f64, f64)> {
        rt.block_on(async {
            let (mut ws, _) =
                tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/synth/stream?format=pcm16", self.port))
                    .await?;
            let t0 = Instant::now();
            ws.send(Message::text(body)).await?;
            let mut first = None;
            while let Some(m) = ws.next().await {
                match m? {
                    Message::Binary(_) => {
                        first.get_or_insert(t0.elapsed().as_secs_f64());
                    }
                    Message::Text(t) => {
                        let v: serde_json::Value = serde_json::from_str(t.as_str())?;
                        match v["event"].as_str() {
                            Some("done") => return Ok((first.unwrap_or(f64::NAN), t0.elapsed().as_secs_f64())),
                            Some("failed" | "cancelled" | "error") => bail!("the bench song ended: {v}"),
                            _ => {}
                        }
                    }
                    Message::Close(f) => bail!("the daemon closed the stream: {f:?}"),
                    _ => {}
                }
            }
            bail!("the stream ended before done")
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The request of a bench song of `seconds`, chunked by `stream` seconds (0: yue2.cpp's rule).
fn request(seconds: f64, code_rate: f64, stream: f64) -> String {
    serde_json::json!({
        "style": "bench", "lyrics": "[verse] la la la", "cot": "off", "duration": seconds, "lm_seed": 1, "seed": 2,
        "output_format": "wav16", "semantic_sampling": { "min_tokens": (seconds * code_rate) as u32 },
        "stream_chunk_seconds": stream,
    })
    .to_string()
}

/// The YuE2 rows: for each policy, yue2.cpp's chunks and `--stream-seconds` chunks.
pub(super) fn run(
    a: &BenchArgs,
    model: &Path,
    vae: &Path,
    code_rate: f64,
    emit: &mut dyn FnMut(Row),
) -> anyhow::Result<()> {
    let models = ["--model".into(), model.into(), "--vae".into(), vae.into()];
    let songs: Vec<(String, String)> = [0.0, a.stream_seconds]
        .iter()
        .map(|&s| {
            (
                if s > 0.0 { format!("{s} s chunks") } else { "yue2.cpp's chunks".to_string() },
                request(a.e2e_seconds, code_rate, s),
            )
        })
        .collect();
    measure(a, &models, &songs, emit)
}

/// The MiniMax Music 3 rows (`--family mm3 --only stream`): for each policy, a song of
/// `--e2e-seconds` from the five files in `dir` (under --keep-loaded each window renders
/// as soon as its frames exist). The daemon also serves YuE2's tiny demo, idle.
pub(super) fn run_mm3(a: &BenchArgs, dir: &Path, emit: &mut dyn FnMut(Row)) -> anyhow::Result<()> {
    let (m, v) = demo_pair(&a.cache, "tiny")?;
    let models = ["--models".into(), dir.into(), "--model".into(), m.into(), "--vae".into(), v.into()];
    let body = serde_json::json!({
        "family": "mm3", "caption": "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright \
            vocals",
        "lyrics": "[verse]\nneon lights over the city\n[chorus]\nwe run, we run", "duration": a.e2e_seconds,
            "lm_seed": 21, "seed": 2,
        "output_format": "wav16",
    });
    measure(a, &models, &[("200-frame windows".to_string(), body.to_string())], emit)
}

/// The unmeasured run before a setting's rows: the song itself, or under `quick` the same
/// request cut to 4 s.
fn warm_up(body: &str, quick: bool) -> String {
    let mut v: serde_json::Value = serde_json::from_str(body).expect("the bench's own request");
    if quick {
        let seconds = v["duration"].as_f64().unwrap_or(4.0);
        if seconds > 4.0 {
            v["duration"] = 4.0.into();
            if let Some(min) = v.pointer_mut("/semantic_sampling/min_tokens") {
                *min = ((min.as_f64().unwrap_or(0.0) * 4.0 / seconds).round() as u64).into();
            }
        }
    }
    v.to_string()
}

/// For each policy and each (label, request): the time to first audio, its share of the
/// render in the note; each row goes to `emit` as soon as it is measured (a full-shape row
/// is many minutes).
fn measure(
    a: &BenchArgs,
    models: &[std::ffi::OsString],
    songs: &[(String, String)],
    emit: &mut dyn FnMut(Row),
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let reps = if a.quick { 1 } else { a.reps.min(3) };
    let policies = [(false, "STRICT"), (true, "--keep-loaded")].into_iter().filter(|(keep, _)| match a.stream_policy {
        StreamPolicy::Both => true,
        StreamPolicy::Strict => !keep,
        StreamPolicy::KeepLoaded => *keep,
    });
    for (keep_loaded, policy) in policies {
        let served = Served::start(a, models, keep_loaded)?;
        for (label, body) in songs {
            let pb = super::progress_bar(reps as u64, "stream");
            pb.set_message(format!("{policy}, {label}"));
            // One unmeasured run per setting: its shapes' first graphs and buffers. Under
            // --quick a 4 s song of the same setting (at full shapes on a CPU the song
            // itself is many minutes; the streaming chunks' shapes are the same).
            served.song(&rt, &warm_up(body, a.quick))?;
            let mut runs = Vec::with_capacity(reps);
            for _ in 0..reps {
                runs.push(served.song(&rt, body)?);
                pb.inc(1);
            }
            pb.finish_and_clear();
            let first = stats(runs.iter().map(|r| r.0).collect());
            let total = stats(runs.iter().map(|r| r.1).collect());
            let what = format!("first audio, {:.0} s song, {policy}, {label}", a.e2e_seconds);
            let note = format!("{:.1}% of the {:.1} s render", 100.0 * first.median / total.median, total.median);
            emit(Row { section: "stream", what, unit: "s", stats: first, note });
        }
    }
    Ok(())
}

/// `yued bench --only seam`: what streaming chunks do to the audio. One song's codes are
/// painted on several chunk grids (yue2.cpp's single chunk; `--stream-seconds` chunks with
/// no left context, with yued's one second, and with two) from the same noise, decoded on
/// the same VAE tiles, and read at the chunk boundaries: the latent jump across each
/// boundary and the sample-to-sample difference around it, each against its typical value
/// over the song (1.0: a boundary reads like any other frame), and how far the whole
/// render moved from the single chunk's.
pub(super) fn seam(a: &BenchArgs, model: &Path, vae: &Path, code_rate: f64) -> anyhow::Result<Vec<Row>> {
    use yued_engine::cancel::CancelToken;
    use yued_engine::models::yue2::nar::ChunkPlan;
    use yued_engine::models::yue2::pipeline::{Pipeline, PipelineOptions};
    use yued_protocol::request::yue2::STREAM_CONTEXT_FRAMES;
    let mut p = Pipeline::load(model, vae, a.device.open()?, &PipelineOptions::default())?;
    let req: yued_protocol::Yue2Request = serde_json::from_str(&request(a.e2e_seconds, code_rate, a.stream_seconds))?;
    let s = yued_actors::settings::yue2(&req)?;
    let cancel = CancelToken::new();
    let (meta, prefix) = p
        .shared
        .compose_codes(&mut p.ar, &p.backend, &s, &cancel, &mut |_| {})?
        .into_iter()
        .next()
        .map(|w| (w.meta, w.prefix))
        .context("no song")?;
    let frames = meta.codes.len();
    let step = s.stream.map(|(f, _)| f).context("--stream-seconds must be at least 2")?;
    let single = ChunkPlan::new(p.shared.max_seq, prefix.len(), None).context("the song does not fit one chunk")?;
    anyhow::ensure!(
        single.step >= frames,
        "a {frames}-frame song takes several chunks even under yue2.cpp's rule: pick a shorter --e2e-seconds"
    );
    let (core, halo) = (s.tile_core(p.shared.vae_core, p.shared.vae_halo), p.shared.vae_halo);
    let boundaries: Vec<usize> = (1..).map(|c| c * step).take_while(|&b| b < frames).collect();
    let secs = a.stream_seconds;
    let grids = [
        ("one chunk (yue2.cpp's rule)".to_string(), single),
        (format!("{secs} s chunks, no left context"), ChunkPlan { step, context: 0 }),
        (
            format!("{secs} s chunks, {} s left context (yued)", STREAM_CONTEXT_FRAMES as f64 / code_rate),
            ChunkPlan { step, context: STREAM_CONTEXT_FRAMES },
        ),
        (
            format!("{secs} s chunks, {} s left context", 2.0 * STREAM_CONTEXT_FRAMES as f64 / code_rate),
            ChunkPlan { step, context: 2 * STREAM_CONTEXT_FRAMES },
        ),
    ];
    let mut rows = Vec::new();
    let mut reference: Option<Vec<f32>> = None;
    for (what, plan) in grids {
        let work = p.shared.prefill_planned(&mut p.ar, &p.backend, plan, meta.clone(), prefix.clone(), &cancel)?;
        let lat = p.shared.render(&mut p.nar, &p.backend, work, &s, &cancel, &mut |_| {})?.remove(0);
        let pcm = p.vae.decode_tiled(&p.backend, &lat, core, halo, &cancel, &mut |_| {})?;
        let hop = p.vae.info.hop();
        let samples = pcm.len() / p.vae.info.audio_channels;
        let left = &pcm[..samples];
        // Latent jump between consecutive frames.
        let c = p.nar.latent;
        let jump = |t: usize| {
            lat[t * c..(t + 1) * c]
                .iter()
                .zip(&lat[(t - 1) * c..t * c])
                .map(|(x, y)| ((x - y) as f64).powi(2))
                .sum::<f64>()
                .sqrt()
        };
        let mut all: Vec<f64> = (1..frames).map(jump).collect();
        all.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let lat_ratio = boundaries.iter().map(|&b| jump(b)).sum::<f64>() / boundaries.len() as f64 / all[all.len() / 2];
        // Sample-to-sample difference in 10 ms either side of each boundary.
        let diff_rms = |a: usize, b: usize| {
            ((a.max(1)..b.min(samples)).map(|n| ((left[n] - left[n - 1]) as f64).powi(2)).sum::<f64>()
                / (b.min(samples) - a.max(1)) as f64)
                .sqrt()
        };
        let w = hop / 4;
        let audio_ratio = boundaries.iter().map(|&b| diff_rms(b * hop - w, b * hop + w)).sum::<f64>()
            / boundaries.len() as f64
            / diff_rms(1, samples);
        let moved = match &reference {
            None => {
                reference = Some(lat.clone());
                0.0
            }
            Some(r) => (r.iter().zip(&lat).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>()
                / r.iter().map(|x| (*x as f64).powi(2)).sum::<f64>())
            .sqrt(),
        };
        let one = |v: f64| stats(vec![v]);
        let note = format!(
            "sample differences x{audio_ratio:.2} around the {} boundaries; latents {moved:.3} rel. RMS from one chunk",
            boundaries.len()
        );
        rows.push(Row {
            section: "seam",
            what: format!("latent jump at boundaries, {what}"),
            unit: "x typical",
            stats: one(lat_ratio),
            note,
        });
    }
    Ok(rows)
}
