//! MiniMax Music 3 as the ModelStore and the stages see it: its five components and their
//! coexistence groups ({ LM, depth } and the synthesis group { cond, DiT, VAE }), how each
//! loads, which file a request's component fields name (minimaxmusic.cpp's rule: an empty field
//! keeps the previous choice, else the first file of the bucket), and a job's run.
//!
//! A job's AR half runs on the entry stage: fresh songs in an [`Mm3Batch`], beside other
//! jobs' songs in one decode step ([`compose::step_together`]), the AR group leased while the
//! batch has members; a replay (of `audio_codes`, or of a resumed job's journaled codes)
//! alone ([`ModelFamily::compose`]). Each song's codes are journaled when its job leaves.
//! Its synthesis half runs on the synthesis stage ([`Synthesis::render`]): the synthesis
//! group leased, each window decoded the moment it is denoised and its audio published to
//! the listeners (44.1 kHz; the Opus stream resamples), and the finished tracks go to the
//! Encoder like YuE2's.
use crate::decode_stage::UploadJobFn;
use crate::family::{Batch, Handoff, Left, ModelFamily, Outlets, StageError, Synthesis};
use crate::hub::Publish;
use crate::messages::{CodesReady, EncCmd, JobCtx, Outcome, TrackOut};
use crate::model_store::{Component, ComponentKey, Group, GroupPin, Lease, Module};
use crate::stage::{FirstAudio, Links, ProgressSink};
use crossbeam_channel::Sender;
use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
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

/// Which files the requests' components name, and the tokenizer of the LM file last read:
/// what the entry stage keeps between MiniMax jobs (an empty field keeps the last job's
/// file), shared by the family and its batch.
struct Selection {
    registry: Registry,
    chosen: [Option<PathBuf>; 5],
    tokenizer: Option<(PathBuf, BpeTokenizer)>,
}

impl Selection {
    /// The files of a request's components; `keep`: they become the next job's defaults.
    fn files(&mut self, req: &Mm3Request, keep: bool) -> Result<[PathBuf; 5], String> {
        let mut out: [PathBuf; 5] = Default::default();
        for (i, ((field, name), bucket)) in req.models().into_iter().zip(Bucket::MM3).enumerate() {
            out[i] = match (&self.chosen[i], name.is_empty()) {
                (Some(p), true) => p.clone(),
                _ => self.registry.resolve(bucket, name).map_err(|e| format!("{field}: {e}"))?.path.clone(),
            };
        }
        if keep {
            self.chosen = out.clone().map(Some);
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

    /// A request's prompt, read with the LM's tokenizer.
    fn prompt(&mut self, lm_file: &PathBuf, lm: &LmModel, req: &Mm3Request) -> Result<prompt::Prompt, String> {
        let tok = self.tokenizer(lm_file, lm)?;
        prompt::build(tok, &lm.info.tokens, &req.caption, &req.lyrics).map_err(|e| format!("lyrics: {e}"))
    }
}

/// MiniMax Music 3 on the entry stage.
pub(crate) struct Mm3 {
    selection: Arc<Mutex<Selection>>,
}

impl Mm3 {
    pub fn new(registry: Registry) -> Self {
        Mm3 { selection: Arc::new(Mutex::new(Selection { registry, chosen: Default::default(), tokenizer: None })) }
    }
}

fn lock(s: &Mutex<Selection>) -> std::sync::MutexGuard<'_, Selection> {
    s.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

crate::family::engine_error!(ComposeError, SynthError);

/// Whether a job samples its songs (else it replays codes: the request's, or all its songs'
/// from the journal).
fn fresh(ctx: &JobCtx) -> bool {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    req.audio_codes.trim().is_empty() && !resumes(ctx)
}

/// Whether the journal holds every song's codes (the job resumes by replaying them).
fn resumes(ctx: &JobCtx) -> bool {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    !ctx.known_songs.is_empty() && ctx.known_songs.len() == req.songs() as usize
}

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

    /// A job alone: fresh songs as a batch of one ([`Mm3Batch`]); a replay (of the request's
    /// codes, or of a resumed job's from the journal) runs its whole AR half first, then
    /// hands over ([`Mm3Synthesis`]).
    fn compose(
        &mut self,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError> {
        if fresh(job) {
            let mut batch = Mm3Batch::new(self.selection.clone());
            batch.join(links, backend, job.clone(), out)?;
            loop {
                if let Some((_, how)) = batch.step(links, backend).pop() {
                    if let Some(synthesis) = how? {
                        out.send(synthesis);
                    }
                    return Ok(());
                }
            }
        }
        let (songs, files) = replay_job(links, backend, &mut lock(&self.selection), job)?;
        out.send(Box::new(Mm3Synthesis { songs, files }));
        Ok(())
    }

    /// Fresh songs batch; a replay composes alone.
    fn batch(&mut self, _links: &Links, job: &JobCtx) -> Option<Box<dyn Batch>> {
        fresh(job).then(|| Box::new(Mm3Batch::new(self.selection.clone())) as Box<dyn Batch>)
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

/// The AR half of a replay on the entry stage: the states of the request's codes, or of
/// every song's journaled codes (a resumed job), teacher-forced; codes replayed from the
/// request are journaled and announced. The AR group's leases are released when it
/// returns. Returns the songs and the synthesis files.
fn replay_job(
    links: &Links,
    backend: &Backend,
    selection: &mut Selection,
    ctx: &Arc<JobCtx>,
) -> Result<(Vec<compose::Song>, [PathBuf; 3]), StageError> {
    let req = ctx.request.as_mm3().expect("a MiniMax job");
    let files = selection.files(req, true)?;
    let cancelled = || ctx.cancel.is_cancelled();
    let mut sink = ProgressSink::new(links, ctx);
    let given = req.audio_codes().map_err(|e| e.to_string())?;
    let resumed = given.is_empty();
    let replay_of: Vec<Vec<[u32; 8]>> = if resumed {
        links.scheduler.do_send(crate::messages::Resumed { id: ctx.id.clone() });
        ctx.known_songs
            .iter()
            .map(|s| s.codes.chunks_exact(8).map(|c| c.try_into().expect("8 codes")).collect())
            .collect()
    } else {
        vec![given]
    };
    let songs = {
        let mut lm_lease = links.store.lease(&key("lm", files[0].clone()), backend)?;
        let mut depth_lease = links.store.lease(&key("depth", files[1].clone()), backend)?;
        let lm_model = lm_lease.get::<LmModel>();
        lm_model.prefill_chunk = links.cfg.options.prefill_chunk;
        let depth = depth_lease.get::<DepthModel>();
        let prompt = selection.prompt(&files[0], lm_model, req)?;
        let mut out = Vec::new();
        for (i, codes) in replay_of.iter().enumerate() {
            out.push(compose::replay(backend, lm_model, depth, &prompt, codes, &cancelled)?);
            sink.report(Stage::Semantic, i + 1, replay_of.len());
        }
        out
    };
    announce(links, ctx, &songs, !resumed);
    let [_, _, c, d, v] = files;
    Ok((songs, [c, d, v]))
}

/// Each song's codes journaled (`journal`: unless they came from the journal) and announced
/// to the listeners.
fn announce(links: &Links, ctx: &JobCtx, songs: &[compose::Song], journal: bool) {
    for (i, song) in songs.iter().enumerate() {
        if journal {
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
}

/// What the streamed AR half sends the synthesis half: a song's next frames' states (whole
/// replay chunks, the states a replay of its codes computes), then its end.
enum Mm3Chunk {
    States { song: usize, frames: usize, states: Vec<f32> },
    End { song: usize, codes: Vec<[u32; 8]>, ended: bool },
}

/// The AR halves of several MiniMax jobs over one LM and depth decoder, stepped together
/// ([`compose::step_together`]). A joining job's prompts (its composer's, then one per song
/// for the replay states) go in one piece a step, before the others' step; its songs then
/// step with theirs. Each song's teacher-forced states are computed chunk by chunk as its
/// frames are written (a [`compose::Restater`] per song): a streamed job's go out to its
/// hand-off, sent at the join; the others' go with the hand-off when the songs are done.
struct Mm3Batch {
    selection: Arc<Mutex<Selection>>,
    /// The LM and depth decoder files of the members (set by the first).
    ar_files: Option<[PathBuf; 2]>,
    /// The LM's and depth decoder's leases: taken at the first join, given back with the
    /// batch.
    leases: Option<(Lease, Lease)>,
    members: Vec<Mm3Member>,
}

/// A job in an [`Mm3Batch`].
struct Mm3Member {
    ctx: Arc<JobCtx>,
    composer: compose::Composer,
    draws: SeedDraws,
    songs: Vec<Restated>,
    /// A streamed job's states go out through this as they are computed.
    stream: Option<Sender<Mm3Chunk>>,
    sink: ProgressSink,
    /// The frames its songs wrote, for the AR metrics (a frame is a song's token here).
    meter: crate::stage::TokenMeter,
    max_frames: usize,
    /// The condition encoder, DiT and VAE files.
    files: [PathBuf; 3],
}

/// A song's replay states as its frames are written.
struct Restated {
    restater: compose::Restater,
    /// The states so far (a job whose hand-off goes when its songs are done).
    states: Vec<f32>,
}

/// The batch's AR modules, under its leases.
struct Ar<'a> {
    backend: &'a Backend,
    lm: &'a mut LmModel,
    depth: &'a mut DepthModel,
}

impl Restated {
    /// Song `i`'s states its frames complete (whole chunks; every frame left once it is
    /// `complete`): out through the stream, or kept; then, when complete, its end.
    fn hand_out(
        &mut self,
        ar: &mut Ar<'_>,
        (i, song): (usize, &compose::Song),
        complete: bool,
        stream: Option<&Sender<Mm3Chunk>>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), ComposeError> {
        let before = self.restater.frames();
        let states = self.restater.advance(ar.backend, ar.lm, ar.depth, &song.codes, complete, cancelled)?;
        let Some(tx) = stream else {
            self.states.extend(states);
            return Ok(());
        };
        if !states.is_empty() {
            let _ = tx.send(Mm3Chunk::States { song: i, frames: self.restater.frames() - before, states });
        }
        if complete {
            let _ = tx.send(Mm3Chunk::End { song: i, codes: song.codes.clone(), ended: song.ended });
        }
        Ok(())
    }
}

impl Mm3Member {
    /// Whether every prompt of the job is in.
    fn prefilled(&self) -> bool {
        self.composer.prefilled() && self.songs.iter().all(|s| s.restater.prefilled())
    }

    /// The next prompt piece: the composer's, then each song's restater's.
    fn prefill_piece(&mut self, backend: &Backend, lm: &mut LmModel) -> Result<(), ComposeError> {
        if !self.composer.prefilled() {
            self.composer.prefill_piece(backend, lm)?;
        } else if let Some(s) = self.songs.iter_mut().find(|s| !s.restater.prefilled()) {
            s.restater.prefill_piece(backend, lm)?;
        }
        Ok(())
    }

    /// The states of the songs a step wrote a frame of, and the progress.
    fn after_step(&mut self, links: &Links, ar: &mut Ar<'_>, frame: compose::Frame) -> Result<(), ComposeError> {
        let cancel = self.ctx.cancel.clone();
        let cancelled = || cancel.is_cancelled();
        for (i, complete) in frame.songs {
            self.meter.count(links, Stage::Semantic, i as u32, frame.frame + 1);
            let song = (i, self.composer.song(i));
            self.songs[i].hand_out(ar, song, complete, self.stream.as_ref(), &cancelled)?;
        }
        self.sink.report(Stage::Semantic, frame.frame + 1, self.max_frames + 1);
        Ok(())
    }

    /// The member's end once its composer is done: the songs no step called complete handed
    /// out, the codes journaled and announced, and the hand-off (a streamed job's went at
    /// the join).
    fn conclude(self, links: &Links, ar: &mut Ar<'_>) -> Left {
        let Mm3Member { ctx, composer, mut songs, stream, files, meter, .. } = self;
        meter.finish(links);
        let cancelled = || ctx.cancel.is_cancelled();
        let (mut written, untold) = composer.finish()?;
        for i in untold {
            songs[i].hand_out(ar, (i, &written[i]), true, stream.as_ref(), &cancelled)?;
        }
        announce(links, &ctx, &written, true);
        if stream.is_some() {
            return Ok(None);
        }
        // The replay's states: a resumed job and a replayed track render the same bytes.
        for (song, r) in written.iter_mut().zip(songs) {
            song.states = r.states;
        }
        Ok(Some(Box::new(Mm3Synthesis { songs: written, files })))
    }
}

impl Mm3Batch {
    fn new(selection: Arc<Mutex<Selection>>) -> Self {
        Mm3Batch { selection, ar_files: None, leases: None, members: Vec::new() }
    }

    fn step_members(&mut self, links: &Links, backend: &Backend) -> Vec<(Arc<JobCtx>, Left)> {
        let mut left = Vec::new();
        // The cancelled leave before the step.
        let (gone, kept): (Vec<Mm3Member>, Vec<Mm3Member>) =
            std::mem::take(&mut self.members).into_iter().partition(|m| m.ctx.cancel.is_cancelled());
        self.members = kept;
        left.extend(gone.into_iter().map(|m| (m.ctx, Err(StageError::Cancelled))));
        let Some((lm_lease, depth_lease)) = self.leases.as_mut() else { return left };
        let mut ar = Ar { backend, lm: lm_lease.get::<LmModel>(), depth: depth_lease.get::<DepthModel>() };
        let mut failed: Vec<(usize, StageError)> = Vec::new();
        // One prompt piece a step at most: the first member's with one to go in.
        if let Some(m) = self.members.iter().position(|m| !m.prefilled()) {
            if let Err(e) = self.members[m].prefill_piece(backend, ar.lm) {
                failed.push((m, e.into()));
            }
        }
        let ready = |m: &Mm3Member| m.composer.prefilled() && !m.composer.done();
        let stepped: Vec<usize> =
            (0..self.members.len()).filter(|&m| ready(&self.members[m]) && !failed.iter().any(|f| f.0 == m)).collect();
        if !stepped.is_empty() {
            let mut parts: Vec<compose::Member<'_>> = self
                .members
                .iter_mut()
                .enumerate()
                .filter(|(m, _)| stepped.contains(m))
                .map(|(_, m)| (&mut m.composer, &mut m.draws as &mut dyn compose::Draws))
                .collect();
            match compose::step_together(backend, ar.lm, ar.depth, &mut parts) {
                Ok(frames) => {
                    for (&m, frame) in stepped.iter().zip(frames) {
                        let Some(frame) = frame else { continue };
                        if let Err(e) = self.members[m].after_step(links, &mut ar, frame) {
                            failed.push((m, e.into()));
                        }
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    failed.extend(stepped.iter().map(|&m| (m, StageError::Failed(msg.clone()))));
                }
            }
        }
        // The failed and the done leave, in member order.
        let done: Vec<usize> = (0..self.members.len())
            .filter(|&m| self.members[m].composer.done() && !failed.iter().any(|f| f.0 == m))
            .collect();
        let mut end: Vec<(usize, Option<StageError>)> = failed.into_iter().map(|(m, e)| (m, Some(e))).collect();
        end.extend(done.into_iter().map(|m| (m, None)));
        end.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut ended: Vec<(Mm3Member, Option<StageError>)> =
            end.into_iter().map(|(m, e)| (self.members.remove(m), e)).collect();
        ended.reverse();
        for (m, err) in ended {
            let ctx = m.ctx.clone();
            let how = match err {
                Some(e) => Err(e),
                None => m.conclude(links, &mut ar),
            };
            left.push((ctx, how));
        }
        left
    }
}

impl Batch for Mm3Batch {
    fn admits(&self, job: &JobCtx) -> bool {
        let Some(req) = job.request.as_mm3() else { return false };
        if !fresh(job) {
            return false;
        }
        // A request whose files do not resolve joins, to fail at once with the reason.
        match (lock(&self.selection).files(req, false), &self.ar_files) {
            (Ok(f), Some(ar)) => f[..2] == ar[..],
            _ => true,
        }
    }

    fn rows_of(&self, job: &JobCtx) -> usize {
        job.request.as_mm3().map_or(1, |req| 2 * req.songs() as usize)
    }

    fn rows(&self) -> usize {
        self.members.iter().map(|m| m.composer.rows()).sum()
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn jobs(&self) -> Vec<Arc<JobCtx>> {
        self.members.iter().map(|m| m.ctx.clone()).collect()
    }

    fn join(
        &mut self,
        links: &Links,
        backend: &Backend,
        ctx: Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError> {
        let req = ctx.request.as_mm3().expect("a MiniMax job");
        let mut selection = lock(&self.selection);
        let files = selection.files(req, true)?;
        if self.leases.is_none() {
            let lm = links.store.lease(&key("lm", files[0].clone()), backend)?;
            let depth = links.store.lease(&key("depth", files[1].clone()), backend)?;
            self.leases = Some((lm, depth));
            self.ar_files = Some([files[0].clone(), files[1].clone()]);
        }
        let lm = self.leases.as_mut().expect("taken above").0.get::<LmModel>();
        // A replay prefills in the same pieces (its states are the song's, bit for bit).
        lm.prefill_chunk = links.cfg.options.prefill_chunk;
        let prompt = selection.prompt(&files[0], lm, req)?;
        let n = req.songs() as usize;
        let s = crate::settings::mm3_ar(req, true);
        let composer = compose::Composer::start(backend, lm, &prompt, n, &s)?;
        let songs = (0..n)
            .map(|_| {
                Ok(Restated {
                    restater: compose::Restater::start(backend, lm, &prompt, s.max_frames)?,
                    states: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, ComposeError>>()?;
        let [_, _, c, d, v] = files;
        let files = [c, d, v];
        let stream = out.can_stream().then(|| {
            let (tx, rx) = crossbeam_channel::unbounded();
            out.send(Box::new(Mm3Stream { rx, songs: n, files: files.clone() }));
            tx
        });
        tracing::info!(job = %ctx.id, members = self.members.len() + 1, "joins the AR batch");
        let mut sink = ProgressSink::new(links, &ctx);
        // The stage shows from the join: its prompts' prefill (pieces, steps) is its first work.
        sink.report(Stage::Semantic, 0, s.max_frames + 1);
        let draws = SeedDraws::new(req.lm_seed, n);
        let meter = crate::stage::TokenMeter::new(ctx.request.family());
        self.members.push(Mm3Member {
            ctx,
            composer,
            draws,
            songs,
            stream,
            sink,
            meter,
            max_frames: s.max_frames,
            files,
        });
        Ok(())
    }

    fn step(&mut self, links: &Links, backend: &Backend) -> Vec<(Arc<JobCtx>, Left)> {
        let left = self.step_members(links, backend);
        if self.members.is_empty() {
            self.leases = None;
            self.ar_files = None;
        }
        left
    }
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
    first_audio: FirstAudio,
    rate: u32,
    peak: f32,
    sent: u32,
    /// Each track's next sample.
    starts: Vec<u64>,
}

impl LivePcm {
    fn new(id: &yued_protocol::JobId, tracks: usize, rate: u32, first_audio: FirstAudio) -> Self {
        let encoder = TileEncoder::new(id);
        LivePcm { id: id.clone(), encoder, first_audio, rate, peak: 1.0, sent: 0, starts: vec![0; tracks] }
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
        self.first_audio.tile();
        self.starts[track] += n;
        self.sent += 1;
    }

    /// The end of the stream (before the job's last track reaches the Encoder).
    fn finish(&mut self, links: &Links) {
        for end in self.encoder.finish() {
            links.hub.do_send(Publish::Tile(self.id.clone(), end));
        }
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
    let mut sink = ProgressSink::new(links, ctx);
    let mut live = LivePcm::new(&ctx.id, work.songs * m, spec.sample_rate, FirstAudio::of_song(links, ctx));
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
    let mut sink = ProgressSink::new(links, ctx);
    let songs = &work.songs;
    let [mut cond_lease, mut dit_lease, mut vae_lease] = synthesis_leases(links, backend, &work.files)?;
    let (cond, dit, vae) = (cond_lease.get::<CondEncoder>(), dit_lease.get::<DitModel>(), vae_lease.get::<VaeModel>());
    let spec = vae.info.audio_spec();
    let variations = req.synth_batch_size.max(1) as usize;
    let s = crate::settings::mm3_synth(req, true);
    let first_audio = FirstAudio::of_song(links, ctx);
    let mut live = LivePcm::new(&ctx.id, songs.len() * variations, spec.sample_rate, first_audio);
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
    let mut sink = ProgressSink::new(links, job);
    match op {
        UploadOp::Tokenize | UploadOp::Transcribe | UploadOp::TranscribeMelody => {
            Some(Outcome::Failed("a listening job is not a VAE job".into()))
        }
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
            let mut live = LivePcm::new(&job.id, 1, vae.info.sample_rate, FirstAudio::unobserved());
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
