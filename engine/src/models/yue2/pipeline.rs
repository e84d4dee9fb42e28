//! One whole request, text to planar stereo: plan, semantic stream (or replay), NAR flow
//! matching per chunk with the request's noise variations, tiled VAE decode. Synchronous;
//! everything a listener may want early (score, codes, latent chunks, PCM tiles) is handed
//! to the event callback the moment it exists.
use crate::cancel::CancelToken;
use crate::ggml::{Backend, GgmlError};
use crate::gguf::{GgufError, GgufFile};
use crate::kv_cache::KvSet;
use crate::models::yue2::ar::ArModel;
use crate::models::yue2::config::BackboneInfo;
use crate::models::yue2::generate::{ArStages, ChunkEvent, ChunkFeeder, Fed, GenError, Planner, Semantic};
use crate::models::yue2::nar::{ChunkPlan, ChunkSpan, NarError, NarModel};
use crate::models::yue2::prompt::Instructions;
use crate::models::yue2::settings::{Invalid, Settings};
use crate::models::yue2::vae::{Tile, VaeError, VaeModel};
use crate::nn::batch::Feed;
use crate::rng::torch_cpu::randn;
use crate::tokenizer::BpeTokenizer;
use crate::weights::LoadError;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Plan(GenError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("{0}")]
    Other(String),
}

impl From<GenError> for PipelineError {
    fn from(e: GenError) -> Self {
        match e {
            GenError::Cancelled => PipelineError::Cancelled,
            GenError::Invalid(r) => PipelineError::Invalid(r),
            GenError::Ggml(g) => PipelineError::Ggml(g),
            other => PipelineError::Plan(other),
        }
    }
}
impl From<NarError> for PipelineError {
    fn from(e: NarError) -> Self {
        match e {
            NarError::Cancelled => PipelineError::Cancelled,
            NarError::Ggml(g) => PipelineError::Ggml(g),
        }
    }
}
impl From<VaeError> for PipelineError {
    fn from(e: VaeError) -> Self {
        match e {
            VaeError::Cancelled => PipelineError::Cancelled,
            VaeError::Ggml(g) => PipelineError::Ggml(g),
            VaeError::Input(s) => PipelineError::Other(s),
        }
    }
}

/// The part of a job a progress report counts: planning the score, writing the codes,
/// painting the latents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Plan,
    Semantic,
    Synth,
}

/// What happened, as it happens.
pub enum Event<'a> {
    Progress {
        phase: Phase,
        song: u32,
        done: usize,
        total: usize,
    },
    Score {
        song: u32,
        abc: &'a str,
    },
    /// A song's semantic stream is complete (with the score it was written under).
    Codes {
        song: u32,
        abc: &'a str,
        codes: &'a [u32],
    },
    /// One NAR chunk of one variation of a song: frames `start_frame..` of its latents.
    Latents {
        song: u32,
        variation: u32,
        start_frame: usize,
        latents: &'a [f32],
    },
    /// One decoded VAE tile of a track (raw, before normalisation).
    Tile {
        track: usize,
        tile: Tile<'a>,
    },
}

/// A song as the AR half leaves it: score, codes, and the sequences the NAR attends to.
#[derive(Clone, Debug)]
pub struct SongMeta {
    pub index: u32,
    pub abc: String,
    /// The planning seed that wrote the score (None: the score was given or there is none).
    pub plan_seed: Option<u64>,
    pub codes: Vec<u32>,
    /// The model wrote music_end (false: the budget cut it).
    pub ended: bool,
}

/// A song as its writer leaves it: what it is, its semantic prefix (the sequence its chunks
/// are prefilled behind) and, when it renders in one chunk, the set its semantic stream was
/// written in, completed with music_end: the sequence that chunk attends to, which needs
/// no prefill (yue2.cpp's rule).
pub struct WrittenSong {
    pub meta: SongMeta,
    pub prefix: Vec<u32>,
    pub kv: Option<KvSet>,
}

/// One acoustic chunk of a song: its frames and the KV set holding
/// `prefix + codes[span.context..span.end] + music_end`, prefilled by the AR half.
pub struct ChunkKv {
    pub span: ChunkSpan,
    pub kv: KvSet,
}

/// What the AR half of a streamed request hands the synthesis half as it writes
/// ([`Shared::compose_streamed`]).
pub enum ChunkReady {
    /// A chunk of song `song` (the chunks of a song come in order).
    Chunk { song: u32, chunk: ChunkKv },
    /// Song `meta.index` is complete: its codes, score and end (after its last chunk).
    SongEnd(SongMeta),
}

/// The acoustic noise of a song's variations (`seed + j`, torch's CPU normal stream over
/// its frames), drawn once for the frames known and redrawn longer when a streamed song
/// outgrows it: the stream of whole frames is prefix-stable, so a chunk's noise does not
/// depend on when it was drawn.
pub struct SongNoise {
    seed: u64,
    lat: usize,
    frames: usize,
    draws: Vec<Vec<f32>>,
}

impl SongNoise {
    pub fn new(seed: u64, variations: usize, lat: usize, frames: usize) -> Self {
        let mut n = SongNoise { seed, lat, frames: 0, draws: vec![Vec::new(); variations] };
        n.grow(frames);
        n
    }

    fn grow(&mut self, frames: usize) {
        self.frames = frames;
        for (j, d) in self.draws.iter_mut().enumerate() {
            *d = randn(self.seed + j as u64, frames * self.lat);
        }
    }

    /// Frames `a..b` of every variation, `[m, b - a, lat]`.
    pub fn frames(&mut self, a: usize, b: usize) -> Vec<f32> {
        if b > self.frames {
            self.grow(b.max(2 * self.frames));
        }
        let lat = self.lat;
        self.draws.iter().flat_map(|d| d[a * lat..b * lat].iter().copied()).collect()
    }
}

/// Everything the synthesis half needs of one song. The KV sets travel with it: they are
/// the only state the two halves share, and they outlive the AR module's residency.
pub struct SongWork {
    pub meta: SongMeta,
    pub chunks: Vec<ChunkKv>,
}

impl SongWork {
    pub fn kv_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.kv.bytes()).sum()
    }
}

/// One rendered track.
#[derive(Clone, Debug)]
pub struct Track {
    pub song: u32,
    pub variation: u32,
    pub abc: String,
    /// The planning seed that wrote the score (None: given, or none).
    pub plan_seed: Option<u64>,
    pub codes: Vec<u32>,
    /// Time-major [frames, 64].
    pub latents: Vec<f32>,
    /// Planar, full range, not normalised.
    pub pcm: Vec<f32>,
    /// The rate and channels of `pcm`.
    pub audio: crate::models::AudioSpec,
    pub frames: usize,
    /// The semantic budget cut the song before the model ended it.
    pub truncated: bool,
}

/// Boot-time settings of a pipeline.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// KV bound in tokens (0 = the model context).
    pub max_seq: usize,
    pub vae_core: usize,
    pub vae_halo: usize,
    /// Tokens a prompt is prefilled in at most per forward (a song joining a running batch
    /// holds the others up by one piece at a time).
    pub prefill_chunk: usize,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions { max_seq: 0, vae_core: 512, vae_halo: 16, prefill_chunk: crate::nn::batch::PREFILL_CHUNK }
    }
}

/// What every stage of a request reads besides the modules: the text side of the backbone
/// file (configuration, tokenizer, prompt texts) and the bounds. Cheap, immutable, shared
/// by the stage threads of the daemon; the modules are passed in by whoever holds them.
pub struct Shared {
    pub info: BackboneInfo,
    pub tokenizer: BpeTokenizer,
    pub instructions: Instructions,
    pub max_seq: usize,
    pub vae_core: usize,
    pub vae_halo: usize,
    pub prefill_chunk: usize,
}

impl Shared {
    pub fn open(model: &Path, opts: &PipelineOptions) -> Result<Self, PipelineError> {
        let f = GgufFile::open(model)?;
        Self::from_gguf(&f, opts)
    }

    pub fn from_gguf(f: &GgufFile, opts: &PipelineOptions) -> Result<Self, PipelineError> {
        let info = BackboneInfo::from_gguf(f)?;
        let tokenizer = BpeTokenizer::from_gguf(f).map_err(|e| PipelineError::Other(e.to_string()))?;
        let instructions = Instructions::from_gguf(f);
        let ctx = info.config.max_position_embeddings;
        let max_seq = if opts.max_seq > 0 { opts.max_seq.min(ctx) } else { ctx };
        if opts.vae_core == 0 {
            return Err(PipelineError::Other("--vae-core must be at least 1".into()));
        }
        if opts.prefill_chunk == 0 {
            return Err(PipelineError::Other("--prefill-chunk must be at least 1".into()));
        }
        let (vae_core, vae_halo, prefill_chunk) = (opts.vae_core, opts.vae_halo, opts.prefill_chunk);
        Ok(Shared { info, tokenizer, instructions, max_seq, vae_core, vae_halo, prefill_chunk })
    }

    pub fn ar_stages<'a>(&'a self, model: &'a mut ArModel, backend: &'a Backend) -> ArStages<'a> {
        ArStages {
            model,
            backend,
            tokenizer: &self.tokenizer,
            tokens: self.info.tokens,
            instructions: &self.instructions,
            max_seq: self.max_seq,
            prefill_chunk: self.prefill_chunk,
        }
    }

    /// The AR half of a request (its seeds resolved): scores, semantic streams (or the
    /// replayed one), then each song's sets for the NAR. A song of one chunk keeps the set
    /// its stream was written in, completed with music_end; a longer song (and a replay)
    /// gets one prefill per chunk. Its codes ran on the row-exact kernels either way, so a
    /// replay renders the same audio bit for bit.
    pub fn compose(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        s: &Settings,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<SongWork>, PipelineError> {
        let songs = self.compose_codes(ar, backend, s, cancel, events)?;
        let mut out = Vec::with_capacity(songs.len());
        for song in songs {
            out.push(self.prefill_chunks(ar, backend, s, song, cancel)?);
        }
        Ok(out)
    }

    /// The scores and semantic streams of a job, without the chunk prefills: each song with
    /// its semantic prefix. A [`Writer`] stepped to the end; what `yued compose` writes out.
    pub fn compose_codes(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        s: &Settings,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<WrittenSong>, PipelineError> {
        self.write(ar, backend, s, false, cancel, events, &mut |_| {})
    }

    /// The AR half of a generated job (not a replay) that hands each song's chunks out
    /// while it writes them ([`ChunkReady`], on the grid of [`Settings::chunk_plan`]), then
    /// each song's end: what lets the synthesis half paint chunk k while this writes chunk
    /// k + 1. The chunks are the ones [`compose`](Self::compose) prefills, bit for bit.
    pub fn compose_streamed(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        s: &Settings,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
        ready: &mut dyn FnMut(ChunkReady),
    ) -> Result<Vec<SongMeta>, PipelineError> {
        let songs = self.write(ar, backend, s, true, cancel, events, ready)?;
        Ok(songs.into_iter().map(|w| w.meta).collect())
    }

    /// A [`Writer`] stepped to the end, its items told as events and hand-outs.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        s: &Settings,
        stream: bool,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
        ready: &mut dyn FnMut(ChunkReady),
    ) -> Result<Vec<WrittenSong>, PipelineError> {
        let mut stages = self.ar_stages(ar, backend);
        let mut writer = Writer::new(&mut stages, s.clone(), stream)?;
        while !writer.done() {
            if cancel.is_cancelled() {
                return Err(PipelineError::Cancelled);
            }
            for item in writer.step(&mut stages)? {
                match item {
                    Written::Progress { phase, song, done, total } => {
                        events(Event::Progress { phase, song, done, total })
                    }
                    Written::Score { song, abc } => events(Event::Score { song, abc: &abc }),
                    Written::Codes(m) => events(Event::Codes { song: m.index, abc: &m.abc, codes: &m.codes }),
                    Written::Chunk { song, chunk } => ready(ChunkReady::Chunk { song, chunk }),
                    Written::SongEnd(meta) => ready(ChunkReady::SongEnd(meta)),
                }
            }
        }
        writer.finish()
    }

    /// One KV set per acoustic chunk of a composed song ([`Settings::chunk_plan`]):
    /// prefix + the chunk's codes + music_end, the sequence the NAR attends to. A song of
    /// one chunk that kept its stream's set takes it as it is.
    pub fn prefill_chunks(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        s: &Settings,
        song: WrittenSong,
        cancel: &CancelToken,
    ) -> Result<SongWork, PipelineError> {
        let plan = s.chunk_plan(self.max_seq, song.prefix.len())?;
        let spans = plan.spans(song.meta.codes.len());
        match song.kv {
            Some(kv) if spans.len() == 1 => {
                Ok(SongWork { meta: song.meta, chunks: vec![ChunkKv { span: spans[0], kv }] })
            }
            _ => self.prefill_planned(ar, backend, plan, song.meta, song.prefix, cancel),
        }
    }

    /// [`prefill_chunks`](Self::prefill_chunks) on a given grid (the seam bench compares
    /// grids; a job always takes its [`Settings::chunk_plan`]).
    pub fn prefill_planned(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        plan: ChunkPlan,
        meta: SongMeta,
        prefix: Vec<u32>,
        cancel: &CancelToken,
    ) -> Result<SongWork, PipelineError> {
        let (index, frames) = (meta.index, meta.codes.len());
        let spans = plan.spans(frames);
        if spans.len() > 1 {
            tracing::info!(song = index, frames, chunks = spans.len(), "rendering in chunks");
        }
        let mut chunks = Vec::with_capacity(spans.len());
        for span in spans {
            if cancel.is_cancelled() {
                return Err(PipelineError::Cancelled);
            }
            let song = self.ar_stages(ar, backend).prefill_sequence(
                prefix.clone(),
                &[],
                &meta.codes[span.context..span.end],
            )?;
            chunks.push(ChunkKv { span, kv: song.kv });
        }
        Ok(SongWork { meta, chunks })
    }

    /// The synthesis half of one song: flow matching over each chunk for all the request's
    /// variations, in one graph per chunk. Each chunk's latents go out as `Event::Latents`
    /// the moment they exist, and each chunk's KV set is freed right after its solve.
    /// Returns every variation's time-major latents.
    pub fn render(
        &self,
        nar: &mut NarModel,
        backend: &Backend,
        song: SongWork,
        s: &Settings,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<Vec<f32>>, PipelineError> {
        let frames = song.meta.codes.len();
        let m = s.variations;
        let mut noise = SongNoise::new(s.seed, m, nar.latent, frames);
        let mut out = vec![Vec::with_capacity(frames * nar.latent); m];
        let n_chunks = song.chunks.len();
        for (c, chunk) in song.chunks.into_iter().enumerate() {
            let progress = (c, n_chunks);
            self.render_chunk(nar, backend, song.meta.index, chunk, &mut noise, s, progress, cancel, &mut |e| {
                if let Event::Latents { variation, latents, .. } = &e {
                    out[*variation as usize].extend_from_slice(latents);
                }
                events(e)
            })?;
        }
        Ok(out)
    }

    /// One chunk of one song for every variation: its noise, the solve over the chunk's set
    /// (freed after), the left context cropped; the kept frames go out as `Event::Latents`.
    /// `progress` is (chunks before this one, the song's chunks as far as known).
    #[allow(clippy::too_many_arguments)]
    pub fn render_chunk(
        &self,
        nar: &mut NarModel,
        backend: &Backend,
        song: u32,
        chunk: ChunkKv,
        noise: &mut SongNoise,
        s: &Settings,
        progress: (usize, usize),
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), PipelineError> {
        let lat = nar.latent;
        let m = s.variations;
        let steps = s.steps;
        let span = chunk.span;
        let n = span.painted();
        let x = noise.frames(span.context, span.end);
        let (done_before, total) = (progress.0 * steps, progress.1.max(progress.0 + 1) * steps);
        let y = nar.solve(backend, &chunk.kv, &x, n, m, steps, s.solver, cancel, &mut |s, _| {
            events(Event::Progress { phase: Phase::Synth, song, done: done_before + s, total })
        })?;
        drop(chunk);
        let crop = span.start - span.context;
        for j in 0..m {
            let part = &y[(j * n + crop) * lat..(j + 1) * n * lat];
            events(Event::Latents { song, variation: j as u32, start_frame: span.start, latents: part });
        }
        Ok(())
    }
}

/// One item of what a [`Writer`] step wrote.
pub enum Written {
    /// Tokens done out of a phase's budget.
    Progress { phase: Phase, song: u32, done: usize, total: usize },
    /// Song `song`'s planned score.
    Score { song: u32, abc: String },
    /// A song's codes are complete (each song once, in order, after the last code step).
    Codes(SongMeta),
    /// A streaming writer's chunk of song `song` (a song's chunks come in order).
    Chunk { song: u32, chunk: ChunkKv },
    /// A streaming writer's song is complete, after its last chunk.
    SongEnd(SongMeta),
}

/// A song's score: its text, its canonical ids and the planning seed that wrote it.
type Scored = (String, Vec<u32>, Option<u64>);

/// The AR half of a job as a stepper its caller drives (the stage loop checks cancel and
/// reports progress between steps): each song's score planned, one token a step and song
/// after song; then every song's codes written in lockstep, one code a step; then the
/// codes told. A replay has nothing to write: its first step tells its codes. Under
/// `stream`, a song's chunks are prefilled and handed out the step their codes exist.
pub struct Writer {
    s: Settings,
    max_seq: usize,
    scores: Vec<Scored>,
    state: WriterState,
    /// Hands the chunks out (a streaming writer's, from the semantic stage's start).
    stream: bool,
    feeder: Option<ChunkFeeder>,
    /// Items written outside a step (a stage that ended as it started), told at the next.
    pending: Vec<Written>,
    /// The first song that ended without a frame (the job fails at [`Writer::finish`]).
    empty: Option<u32>,
    /// The span it was made in (the daemon's: its job's), entered around its own work in a
    /// step shared with other jobs' writers, so what it logs there names its job.
    span: tracing::Span,
}

enum WriterState {
    Plan {
        song: u32,
        planner: Planner,
    },
    Semantic(Semantic),
    /// The streams written, not yet told.
    Written(Vec<Stream>),
    Done(Vec<WrittenSong>),
}

/// A song's stream once written: (song, prefix, codes, ended) and its completed set when
/// the song renders in one chunk.
struct Stream {
    index: u32,
    prefix: Vec<u32>,
    codes: Vec<u32>,
    ended: bool,
    kv: Option<KvSet>,
}

impl Writer {
    /// A job's writer: refused before any compute when it cannot fit the cache; the first
    /// score's prefix (or every song's semantic prefix) prefilled.
    pub fn new(stages: &mut ArStages<'_>, s: Settings, stream: bool) -> Result<Writer, PipelineError> {
        stages.check_fits(&s)?;
        let max_seq = stages.max_seq;
        if let Some(codes) = s.replay.clone() {
            if stream {
                return Err(PipelineError::Other("a replay has every code already: compose it".into()));
            }
            let score = (s.abc.clone(), stages.tokenizer.encode(&s.abc), None);
            let prefix = stages.semantic_prefix(&s, &score.1);
            let state = WriterState::Written(vec![Stream { index: 0, prefix, codes, ended: true, kv: None }]);
            let scores = vec![score];
            let span = tracing::Span::current();
            return Ok(Writer {
                s,
                max_seq,
                scores,
                state,
                stream,
                feeder: None,
                pending: Vec::new(),
                empty: None,
                span,
            });
        }
        let given = (s.abc.clone(), stages.tokenizer.encode(&s.abc), None);
        let scores = vec![given; s.songs];
        let state = WriterState::Done(Vec::new());
        let span = tracing::Span::current();
        let mut w = Writer { s, max_seq, scores, state, stream, feeder: None, pending: Vec::new(), empty: None, span };
        w.next_song(stages, 0)?;
        Ok(w)
    }

    /// Plans song `song` when it needs a score, or starts the semantic stage once every
    /// song has one.
    fn next_song(&mut self, stages: &mut ArStages<'_>, song: u32) -> Result<(), PipelineError> {
        if self.s.plans() && (song as usize) < self.s.songs {
            self.state = WriterState::Plan { song, planner: stages.plan_start(&self.s, song)? };
            return Ok(());
        }
        let ids: Vec<Vec<u32>> = self.scores.iter().map(|s| s.1.clone()).collect();
        if self.stream {
            // Each song's grid comes from its prefix (its score's length).
            let plans = ids
                .iter()
                .map(|score| self.s.chunk_plan(self.max_seq, stages.semantic_prefix(&self.s, score).len()))
                .collect::<Result<Vec<_>, _>>()?;
            self.feeder = Some(ChunkFeeder::new(plans));
        }
        let sem = stages.semantic_start(&self.s, &ids)?;
        self.state = WriterState::Semantic(sem);
        let mut out = Vec::new();
        self.end_semantic(stages, &mut out)?;
        self.pending.append(&mut out);
        Ok(())
    }

    /// Once the semantic stage is done: its last chunks and ends handed out, the streams
    /// taken from it.
    fn end_semantic(&mut self, stages: &mut ArStages<'_>, out: &mut Vec<Written>) -> Result<(), PipelineError> {
        let WriterState::Semantic(sem) = &self.state else { return Ok(()) };
        if !sem.done() {
            return Ok(());
        }
        if let Some(f) = self.feeder.as_mut() {
            f.finish(stages, sem, &mut |e| out.extend(handout(&self.scores, e)))?;
        }
        let WriterState::Semantic(sem) = std::mem::replace(&mut self.state, WriterState::Done(Vec::new())) else {
            unreachable!()
        };
        let mut streams = Vec::with_capacity(sem.songs());
        for i in 0..sem.songs() {
            let (prefix, codes) = (sem.prefix(i).to_vec(), sem.codes(i).to_vec());
            // A song of one chunk keeps the set it was written in (a streamed one's chunk
            // went out already), where the kernels let a replay prefill the same bits.
            let one_chunk = self.s.chunk_plan(self.max_seq, prefix.len())?.spans(codes.len()).len() == 1;
            let kv = if one_chunk && !self.stream && !codes.is_empty() && stages.backend.has_row_exact_kernels() {
                let mut song = sem.song(stages, i)?;
                stages.complete(&mut song)?;
                Some(song.kv)
            } else {
                None
            };
            streams.push(Stream { index: i as u32, prefix, codes, ended: sem.ended(i), kv });
        }
        self.state = WriterState::Written(streams);
        Ok(())
    }

    /// The span it was made in (its job's, in the daemon).
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Whether every song's codes are written and told.
    pub fn done(&self) -> bool {
        matches!(self.state, WriterState::Done(_))
    }

    /// Rows the writer takes in a decode step now: one per stream it decodes.
    pub fn rows(&self) -> usize {
        let songs = self.s.songs.max(1);
        match &self.state {
            WriterState::Plan { .. } => 1,
            WriterState::Semantic(_) if self.s.cfg_scale != 1.0 => 2 * songs,
            WriterState::Semantic(_) => songs,
            _ => 0,
        }
    }

    /// The most rows the writer will take (its songs, twice under guidance).
    pub fn max_rows(s: &Settings) -> usize {
        let songs = s.songs.max(1);
        if s.cfg_scale != 1.0 && s.replay.is_none() {
            2 * songs
        } else {
            songs
        }
    }

    /// Whether the phase's feeds ran, so [`Writer::sample`] can step.
    fn ready(&self) -> bool {
        match &self.state {
            WriterState::Plan { planner, .. } => planner.ready(),
            WriterState::Semantic(sem) => sem.ready(),
            _ => true,
        }
    }

    /// One step alone: what the phase has to run, then [`Writer::sample`].
    pub fn step(&mut self, stages: &mut ArStages<'_>) -> Result<Vec<Written>, PipelineError> {
        stages.run_alone(self)?;
        self.sample(stages)
    }

    /// One step once the feeds ran (alone or beside other jobs'): a score token, a code of
    /// every open song, or the codes told. A writer whose prompt is still being prefilled
    /// piece by piece says only what it had pending.
    pub fn sample(&mut self, stages: &mut ArStages<'_>) -> Result<Vec<Written>, PipelineError> {
        let mut out = std::mem::take(&mut self.pending);
        if !self.ready() {
            return Ok(out);
        }
        match &mut self.state {
            WriterState::Plan { song, planner } => {
                let song = *song;
                let st = planner.step(stages)?;
                let p = st.progress;
                out.push(Written::Progress { phase: Phase::Plan, song: p.song, done: p.done, total: p.total });
                if let Some(plan) = st.plan {
                    out.push(Written::Score { song, abc: plan.abc.clone() });
                    // The score travels as text: the next stages read its canonical
                    // tokenization, exactly what a replay of the track will read.
                    let ids = stages.tokenizer.encode(&plan.abc);
                    self.scores[song as usize] = (plan.abc, ids, Some(plan.seed));
                    self.next_song(stages, song + 1)?;
                    out.append(&mut self.pending);
                }
            }
            WriterState::Semantic(sem) => {
                let done = sem.step(stages)?;
                out.push(Written::Progress { phase: Phase::Semantic, song: 0, done, total: sem.total() });
                if let Some(f) = self.feeder.as_mut() {
                    f.after_step(stages, sem, &mut |e| out.extend(handout(&self.scores, e)))?;
                }
                self.end_semantic(stages, &mut out)?;
            }
            WriterState::Written(streams) => {
                let mut done = Vec::with_capacity(streams.len());
                for Stream { index, prefix, codes, ended, kv } in std::mem::take(streams) {
                    let (abc, _, plan_seed) = self.scores[index as usize].clone();
                    let meta = SongMeta { index, abc, plan_seed, codes, ended };
                    out.push(Written::Codes(meta.clone()));
                    if meta.codes.is_empty() {
                        self.empty = Some(index);
                        break;
                    }
                    done.push(WrittenSong { meta, prefix, kv });
                }
                self.state = WriterState::Done(done);
            }
            WriterState::Done(_) => {}
        }
        Ok(out)
    }

    /// The songs, each with its semantic prefix and, when it renders in one chunk, its set.
    pub fn finish(self) -> Result<Vec<WrittenSong>, PipelineError> {
        if let Some(index) = self.empty {
            return Err(PipelineError::Other(format!("song {index} has no semantic frame to render")));
        }
        match self.state {
            WriterState::Done(songs) => Ok(songs),
            _ => Err(PipelineError::Other("the writer was finished before its last step".into())),
        }
    }
}

impl Fed for Writer {
    fn feed(&mut self) -> Option<Feed<'_>> {
        match &mut self.state {
            WriterState::Plan { planner, .. } => planner.feed(),
            WriterState::Semantic(sem) => sem.feed(),
            _ => None,
        }
    }

    fn fed(&mut self, logits: Vec<Vec<f32>>) {
        match &mut self.state {
            WriterState::Plan { planner, .. } => planner.fed(logits),
            WriterState::Semantic(sem) => sem.fed(logits),
            _ => unreachable!("a writer fed without a feed"),
        }
    }
}

/// One decode step of several jobs' writers over the same AR half: every writer's feed in
/// one forward (a prompt's piece held back while the step already carries `prefill_budget`
/// prompt tokens, whoever's first), then each writer's [`Writer::sample`]. A writer's own
/// failure is its own (the others go on); a failed forward fails the step.
pub fn step_together(
    stages: &mut ArStages<'_>,
    writers: &mut [&mut Writer],
    prefill_budget: usize,
) -> Result<Vec<Result<Vec<Written>, PipelineError>>, PipelineError> {
    let mut feeds = Vec::new();
    let mut fed = Vec::new();
    let mut prompt_tokens = 0;
    for (i, w) in writers.iter_mut().enumerate() {
        let span = w.span.clone();
        let _in = span.enter();
        let Some(f) = w.feed() else { continue };
        if f.prefills() {
            if prompt_tokens > 0 && prompt_tokens + f.tokens() > prefill_budget {
                continue;
            }
            prompt_tokens += f.tokens();
        }
        feeds.push(f);
        fed.push(i);
    }
    let logits = stages.model.run_feeds(stages.backend, &mut feeds)?;
    drop(feeds);
    for (i, l) in fed.into_iter().zip(logits) {
        writers[i].fed(l);
    }
    Ok(writers
        .iter_mut()
        .map(|w| {
            let span = w.span.clone();
            let _in = span.enter();
            w.sample(stages)
        })
        .collect())
}

/// A chunk feeder's event as a writer's item. A song without a frame fails the job; its
/// end is not handed out.
fn handout(scores: &[Scored], e: ChunkEvent) -> Option<Written> {
    match e {
        ChunkEvent::Chunk { song, span, kv } => Some(Written::Chunk { song, chunk: ChunkKv { span, kv } }),
        ChunkEvent::End { codes, .. } if codes.is_empty() => None,
        ChunkEvent::End { song, codes, ended } => {
            let (abc, _, plan_seed) = scores[song as usize].clone();
            Some(Written::SongEnd(SongMeta { index: song, abc, plan_seed, codes, ended }))
        }
    }
}

/// All three modules resident on one backend: the synchronous whole-request path of
/// `yued synth` and of the tests. The daemon runs the same stage functions on its own
/// threads, each module leased from its ModelStore.
pub struct Pipeline {
    pub backend: Backend,
    pub shared: Shared,
    pub ar: ArModel,
    pub nar: NarModel,
    pub vae: VaeModel,
}

impl Pipeline {
    pub fn load(model: &Path, vae: &Path, backend: Backend, opts: &PipelineOptions) -> Result<Self, PipelineError> {
        Self::load_adapted(model, vae, backend, opts, &Default::default())
    }

    /// [`Pipeline::load`] with adapter terms merged into the halves
    /// ([`crate::models::yue2::adapter::request_terms`]: the AR half's, then the NAR half's).
    pub fn load_adapted(
        model: &Path,
        vae: &Path,
        backend: Backend,
        opts: &PipelineOptions,
        terms: &(crate::models::yue2::adapter::HalfTerms, crate::models::yue2::adapter::HalfTerms),
    ) -> Result<Self, PipelineError> {
        let f = GgufFile::open(model)?;
        let shared = Shared::from_gguf(&f, opts)?;
        let ar = ArModel::load_with(&f, &shared.info, &backend, &terms.0)?;
        let nar = NarModel::load_with(&f, &shared.info, &backend, &terms.1)?;
        let vf = GgufFile::open(vae)?;
        let vae = VaeModel::load(&vf, &backend)?;
        if vae.info.latent_channels != nar.latent {
            return Err(PipelineError::Other(format!(
                "the VAE takes {} latent channels, the backbone writes {}",
                vae.info.latent_channels, nar.latent
            )));
        }
        Ok(Pipeline { backend, shared, ar, nar, vae })
    }

    /// The audio the pipeline renders.
    pub fn audio_spec(&self) -> crate::models::AudioSpec {
        self.vae.info.audio_spec()
    }

    /// Runs a job to its tracks: the AR half, then each song's synthesis and decode.
    pub fn run(
        &mut self,
        s: &Settings,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<Track>, PipelineError> {
        let songs = self.shared.compose(&mut self.ar, &self.backend, s, cancel, events)?;
        let core = s.tile_core(self.shared.vae_core, self.shared.vae_halo);
        let mut tracks = Vec::new();
        for song in songs {
            let meta = song.meta.clone();
            let latents = self.shared.render(&mut self.nar, &self.backend, song, s, cancel, events)?;
            for (j, lat) in latents.into_iter().enumerate() {
                let track = tracks.len();
                let pcm =
                    self.vae.decode_tiled(&self.backend, &lat, core, self.shared.vae_halo, cancel, &mut |tile| {
                        events(Event::Tile { track, tile });
                    })?;
                tracks.push(Track::new(&meta, j as u32, lat, pcm, self.vae.info.audio_spec()));
            }
        }
        Ok(tracks)
    }
}

impl Track {
    /// Variation `variation` of a song, from its latents and decoded samples.
    pub fn new(
        meta: &SongMeta,
        variation: u32,
        latents: Vec<f32>,
        pcm: Vec<f32>,
        audio: crate::models::AudioSpec,
    ) -> Track {
        Track {
            song: meta.index,
            variation,
            abc: meta.abc.clone(),
            plan_seed: meta.plan_seed,
            codes: meta.codes.clone(),
            frames: meta.codes.len(),
            latents,
            pcm,
            audio,
            truncated: !meta.ended,
        }
    }

    /// The song it is a variation of.
    pub fn meta(&self) -> SongMeta {
        let (index, abc, plan_seed) = (self.song, self.abc.clone(), self.plan_seed);
        SongMeta { index, abc, plan_seed, codes: self.codes.clone(), ended: !self.truncated }
    }

    /// The settings that render exactly this track again (a replay of `s`, the job's).
    pub fn replay(&self, s: &Settings) -> Settings {
        s.replay(self.song, &self.abc, &self.codes, self.plan_seed, self.variation)
    }
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod tests;
