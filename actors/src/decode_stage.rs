//! The decode stage: decodes each track tile by tile as its latent chunks arrive
//! (a tile waits only for its right halo), publishes every tile to the StreamHub the
//! moment it is decoded, and hands each finished track to the Encoder. It also runs the
//! jobs of an upload: the `/vae` jobs (the VAE's own work) and the listening jobs (`listen`).
use crate::hub::{Publish, StreamHub};
use crate::messages::{EncCmd, Finished, JobCtx, Outcome, TrackOut};
use crate::model_store::{ComponentKey, GroupPin};
use crate::stage::{guarded, test_fault, FirstAudio, Links, ProgressSink};
use actix::Addr;
use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;
use std::sync::Arc;
use yued_audio::Pcm;
use yued_contract::results::ResultStore;
use yued_contract::stream::{PcmTile, TileEncoder};
use yued_contract::{UploadOp, UploadTask};
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::yue2::pipeline::SongMeta;
use yued_engine::models::yue2::vae::{Tile, TileStream, VaeError, VaeInfo, VaeModel};
use yued_engine::models::AudioSpec;
use yued_protocol::{JobId, Stage};

/// One track the NAR will send chunks of.
pub struct TrackPlan {
    pub meta: SongMeta,
    pub variation: u32,
    /// A streamed song still being written: its length (and `meta`) come with
    /// [`VaeCmd::TrackEnd`].
    pub open: bool,
}

/// How the decode stage tiles a job's tracks and names each finished one, as the job's
/// family says.
pub struct Tiling {
    /// Latent frames a tile decodes (its core; the halo is the daemon's).
    pub core: usize,
    /// The frames an open track counts at in the progress until its length is known.
    pub open_frames: usize,
    /// The request that renders a finished track (its song, its variation) again.
    pub replay: ReplayFn,
    /// The VAE the tracks are decoded with.
    pub vae: ComponentKey,
}

/// The replay request of a finished track: its song and its variation.
pub type ReplayFn = Box<dyn Fn(&SongMeta, u32) -> serde_json::Value + Send>;

/// A family's `/vae` job on the decode stage (its own decoder): `None` when the Encoder
/// reports the job.
/// It gets the operation and the upload's bytes (the decode stage reads the upload once the
/// job is not cancelled).
pub type UploadJobFn =
    fn(&Links, &Backend, &Arc<JobCtx>, UploadOp, &[u8], &ResultStore, &Sender<EncCmd>) -> Option<Outcome>;

pub enum VaeCmd {
    /// A job's tracks, in track order, how to tile them, and the synthesis-group pin held
    /// until the last tile is out.
    Begin {
        job: Arc<JobCtx>,
        tracks: Vec<TrackPlan>,
        tiling: Tiling,
        pin: GroupPin,
    },
    Latents {
        id: JobId,
        track: usize,
        start_frame: usize,
        latents: Vec<f32>,
    },
    /// An open track's song is complete: its codes (hence its length) and score.
    TrackEnd {
        id: JobId,
        track: usize,
        meta: SongMeta,
    },
    /// The NAR gave up on the job: drop its state.
    Abort(JobId),
    /// A job of an upload (`/vae`, `/tokenize`), with its group's pin and its runner.
    UploadJob(Arc<JobCtx>, UploadTask, GroupPin, UploadJobFn),
    Shutdown,
}

/// A job's decoded tiles on their way to the listeners, with the decode progress.
pub(crate) struct LiveTiles {
    id: JobId,
    /// The stream only ever attenuates, by the loudest peak heard so far (the file is
    /// normalised over the whole song, which is not known yet).
    peak: f32,
    sent: u32,
    total: usize,
    sink: ProgressSink,
    /// s16 and Ogg Opus for the listeners, made here on the compute thread (see the hub).
    encoder: TileEncoder,
    first_audio: FirstAudio,
}

impl LiveTiles {
    pub(crate) fn new(links: &Links, job: &JobCtx, total: usize, first_audio: FirstAudio) -> Self {
        LiveTiles {
            id: job.id.clone(),
            peak: 1.0,
            sent: 0,
            total,
            sink: ProgressSink::new(links, job),
            encoder: TileEncoder::new(&job.id),
            first_audio,
        }
    }

    /// The decode stage works on the job: its duration counts from the first call (its first
    /// latents), not from its first tile out.
    pub(crate) fn begin(&mut self) {
        self.sink.begin(Stage::Decode);
    }

    pub(crate) fn publish(&mut self, hub: &Addr<StreamHub>, track: usize, spec: AudioSpec, tile: Tile<'_>) {
        self.peak = self.peak.max(tile.pcm.iter().fold(0f32, |m, x| m.max(x.abs())));
        let planar: Vec<f32> = tile.pcm.iter().map(|x| x / self.peak).collect();
        let encoded = self.encoder.encode(&PcmTile {
            track: track as u32,
            index: self.sent,
            start_sample: tile.start_sample as u64,
            sample_rate: spec.sample_rate,
            channels: spec.channels,
            planar,
        });
        hub.do_send(Publish::Tile(self.id.clone(), encoded));
        self.first_audio.tile();
        self.sent += 1;
        self.sink.report(Stage::Decode, self.sent as usize, self.total);
    }

    /// After the job's last tile: the ends of its tracks' Opus streams, then the stage is over.
    pub(crate) fn finish(&mut self, hub: &Addr<StreamHub>) {
        for end in self.encoder.finish() {
            hub.do_send(Publish::Tile(self.id.clone(), end));
        }
        self.sink.close();
    }
}

struct JobState {
    job: Arc<JobCtx>,
    /// Each track's plan and its stream, taken when the track is complete.
    tracks: Vec<(TrackPlan, Option<TileStream>)>,
    tiling: Tiling,
    _pin: GroupPin,
    live: LiveTiles,
}

pub(crate) fn run(links: Links, rx: Receiver<VaeCmd>, enc_tx: Sender<EncCmd>, results: Arc<ResultStore>) {
    let backend = links.backend();
    let info = GgufFile::open(&links.cfg.vae)
        .map_err(|e| e.to_string())
        .and_then(|f| VaeModel::info(&f).map_err(|e| e.to_string()));
    let mut jobs: HashMap<JobId, JobState> = HashMap::new();
    while let Ok(cmd) = rx.recv() {
        match cmd {
            VaeCmd::Shutdown => break,
            VaeCmd::Abort(id) => {
                jobs.remove(&id);
            }
            VaeCmd::Begin { job, tracks, tiling, pin } => match &info {
                Ok(info) => match begin(&links, info, job.clone(), tracks, tiling, pin) {
                    Ok(st) => {
                        jobs.insert(job.id.clone(), st);
                    }
                    Err(e) => links.fail(&job, format!("VAE tile plan: {e}")),
                },
                Err(e) => links.fail(&job, format!("the VAE file: {e}")),
            },
            VaeCmd::Latents { id, track, start_frame, latents } => {
                let chunk = Chunk { track, start_frame: Some(start_frame), latents, end: None };
                on_chunk(&links, &backend, &enc_tx, &mut jobs, id, chunk);
            }
            VaeCmd::TrackEnd { id, track, meta } => {
                let chunk = Chunk { track, start_frame: None, latents: Vec::new(), end: Some(meta) };
                on_chunk(&links, &backend, &enc_tx, &mut jobs, id, chunk);
            }
            VaeCmd::UploadJob(job, task, _pin, run_job) => {
                let span = tracing::info_span!("job", job = %job.id);
                let _g = span.enter();
                let outcome = guarded(&links, &job, "vae", || {
                    test_fault("vae", &job);
                    match &backend {
                        Ok(b) => match read_upload(&job, &task) {
                            Ok(bytes) => run_job(&links, b, &job, task.op, &bytes, &results, &enc_tx),
                            Err(outcome) => Some(outcome),
                        },
                        Err(e) => Some(Outcome::Failed(format!("no compute backend: {e}"))),
                    }
                })
                .flatten();
                if let Some(outcome) = outcome {
                    links.scheduler.do_send(Finished::of(&job, outcome));
                }
            }
        }
    }
    let _ = enc_tx.send(EncCmd::Shutdown);
    tracing::info!("VAE stage stopped");
}

/// A job's tile streams, one a track (an open track counts at its budget until its length
/// is known).
fn begin(
    links: &Links,
    info: &VaeInfo,
    job: Arc<JobCtx>,
    tracks: Vec<TrackPlan>,
    tiling: Tiling,
    pin: GroupPin,
) -> Result<JobState, VaeError> {
    let (core, halo) = (tiling.core.max(1), links.cfg.options.vae_halo);
    let frames = |t: &TrackPlan| if t.open { tiling.open_frames } else { t.meta.codes.len() };
    let tiles_total = tracks.iter().map(|t| frames(t).div_ceil(core)).sum();
    let tracks = tracks
        .into_iter()
        .map(|t| {
            let stream =
                if t.open { TileStream::open(info, core, halo) } else { TileStream::new(info, frames(&t), core, halo) };
            stream.map(|s| (t, Some(s)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let live = LiveTiles::new(links, &job, tiles_total, FirstAudio::of_song(links, &job));
    Ok(JobState { job, tracks, tiling, _pin: pin, live })
}

/// A track's latents from the synthesis stage (`start_frame` None and `end` its song: the
/// end of an open track).
struct Chunk {
    track: usize,
    start_frame: Option<usize>,
    latents: Vec<f32>,
    end: Option<SongMeta>,
}

/// Decodes a chunk of a job's track; a finished track goes to the Encoder, and the job
/// leaves `jobs` when its last track has, or when it failed or was cancelled.
fn on_chunk(
    links: &Links,
    backend: &Result<Backend, String>,
    enc_tx: &Sender<EncCmd>,
    jobs: &mut HashMap<JobId, JobState>,
    id: JobId,
    chunk: Chunk,
) {
    let Some(st) = jobs.get_mut(&id) else { return };
    let span = tracing::info_span!("job", job = %id);
    let _g = span.enter();
    if st.job.cancel.is_cancelled() {
        links.cancelled(&st.job);
        jobs.remove(&id);
        return;
    }
    let job = st.job.clone();
    let track = chunk.track;
    st.live.begin();
    let decoded = guarded(links, &job, "vae", || {
        test_fault("vae", &job);
        decode_chunk(links, backend.as_ref().map_err(|e| e.clone()), st, chunk)
    });
    let Some(decoded) = decoded else {
        jobs.remove(&id);
        return;
    };
    match decoded {
        Ok(Some(t)) => {
            let of = st.tracks.len();
            // A finished track has given its stream up: the job is done when all have. The
            // stream's end goes out before the last track reaches the Encoder, so it
            // precedes the terminal event.
            let last = st.tracks.iter().all(|(_, s)| s.is_none());
            if last {
                st.live.finish(&links.hub);
            }
            let _ = enc_tx.send(EncCmd::Track { job, index: track, of, track: Box::new(t) });
            if last {
                jobs.remove(&id);
            }
        }
        Ok(None) => {}
        Err(VaeError::Cancelled) => {
            links.cancelled(&job);
            jobs.remove(&id);
        }
        Err(e) => {
            links.fail(&job, format!("VAE decode: {e}"));
            jobs.remove(&id);
        }
    }
}

/// Feeds one chunk to its track's tile stream (`start_frame` None: the end of an open
/// track, `end` its song); the finished track when this completed it.
fn decode_chunk(
    links: &Links,
    backend: Result<&Backend, String>,
    st: &mut JobState,
    chunk: Chunk,
) -> Result<Option<TrackOut>, VaeError> {
    let Chunk { track, start_frame, latents, end } = chunk;
    let backend = backend.map_err(VaeError::Input)?;
    let (plan, stream) =
        st.tracks.get_mut(track).ok_or_else(|| VaeError::Input(format!("no track {track} in this job")))?;
    let stream_ref = stream.as_mut().ok_or_else(|| VaeError::Input(format!("track {track} is already complete")))?;
    if let Some(start_frame) = start_frame.filter(|&f| f != stream_ref.received()) {
        return Err(VaeError::Input(format!(
            "track {track}: chunk at frame {start_frame}, expected {}",
            stream_ref.received()
        )));
    }
    if let Some(meta) = end {
        if !plan.open {
            return Err(VaeError::Input(format!("track {track}: an end for a track whose length was known")));
        }
        stream_ref.set_frames(meta.codes.len())?;
        let (core, counted) = (st.tiling.core.max(1), st.tiling.open_frames);
        st.live.total = st.live.total + meta.codes.len().div_ceil(core) - counted.div_ceil(core).min(st.live.total);
        plan.meta = meta;
    }
    let mut lease = links.store.lease(&st.tiling.vae, backend).map_err(VaeError::Input)?;
    let live = &mut st.live;
    let stream_ref_spec = lease.get::<VaeModel>().info.audio_spec();
    stream_ref.push(lease.get::<VaeModel>(), backend, &latents, &st.job.cancel, &mut |tile| {
        live.publish(&links.hub, track, stream_ref_spec, tile)
    })?;
    drop(lease);
    if !stream_ref.is_complete() {
        return Ok(None);
    }
    let (pcm, lat) = stream.take().unwrap().finish();
    let meta = &plan.meta;
    Ok(Some(TrackOut {
        audio: Pcm::new(stream_ref_spec.sample_rate, stream_ref_spec.channels, pcm),
        replay: (st.tiling.replay)(meta, plan.variation),
        latents: lat,
        truncated: !meta.ended,
    }))
}

/// A `/vae` job's upload, unless the job was cancelled while it waited.
fn read_upload(job: &JobCtx, task: &UploadTask) -> Result<Vec<u8>, Outcome> {
    if job.cancel.is_cancelled() {
        return Err(Outcome::Cancelled);
    }
    std::fs::read(&task.input).map_err(|e| Outcome::Failed(format!("reading the upload {}: {e}", task.input.display())))
}
