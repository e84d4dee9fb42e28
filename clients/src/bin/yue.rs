//! `yue`: the command-line client of a yued daemon.
#![forbid(unsafe_code)]
use anyhow::Context;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use yue_client::{wav_header, Client, StreamMessage};
use yued_protocol::{JobId, StreamEvent};

#[derive(Parser)]
#[command(name = "yue", version, about = "Client of the yued song generation daemon")]
struct Cli {
    /// Daemon address.
    #[arg(long, env = "YUE_SERVER", default_value = "http://127.0.0.1:8087", global = true)]
    server: String,
    /// API key, when the daemon requires one.
    #[arg(long, env = "YUE_API_KEY", global = true)]
    api_key: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Submit a request, show its queue position and stage progress, and download it.
    Synth {
        /// Request JSON file.
        request: PathBuf,
        /// Write the audio as it renders (16-bit stereo WAV) to this file; a player can
        /// start on it before the song is finished. A job of several tracks writes one file
        /// per track: the first here, the others beside it as NAME-track01.wav, ...
        #[arg(long)]
        stream: Option<PathBuf>,
        /// Directory to unpack the finished result into (replay JSON, audio, latents).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Only submit and print the job id.
        #[arg(long)]
        no_wait: bool,
    },
    /// Print a job's status (or the daemon's when no id is given).
    Status {
        /// The job id `synth` printed (16 hex digits).
        id: Option<String>,
    },
    /// Download and unpack a finished job's result.
    Result {
        /// The job id (16 hex digits).
        id: String,
        /// Directory to unpack the result into.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Cancel a job.
    Cancel {
        /// The job id (16 hex digits).
        id: String,
    },
    /// Print the daemon's properties (version, models, formats, default request).
    Props,
    /// Serving overhead: an open-loop request rate against one route; prints the achieved
    /// rate and latency percentiles (from each request's scheduled time) as JSON.
    Load {
        /// Route, e.g. /health or /job?id=ID.
        #[arg(long, default_value = "/health")]
        path: String,
        /// POST this JSON body instead of a GET (e.g. a request to /synth).
        #[arg(long)]
        post: Option<String>,
        /// Requests per second to send.
        #[arg(long, default_value_t = 1000)]
        rps: u32,
        /// How long to send, in seconds.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Requests in flight at most.
        #[arg(long, default_value_t = 64)]
        connections: usize,
    },
    /// WebSocket fan-out: N listeners on one job's stream, every tile counted; JSON out.
    Fanout {
        /// The job id (16 hex digits) whose stream the listeners follow.
        id: String,
        /// WebSocket listeners to open.
        #[arg(long, default_value_t = 200)]
        listeners: usize,
    },
}

fn job_id(s: &str) -> anyhow::Result<JobId> {
    JobId::parse(s).map_err(|e| anyhow::anyhow!("{e}"))
}

fn main() {
    let cli = Cli::parse();
    let client = Client::new(&cli.server, cli.api_key.clone());
    if let Err(e) = run(&client, cli.command, &cli.server) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn unpack(client: &Client, id: &JobId, out: &PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    for (i, p) in client.result(id)?.into_iter().enumerate() {
        let name = p.filename.unwrap_or_else(|| format!("part{i}"));
        let path = out.join(format!("{id}-{name}"));
        std::fs::write(&path, &p.data).with_context(|| format!("writing {}", path.display()))?;
        println!("{} ({}, {} bytes)", path.display(), p.content_type, p.data.len());
    }
    Ok(())
}

fn run(client: &Client, cmd: Cmd, server: &str) -> anyhow::Result<()> {
    match cmd {
        Cmd::Load { path, post, rps, seconds, connections } => {
            let rt = tokio::runtime::Runtime::new()?;
            let url = format!("{}{path}", server.trim_end_matches('/'));
            let r = rt.block_on(yue_client::load::http_load(
                &url,
                post,
                client.api_key().map(String::from),
                rps,
                seconds,
                connections,
            ))?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            // Status 0: no answer at all (refused, reset, timed out).
            if r.statuses.keys().all(|&s| s == 0) {
                anyhow::bail!("no request to {url} was answered");
            }
        }
        Cmd::Fanout { id, listeners } => {
            let id = job_id(&id)?.to_string();
            let rt = tokio::runtime::Runtime::new()?;
            let ws = server.replacen("http", "ws", 1);
            let r =
                rt.block_on(yue_client::load::ws_fanout(&ws, &id, client.api_key().map(String::from), listeners))?;
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
        Cmd::Props => println!("{}", serde_json::to_string_pretty(&client.props()?)?),
        Cmd::Status { id: None } => {
            let v = client.server_status()?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Cmd::Status { id: Some(id) } => println!("{}", serde_json::to_string_pretty(&client.status(&job_id(&id)?)?)?),
        Cmd::Cancel { id } => {
            client.cancel(&job_id(&id)?)?;
            println!("cancelled {id}");
        }
        Cmd::Result { id, out } => unpack(client, &job_id(&id)?, &out)?,
        Cmd::Synth { request, stream, out, no_wait } => synth(client, &request, stream.as_deref(), &out, no_wait)?,
    }
    Ok(())
}

/// `yue synth`: submit, follow the job's stream (progress, and its audio into `stream` as
/// a WAV), then unpack the result.
fn synth(client: &Client, request: &Path, stream: Option<&Path>, out: &PathBuf, no_wait: bool) -> anyhow::Result<()> {
    let body = std::fs::read_to_string(request).with_context(|| format!("reading {}", request.display()))?;
    let reply = client.submit_json(&body)?;
    let id = reply.id;
    println!("job {id}");
    if !reply.ignored.is_empty() {
        eprintln!("warning: the daemon ignored these fields of the request: {}", reply.ignored.join(", "));
    }
    if no_wait {
        return Ok(());
    }
    let pb = ProgressBar::new(1);
    let style = "{msg:>12} [{bar:40}] {pos}/{len} {elapsed_precise} (left {eta})";
    pb.set_style(ProgressStyle::with_template(style).unwrap().progress_chars("=> "));
    // One live file per track: the tile event before each audio frame names its track.
    let mut wavs: std::collections::BTreeMap<u32, (PathBuf, LiveWav)> = Default::default();
    let (mut track, mut format) = (0u32, None);
    let mut shown_stage = None;
    let mut outcome: Option<StreamEvent> = None;
    let mut io_err = None;
    client.stream(&id, "pcm16", &mut |m| match m {
        StreamMessage::Event(StreamEvent::Queued { position }) => {
            pb.set_message(if position == 0 { "queued next".to_string() } else { format!("queued #{}", position + 1) })
        }
        StreamMessage::Event(StreamEvent::Stage { stage, done, total, .. }) => {
            // A new stage starts its own count (and clock) before it is shown.
            if shown_stage != Some(stage) {
                shown_stage = Some(stage);
                pb.reset();
                pb.set_length(total.max(1));
                pb.set_position(done.min(total.max(1)));
                pb.set_message(stage.as_str().to_string());
            } else {
                pb.set_length(total.max(1));
                pb.set_position(done.min(total.max(1)));
            }
        }
        StreamMessage::Event(StreamEvent::Score { abc }) => pb.println(format!("score: {} lines", abc.lines().count())),
        StreamMessage::Event(StreamEvent::Codes { frames }) => pb.println(format!("codes: {frames} frames")),
        StreamMessage::Event(StreamEvent::Format { sample_rate, channels, .. }) => {
            format = Some((sample_rate, channels));
            for (_, w) in wavs.values_mut() {
                if let Err(e) = w.format(sample_rate, channels) {
                    io_err = Some(e);
                }
            }
        }
        StreamMessage::Event(StreamEvent::Tile { track: t, .. }) => track = t,
        StreamMessage::Audio(b) => {
            let Some(base) = stream else { return };
            if let std::collections::btree_map::Entry::Vacant(slot) = wavs.entry(track) {
                let path = track_path(base, track);
                let opened = LiveWav::create(&path).and_then(|mut w| {
                    if let Some((rate, channels)) = format {
                        w.format(rate, channels)?;
                    }
                    Ok(w)
                });
                match opened {
                    Ok(w) => {
                        slot.insert((path, w));
                    }
                    Err(e) => {
                        io_err = Some(std::io::Error::other(e.to_string()));
                        return;
                    }
                }
            }
            if let Some(Err(e)) = wavs.get_mut(&track).map(|(_, w)| w.append(&b)) {
                io_err = Some(e);
            }
        }
        StreamMessage::Event(e) if e.is_terminal() => outcome = Some(e),
        _ => {}
    })?;
    pb.finish_and_clear();
    if let Some(e) = io_err {
        return Err(e.into());
    }
    for (path, w) in wavs.into_values() {
        let seconds = w.finish()?;
        println!("streamed {} ({seconds:.1} s)", path.display());
    }
    match outcome {
        Some(StreamEvent::Done { tracks, audio_seconds }) => {
            println!("done: {tracks} track(s), {audio_seconds:.1} s of audio");
            unpack(client, &id, out)
        }
        Some(StreamEvent::Failed { error }) => anyhow::bail!("job {id} failed: {error}"),
        Some(StreamEvent::Cancelled {}) => anyhow::bail!("job {id} was cancelled"),
        _ => anyhow::bail!("the stream of job {id} ended early; `yue status {id}` tells more"),
    }
}

/// Where track `track`'s live audio goes: `base` for the first, `NAME-trackNN.EXT` beside it
/// for the others.
fn track_path(base: &Path, track: u32) -> PathBuf {
    if track == 0 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "live".into());
    let ext = base.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    base.with_file_name(format!("{stem}-track{track:02}{ext}"))
}

/// A WAV file written while the stream plays: its header is written again once the
/// stream's format event tells the rate and channels, and at the end with the length.
struct LiveWav {
    file: std::fs::File,
    written: u64,
    format: (u32, u16),
}

impl LiveWav {
    fn create(p: &Path) -> anyhow::Result<Self> {
        let mut file = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        file.write_all(&wav_header(u32::MAX - 36, 48000, 2))?;
        Ok(LiveWav { file, written: 0, format: (48000, 2) })
    }

    fn format(&mut self, sample_rate: u32, channels: u16) -> std::io::Result<()> {
        self.format = (sample_rate, channels);
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&wav_header(u32::MAX - 36, sample_rate, channels))?;
        self.file.seek(SeekFrom::End(0)).map(|_| ())
    }

    fn append(&mut self, pcm16: &[u8]) -> std::io::Result<()> {
        self.written += pcm16.len() as u64;
        self.file.write_all(pcm16)?;
        self.file.flush()
    }

    /// The header with the length; the seconds streamed.
    fn finish(mut self) -> std::io::Result<f64> {
        let (rate, channels) = self.format;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&wav_header(self.written.min(u32::MAX as u64 - 36) as u32, rate, channels))?;
        Ok(self.written as f64 / (2.0 * channels as f64) / rate as f64)
    }
}
