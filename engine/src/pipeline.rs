//! One whole request, text to planar stereo: plan, semantic stream (or replay), NAR flow
//! matching per chunk with the request's noise variations, tiled VAE decode. Synchronous;
//! everything a listener may want early (score, codes, latent chunks, PCM tiles) is handed
//! to the event callback the moment it exists.
use crate::ar::ArModel;
use crate::generate::{ArProgress, ArStage, ArStages, CancelToken, GenError, Song};
use crate::ggml::{Backend, GgmlError};
use crate::gguf::{GgufError, GgufFile};
use crate::model::BackboneInfo;
use crate::nar::{chunk_frames, NarError, NarModel};
use crate::prompt::Instructions;
use crate::rng::torch_cpu::randn;
use crate::tokenizer::BpeTokenizer;
use crate::vae::{Tile, VaeError, VaeModel};
use crate::weights::LoadError;
use std::path::Path;
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
    Progress { stage: Stage, song: u32, done: usize, total: usize },
    Score { song: u32, abc: &'a str },
    /// A song's semantic stream is complete (with the score it was written under).
    Codes { song: u32, abc: &'a str, codes: &'a [u32] },
    /// One NAR chunk of one variation: frames `start_frame..` of the track's latents.
    Latents { track: usize, start_frame: usize, latents: &'a [f32] },
    /// One decoded VAE tile of a track (raw, before normalisation).
    Tile { track: usize, tile: Tile<'a> },
}

/// A song's semantic stream, ready for the NAR.
struct SongCodes {
    index: u32,
    prefix: Vec<u32>,
    codes: Vec<u32>,
    ended: bool,
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
    /// Planar stereo, full range, not normalised.
    pub pcm: Vec<f32>,
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

/// The resident modules and everything a request needs.
pub struct Pipeline {
    pub backend: Backend,
    pub info: BackboneInfo,
    pub tokenizer: BpeTokenizer,
    pub instructions: Instructions,
    pub ar: ArModel,
    pub nar: NarModel,
    pub vae: VaeModel,
    pub max_seq: usize,
    pub vae_core: usize,
    pub vae_halo: usize,
}

impl Pipeline {
    pub fn load(model: &Path, vae: &Path, backend: Backend, opts: &PipelineOptions) -> Result<Self, PipelineError> {
        let f = GgufFile::open(model)?;
        let info = BackboneInfo::from_gguf(&f)?;
        let tokenizer = BpeTokenizer::from_gguf(&f).map_err(|e| PipelineError::Other(e.to_string()))?;
        let instructions = Instructions::from_gguf(&f);
        let ar = ArModel::load(&f, &info, &backend)?;
        let nar = NarModel::load(&f, &info, &backend)?;
        let vf = GgufFile::open(vae)?;
        let vae = VaeModel::load(&vf, &backend)?;
        if vae.info.latent_channels != nar.latent {
            return Err(PipelineError::Other(format!("the VAE takes {} latent channels, the backbone writes {}", vae.info.latent_channels, nar.latent)));
        }
        let ctx = info.config.max_position_embeddings;
        let max_seq = if opts.max_seq > 0 { opts.max_seq.min(ctx) } else { ctx };
        if opts.vae_core == 0 {
            return Err(PipelineError::Other("--vae-core must be at least 1".into()));
        }
        Ok(Pipeline { backend, info, tokenizer, instructions, ar, nar, vae, max_seq, vae_core: opts.vae_core, vae_halo: opts.vae_halo })
    }

    /// The request bounds this pipeline enforces.
    pub fn limits(&self, max_batch: u32) -> Limits {
        Limits { max_batch, context: self.max_seq as u32, codebook_size: self.info.tokens.codebook_size, ..Limits::default() }
    }

    fn stages(&mut self) -> ArStages<'_> {
        ArStages { model: &mut self.ar, backend: &self.backend, tokenizer: &self.tokenizer, tokens: self.info.tokens, instructions: &self.instructions, max_seq: self.max_seq }
    }

    /// Runs a validated request whose seeds are resolved (non-negative).
    pub fn run(&mut self, req: &Yue2Request, cancel: &CancelToken, events: &mut dyn FnMut(Event<'_>)) -> Result<Vec<Track>, PipelineError> {
        if req.lm_seed < 0 || req.seed < 0 {
            return Err(PipelineError::Other("seeds must be resolved before the pipeline runs".into()));
        }
        self.stages().check_fits(req)?;
        let replay = !req.semantic_tokens.is_empty();
        let n_songs = if replay { 1 } else { req.lm_batch_size.max(1) as usize };
        // Scores.
        let mut scores: Vec<(String, Vec<u32>, Option<u64>)> = Vec::with_capacity(n_songs);
        for i in 0..n_songs {
            if !req.abc.is_empty() {
                scores.push((req.abc.clone(), self.tokenizer.encode(&req.abc), None));
            } else if replay || req.cot == CotMode::Off {
                scores.push((String::new(), Vec::new(), None));
            } else {
                let plan = self.stages().plan(req, i as u32, cancel, &mut |p: ArProgress| events(Event::Progress { stage: Stage::Plan, song: p.song, done: p.done, total: p.total }))?;
                events(Event::Score { song: i as u32, abc: &plan.abc });
                // The score travels as text: the next stages read its canonical tokenization,
                // exactly what a replay of the track will read.
                let ids = self.tokenizer.encode(&plan.abc);
                scores.push((plan.abc, ids, Some(plan.seed)));
            }
        }
        // Semantic stream: (prefix, codes, ended) per song. The AR KV sets are dropped here:
        // the NAR reads a fresh one-forward prefill of prefix + codes + music_end, the same
        // sequence a replay prefills, so a replay renders the same audio bit for bit.
        let songs: Vec<SongCodes> = if replay {
            let prefix = self.stages().semantic_prefix(req, &scores[0].1)?;
            vec![SongCodes { index: 0, prefix, codes: req.semantic_codes()?, ended: true }]
        } else {
            let ids: Vec<Vec<u32>> = scores.iter().map(|s| s.1.clone()).collect();
            let songs: Vec<Song> = self.stages().semantic(req, &ids, cancel, &mut |p: ArProgress| {
                let stage = if p.stage == ArStage::Plan { Stage::Plan } else { Stage::Semantic };
                events(Event::Progress { stage, song: p.song, done: p.done, total: p.total })
            })?;
            songs.into_iter().map(|s| SongCodes { index: s.index, prefix: s.prefix, codes: s.codes, ended: s.ended }).collect()
        };
        let mut tracks = Vec::new();
        let m = req.synth_batch_size.max(1) as usize;
        for song in songs.iter() {
            events(Event::Codes { song: song.index, abc: &scores[song.index as usize].0, codes: &song.codes });
            let frames = song.codes.len();
            if frames == 0 {
                return Err(PipelineError::Other(format!("song {} has no semantic frame to render", song.index)));
            }
            let noise: Vec<Vec<f32>> = (0..m).map(|j| randn(req.seed as u64 + j as u64, frames * self.nar.latent)).collect();
            let latents = self.render_song(song, &noise, req.steps as usize, cancel, events, tracks.len())?;
            for (j, lat) in latents.into_iter().enumerate() {
                let track = tracks.len();
                let pcm = self.vae.decode_tiled(&self.backend, &lat, self.vae_core, self.vae_halo, cancel, &mut |tile| {
                    events(Event::Tile { track, tile });
                })?;
                let (abc, _, plan_seed) = &scores[song.index as usize];
                let mut rq = req.clone();
                rq.abc = abc.clone();
                rq.semantic_tokens = song.codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
                rq.source_tokens.clear();
                rq.lm_seed = plan_seed.map(|s| s as i64).unwrap_or(req.lm_seed + song.index as i64);
                rq.seed = req.seed + j as i64;
                rq.lm_batch_size = 1;
                rq.synth_batch_size = 1;
                if rq.cot != CotMode::Off && abc.is_empty() {
                    rq.cot = req.cot;
                }
                tracks.push(Track { song: song.index, variation: j as u32, replay: rq, abc: abc.clone(), codes: song.codes.clone(), frames, latents: lat, pcm, truncated: !song.ended });
            }
        }
        Ok(tracks)
    }

    /// NAR over every chunk of a song for all its variations; returns each variation's
    /// time-major latents. Chunks are `(max_seq - prefix - 3) / 2` frames, each its own
    /// `prefix + chunk codes + music_end` sequence.
    fn render_song(&mut self, song: &SongCodes, noise: &[Vec<f32>], steps: usize, cancel: &CancelToken, events: &mut dyn FnMut(Event<'_>), first_track: usize) -> Result<Vec<Vec<f32>>, PipelineError> {
        let lat = self.nar.latent;
        let frames = song.codes.len();
        let m = noise.len();
        let per_chunk = chunk_frames(self.max_seq, song.prefix.len());
        if per_chunk == 0 {
            return Err(RequestError::new("abc", format!("the prefix of {} tokens leaves no room for a latent block in a context of {}", song.prefix.len(), self.max_seq)).into());
        }
        let n_chunks = frames.div_ceil(per_chunk);
        if n_chunks > 1 {
            tracing::info!(song = song.index, frames, chunks = n_chunks, "song longer than one context window: rendering in chunks");
        }
        let mut out = vec![Vec::with_capacity(frames * lat); m];
        let total_steps = steps * n_chunks;
        for c in 0..n_chunks {
            let (a, b) = (c * per_chunk, ((c + 1) * per_chunk).min(frames));
            let n = b - a;
            let chunk_song = self.stages().prefill_sequence(song.prefix.clone(), &[], &song.codes[a..b])?;
            let kv = &chunk_song.kv;
            let mut x = Vec::with_capacity(m * n * lat);
            for nz in noise {
                x.extend_from_slice(&nz[a * lat..b * lat]);
            }
            let done_before = c * steps;
            let y = self.nar.solve(&self.backend, kv, &x, n, m, steps, cancel, &mut |s, _| {
                events(Event::Progress { stage: Stage::Synth, song: song.index, done: done_before + s, total: total_steps })
            })?;
            for j in 0..m {
                let part = &y[j * n * lat..(j + 1) * n * lat];
                events(Event::Latents { track: first_track + j, start_frame: a, latents: part });
                out[j].extend_from_slice(part);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
