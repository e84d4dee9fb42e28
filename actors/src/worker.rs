//! The compute worker: a dedicated thread fed by a crossbeam channel. It owns the models
//! (the pipeline) and runs one job at a time, never on the HTTP executor. Everything a
//! listener can use early goes out the moment it exists: stage progress to the scheduler,
//! score, codes and decoded PCM tiles to the StreamHub; the semantic codes also go to the
//! journal so a restart resumes from them.
use crate::hub::{PcmTile, Publish, StreamHub};
use crate::journal::{SongCodes, VaeOp, VaeTask};
use crate::metrics::Metrics;
use crate::results::ResultStore;
use crate::scheduler::{CodesReady, Finished, Outcome, Progress, Scheduler, WorkerReady};
use actix::Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use yued_audio::encode::encode;
use yued_audio::{peak_normalize, Pcm};
use yued_engine::generate::CancelToken;
use yued_engine::ggml::Backend;
use yued_engine::pipeline::{Event, Pipeline, PipelineError, PipelineOptions, Track};
use yued_protocol::{JobId, JobMetrics, OutputFormat, Stage, StreamEvent, Yue2Request};

pub enum WorkerCmd {
    Run(Box<RunJob>),
    Shutdown,
}

pub struct RunJob {
    pub id: JobId,
    pub request: Yue2Request,
    /// Songs whose codes the journal already holds (a resumed job).
    pub known_songs: Vec<SongCodes>,
    pub cancel: CancelToken,
    pub queue_seconds: f64,
    /// A `/vae` job instead of a song.
    pub vae: Option<VaeTask>,
}

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub model: PathBuf,
    pub vae: PathBuf,
    pub device: String,
    pub threads: usize,
    pub options: PipelineOptions,
    pub keep_loaded: bool,
}

/// Whether this build can write the format.
pub fn format_supported(f: OutputFormat) -> bool {
    yued_audio::encode::supported(f)
}

pub fn spawn(cfg: WorkerConfig, rx: crossbeam_channel::Receiver<WorkerCmd>, scheduler: Addr<Scheduler>, hub: Addr<StreamHub>, results: Arc<ResultStore>, metrics: Metrics) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("yued-compute".into())
        .spawn(move || {
            let loaded = Backend::new(&cfg.device).map_err(|e| e.to_string()).and_then(|b| {
                b.set_threads(cfg.threads);
                tracing::info!(device = b.name(), model = %cfg.model.display(), "loading the pipeline");
                Pipeline::load(&cfg.model, &cfg.vae, b, &cfg.options).map_err(|e| e.to_string())
            });
            let mut pipeline = match loaded {
                Ok(p) => {
                    metrics.module_loads_total.inc_by(3);
                    metrics.resident_weight_bytes.set((p.ar.weight_bytes() + p.nar.weight_bytes() + p.vae.weight_bytes()) as i64);
                    tracing::info!(weights = p.ar.weight_bytes() + p.nar.weight_bytes() + p.vae.weight_bytes(), "pipeline ready");
                    Some(p)
                }
                Err(e) => {
                    tracing::error!(error = %e, "the pipeline failed to load: every job will fail");
                    None
                }
            };
            scheduler.do_send(WorkerReady);
            while let Ok(cmd) = rx.recv() {
                match cmd {
                    WorkerCmd::Shutdown => break,
                    WorkerCmd::Run(job) => {
                        let id = job.id.clone();
                        let outcome = match pipeline.as_mut() {
                            None => Outcome::Failed("the model failed to load; see the daemon log".into()),
                            Some(p) => {
                                let span = tracing::info_span!("job", job = %id);
                                let _g = span.enter();
                                match &job.vae {
                                    Some(task) => run_vae_job(p, &job, task, &cfg, &scheduler, &hub, &results),
                                    None => run_job(p, &job, &cfg, &scheduler, &hub, &results, &metrics),
                                }
                            }
                        };
                        scheduler.do_send(Finished { id, outcome });
                    }
                }
            }
            tracing::info!("compute worker stopped");
        })
        .expect("spawn the compute thread")
}

/// Rate limiter of progress messages: a new stage, or a step of at least 1%.
struct Throttle {
    last: Option<(Stage, usize)>,
}

impl Throttle {
    fn pass(&mut self, stage: Stage, done: usize, total: usize) -> bool {
        let step = (total / 100).max(1);
        let ok = match self.last {
            Some((s, d)) => s != stage || done >= d + step || done == total,
            None => true,
        };
        if ok {
            self.last = Some((stage, done));
        }
        ok
    }
}

fn run_job(p: &mut Pipeline, job: &RunJob, cfg: &WorkerConfig, scheduler: &Addr<Scheduler>, hub: &Addr<StreamHub>, results: &ResultStore, metrics: &Metrics) -> Outcome {
    let t0 = Instant::now();
    let req = &job.request;
    if !format_supported(req.output_format) {
        return Outcome::Failed(format!("output_format {} is not available in this build", req.output_format.name()));
    }
    let mut throttle = Throttle { last: None };
    let mut stage_started: Option<(Stage, Instant, usize)> = None;
    let mut stream_peak = 1.0f32;
    let mut tile_counter = 0u32;
    let mut on_event = |e: Event<'_>| match e {
        Event::Progress { stage, done, total, .. } => {
            match stage_started {
                Some((s, _, _)) if s == stage => {}
                _ => {
                    if let Some((s, at, _)) = stage_started.take() {
                        metrics.stage_seconds.with_label_values(&[s.as_str()]).observe(at.elapsed().as_secs_f64());
                    }
                    stage_started = Some((stage, Instant::now(), 0));
                }
            }
            if let Some(st) = stage_started.as_mut() {
                st.2 = done;
            }
            if throttle.pass(stage, done, total) {
                scheduler.do_send(Progress { id: job.id.clone(), stage, done, total });
                let progress = if total > 0 { done as f32 / total as f32 } else { 0.0 };
                hub.do_send(Publish::Event(job.id.clone(), StreamEvent::Stage { stage, progress, done: done as u64, total: total as u64 }));
            }
        }
        Event::Score { abc, .. } => hub.do_send(Publish::Event(job.id.clone(), StreamEvent::Score { abc: abc.to_string() })),
        Event::Codes { song, abc, codes } => {
            scheduler.do_send(CodesReady { id: job.id.clone(), song: SongCodes { song, abc: abc.to_string(), codes: codes.to_vec() } });
            hub.do_send(Publish::Event(job.id.clone(), StreamEvent::Codes { frames: codes.len() as u32 }));
        }
        Event::Latents { .. } => {}
        Event::Tile { track, tile } => {
            // The final file is normalised over the whole song, which is not known yet:
            // the stream only ever attenuates, by the loudest peak heard so far.
            let peak = tile.pcm.iter().fold(0f32, |m, x| m.max(x.abs()));
            stream_peak = stream_peak.max(peak);
            let planar: Vec<f32> = tile.pcm.iter().map(|x| x / stream_peak).collect();
            hub.do_send(Publish::Tile(job.id.clone(), PcmTile { track: track as u32, index: tile_counter, start_sample: tile.start_sample as u64, channels: 2, planar }));
            tile_counter += 1;
        }
    };
    let result = if !job.known_songs.is_empty() && (job.known_songs.len() as u32 == req.lm_batch_size.max(1) || !req.semantic_tokens.is_empty()) {
        // Resume from the journaled codes: every song through the replay path.
        let mut songs = job.known_songs.clone();
        songs.sort_by_key(|s| s.song);
        let mut all = Vec::new();
        let mut err = None;
        for s in songs {
            let mut r = req.clone();
            r.semantic_tokens = s.codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
            r.abc = s.abc.clone();
            r.source_tokens.clear();
            r.lm_batch_size = 1;
            r.lm_seed = req.lm_seed + s.song as i64;
            match p.run(&r, &job.cancel, &mut on_event) {
                Ok(mut ts) => {
                    for t in ts.iter_mut() {
                        t.song = s.song;
                    }
                    all.extend(ts);
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(all),
        }
    } else {
        p.run(req, &job.cancel, &mut on_event)
    };
    if let Some((s, at, _)) = stage_started {
        metrics.stage_seconds.with_label_values(&[s.as_str()]).observe(at.elapsed().as_secs_f64());
    }
    let tracks: Vec<Track> = match result {
        Ok(t) => t,
        Err(PipelineError::Cancelled) => return Outcome::Cancelled,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let pipeline_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut files = Vec::new();
    let mut audio_seconds = 0.0;
    let mut truncated = false;
    for (k, t) in tracks.iter().enumerate() {
        if job.cancel.is_cancelled() {
            return Outcome::Cancelled;
        }
        let mut pcm = t.pcm.clone();
        if req.output_format.normalizes() {
            peak_normalize(&mut pcm, req.peak_clip);
        }
        let audio = Pcm::new(48000, 2, pcm);
        audio_seconds += audio.seconds();
        truncated |= t.truncated;
        let encoded = match encode(&audio, req.output_format, req.mp3_bitrate) {
            Ok(w) => w,
            Err(e) => return Outcome::Failed(format!("encoding track {k}: {e}")),
        };
        files.push((format!("track{k:02}.json"), "application/json".to_string(), serde_json::to_vec_pretty(&t.replay).unwrap()));
        files.push((format!("track{k:02}.{}", req.output_format.extension()), req.output_format.mime().to_string(), encoded));
        files.push((format!("track{k:02}.vae"), "application/octet-stream".to_string(), t.latents.iter().flat_map(|x| x.to_le_bytes()).collect()));
    }
    if let Err(e) = results.save(&job.id, files) {
        return Outcome::Failed(format!("saving the result: {e}"));
    }
    let encoding = t1.elapsed().as_secs_f64();
    metrics.audio_seconds_total.inc_by(audio_seconds);
    if pipeline_seconds > 0.0 {
        metrics.real_time_factor.observe(audio_seconds / pipeline_seconds);
    }
    let m = JobMetrics {
        queue_seconds: job.queue_seconds,
        pipeline_seconds,
        encoding_packaging_seconds: encoding,
        worker_seconds: pipeline_seconds + encoding,
        audio_seconds,
        steps: req.steps,
        truncated,
        keep_loaded: cfg.keep_loaded,
        module_loads: 0,
        resident_modules: 3,
        resident_weight_bytes: (p.ar.weight_bytes() + p.nar.weight_bytes() + p.vae.weight_bytes()) as u64,
        ..JobMetrics::default()
    };
    Outcome::Done { tracks: tracks.len() as u32, audio_seconds, metrics: Some(m) }
}

/// A `/vae` job: encode an uploaded file to raw latents, or decode uploaded latents to the
/// request's output format, streaming the decoded tiles like a song's.
fn run_vae_job(p: &mut Pipeline, job: &RunJob, task: &VaeTask, cfg: &WorkerConfig, scheduler: &Addr<Scheduler>, hub: &Addr<StreamHub>, results: &ResultStore) -> Outcome {
    let bytes = match std::fs::read(&task.input) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("reading the upload {}: {e}", task.input.display())),
    };
    let lat = p.vae.info.latent_channels;
    let progress = |stage: Stage, done: usize, total: usize| {
        scheduler.do_send(Progress { id: job.id.clone(), stage, done, total });
        let f = if total > 0 { done as f32 / total as f32 } else { 0.0 };
        hub.do_send(Publish::Event(job.id.clone(), StreamEvent::Stage { stage, progress: f, done: done as u64, total: total as u64 }));
    };
    let files = match task.op {
        VaeOp::Encode => {
            progress(Stage::Encode, 0, 1);
            let z = match crate::codec::audio_to_latents(&mut p.vae, &p.backend, &bytes) {
                Ok(z) => z,
                Err(e) => return Outcome::Failed(format!("audio: {e}")),
            };
            progress(Stage::Encode, 1, 1);
            let secs = (z.len() / lat) as f64 / 25.0;
            tracing::info!(frames = z.len() / lat, "vae encode done");
            (vec![("latents.vae".to_string(), "application/octet-stream".to_string(), z.iter().flat_map(|x| x.to_le_bytes()).collect())], secs)
        }
        VaeOp::Decode => {
            let z: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let req = &job.request;
            let tiles = (z.len() / lat).div_ceil(cfg.options.vae_core.max(1));
            let mut index = 0u32;
            let mut stream_peak = 1.0f32;
            let opts = crate::codec::DecodeOptions { format: req.output_format, peak_clip: req.peak_clip, mp3_bitrate: req.mp3_bitrate, core: cfg.options.vae_core, halo: cfg.options.vae_halo };
            let decoded = crate::codec::latents_to_audio(&mut p.vae, &p.backend, &z, opts, &job.cancel, &mut |tile| {
                let peak = tile.pcm.iter().fold(0f32, |m, x| m.max(x.abs()));
                stream_peak = stream_peak.max(peak);
                let planar: Vec<f32> = tile.pcm.iter().map(|x| x / stream_peak).collect();
                hub.do_send(Publish::Tile(job.id.clone(), PcmTile { track: 0, index, start_sample: tile.start_sample as u64, channels: 2, planar }));
                index += 1;
                progress(Stage::Decode, index as usize, tiles);
            });
            if job.cancel.is_cancelled() {
                return Outcome::Cancelled;
            }
            let (audio, encoded) = match decoded {
                Ok(x) => x,
                Err(e) => return Outcome::Failed(format!("decode: {e}")),
            };
            let f = req.output_format;
            (vec![(format!("audio.{}", f.extension()), f.mime().to_string(), encoded)], audio.seconds())
        }
    };
    let (files, audio_seconds) = files;
    if let Err(e) = results.save(&job.id, files) {
        return Outcome::Failed(format!("saving the result: {e}"));
    }
    Outcome::Done { tracks: 1, audio_seconds, metrics: None }
}
