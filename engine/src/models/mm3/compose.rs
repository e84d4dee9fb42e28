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
//! leaves F + 1 code frames. A song ends at its end token, except before its first frame
//! (frames 0 and 1), where the reference would leave a song with nothing to render: there
//! the end token is set aside and the song's next uniform draws among the codes
//! ([`sample_semantic`] without the end token); no draw of a song that the reference writes
//! in full changes.
//! Draws come from one stream per song, semantic first, then the 7 acoustic codes
//! (minimaxmusic.cpp: mt19937_64 seeded `lm_seed + i`, libstdc++'s float draw).
use crate::ggml::{Backend, GgmlError};
use crate::kv_cache::KvSet;
use crate::models::mm3::config::{TokenLayout, CODES_PER_FRAME, FEEDBACK_SCALE};
use crate::models::mm3::depth::{step_positions, DepthModel};
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
/// end-of-audio token, `rows_start`); the allowed ids are the codes and, with `end_allowed`,
/// the end token. Returns the LM token id. Without the end token it is the draw of a song
/// that has no frame yet and drew the end token: the same rule over the codes alone (their
/// top k), with the song's next uniform. minimaxmusic.cpp would end such a song empty, with
/// nothing to render; yued writes every song at least one frame, and every other draw is
/// the reference's.
#[allow(clippy::too_many_arguments)]
pub fn sample_semantic(
    cond: &[f32],
    uncond: &[f32],
    rows_start: u32,
    semantic_base: u32,
    cfg: f32,
    k: usize,
    end_allowed: bool,
    u: f32,
) -> u32 {
    let at = |id: u32| (id - rows_start) as usize;
    let end = end_allowed.then_some(rows_start);
    let allowed = (semantic_base..rows_start + cond.len() as u32).chain(end);
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
///
/// A composer may start before its prompt is in the cache ([`Composer::start`]): the prompt
/// then goes in by pieces ([`Composer::prefill_piece`]), so a job that joins a shared decode
/// step ([`step_together`]) holds the others up by one piece at a time.
pub struct Composer {
    set: KvSet,
    out: LmOut,
    s: ArSettings,
    prefill: Prefill,
    songs: Vec<Song>,
    /// Songs still writing, and where their streams' outputs are in `out`.
    active: Vec<usize>,
    /// Songs a step has called complete.
    told: Vec<bool>,
    /// The next frame's index.
    frame: usize,
    finished: bool,
}

/// Prompts going into their streams' caches in pieces of at most
/// [`LmModel::prefill_chunk`] tokens, at fixed offsets from their start (a prompt of one
/// piece is one forward, as a whole prefill is); the logits and hidden state of each
/// prompt's last position land in `out` at its stream.
struct Prefill {
    /// Per stream, its prompt.
    streams: Vec<Vec<u32>>,
    /// Tokens of every prompt in the cache so far.
    at: usize,
    /// One forward for all the streams' pieces; else one each.
    batch: bool,
    chunk: usize,
}

impl Prefill {
    fn done(&self) -> bool {
        self.streams.iter().all(|p| p.len() <= self.at)
    }

    /// The next piece of every prompt not yet in; true once all are.
    fn piece(
        &mut self,
        backend: &Backend,
        lm: &mut LmModel,
        set: &mut KvSet,
        out: &mut LmOut,
    ) -> Result<bool, GgmlError> {
        if self.done() {
            return Ok(true);
        }
        let at = self.at;
        let end = |p: &[u32]| (at + self.chunk).min(p.len());
        let pieces: Vec<(&[u32], usize)> =
            self.streams.iter().enumerate().filter(|(_, p)| p.len() > at).map(|(k, p)| (&p[at..end(p)], k)).collect();
        let o = lm.prefill(backend, set, &pieces, self.batch)?;
        for ((&(_, k), logits), hidden) in pieces.iter().zip(o.logits).zip(o.hidden) {
            if end(&self.streams[k]) == self.streams[k].len() {
                out.logits[k] = logits;
                out.hidden[k] = hidden;
            }
        }
        self.at += self.chunk;
        Ok(self.done())
    }
}

fn no_output(streams: usize) -> LmOut {
    LmOut { logits: vec![Vec::new(); streams], hidden: vec![Vec::new(); streams] }
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
        let mut c = Composer::start(backend, lm, prompt, songs, s)?;
        while !c.prefill_piece(backend, lm)? {}
        Ok(c)
    }

    /// A composer whose prompt is still to go in ([`Composer::prefill_piece`]): its cache
    /// made, nothing computed.
    pub fn start(
        backend: &Backend,
        lm: &LmModel,
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
        let set = lm.kv_set(backend, capacity, 2 * songs)?;
        let streams = (0..songs).flat_map(|_| [prompt.cond.clone(), prompt.uncond.clone()]).collect();
        Ok(Composer {
            set,
            out: no_output(2 * songs),
            s: *s,
            prefill: Prefill { streams, at: 0, batch: s.batch_cfg, chunk: lm.prefill_chunk.max(1) },
            songs: (0..songs).map(|_| Song { codes: Vec::new(), states: Vec::new(), ended: false }).collect(),
            active: (0..songs).collect(),
            told: vec![false; songs],
            frame: 0,
            finished: false,
        })
    }

    /// Whether the prompt is in (the composer may step).
    pub fn prefilled(&self) -> bool {
        self.prefill.done()
    }

    /// The prompt's next piece; true once it is all in.
    pub fn prefill_piece(&mut self, backend: &Backend, lm: &mut LmModel) -> Result<bool, ComposeError> {
        Ok(self.prefill.piece(backend, lm, &mut self.set, &mut self.out)?)
    }

    /// Whether every song is written (or the frame budget is spent).
    pub fn done(&self) -> bool {
        self.finished || self.frame > self.s.max_frames
    }

    /// Song `i` so far.
    pub fn song(&self, i: usize) -> &Song {
        &self.songs[i]
    }

    /// The most rows a step of this composer runs: two streams a song.
    pub fn rows(&self) -> usize {
        2 * self.songs.len()
    }

    /// The next frame of every open song, fed back; `None` when every open song ended at
    /// this frame's semantic draw (nothing was written, and the composer is done). This is
    /// [`step_together`] with one member.
    pub fn step(
        &mut self,
        backend: &Backend,
        lm: &mut LmModel,
        depth: &mut DepthModel,
        draws: &mut dyn Draws,
    ) -> Result<Option<Frame>, ComposeError> {
        let mut one: [(&mut Composer, &mut dyn Draws); 1] = [(self, draws)];
        Ok(step_together(backend, lm, depth, &mut one)?.pop().flatten())
    }

    /// This frame's semantic draw of every open song: `(position in out, song, code)` of
    /// the songs that go on (the others drew the end token).
    fn semantic(&mut self, t: TokenLayout, draws: &mut dyn Draws) -> Vec<(usize, usize, u32)> {
        let s = self.s;
        let mut sem = Vec::with_capacity(self.active.len());
        for (j, &i) in self.active.iter().enumerate() {
            let (cond, uncond) = (&self.out.logits[2 * j], &self.out.logits[2 * j + 1]);
            let (end, base) = (t.audio_end, t.semantic_base);
            let mut id = sample_semantic(cond, uncond, end, base, s.lm_cfg, s.top_k, true, draws.next(i));
            if id == end && self.songs[i].frames() == 0 {
                id = sample_semantic(cond, uncond, end, base, s.lm_cfg, s.top_k, false, draws.next(i));
            }
            if id == end {
                self.songs[i].ended = true;
            } else {
                sem.push((j, i, id - t.semantic_base));
            }
        }
        sem
    }

    /// The frame's codes and depth states onto its songs; returns the feedback of the songs
    /// that go on, and the frame as a step reports it.
    fn record(
        &mut self,
        lm: &LmModel,
        depth: &DepthModel,
        frame: usize,
        sem: &[(usize, usize, u32)],
        acoustic: &Acoustic,
    ) -> (Vec<(usize, Vec<f32>)>, Frame) {
        let mut feed = Vec::with_capacity(sem.len());
        for (n, &(j, i, _)) in sem.iter().enumerate() {
            let song = &mut self.songs[i];
            song.codes.push(acoustic.codes[n]);
            if frame > 0 {
                song.states.extend_from_slice(&self.out.hidden[2 * j]);
                song.states.extend_from_slice(&acoustic.states[n]);
                if song.frames() >= self.s.max_frames {
                    continue;
                }
            }
            feed.push((i, feedback(lm, depth, &acoustic.codes[n])));
        }
        // Songs that ended this frame (the end token, or the budget) are complete.
        let songs: Vec<(usize, bool)> = self.active.iter().map(|&i| (i, !feed.iter().any(|(k, _)| *k == i))).collect();
        for &(i, complete) in &songs {
            self.told[i] |= complete;
        }
        (feed, Frame { frame, songs })
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

/// One member of a shared step: a job's composer and its draws.
pub type Member<'a> = (&'a mut Composer, &'a mut dyn Draws);

/// One step of several composers (the songs of several jobs) side by side: every open
/// song's next frame, with one depth forward per codebook and one LM feed for all of them
/// (a composer that runs its guidance pair apart, `batch_cfg: false`, runs its rows one by
/// one, as alone). Each composer keeps its own cache and draws, and a row's result does not
/// depend on the rows beside it, so a composer writes here what it writes alone
/// ([`Composer::step`] is this with one member). Returns each member's frame.
pub fn step_together(
    backend: &Backend,
    lm: &mut LmModel,
    depth: &mut DepthModel,
    members: &mut [Member<'_>],
) -> Result<Vec<Option<Frame>>, ComposeError> {
    let t = lm.info.tokens;
    let mut frames = Vec::with_capacity(members.len());
    let mut sems = Vec::with_capacity(members.len());
    for (c, draws) in members.iter_mut() {
        assert!(c.prefilled() && !c.done(), "a composer steps once its prompt is in, until it is done");
        frames.push(c.frame);
        c.frame += 1;
        let sem = c.semantic(t, &mut **draws);
        c.finished |= sem.is_empty();
        sems.push(sem);
    }
    let acoustic = acoustic(backend, lm, depth, members, &sems)?;
    let mut out = Vec::with_capacity(members.len());
    let mut feeds = Vec::with_capacity(members.len());
    for (m, (c, _)) in members.iter_mut().enumerate() {
        if sems[m].is_empty() {
            out.push(None);
            feeds.push(Vec::new());
            continue;
        }
        let (feed, frame) = c.record(lm, depth, frames[m], &sems[m], &acoustic[m]);
        c.finished |= feed.is_empty();
        out.push(Some(frame));
        feeds.push(feed);
    }
    feed_back(backend, lm, members, &feeds)?;
    Ok(out)
}

/// A member's acoustic codes of one frame: per song that goes on, its 8 codes and the depth
/// decoder's 7 conditional states.
#[derive(Default)]
struct Acoustic {
    codes: Vec<[u32; CODES_PER_FRAME]>,
    states: Vec<Vec<f32>>,
}

/// The 7 acoustic codes of each member's songs in `sems` (`(position in out, song, semantic
/// code)`): per codebook one depth step over the rows (cond, uncond per song) of every
/// member that batches (computing only the step's new position, the others' keys and values
/// kept from the frame's earlier steps), one whole-sequence forward a row for the others.
fn acoustic(
    backend: &Backend,
    lm: &LmModel,
    depth: &mut DepthModel,
    members: &mut [Member<'_>],
    sems: &[Vec<(usize, usize, u32)>],
) -> Result<Vec<Acoustic>, ComposeError> {
    let (t, h) = (lm.info.tokens, lm.hidden());
    // Per member, its rows' sequences so far.
    let mut seqs: Vec<Vec<Vec<f32>>> = Vec::with_capacity(members.len());
    let mut out: Vec<Acoustic> = Vec::with_capacity(members.len());
    for ((c, _), sem) in members.iter().zip(sems) {
        let mut rows = Vec::with_capacity(2 * sem.len());
        for &(j, _, code) in sem {
            let e = lm.embeddings(&[code + t.semantic_base]);
            for r in 0..2 {
                let mut v = c.out.hidden[2 * j + r].clone();
                v.extend_from_slice(&e);
                rows.push(v);
            }
        }
        seqs.push(rows);
        out.push(Acoustic {
            codes: sem.iter().map(|&(_, _, c)| [c, 0, 0, 0, 0, 0, 0, 0]).collect(),
            states: vec![Vec::with_capacity(7 * h); sem.len()],
        });
    }
    let batched: Vec<usize> = (0..members.len()).filter(|&m| members[m].0.s.batch_cfg && !seqs[m].is_empty()).collect();
    for step in 1..CODES_PER_FRAME {
        let len = step + 1;
        // Per member, each row's (hidden, logits).
        let mut d: Vec<Vec<(Vec<f32>, Vec<f32>)>> = vec![Vec::new(); members.len()];
        if !batched.is_empty() {
            // The frame's steps over the cache: the first two positions, then each new one.
            let from = step_positions(len).start * h;
            let flat: Vec<f32> =
                batched.iter().flat_map(|&m| seqs[m].iter().flat_map(|q| q[from..].iter().copied())).collect();
            let rows = batched.iter().map(|&m| seqs[m].len()).sum();
            let o = depth.step(backend, &flat, len, rows)?;
            let mut all = o.hidden.into_iter().zip(o.logits);
            for &m in &batched {
                d[m] = all.by_ref().take(seqs[m].len()).collect();
            }
        }
        for m in (0..members.len()).filter(|m| !batched.contains(m)) {
            for q in &seqs[m] {
                let o = depth.forward(backend, q, len, 1, false)?;
                d[m].extend(o.hidden.into_iter().zip(o.logits));
            }
        }
        for (m, ((c, draws), sem)) in members.iter_mut().zip(sems).enumerate() {
            let s = c.s;
            for (n, &(_, i, _)) in sem.iter().enumerate() {
                let ((hidden, cond), (_, uncond)) = (&d[m][2 * n], &d[m][2 * n + 1]);
                out[m].states[n].extend_from_slice(hidden);
                let code = sample_acoustic(cond, uncond, s.lm_cfg, s.top_k, draws.next(i));
                out[m].codes[n][step] = code;
                if step < CODES_PER_FRAME - 1 {
                    let e = depth.audio_embedding(step - 1, code);
                    seqs[m][2 * n].extend_from_slice(&e);
                    seqs[m][2 * n + 1].extend_from_slice(&e);
                }
            }
        }
    }
    Ok(out)
}

/// Feeds each member's frame back (`feeds[m]`: its songs that go on, with their feedback):
/// one LM forward over the caches of every member that batches, one a stream for the
/// others; each member's next output is its songs' logits and hidden states.
fn feed_back(
    backend: &Backend,
    lm: &mut LmModel,
    members: &mut [Member<'_>],
    feeds: &[Vec<(usize, Vec<f32>)>],
) -> Result<(), ComposeError> {
    let mut sets: Vec<&mut KvSet> = Vec::new();
    let mut inputs: Vec<(&[f32], usize)> = Vec::new();
    let mut shared = Vec::new();
    let mut base = 0;
    for (m, ((c, _), feed)) in members.iter_mut().zip(feeds).enumerate() {
        if feed.is_empty() {
            continue;
        }
        let streams = |base: usize| {
            feed.iter().flat_map(move |(i, e)| [(e.as_slice(), base + 2 * i), (e.as_slice(), base + 2 * i + 1)])
        };
        if c.s.batch_cfg {
            inputs.extend(streams(base));
            base += c.set.streams();
            sets.push(&mut c.set);
            shared.push(m);
        } else {
            let own: Vec<(&[f32], usize)> = streams(0).collect();
            c.out = lm.feed(backend, &mut c.set, &own, false)?;
            c.active = feed.iter().map(|(i, _)| *i).collect();
        }
    }
    if sets.is_empty() {
        return Ok(());
    }
    let o = lm.feed_over(backend, &mut sets, &inputs)?;
    let mut all = o.logits.into_iter().zip(o.hidden);
    for m in shared {
        let c = &mut members[m].0;
        let (logits, hidden) = all.by_ref().take(2 * feeds[m].len()).unzip();
        c.out = LmOut { logits, hidden };
        c.active = feeds[m].iter().map(|(i, _)| *i).collect();
    }
    Ok(())
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
    set: KvSet,
    /// The conditional prompt, in the pieces a [`Composer`]'s goes in.
    prefill: Prefill,
    /// State frames computed (frame k >= 1 is `lm_hidden[k - 1]` and the depth states of
    /// `codes[k]`).
    done: usize,
}

impl Restater {
    /// A restater for songs of up to `max_frames` frames: the prompt prefilled.
    pub fn new(backend: &Backend, lm: &mut LmModel, prompt: &Prompt, max_frames: usize) -> Result<Self, ComposeError> {
        let mut r = Restater::start(backend, lm, prompt, max_frames)?;
        while !r.prefill_piece(backend, lm)? {}
        Ok(r)
    }

    /// A restater whose prompt is still to go in ([`Restater::prefill_piece`]; the first
    /// [`Restater::advance`] puts in what is left).
    pub fn start(backend: &Backend, lm: &LmModel, prompt: &Prompt, max_frames: usize) -> Result<Self, ComposeError> {
        let set = lm.kv_set(backend, prompt.cond.len() + max_frames, 1)?;
        let prefill =
            Prefill { streams: vec![prompt.cond.clone()], at: 0, batch: true, chunk: lm.prefill_chunk.max(1) };
        Ok(Restater { set, prefill, done: 0 })
    }

    /// Whether the prompt is in.
    pub fn prefilled(&self) -> bool {
        self.prefill.done()
    }

    /// The prompt's next piece; true once it is all in.
    pub fn prefill_piece(&mut self, backend: &Backend, lm: &mut LmModel) -> Result<bool, ComposeError> {
        Ok(self.prefill.piece(backend, lm, &mut self.set, &mut no_output(1))?)
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
        while !self.prefill_piece(backend, lm)? {}
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
