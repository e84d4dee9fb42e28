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
use crate::models::yue2::generate::{ArProgress, ArStages, ChunkEvent, ChunkFeeder, GenError, Song};
use crate::models::yue2::nar::{ChunkPlan, ChunkSpan, NarError, NarModel};
use crate::models::yue2::prompt::Instructions;
use crate::models::yue2::vae::{Tile, VaeError, VaeModel};
use crate::rng::torch_cpu::randn;
use crate::tokenizer::BpeTokenizer;
use crate::weights::LoadError;
use std::path::Path;
use yued_protocol::request::yue2::STREAM_CONTEXT_FRAMES;
use yued_protocol::{CotMode, Limits, RequestError, Stage, Yue2Request};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Request(#[from] RequestError),
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
            GenError::Request(r) => PipelineError::Request(r),
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

/// What happened, as it happens.
pub enum Event<'a> {
    Progress {
        stage: Stage,
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

/// Where a request's chunks fall for a song behind a prefix of `prefix_len` tokens: yue2.cpp's
/// rule, or `stream_chunk_seconds` chunks behind [`STREAM_CONTEXT_FRAMES`] of
/// left context.
pub fn chunk_plan(req: &Yue2Request, max_seq: usize, prefix_len: usize) -> Result<ChunkPlan, PipelineError> {
    ChunkPlan::new(max_seq, prefix_len, req.stream_chunk_frames().map(|f| (f, STREAM_CONTEXT_FRAMES))).ok_or_else(
        || {
            RequestError::new(
                "abc",
                format!(
                    "the prefix of {prefix_len} tokens leaves no room for a latent block in a context of {max_seq}"
                ),
            )
            .into()
        },
    )
}

/// The VAE tile core of a request's tracks: the server's (`--vae-core`), or under streaming
/// chunks at most a chunk less the halo, so a track's first tile is decoded as soon as its
/// first chunk is painted. Part of what a replay must match to render the same samples.
pub fn tile_core(req: &Yue2Request, core: usize, halo: usize) -> usize {
    match req.stream_chunk_frames() {
        Some(f) => core.min(f.saturating_sub(halo).max(1)),
        None => core,
    }
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
    pub fn new(seed: i64, variations: usize, lat: usize, frames: usize) -> Self {
        let mut n = SongNoise { seed: seed as u64, lat, frames: 0, draws: vec![Vec::new(); variations] };
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
    /// The request that renders exactly this track again.
    pub replay: Yue2Request,
    pub abc: String,
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
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions { max_seq: 0, vae_core: 512, vae_halo: 16 }
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
        Ok(Shared { info, tokenizer, instructions, max_seq, vae_core: opts.vae_core, vae_halo: opts.vae_halo })
    }

    /// The request bounds this pipeline enforces.
    pub fn limits(&self, max_batch: u32) -> Limits {
        Limits {
            max_batch,
            context: self.max_seq as u32,
            codebook_size: self.info.tokens.codebook_size,
            ..Limits::default()
        }
    }

    pub fn ar_stages<'a>(&'a self, model: &'a mut ArModel, backend: &'a Backend) -> ArStages<'a> {
        ArStages {
            model,
            backend,
            tokenizer: &self.tokenizer,
            tokens: self.info.tokens,
            instructions: &self.instructions,
            max_seq: self.max_seq,
        }
    }

    /// The AR half of a request (its seeds resolved): scores, semantic streams (or the
    /// replayed one), then one prefill per acoustic chunk. The KV sets of the generation are
    /// dropped: the NAR reads a fresh one-forward prefill of prefix + codes + music_end, the
    /// same sequence a replay prefills, so a replay renders the same audio bit for bit.
    pub fn compose(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<SongWork>, PipelineError> {
        let songs = self.compose_codes(ar, backend, req, cancel, events)?;
        let mut out = Vec::with_capacity(songs.len());
        for (meta, prefix) in songs {
            out.push(self.prefill_chunks(ar, backend, req, meta, prefix, cancel)?);
        }
        Ok(out)
    }

    /// The scores and semantic streams of a request (its seeds resolved), without the
    /// chunk prefills: each song with its semantic prefix. What `yued compose` writes out.
    pub fn compose_codes(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<(SongMeta, Vec<u32>)>, PipelineError> {
        self.compose_fed(ar, backend, req, cancel, events, None)
    }

    /// The AR half of a generated request (not a replay) that hands each song's chunks out
    /// while it writes them ([`ChunkReady`], on the grid of [`chunk_plan`]), then each
    /// song's end: what lets the synthesis half paint chunk k while this writes chunk
    /// k + 1. The chunks are the ones [`compose`](Self::compose) prefills, bit for bit.
    pub fn compose_streamed(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
        ready: &mut dyn FnMut(ChunkReady),
    ) -> Result<Vec<SongMeta>, PipelineError> {
        if !req.semantic_tokens.is_empty() {
            return Err(PipelineError::Other("a replay has every code already: compose it".into()));
        }
        let songs = self.compose_fed(ar, backend, req, cancel, events, Some(ready))?;
        Ok(songs.into_iter().map(|(m, _)| m).collect())
    }

    fn compose_fed(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
        ready: Option<&mut dyn FnMut(ChunkReady)>,
    ) -> Result<Vec<(SongMeta, Vec<u32>)>, PipelineError> {
        if req.lm_seed < 0 || req.seed < 0 {
            return Err(PipelineError::Other("seeds must be resolved before the pipeline runs".into()));
        }
        self.ar_stages(ar, backend).check_fits(req)?;
        let replay = !req.semantic_tokens.is_empty();
        let n_songs = if replay { 1 } else { req.lm_batch_size.max(1) as usize };
        // Scores: (text, ids, planning seed).
        let mut scores: Vec<(String, Vec<u32>, Option<u64>)> = Vec::with_capacity(n_songs);
        for i in 0..n_songs {
            if !req.abc.is_empty() {
                scores.push((req.abc.clone(), self.tokenizer.encode(&req.abc), None));
            } else if replay || req.cot == CotMode::Off {
                scores.push((String::new(), Vec::new(), None));
            } else {
                let plan = self.ar_stages(ar, backend).plan(req, i as u32, cancel, &mut |p: ArProgress| {
                    events(Event::Progress { stage: Stage::Plan, song: p.song, done: p.done, total: p.total })
                })?;
                events(Event::Score { song: i as u32, abc: &plan.abc });
                // The score travels as text: the next stages read its canonical tokenization,
                // exactly what a replay of the track will read.
                let ids = self.tokenizer.encode(&plan.abc);
                scores.push((plan.abc, ids, Some(plan.seed)));
            }
        }
        let streams: Vec<(u32, Vec<u32>, Vec<u32>, bool)> = if replay {
            let prefix = self.ar_stages(ar, backend).semantic_prefix(req, &scores[0].1)?;
            vec![(0, prefix, req.semantic_codes()?, true)]
        } else {
            let ids: Vec<Vec<u32>> = scores.iter().map(|s| s.1.clone()).collect();
            let mut stages = self.ar_stages(ar, backend);
            // Under a feed, each song's grid comes from its prefix (its score's length).
            let mut feeder = match &ready {
                Some(_) => Some(ChunkFeeder::new(
                    ids.iter()
                        .map(|score| chunk_plan(req, self.max_seq, stages.semantic_prefix(req, score)?.len()))
                        .collect::<Result<Vec<_>, _>>()?,
                )),
                None => None,
            };
            let mut ready = ready;
            let mut emit = |e: ChunkEvent| {
                let Some(ready) = ready.as_mut() else { return };
                match e {
                    ChunkEvent::Chunk { song, span, kv } => {
                        ready(ChunkReady::Chunk { song, chunk: ChunkKv { span, kv } })
                    }
                    // A song without a frame fails the job below; its end is not handed out.
                    ChunkEvent::End { codes, .. } if codes.is_empty() => {}
                    ChunkEvent::End { song, codes, ended } => {
                        let (abc, _, plan_seed) = scores[song as usize].clone();
                        ready(ChunkReady::SongEnd(SongMeta { index: song, abc, plan_seed, codes, ended }))
                    }
                }
            };
            let mut sem = stages.semantic_start(req, &ids)?;
            while !sem.done() {
                if cancel.is_cancelled() {
                    return Err(PipelineError::Cancelled);
                }
                let done = sem.step(&mut stages)?;
                events(Event::Progress { stage: Stage::Semantic, song: 0, done, total: sem.total() });
                if let Some(f) = feeder.as_mut() {
                    f.after_step(&mut stages, &sem, &mut emit)?;
                }
            }
            if let Some(f) = feeder.as_mut() {
                f.finish(&mut stages, &sem, &mut emit)?;
            }
            let songs: Vec<Song> = sem.finish(&stages)?;
            songs.into_iter().map(|s| (s.index, s.prefix, s.codes, s.ended)).collect()
        };
        let mut out = Vec::with_capacity(streams.len());
        for (index, prefix, codes, ended) in streams {
            let (abc, _, plan_seed) = scores[index as usize].clone();
            events(Event::Codes { song: index, abc: &abc, codes: &codes });
            if codes.is_empty() {
                return Err(PipelineError::Other(format!("song {index} has no semantic frame to render")));
            }
            out.push((SongMeta { index, abc, plan_seed, codes, ended }, prefix));
        }
        Ok(out)
    }

    /// One KV set per acoustic chunk of a composed song (the request's [`chunk_plan`]):
    /// prefix + the chunk's codes, the sequence the NAR attends to.
    pub fn prefill_chunks(
        &self,
        ar: &mut ArModel,
        backend: &Backend,
        req: &Yue2Request,
        meta: SongMeta,
        prefix: Vec<u32>,
        cancel: &CancelToken,
    ) -> Result<SongWork, PipelineError> {
        let plan = chunk_plan(req, self.max_seq, prefix.len())?;
        self.prefill_planned(ar, backend, plan, meta, prefix, cancel)
    }

    /// [`prefill_chunks`](Self::prefill_chunks) on a given grid (the seam bench compares
    /// grids; a request always takes its [`chunk_plan`]).
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
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<Vec<f32>>, PipelineError> {
        let frames = song.meta.codes.len();
        let m = req.synth_batch_size.max(1) as usize;
        let mut noise = SongNoise::new(req.seed, m, nar.latent, frames);
        let mut out = vec![Vec::with_capacity(frames * nar.latent); m];
        let n_chunks = song.chunks.len();
        for (c, chunk) in song.chunks.into_iter().enumerate() {
            let progress = (c, n_chunks);
            self.render_chunk(nar, backend, song.meta.index, chunk, &mut noise, req, progress, cancel, &mut |e| {
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
        req: &Yue2Request,
        progress: (usize, usize),
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), PipelineError> {
        let lat = nar.latent;
        let m = req.synth_batch_size.max(1) as usize;
        let steps = req.steps as usize;
        let span = chunk.span;
        let n = span.painted();
        let x = noise.frames(span.context, span.end);
        let (done_before, total) = (progress.0 * steps, progress.1.max(progress.0 + 1) * steps);
        let y = nar.solve(backend, &chunk.kv, &x, n, m, steps, cancel, &mut |s, _| {
            events(Event::Progress { stage: Stage::Synth, song, done: done_before + s, total })
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

/// The request that renders variation `variation` of `song` again, bit for bit.
pub fn replay_request(req: &Yue2Request, song: &SongMeta, variation: u32) -> Yue2Request {
    let mut rq = req.clone();
    rq.abc = song.abc.clone();
    rq.semantic_tokens = song.codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    rq.source_tokens.clear();
    rq.lm_seed = song.plan_seed.map(|s| s as i64).unwrap_or(req.lm_seed + song.index as i64);
    rq.seed = req.seed + variation as i64;
    rq.lm_batch_size = 1;
    rq.synth_batch_size = 1;
    rq
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

    /// The request bounds this pipeline enforces.
    pub fn limits(&self, max_batch: u32) -> Limits {
        self.shared.limits(max_batch)
    }

    /// The audio the pipeline renders.
    pub fn audio_spec(&self) -> crate::models::AudioSpec {
        self.vae.info.audio_spec()
    }

    /// Runs a validated request whose seeds are resolved (non-negative).
    pub fn run(
        &mut self,
        req: &Yue2Request,
        cancel: &CancelToken,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Vec<Track>, PipelineError> {
        let songs = self.shared.compose(&mut self.ar, &self.backend, req, cancel, events)?;
        let mut tracks = Vec::new();
        for song in songs {
            let meta = song.meta.clone();
            let latents = self.shared.render(&mut self.nar, &self.backend, song, req, cancel, events)?;
            for (j, lat) in latents.into_iter().enumerate() {
                let track = tracks.len();
                let core = tile_core(req, self.shared.vae_core, self.shared.vae_halo);
                let pcm =
                    self.vae.decode_tiled(&self.backend, &lat, core, self.shared.vae_halo, cancel, &mut |tile| {
                        events(Event::Tile { track, tile });
                    })?;
                let frames = meta.codes.len();
                tracks.push(Track {
                    song: meta.index,
                    variation: j as u32,
                    replay: replay_request(req, &meta, j as u32),
                    abc: meta.abc.clone(),
                    codes: meta.codes.clone(),
                    frames,
                    latents: lat,
                    pcm,
                    audio: self.vae.info.audio_spec(),
                    truncated: !meta.ended,
                });
            }
        }
        Ok(tracks)
    }
}

#[cfg(test)]
mod tests;
