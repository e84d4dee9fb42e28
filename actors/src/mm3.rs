//! MiniMax Music 3 as the ModelStore and the stages see it: its five components and their
//! coexistence groups ({ LM, depth } and the synthesis group { cond, DiT, VAE }), how each
//! loads, which file a request's component fields name (minimaxmusic.cpp's rule: an empty field
//! keeps the previous choice, else the first file of the bucket), and a job's run.
//!
//! A job's AR half runs on the entry stage ([`ModelFamily::compose`]): the AR group leased
//! for the frames (or their replay from `audio_codes` or from the journal), each song's
//! codes journaled, then the AR group released. Its synthesis half runs on the synthesis
//! stage ([`Synthesis::render`]): the synthesis group leased, each window decoded the
//! moment it is denoised and its audio published to the listeners (44.1 kHz; the Opus
//! stream resamples), and the finished tracks go to the Encoder like YuE2's.
use crate::decode_stage::UploadJobFn;
use crate::family::{Handoff, ModelFamily, Outlets, StageError, Synthesis};
use crate::hub::Publish;
use crate::messages::{CodesReady, EncCmd, JobCtx, Outcome, TrackOut};
use crate::model_store::{Component, ComponentKey, Group, GroupPin, Module};
use crate::stage::{Links, ProgressSink};
use crossbeam_channel::Sender;
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use yued_audio::Pcm;
use yued_contract::results::ResultStore;
use yued_contract::stream::{PcmTile, TileEncoder};
use yued_contract::{SongCodes, UploadOp};
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::mm3::compose::{self, ComposeError, SeedDraws};
use yued_engine::models::mm3::cond::CondEncoder;
use yued_engine::models::mm3::depth::DepthModel;
use yued_engine::models::mm3::dit::DitModel;
use yued_engine::models::mm3::lm::{self, LmModel};
use yued_engine::models::mm3::synth::{
    decode_open, decode_window, windows, Noise, PhiloxNoise, SynthError, SynthSettings, WindowRenderer,
};
use yued_engine::models::mm3::vae::VaeModel;
use yued_engine::models::mm3::vae_enc::VaeEncoder;
use yued_engine::models::mm3::{pipeline, prompt};
use yued_engine::models::AudioSpec;
use yued_engine::registry::{Bucket, Registry};
use yued_engine::tokenizer::BpeTokenizer;
use yued_protocol::{Family, Mm3Request, Stage, StreamEvent};

pub const AR_GROUP: &str = "ar";
pub const SYNTHESIS_GROUP: &str = "synthesis";

fn key(component: &'static str, file: PathBuf) -> ComponentKey {
    // The VAE's encoder (`vae_enc`, read from the vocoder file) sits with the synthesis group.
    let group = if matches!(component, "lm" | "depth") { AR_GROUP } else { SYNTHESIS_GROUP };
    ComponentKey { family: Family::Mm3, component, group, file, variant: String::new() }
}

/// Loads a component from its file. The depth decoder reads the LM width from its own
/// projection.
pub fn load(key: &ComponentKey, backend: &Backend) -> Result<Module, String> {
    let f = GgufFile::open(&key.file).map_err(|e| e.to_string())?;
    let e = |e: yued_engine::weights::LoadError| e.to_string();
    Ok(match key.component {
        "lm" => Box::new(LmModel::load(&f, backend).map_err(e)?),
        "depth" => {
            let lm_hidden = f.require_tensor("projection.weight").map_err(|e| e.to_string())?.ne[0] as usize;
            Box::new(DepthModel::load(&f, lm_hidden, backend).map_err(e)?)
        }
        "cond" => Box::new(CondEncoder::load(&f, backend).map_err(e)?),
        "dit" => Box::new(DitModel::load(&f, backend).map_err(e)?),
        "vae" => Box::new(VaeModel::load(&f, backend).map_err(e)?),
        "vae_enc" => Box::new(VaeEncoder::load(&f, backend).map_err(e)?),
        other => return Err(format!("MiniMax Music 3 has no component '{other}'")),
    })
}

macro_rules! component {
    ($t:ty) => {
        impl Component for $t {
            fn weight_bytes(&self) -> usize {
                <$t>::weight_bytes(self)
            }
            fn as_any_mut(&mut self) -> &mut dyn Any {
                self
            }
        }
    };
}
component!(LmModel);
component!(DepthModel);
component!(CondEncoder);
component!(DitModel);
component!(VaeModel);
component!(VaeEncoder);

/// What the entry stage keeps between MiniMax jobs: the registry, the files the last job
/// used (an empty field keeps them), and the tokenizer of the LM file last read.
pub(crate) struct Mm3 {
    registry: Registry,
    chosen: [Option<PathBuf>; 5],
    tokenizer: Option<(PathBuf, BpeTokenizer)>,
}

impl Mm3 {
    pub fn new(registry: Registry) -> Self {
        Mm3 { registry, chosen: Default::default(), tokenizer: None }
    }

    /// The files of a request's components.
    fn files(&mut self, req: &Mm3Request) -> Result<[PathBuf; 5], String> {
        let mut out: [PathBuf; 5] = Default::default();
        for (i, ((field, name), bucket)) in req.models().into_iter().zip(Bucket::MM3).enumerate() {
            let path = match (&self.chosen[i], name.is_empty()) {
                (Some(p), true) => p.clone(),
                _ => self.registry.resolve(bucket, name).map_err(|e| format!("{field}: {e}"))?.path.clone(),
            };
            self.chosen[i] = Some(path.clone());
            out[i] = path;
        }
        Ok(out)
    }

    fn tokenizer(&mut self, lm_file: &PathBuf, lm: &LmModel) -> Result<&BpeTokenizer, String> {
        if self.tokenizer.as_ref().is_none_or(|(p, _)| p != lm_file) {
            let f = GgufFile::open(lm_file).map_err(|e| e.to_string())?;
            self.tokenizer = Some((lm_file.clone(), lm::tokenizer(&f, &lm.info).map_err(|e| e.to_string())?));
        }
        Ok(&self.tokenizer.as_ref().expect("set above").1)
    }
}

crate::family::engine_error!(ComposeError, SynthError);

impl ModelFamily for Mm3 {
    fn family(&self) -> Family {
        Family::Mm3
    }

    fn synthesis_group(&self) -> Group {
        synthesis_group()
    }

    fn vae_job(&self) -> UploadJobFn {
        run_vae_job
    }

    /// A fresh song with every group resident is handed over before its first frame
    /// ([`Mm3Stream`]): each window renders as soon as its frames' states exist. Otherwise
    /// (STRICT, a replay, a resumed job) the whole AR half runs first ([`Mm3Synthesis`]).
    fn compose(
        &mut self,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError> {
        let req = job.request.as_mm3().expect("a MiniMax job");
        if out.can_overlap() && req.audio_codes.trim().is_empty() && job.known_songs.is_empty() {
            return compose_streamed(links, backend, self, job, out);
        }
        let (songs, files) = compose_job(links, backend, self, job)?;
        out.send(Box::new(Mm3Synthesis { songs, files }));
        Ok(())
    }
}

impl Synthesis for Mm3Synthesis {
    fn describe(&self) -> String {
        format!("{} songs of {} frames", self.songs.len(), self.songs.iter().map(|s| s.frames()).max().unwrap_or(0))
    }

    fn render(
        self: Box<Self>,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        _pin: GroupPin,
        out: &Outlets,
    ) -> Result<(), StageError> {
        render_job(links, backend, job, &self, &out.enc)
    }
}

/// A MiniMax job between its halves: the songs' codes and frame states, and the files of
/// the synthesis components.
struct Mm3Synthesis {
    songs: Vec<compose::Song>,
    /// The condition encoder, DiT and VAE files.
    files: [PathBuf; 3],
}

pub fn synthesis_group() -> Group {
    Group { family: Family::Mm3, name: SYNTHESIS_GROUP }
}

/// The AR half of a MiniMax job on the entry stage: the frames sampled (or replayed from
/// the request's codes or the journal's), each song's codes journaled and announced. The AR
/// group's leases are released when it returns. Returns the songs and the synthesis files.
fn compose_job(
    links: &Links,
    backend: &Backend,
    state: &mut Mm3,
    ctx: &Arc<JobCtx>,
) -> Result<(Vec<compose::Song>, [PathBuf; 3]), StageError> {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    let files = state.files(req)?;
    let cancelled = || ctx.cancel.is_cancelled();
    let mut sink = ProgressSink::new(links, &ctx.id);
    // The guidance pairs as batches of two (the daemon has no split-path setting).
    let batch = true;
    let journaled: Vec<Vec<[u32; 8]>> = ctx
        .known_songs
        .iter()
        .map(|s| s.codes.chunks_exact(8).map(|c| c.try_into().expect("8 codes")).collect())
        .collect();
    let given = req.audio_codes().map_err(|e| e.to_string())?;
    let resumed = given.is_empty() && !journaled.is_empty() && journaled.len() == req.songs() as usize;
    let replay_of: Vec<Vec<[u32; 8]>> = if !given.is_empty() {
        vec![given]
    } else if resumed {
        links.scheduler.do_send(crate::messages::Resumed { id: ctx.id.clone() });
        journaled
    } else {
        Vec::new()
    };
    let songs = {
        let mut lm_lease = links.store.lease(&key("lm", files[0].clone()), backend)?;
        let mut depth_lease = links.store.lease(&key("depth", files[1].clone()), backend)?;
        let lm_model = lm_lease.get::<LmModel>();
        let depth = depth_lease.get::<DepthModel>();
        let tok = state.tokenizer(&files[0], lm_model)?;
        let prompt =
            prompt::build(tok, &lm_model.info.tokens, &req.caption, &req.lyrics).map_err(|e| format!("lyrics: {e}"))?;
        if replay_of.is_empty() {
            let n = req.songs() as usize;
            let s = crate::settings::mm3_ar(req, batch);
            let mut draws = SeedDraws::new(req.lm_seed, n);
            let mut songs =
                compose::compose(backend, lm_model, depth, &prompt, n, &s, &mut draws, &cancelled, &mut |f, total| {
                    sink.report(Stage::Semantic, f + 1, total + 1)
                })?;
            // The replay's states: a resumed job and a replayed track render the same bytes.
            compose::restate(backend, lm_model, depth, &prompt, &mut songs, &cancelled)?;
            songs
        } else {
            let mut out = Vec::new();
            for (i, codes) in replay_of.iter().enumerate() {
                out.push(compose::replay(backend, lm_model, depth, &prompt, codes, &cancelled)?);
                sink.report(Stage::Semantic, i + 1, replay_of.len());
            }
            out
        }
    };
    for (i, song) in songs.iter().enumerate() {
        if !resumed {
            links.scheduler.do_send(CodesReady {
                id: ctx.id.clone(),
                song: SongCodes {
                    song: i as u32,
                    abc: String::new(),
                    codes: song.codes.iter().flatten().copied().collect(),
                },
            });
        }
        links.hub.do_send(Publish::Event(ctx.id.clone(), StreamEvent::Codes { frames: song.frames() as u32 }));
    }
    let [_, _, c, d, v] = files;
    Ok((songs, [c, d, v]))
}

/// What the streamed AR half sends the synthesis half: a song's next frames' states (whole
/// replay chunks, the states a replay of its codes computes), then its end.
enum Mm3Chunk {
    States { song: usize, frames: usize, states: Vec<f32> },
    End { song: usize, codes: Vec<[u32; 8]>, ended: bool },
}

/// The AR half of a streamed job: the hand-off goes first; while the frames are sampled,
/// each song's teacher-forced states go out chunk by chunk (a [`compose::Restater`] per
/// song on the same modules), then its end. The codes are journaled when the half ends.
fn compose_streamed(
    links: &Links,
    backend: &Backend,
    state: &mut Mm3,
    ctx: &Arc<JobCtx>,
    out: &mut Handoff<'_>,
) -> Result<(), StageError> {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    let files = state.files(req)?;
    let n = req.songs() as usize;
    let (tx, rx) = crossbeam_channel::unbounded();
    out.send(Box::new(Mm3Stream { rx, songs: n, files: [files[2].clone(), files[3].clone(), files[4].clone()] }));
    let cancelled = || ctx.cancel.is_cancelled();
    let mut sink = ProgressSink::new(links, &ctx.id);
    let mut lm_lease = links.store.lease(&key("lm", files[0].clone()), backend)?;
    let mut depth_lease = links.store.lease(&key("depth", files[1].clone()), backend)?;
    let lm_model = lm_lease.get::<LmModel>();
    let depth = depth_lease.get::<DepthModel>();
    let tok = state.tokenizer(&files[0], lm_model)?;
    let prompt =
        prompt::build(tok, &lm_model.info.tokens, &req.caption, &req.lyrics).map_err(|e| format!("lyrics: {e}"))?;
    let s = crate::settings::mm3_ar(req, true);
    let mut restaters = (0..n)
        .map(|_| compose::Restater::new(backend, lm_model, &prompt, s.max_frames))
        .collect::<Result<Vec<_>, _>>()?;
    let mut draws = SeedDraws::new(req.lm_seed, n);
    // Each song's teacher-forced states go out as its frames are written, then its end.
    let mut hand_out = |lm: &mut LmModel, depth: &mut DepthModel, i: usize, song: &compose::Song, complete: bool| {
        let before = restaters[i].frames();
        let states = restaters[i].advance(backend, lm, depth, &song.codes, complete, &cancelled)?;
        if !states.is_empty() {
            let _ = tx.send(Mm3Chunk::States { song: i, frames: restaters[i].frames() - before, states });
        }
        if complete {
            let _ = tx.send(Mm3Chunk::End { song: i, codes: song.codes.clone(), ended: song.ended });
        }
        Ok::<_, compose::ComposeError>(())
    };
    let mut composer = compose::Composer::new(backend, lm_model, &prompt, n, &s)?;
    while !composer.done() {
        if cancelled() {
            return Err(StageError::Cancelled);
        }
        let Some(frame) = composer.step(backend, lm_model, depth, &mut draws)? else { continue };
        for (i, complete) in frame.songs {
            hand_out(lm_model, depth, i, composer.song(i), complete)?;
        }
        sink.report(Stage::Semantic, frame.frame + 1, s.max_frames + 1);
    }
    let (songs, untold) = composer.finish()?;
    for i in untold {
        hand_out(lm_model, depth, i, &songs[i], true)?;
    }
    for (i, song) in songs.iter().enumerate() {
        links.scheduler.do_send(CodesReady {
            id: ctx.id.clone(),
            song: SongCodes {
                song: i as u32,
                abc: String::new(),
                codes: song.codes.iter().flatten().copied().collect(),
            },
        });
        links.hub.do_send(Publish::Event(ctx.id.clone(), StreamEvent::Codes { frames: song.frames() as u32 }));
    }
    Ok(())
}

/// A streamed MiniMax job between its halves: the songs' states arrive while the AR half
/// writes them; each window renders the moment its frames are there.
struct Mm3Stream {
    rx: crossbeam_channel::Receiver<Mm3Chunk>,
    songs: usize,
    /// The condition encoder, DiT and VAE files.
    files: [PathBuf; 3],
}

impl Synthesis for Mm3Stream {
    fn describe(&self) -> String {
        format!("{} songs, streamed window by window as they are written", self.songs)
    }

    fn render(
        self: Box<Self>,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        _pin: GroupPin,
        out: &Outlets,
    ) -> Result<(), StageError> {
        // false: the AR half stopped early, and reports why.
        render_stream(links, backend, job, &self, &out.enc).map(|_| ())
    }
}

/// One streamed song on the synthesis stage.
struct SongRender {
    states: Vec<f32>,
    frames: usize,
    end: Option<compose::Song>,
    windows: WindowRenderer,
    noise: Vec<Box<dyn Noise + Send>>,
    /// Each variation's planar halves so far.
    tracks: Vec<(Vec<f32>, Vec<f32>)>,
    /// Each variation's right edge of the last window, kept only if no window follows.
    held: Vec<Option<Vec<f32>>>,
    finished: bool,
}

/// A MiniMax job's decoded audio on its way to the listeners: attenuated by the loudest
/// peak heard so far (the file is normalised over the whole song), s16 and Opus made here.
struct LivePcm {
    id: yued_protocol::JobId,
    encoder: TileEncoder,
    rate: u32,
    peak: f32,
    sent: u32,
    /// Each track's next sample.
    starts: Vec<u64>,
}

impl LivePcm {
    fn new(id: &yued_protocol::JobId, tracks: usize, rate: u32) -> Self {
        LivePcm { id: id.clone(), encoder: TileEncoder::new(id), rate, peak: 1.0, sent: 0, starts: vec![0; tracks] }
    }

    /// One piece of planar stereo of `track`, in order.
    fn publish(&mut self, links: &Links, track: usize, planar: &[f32]) {
        self.peak = self.peak.max(planar.iter().fold(0f32, |a, x| a.max(x.abs())));
        let planar: Vec<f32> = planar.iter().map(|x| x / self.peak).collect();
        let n = (planar.len() / 2) as u64;
        let tile = self.encoder.encode(&PcmTile {
            track: track as u32,
            index: self.sent,
            start_sample: self.starts[track],
            sample_rate: self.rate,
            channels: 2,
            planar,
        });
        links.hub.do_send(Publish::Tile(self.id.clone(), tile));
        self.starts[track] += n;
        self.sent += 1;
    }

    /// The end of the stream (before the job's last track reaches the Encoder).
    fn finish(&mut self, links: &Links) {
        links.hub.do_send(Publish::StreamEnd(self.id.clone(), self.encoder.finish()));
    }
}

/// The synthesis group's three leases: condition encoder, DiT, VAE.
fn synthesis_leases(
    links: &Links,
    backend: &Backend,
    files: &[PathBuf; 3],
) -> Result<[crate::model_store::Lease; 3], StageError> {
    let [cf, df, vf] = files;
    Ok([
        links.store.lease(&key("cond", cf.clone()), backend)?,
        links.store.lease(&key("dit", df.clone()), backend)?,
        links.store.lease(&key("vae", vf.clone()), backend)?,
    ])
}

fn render_stream(
    links: &Links,
    backend: &Backend,
    ctx: &Arc<JobCtx>,
    work: &Mm3Stream,
    enc_tx: &Sender<EncCmd>,
) -> Result<bool, StageError> {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    let cancelled = || ctx.cancel.is_cancelled();
    let [mut cond_lease, mut dit_lease, mut vae_lease] = synthesis_leases(links, backend, &work.files)?;
    let mut models = SynthModels {
        backend,
        cond: cond_lease.get::<CondEncoder>(),
        dit: dit_lease.get::<DitModel>(),
        vae: vae_lease.get::<VaeModel>(),
    };
    let spec = models.vae.info.audio_spec();
    let m = req.synth_batch_size.max(1) as usize;
    let s = crate::settings::mm3_synth(req, true);
    let mut sink = ProgressSink::new(links, &ctx.id);
    let mut live = LivePcm::new(&ctx.id, work.songs * m, spec.sample_rate);
    let mut songs: Vec<SongRender> = (0..work.songs).map(|_| SongRender::new(&s, req.seed, m)).collect();
    let mut finished = 0;
    for msg in work.rx.iter() {
        let i = match msg {
            Mm3Chunk::States { song, frames, states } => {
                songs[song].states.extend_from_slice(&states);
                songs[song].frames += frames;
                song
            }
            Mm3Chunk::End { song, codes, ended } => {
                if codes.len() < 2 {
                    return Ok(false);
                }
                songs[song].end = Some(compose::Song { codes, states: Vec::new(), ended });
                song
            }
        };
        let sr = &mut songs[i];
        sr.render(&mut models, &s, &cancelled, &mut |j, body| live.publish(links, i * m + j, body))?;
        if sr.end.is_some() && !sr.finished && sr.windows.rendered() == windows(sr.frames).len() {
            sr.finish(&mut |j, edge| live.publish(links, i * m + j, edge));
            finished += 1;
        }
        if finished == work.songs {
            let total: usize = songs.iter().map(|s| windows(s.frames).len()).sum();
            sink.report(Stage::Synth, total, total);
        }
    }
    if finished < work.songs {
        return Ok(false);
    }
    // Every song is complete: the stream's end, then the tracks, song-major.
    live.finish(links);
    send_tracks(ctx, req, spec, songs, enc_tx)?;
    sink.close();
    Ok(true)
}

/// The synthesis half's models under their leases.
struct SynthModels<'a> {
    backend: &'a Backend,
    cond: &'a mut CondEncoder,
    dit: &'a mut DitModel,
    vae: &'a mut VaeModel,
}

impl SongRender {
    fn new(s: &SynthSettings, seed: i64, variations: usize) -> Self {
        SongRender {
            states: Vec::new(),
            frames: 0,
            end: None,
            windows: WindowRenderer::new(s),
            noise: (0..variations)
                .map(|j| Box::new(PhiloxNoise::new(seed.wrapping_add(j as i64) as u64)) as Box<dyn Noise + Send>)
                .collect(),
            tracks: vec![(Vec::new(), Vec::new()); variations],
            held: vec![None; variations],
            finished: false,
        }
    }

    /// Every window the states so far complete, denoised and decoded; each variation's audio
    /// goes to `publish` (variation, planar) and onto its track.
    fn render(
        &mut self,
        x: &mut SynthModels<'_>,
        s: &SynthSettings,
        cancelled: &dyn Fn() -> bool,
        publish: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<(), StageError> {
        let complete = self.end.is_some();
        while let Some(w) = self.windows.next(
            x.backend,
            &mut *x.cond,
            &mut *x.dit,
            &self.states,
            self.frames,
            complete,
            &mut self.noise,
            s,
            cancelled,
            &mut |_| {},
        )? {
            let count = complete.then(|| windows(self.frames).len());
            for (j, lat) in w.latents.iter().enumerate() {
                if cancelled() {
                    return Err(StageError::Cancelled);
                }
                // A window follows the last one decoded: its held edge is cropped away.
                self.held[j] = None;
                let body = match count {
                    Some(count) => {
                        decode_window(x.backend, &mut *x.vae, lat, w.index, count).map_err(|e| e.to_string())?
                    }
                    None => {
                        let (body, edge) =
                            decode_open(x.backend, &mut *x.vae, lat, w.index).map_err(|e| e.to_string())?;
                        self.held[j] = Some(edge);
                        body
                    }
                };
                publish(j, &body);
                append(&mut self.tracks[j], &body);
            }
        }
        Ok(())
    }

    /// The song is complete and its last window decoded before its end was known: the
    /// window's held edge stays.
    fn finish(&mut self, publish: &mut dyn FnMut(usize, &[f32])) {
        for j in 0..self.held.len() {
            if let Some(edge) = self.held[j].take() {
                publish(j, &edge);
                append(&mut self.tracks[j], &edge);
            }
        }
        self.finished = true;
    }
}

/// A planar stereo block onto a track's halves.
fn append(t: &mut (Vec<f32>, Vec<f32>), planar: &[f32]) {
    let n = planar.len() / 2;
    t.0.extend_from_slice(&planar[..n]);
    t.1.extend_from_slice(&planar[n..]);
}

/// The finished tracks to the Encoder, song-major, each with its replay request.
fn send_tracks(
    ctx: &Arc<JobCtx>,
    req: &Mm3Request,
    spec: AudioSpec,
    mut songs: Vec<SongRender>,
    enc_tx: &Sender<EncCmd>,
) -> Result<(), StageError> {
    let m = songs.first().map_or(0, |s| s.tracks.len());
    let count = songs.len() * m;
    for (i, sr) in songs.iter_mut().enumerate() {
        let song = sr.end.as_ref().expect("complete");
        for (j, (l, r)) in std::mem::take(&mut sr.tracks).into_iter().enumerate() {
            let replay = yued_protocol::Request::Mm3(crate::settings::mm3_replay(req, song, i, j, false));
            let track = TrackOut {
                audio: Pcm::new(spec.sample_rate, spec.channels, [l, r].concat()),
                replay: serde_json::to_value(replay).expect("a request serializes"),
                latents: Vec::new(),
                truncated: !song.ended && song.frames() >= req.frames(),
            };
            if enc_tx
                .send(EncCmd::Track { job: ctx.clone(), index: i * m + j, of: count, track: Box::new(track) })
                .is_err()
            {
                return Err(StageError::Failed("the encoder stage is gone".into()));
            }
        }
    }
    Ok(())
}

/// The synthesis half on the synthesis stage: each window denoised, decoded and published
/// to the listeners at once; the finished tracks go to the Encoder.
fn render_job(
    links: &Links,
    backend: &Backend,
    ctx: &Arc<JobCtx>,
    work: &Mm3Synthesis,
    enc_tx: &Sender<EncCmd>,
) -> Result<(), StageError> {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    let cancelled = || ctx.cancel.is_cancelled();
    if cancelled() {
        return Err(StageError::Cancelled);
    }
    let from_codes = !req.audio_codes.trim().is_empty();
    let mut sink = ProgressSink::new(links, &ctx.id);
    let songs = &work.songs;
    let [mut cond_lease, mut dit_lease, mut vae_lease] = synthesis_leases(links, backend, &work.files)?;
    let (cond, dit, vae) = (cond_lease.get::<CondEncoder>(), dit_lease.get::<DitModel>(), vae_lease.get::<VaeModel>());
    let spec = vae.info.audio_spec();
    let variations = req.synth_batch_size.max(1) as usize;
    let s = crate::settings::mm3_synth(req, true);
    let mut live = LivePcm::new(&ctx.id, songs.len() * variations, spec.sample_rate);
    let total_steps =
        songs.iter().map(|song| yued_engine::models::mm3::synth::windows(song.frames()).len() * s.steps).sum::<usize>();
    let mut steps_before = 0;
    let count = songs.len() * variations;
    for (i, song) in songs.iter().enumerate() {
        let tracks = pipeline::render_song(
            backend,
            cond,
            dit,
            vae,
            song,
            req.seed,
            variations,
            &s,
            &cancelled,
            &mut |d, _| sink.report(Stage::Synth, steps_before + d, total_steps),
            &mut |piece| {
                live.publish(links, i * variations + piece.variation, piece.pcm);
            },
        )?;
        steps_before += yued_engine::models::mm3::synth::windows(song.frames()).len() * s.steps;
        for (j, pcm) in tracks.into_iter().enumerate() {
            let index = i * variations + j;
            if index + 1 == count {
                live.finish(links);
            }
            let replay = crate::settings::mm3_replay(req, song, i, j, from_codes);
            let track = TrackOut {
                audio: Pcm::new(spec.sample_rate, spec.channels, pcm),
                replay: serde_json::to_value(yued_protocol::Request::Mm3(replay)).expect("a request serializes"),
                latents: Vec::new(),
                truncated: !song.ended && song.frames() >= req.frames(),
            };
            if enc_tx.send(EncCmd::Track { job: ctx.clone(), index, of: count, track: Box::new(track) }).is_err() {
                return Err(StageError::Failed("the encoder stage is gone".into()));
            }
        }
    }
    sink.close();
    Ok(())
}

/// A `/vae` job of MiniMax Music 3 (on the decode stage, the synthesis group pinned):
/// encode an upload to the flow VAE's posterior mean (saved here as `latents.vae`), or
/// decode uploaded latents tile by tile, each tile published to the listeners at 44.1 kHz
/// as it lands, the audio then handed to the Encoder (which reports the job: `None` here).
pub(crate) fn run_vae_job(
    links: &Links,
    backend: &Backend,
    job: &Arc<JobCtx>,
    op: UploadOp,
    bytes: &[u8],
    results: &ResultStore,
    enc_tx: &Sender<EncCmd>,
) -> Option<Outcome> {
    let req = job.request.as_mm3().expect("a MiniMax job");
    let Some(registry) = links.cfg.mm3.as_ref() else {
        return Some(Outcome::Failed("MiniMax Music 3 is not served by this daemon".into()));
    };
    let file = match registry.resolve(Bucket::Mm3Vae, &req.vae_model) {
        Ok(e) => e.path.clone(),
        Err(e) => return Some(Outcome::Failed(format!("vae_model: {e}"))),
    };
    let mut sink = ProgressSink::new(links, &job.id);
    match op {
        UploadOp::Tokenize => Some(Outcome::Failed("a tokenization is not a VAE job".into())),
        UploadOp::Encode => {
            sink.report(Stage::Encode, 0, 1);
            let mut lease = match links.store.lease(&key("vae_enc", file), backend) {
                Ok(l) => l,
                Err(e) => return Some(Outcome::Failed(e)),
            };
            let enc = lease.get::<VaeEncoder>();
            let (channels, hop) = (enc.latent_channels, enc.hop());
            let z = match crate::codec::mm3_audio_to_latents(enc, backend, bytes) {
                Ok(z) => z,
                Err(e) => return Some(Outcome::Failed(format!("audio: {e}"))),
            };
            drop(lease);
            sink.report(Stage::Encode, 1, 1);
            let frames = z.len() / channels;
            tracing::info!(frames, "vae encode done");
            let files = vec![(
                "latents.vae".to_string(),
                "application/octet-stream".to_string(),
                z.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )];
            if let Err(e) = results.save(&job.id, files) {
                return Some(Outcome::Failed(format!("saving the result: {e}")));
            }
            let seconds = (frames * hop) as f64 / yued_protocol::request::mm3::SAMPLE_RATE as f64;
            Some(Outcome::Done { tracks: 1, audio_seconds: seconds, metrics: None })
        }
        UploadOp::Decode => {
            let mut lease = match links.store.lease(&key("vae", file), backend) {
                Ok(l) => l,
                Err(e) => return Some(Outcome::Failed(e)),
            };
            let vae = lease.get::<VaeModel>();
            let z: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let mut live = LivePcm::new(&job.id, 1, vae.info.sample_rate);
            let decoded = crate::codec::mm3_decode_tiled(vae, backend, &z, &mut |done, tiles, planar| {
                if job.cancel.is_cancelled() {
                    return Err(CANCELLED.into());
                }
                live.publish(links, 0, planar);
                sink.report(Stage::Decode, done, tiles);
                Ok(())
            });
            drop(lease);
            match decoded {
                Ok(pcm) => {
                    live.finish(links);
                    let _ = enc_tx.send(EncCmd::Audio { job: job.clone(), pcm });
                    None
                }
                Err(_) if job.cancel.is_cancelled() => Some(Outcome::Cancelled),
                Err(e) => Some(Outcome::Failed(format!("decode: {e}"))),
            }
        }
    }
}

const CANCELLED: &str = "cancelled";
