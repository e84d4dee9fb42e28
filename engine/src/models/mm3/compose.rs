//! MiniMax Music 3's autoregressive half: the LM writes a semantic code per 25 Hz frame,
//! the depth decoder the frame's 7 acoustic codes, and the frame is fed back; or, for a
//! replay, the given codes are run teacher-forced. Either way a song leaves with its codes
//! and, per frame after the first, the 8 states the condition encoder fuses.
//!
//! Per frame and song, following the reference pipeline:
//! - semantic: logits restricted to the codes and the end-of-audio token; the candidates
//!   are the conditional branch's top k, weighted by the softmax of the guided logits
//!   `uncond + (cond - uncond) * lm_cfg`; one uniform draw;
//! - depth, steps 1..=7: the guided logits of `audio_heads[step-1]` over both branches,
//!   their own top k, one draw each; the conditional hidden state of each step is kept;
//! - feedback: `(LM_embed(semantic) + sum of the 7 acoustic embeddings) * 8^-0.5`, the same
//!   vector into both streams.
//!
//! Frame 0 is sampled and fed back in full; only its states are dropped. A song of F frames
//! leaves F + 1 code frames. Draws come from one stream per song, semantic first, then the
//! 7 acoustic codes (minimaxmusic.cpp: mt19937_64 seeded `lm_seed + i`, libstdc++'s float draw).
use crate::ggml::{Backend, GgmlError};
use crate::kv_cache::KvSet;
use crate::models::mm3::config::{CODES_PER_FRAME, FEEDBACK_SCALE};
use crate::models::mm3::depth::DepthModel;
use crate::models::mm3::lm::{LmModel, LmOut};
use crate::models::mm3::prompt::Prompt;
use crate::rng::mt64::Mt19937_64;

#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Invalid(String),
}

/// The sampling settings of a compose run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArSettings {
    pub lm_cfg: f32,
    pub top_k: usize,
    /// Frames to write at most (the end-of-audio token may stop a song earlier).
    pub max_frames: usize,
    /// Run the guidance pair (and the songs) as one batch; false runs each stream alone.
    pub batch_cfg: bool,
}

/// One song's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Song {
    /// `F + 1` frames of 8 codes: the semantic code, then the 7 acoustic codes.
    pub codes: Vec<[u32; CODES_PER_FRAME]>,
    /// Per frame after the first, the 8 fused states, layer-major: the LM's hidden state
    /// that predicted the frame, then the depth decoder's 7 (`8 * hidden` values a frame).
    pub states: Vec<f32>,
    /// Whether the LM ended the song (else the frame budget did).
    pub ended: bool,
}

impl Song {
    pub fn frames(&self) -> usize {
        self.codes.len().saturating_sub(1)
    }
}

/// Where the uniforms of the draws come from: one stream per song of a batch.
pub trait Draws {
    fn next(&mut self, song: usize) -> f32;
}

/// minimaxmusic.cpp's streams: song i draws from `mt19937_64(seed + i)`.
pub struct SeedDraws(pub Vec<Mt19937_64>);

impl SeedDraws {
    pub fn new(seed: i64, songs: usize) -> Self {
        SeedDraws((0..songs).map(|i| Mt19937_64::new(seed.wrapping_add(i as i64) as u64)).collect())
    }
}

impl Draws for SeedDraws {
    fn next(&mut self, song: usize) -> f32 {
        self.0[song].uniform_f32()
    }
}

/// Given uniforms, per song in order (tests inject the reference's).
pub struct FixedDraws(pub Vec<std::collections::VecDeque<f32>>);

impl Draws for FixedDraws {
    fn next(&mut self, song: usize) -> f32 {
        self.0[song].pop_front().expect("ran out of injected uniforms")
    }
}

/// Picks among `ranked` candidates (best first) with weights `softmax(guided)` by one
/// uniform `u`: the first whose running weight passes `u` times the total (the fused graph
/// of minimaxmusic.cpp; its host path takes "reaches", which differs only on equality).
fn draw(ranked: &[(u32, f32)], u: f32) -> u32 {
    let mx = ranked.iter().map(|&(_, g)| g).fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = ranked.iter().map(|&(_, g)| (g - mx).exp()).collect();
    let r = u * w.iter().sum::<f32>();
    let mut acc = 0f32;
    for (i, wi) in w.iter().enumerate() {
        acc += wi;
        if acc > r {
            return ranked[i].0;
        }
    }
    ranked.last().expect("at least one candidate").0
}

/// The `k` best of `ids` by `rank` (descending; ties: the lower id first).
fn top_k(ids: impl Iterator<Item = u32>, rank: impl Fn(u32) -> f32, k: usize) -> Vec<u32> {
    let mut v: Vec<u32> = ids.collect();
    v.sort_by(|&a, &b| rank(b).total_cmp(&rank(a)).then(a.cmp(&b)));
    v.truncate(k.max(1));
    v
}

/// The semantic draw: `cond` and `uncond` are logits over the sample rows (starting at the
/// end-of-audio token, `rows_start`); the allowed ids are the codes and the end token.
/// Returns the LM token id.
pub fn sample_semantic(
    cond: &[f32],
    uncond: &[f32],
    rows_start: u32,
    semantic_base: u32,
    cfg: f32,
    k: usize,
    u: f32,
) -> u32 {
    let at = |id: u32| (id - rows_start) as usize;
    let allowed = (semantic_base..rows_start + cond.len() as u32).chain(std::iter::once(rows_start));
    let cands = top_k(allowed, |id| cond[at(id)], k);
    let ranked: Vec<(u32, f32)> =
        cands.iter().map(|&id| (id, uncond[at(id)] + (cond[at(id)] - uncond[at(id)]) * cfg)).collect();
    draw(&ranked, u)
}

/// The acoustic draw: top k of the guided logits themselves.
pub fn sample_acoustic(cond: &[f32], uncond: &[f32], cfg: f32, k: usize, u: f32) -> u32 {
    let guided: Vec<f32> = cond.iter().zip(uncond).map(|(c, n)| n + (c - n) * cfg).collect();
    let cands = top_k(0..guided.len() as u32, |i| guided[i as usize], k);
    let ranked: Vec<(u32, f32)> = cands.iter().map(|&i| (i, guided[i as usize])).collect();
    draw(&ranked, u)
}

/// The frame feedback of `codes` (`hidden` values).
pub fn feedback(lm: &LmModel, depth: &DepthModel, codes: &[u32; CODES_PER_FRAME]) -> Vec<f32> {
    let mut e = lm.embeddings(&[codes[0] + lm.info.tokens.semantic_base]);
    for (book, &c) in codes[1..].iter().enumerate() {
        for (a, b) in e.iter_mut().zip(depth.audio_embedding(book, c)) {
            *a += b;
        }
    }
    e.iter_mut().for_each(|a| *a *= FEEDBACK_SCALE);
    e
}

/// Runs the AR half for `songs` songs of one prompt, a [`Composer`] stepped to the end.
/// `progress(frame, max_frames)` after each frame; `cancelled()` is asked between frames.
#[allow(clippy::too_many_arguments)]
pub fn compose(
    backend: &Backend,
    lm: &mut LmModel,
    depth: &mut DepthModel,
    prompt: &Prompt,
    songs: usize,
    s: &ArSettings,
    draws: &mut dyn Draws,
    cancelled: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Song>, ComposeError> {
    let mut c = Composer::new(backend, lm, prompt, songs, s)?;
    while !c.done() {
        if cancelled() {
            return Err(ComposeError::Cancelled);
        }
        if let Some(f) = c.step(backend, lm, depth, draws)? {
            progress(f.frame, s.max_frames);
        }
    }
    Ok(c.finish()?.0)
}

/// One step of a [`Composer`]: the frame sampled, and each song that wrote it with
/// whether that song is complete now (the end token, or its budget).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub frame: usize,
    pub songs: Vec<(usize, bool)>,
}

/// The AR half of a batch of songs as a stepper: [`step`](Self::step) samples every open
/// song's next frame and feeds it back. The caller owns the loop (cancel, progress, and
/// what it does with a song between frames); the modules are free between steps.
pub struct Composer {
    set: KvSet,
    out: LmOut,
    s: ArSettings,
    songs: Vec<Song>,
    /// Songs still writing, and where their streams' outputs are in `out`.
    active: Vec<usize>,
    /// Songs a step has called complete.
    told: Vec<bool>,
    /// The next frame's index.
    frame: usize,
    finished: bool,
}

impl Composer {
    /// Prefills the prompt's two streams (conditional, unconditional) for every song.
    pub fn new(
        backend: &Backend,
        lm: &mut LmModel,
        prompt: &Prompt,
        songs: usize,
        s: &ArSettings,
    ) -> Result<Self, ComposeError> {
        let capacity = prompt.cond.len() + s.max_frames + 1;
        if capacity > lm.info.config.max_position_embeddings {
            return Err(ComposeError::Invalid(format!(
                "a prompt of {} tokens and {} frames is over the LM's context of {}",
                prompt.cond.len(),
                s.max_frames,
                lm.info.config.max_position_embeddings
            )));
        }
        // Song i: the conditional stream 2i, the unconditional 2i + 1.
        let mut set = lm.kv_set(backend, capacity, 2 * songs)?;
        let prompts: Vec<(&[u32], usize)> =
            (0..songs).flat_map(|i| [(prompt.cond.as_slice(), 2 * i), (prompt.uncond.as_slice(), 2 * i + 1)]).collect();
        let out = lm.prefill(backend, &mut set, &prompts, s.batch_cfg)?;
        Ok(Composer {
            set,
            out,
            s: *s,
            songs: (0..songs).map(|_| Song { codes: Vec::new(), states: Vec::new(), ended: false }).collect(),
            active: (0..songs).collect(),
            told: vec![false; songs],
            frame: 0,
            finished: false,
        })
    }

    /// Whether every song is written (or the frame budget is spent).
    pub fn done(&self) -> bool {
        self.finished || self.frame > self.s.max_frames
    }

    /// Song `i` so far.
    pub fn song(&self, i: usize) -> &Song {
        &self.songs[i]
    }

    /// The next frame of every open song, fed back; `None` when every open song ended at
    /// this frame's semantic draw (nothing was written, and the composer is done).
    pub fn step(
        &mut self,
        backend: &Backend,
        lm: &mut LmModel,
        depth: &mut DepthModel,
        draws: &mut dyn Draws,
    ) -> Result<Option<Frame>, ComposeError> {
        let (t, h, s, frame) = (lm.info.tokens, lm.hidden(), self.s, self.frame);
        self.frame += 1;
        // Semantic codes.
        let mut sem = Vec::with_capacity(self.active.len());
        for (j, &i) in self.active.iter().enumerate() {
            let (cond, uncond) = (&self.out.logits[2 * j], &self.out.logits[2 * j + 1]);
            let id = sample_semantic(cond, uncond, t.audio_end, t.semantic_base, s.lm_cfg, s.top_k, draws.next(i));
            if id == t.audio_end {
                self.songs[i].ended = true;
            } else {
                sem.push((j, i, id - t.semantic_base));
            }
        }
        if sem.is_empty() {
            self.finished = true;
            return Ok(None);
        }
        let (codes, depth_states) = self.acoustic(backend, lm, depth, draws, &sem, h)?;
        let mut feed_songs = Vec::with_capacity(sem.len());
        for (n, &(j, i, _)) in sem.iter().enumerate() {
            let song = &mut self.songs[i];
            song.codes.push(codes[n]);
            if frame > 0 {
                song.states.extend_from_slice(&self.out.hidden[2 * j]);
                song.states.extend_from_slice(&depth_states[n]);
                if song.frames() >= s.max_frames {
                    continue;
                }
            }
            feed_songs.push((i, feedback(lm, depth, &codes[n])));
        }
        // Songs that ended this frame (the end token, or the budget) are complete.
        let fed: Vec<usize> = feed_songs.iter().map(|(i, _)| *i).collect();
        let songs: Vec<(usize, bool)> = self.active.iter().map(|&i| (i, !fed.contains(&i))).collect();
        for &(i, complete) in &songs {
            self.told[i] |= complete;
        }
        if feed_songs.is_empty() {
            self.finished = true;
        } else {
            let inputs: Vec<(&[f32], usize)> =
                feed_songs.iter().flat_map(|(i, e)| [(e.as_slice(), 2 * i), (e.as_slice(), 2 * i + 1)]).collect();
            self.out = lm.feed(backend, &mut self.set, &inputs, s.batch_cfg)?;
            self.active = fed;
        }
        Ok(Some(Frame { frame, songs }))
    }

    /// The 7 acoustic codes of each song in `sem` (`(stream index, song, semantic code)`):
    /// rows (cond, uncond) per song, one batch (or one row at a time); with the depth
    /// decoder's conditional states.
    #[allow(clippy::type_complexity)]
    fn acoustic(
        &self,
        backend: &Backend,
        lm: &LmModel,
        depth: &mut DepthModel,
        draws: &mut dyn Draws,
        sem: &[(usize, usize, u32)],
        h: usize,
    ) -> Result<(Vec<[u32; CODES_PER_FRAME]>, Vec<Vec<f32>>), ComposeError> {
        let (t, s) = (lm.info.tokens, self.s);
        let mut seqs: Vec<Vec<f32>> = Vec::with_capacity(2 * sem.len());
        for &(j, _, code) in sem {
            let e = lm.embeddings(&[code + t.semantic_base]);
            for r in 0..2 {
                let mut v = self.out.hidden[2 * j + r].clone();
                v.extend_from_slice(&e);
                seqs.push(v);
            }
        }
        let mut codes: Vec<[u32; CODES_PER_FRAME]> = sem.iter().map(|&(_, _, c)| [c, 0, 0, 0, 0, 0, 0, 0]).collect();
        let mut depth_states: Vec<Vec<f32>> = vec![Vec::with_capacity(7 * h); sem.len()];
        #[allow(clippy::needless_range_loop)] // `step` is the codebook, not only an index
        for step in 1..CODES_PER_FRAME {
            let len = step + 1;
            let d = if s.batch_cfg {
                let flat: Vec<f32> = seqs.iter().flatten().copied().collect();
                depth.forward(backend, &flat, len, seqs.len(), false)?
            } else {
                let mut all = crate::models::mm3::depth::DepthOut { hidden: Vec::new(), logits: Vec::new() };
                for q in &seqs {
                    let o = depth.forward(backend, q, len, 1, false)?;
                    all.hidden.extend(o.hidden);
                    all.logits.extend(o.logits);
                }
                all
            };
            for (n, &(_, i, _)) in sem.iter().enumerate() {
                depth_states[n].extend_from_slice(&d.hidden[2 * n]);
                let c = sample_acoustic(&d.logits[2 * n], &d.logits[2 * n + 1], s.lm_cfg, s.top_k, draws.next(i));
                codes[n][step] = c;
                if step < CODES_PER_FRAME - 1 {
                    let e = depth.audio_embedding(step - 1, c);
                    seqs[2 * n].extend_from_slice(&e);
                    seqs[2 * n + 1].extend_from_slice(&e);
                }
            }
        }
        Ok((codes, depth_states))
    }

    /// The songs, and those no step called complete (they are, now: every open song ended
    /// at the last semantic draw, or the frame budget ran out).
    pub fn finish(self) -> Result<(Vec<Song>, Vec<usize>), ComposeError> {
        if self.songs.iter().any(|song| song.frames() == 0) {
            return Err(ComposeError::Invalid("the LM ended the song before its first frame".into()));
        }
        let untold = (0..self.songs.len()).filter(|&i| !self.told[i]).collect();
        Ok((self.songs, untold))
    }
}

/// Replaces each sampled song's states with its teacher-forced ones ([`replay`] of its
/// codes). The states collected while sampling come from other graphs (one frame at a
/// time, beside the unconditional stream) and differ from a replay's in the last bits;
/// with this, a song renders to the same bytes whether it was just sampled, resumed from
/// its journaled codes, or replayed from its `audio_codes`.
pub fn restate(
    backend: &Backend,
    lm: &mut LmModel,
    depth: &mut DepthModel,
    prompt: &Prompt,
    songs: &mut [Song],
    cancelled: &dyn Fn() -> bool,
) -> Result<(), ComposeError> {
    for song in songs {
        song.states = replay(backend, lm, depth, prompt, &song.codes, cancelled)?.states;
    }
    Ok(())
}

/// Frames of one replay chunk: the window hop, so a window's frames are whole chunks.
pub const REPLAY_CHUNK: usize = 100;

/// The teacher-forced states of a song, computed chunk by chunk as its codes become known:
/// the LM fed each chunk's feedback rows behind the conditional prompt (one set kept
/// across chunks), the depth decoder one causal 8-position forward per frame of the chunk
/// (the chunk's frames as one batch). A whole [`replay`] is this run over every chunk at
/// once, so states handed out while a song is being written are the replay's, bit for bit.
pub struct Restater {
    set: crate::kv_cache::KvSet,
    /// State frames computed (frame k >= 1 is `lm_hidden[k - 1]` and the depth states of
    /// `codes[k]`).
    done: usize,
}

impl Restater {
    /// A restater for songs of up to `max_frames` frames: the prompt prefilled.
    pub fn new(backend: &Backend, lm: &mut LmModel, prompt: &Prompt, max_frames: usize) -> Result<Self, ComposeError> {
        let mut set = lm.kv_set(backend, prompt.cond.len() + max_frames, 1)?;
        lm.prefill(backend, &mut set, &[(prompt.cond.as_slice(), 0)], true)?;
        Ok(Restater { set, done: 0 })
    }

    /// State frames computed so far.
    pub fn frames(&self) -> usize {
        self.done
    }

    /// The states of the whole chunks that `codes` (`F + 1` frames so far) complete, or of
    /// every frame left when the song is `complete`: `8 * hidden` values per frame.
    pub fn advance(
        &mut self,
        backend: &Backend,
        lm: &mut LmModel,
        depth: &mut DepthModel,
        codes: &[[u32; CODES_PER_FRAME]],
        complete: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<f32>, ComposeError> {
        let t = lm.info.tokens;
        let h = lm.hidden();
        let n = codes.len().saturating_sub(1);
        let mut states = Vec::new();
        loop {
            let start = self.done + 1;
            let end = (self.done + REPLAY_CHUNK).min(n);
            if start > n || (!complete && self.done + REPLAY_CHUNK > n) {
                return Ok(states);
            }
            if cancelled() {
                return Err(ComposeError::Cancelled);
            }
            let fb: Vec<f32> = codes[start - 1..end].iter().flat_map(|c| feedback(lm, depth, c)).collect();
            let lm_hidden = lm.feed_all(backend, &mut self.set, &fb, 0)?;
            let mut input = Vec::with_capacity((end + 1 - start) * CODES_PER_FRAME * h);
            for k in start..=end {
                input.extend_from_slice(&lm_hidden[k - start]);
                input.extend(lm.embeddings(&[codes[k][0] + t.semantic_base]));
                for book in 0..CODES_PER_FRAME - 2 {
                    input.extend(depth.audio_embedding(book, codes[k][book + 1]));
                }
            }
            let d = depth.forward(backend, &input, CODES_PER_FRAME, end + 1 - start, true)?;
            for (k, hid) in (start..=end).zip(&d.hidden) {
                states.extend_from_slice(&lm_hidden[k - start]);
                states.extend_from_slice(&hid[h..]);
            }
            self.done = end;
        }
    }
}

/// Replay: the states of the given codes (`F + 1` frames), teacher-forced ([`Restater`]
/// over every chunk).
pub fn replay(
    backend: &Backend,
    lm: &mut LmModel,
    depth: &mut DepthModel,
    prompt: &Prompt,
    codes: &[[u32; CODES_PER_FRAME]],
    cancelled: &dyn Fn() -> bool,
) -> Result<Song, ComposeError> {
    let n = codes
        .len()
        .checked_sub(1)
        .filter(|&n| n > 0)
        .ok_or_else(|| ComposeError::Invalid("a replay needs at least two frames of codes".into()))?;
    let mut r = Restater::new(backend, lm, prompt, n)?;
    let states = r.advance(backend, lm, depth, codes, true, cancelled)?;
    Ok(Song { codes: codes.to_vec(), states, ended: false })
}
