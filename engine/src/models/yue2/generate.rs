//! The two autoregressive stages over the AR half: the symbolic plan (ABC score) and the
//! semantic stream (25 Hz codes), plus the replay prefill. Synchronous and blocking: the
//! daemon runs it on a compute thread and hears from it through the progress callback;
//! a cancel token is checked between steps.
use crate::cancel::CancelToken;
use crate::ggml::{Backend, GgmlError, Kernels};
use crate::kv_cache::KvSet;
use crate::models::yue2::abc_check::check_abc;
use crate::models::yue2::ar::{ArModel, Positions, SeqInput};
use crate::models::yue2::config::TokenLayout;
use crate::models::yue2::nar::{ChunkPlan, ChunkSpan};
use crate::models::yue2::prompt::{Cot, Instructions, PromptBuilder, Score};
use crate::models::yue2::settings::{Invalid, Settings};
use crate::nn::batch::{Feed, Pending};
use crate::sampling::{cfg_combine, sample, SampleContext, Sampling};
use crate::tokenizer::BpeTokenizer;
use std::ops::Range;

/// A stepper whose forwards its caller runs: alone ([`ArStages::run_alone`]) or in one decode
/// step with other jobs' ([`crate::nn::batch::run`]).
pub trait Fed {
    /// What must run before the next sample (`None`: nothing, the logits are ready).
    fn feed(&mut self) -> Option<Feed<'_>>;
    /// The last feed ran: the logits of its sequences' last positions, in its order.
    fn fed(&mut self, logits: Vec<Vec<f32>>);
}

/// Stops a generation at a step boundary once its job is cancelled.
trait Check {
    fn check(&self) -> Result<(), GenError>;
}

impl Check for CancelToken {
    fn check(&self) -> Result<(), GenError> {
        if self.is_cancelled() {
            Err(GenError::Cancelled)
        } else {
            Ok(())
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("the planned score is malformed after {attempts} attempt(s): {reason}")]
    PlanExhausted { attempts: u32, reason: String, last_abc: String },
    #[error(transparent)]
    Ggml(#[from] GgmlError),
}

/// Which AR stage a progress report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArStage {
    Plan,
    Semantic,
}

/// One progress report: tokens done out of the stage budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArProgress {
    pub stage: ArStage,
    pub song: u32,
    pub done: usize,
    pub total: usize,
}

/// A planned score.
#[derive(Clone, Debug)]
pub struct Plan {
    pub abc: String,
    pub ids: Vec<u32>,
    /// The seed of the accepted attempt.
    pub seed: u64,
    pub attempts: u32,
    /// The budget ran out before abc_end.
    pub truncated: bool,
}

/// A song after the semantic stage: its codes and the KV set holding its sequence.
pub struct Song {
    pub index: u32,
    pub score_ids: Vec<u32>,
    pub codes: Vec<u32>,
    /// The model wrote music_end (false: the budget cut it).
    pub ended: bool,
    /// Length of the semantic prefix (everything before the first code).
    pub prefix_len: usize,
    /// The semantic prefix itself (a chunk of a long song is prefilled behind it again).
    pub prefix: Vec<u32>,
    pub kv: KvSet,
    /// Tokens sampled but not yet run through the model.
    pending: Vec<u32>,
}

impl Song {
    /// True once the set holds prefix + codes + music_end, the sequence the NAR reads.
    pub fn is_complete(&self) -> bool {
        self.pending.is_empty() && self.kv.len() == self.prefix_len + self.codes.len() + 1
    }
}

/// What the semantic stage hands out while it writes (see [`ChunkFeeder`]).
pub enum ChunkEvent {
    /// Chunk `span` of song `song` is written: its sequence (`prefix + codes[span.context..
    /// span.end] + music_end`) prefilled into `kv`, the set the NAR attends to.
    Chunk { song: u32, span: ChunkSpan, kv: KvSet },
    /// Song `song`'s stream is complete (after its last chunk).
    End { song: u32, codes: Vec<u32>, ended: bool },
}

/// Hands the songs' chunks out as soon as their codes exist, on each song's grid, so the
/// NAR can paint chunk k while the semantic stage writes chunk k + 1: after each
/// [`Semantic::step`], [`after_step`](Self::after_step); at the end,
/// [`finish`](Self::finish). Each chunk's set is the prefill a composed song's chunk gets (a
/// song of one chunk: its stream's set, completed), so the audio is the same.
pub struct ChunkFeeder {
    /// Each song's grid (its prefix decides how much a chunk may hold).
    plans: Vec<ChunkPlan>,
    /// Each song's next chunk, and whether its end is out.
    next: Vec<usize>,
    fed_end: Vec<bool>,
}

impl ChunkFeeder {
    pub fn new(plans: Vec<ChunkPlan>) -> Self {
        let n = plans.len();
        ChunkFeeder { plans, next: vec![0; n], fed_end: vec![false; n] }
    }

    /// The chunks the last step completed, and the ends of the songs it ended.
    pub fn after_step(
        &mut self,
        stages: &mut ArStages<'_>,
        sem: &Semantic,
        emit: &mut dyn FnMut(ChunkEvent),
    ) -> Result<(), GenError> {
        for i in 0..self.plans.len() {
            if !self.fed_end[i] {
                self.fed_end[i] = sem.ended[i];
                self.feed(stages, sem, i, sem.ended[i].then_some(true), emit)?;
            }
        }
        Ok(())
    }

    /// The songs the budget ended (or a source alone made): their last chunks and ends.
    pub fn finish(
        &mut self,
        stages: &mut ArStages<'_>,
        sem: &Semantic,
        emit: &mut dyn FnMut(ChunkEvent),
    ) -> Result<(), GenError> {
        let open: Vec<usize> = (0..self.plans.len()).filter(|&i| !self.fed_end[i]).collect();
        for i in open {
            self.fed_end[i] = true;
            self.feed(stages, sem, i, Some(sem.ended[i]), emit)?;
        }
        Ok(())
    }

    /// Hands out song `i`'s chunks that its codes complete, then its end when `done` is
    /// `Some(ended)` (the last chunk is then whatever is left).
    fn feed(
        &mut self,
        stages: &mut ArStages<'_>,
        sem: &Semantic,
        i: usize,
        done: Option<bool>,
        emit: &mut dyn FnMut(ChunkEvent),
    ) -> Result<(), GenError> {
        let (plan, codes, song) = (self.plans[i], &sem.codes[i], i as u32);
        while let Some(span) = plan.span(self.next[i], codes.len()) {
            if done.is_none() && span.start + plan.step > codes.len() {
                break;
            }
            let whole = done.is_some() && span.context == 0 && span.end == codes.len();
            let kv = if whole && stages.backend.has_row_exact_kernels() {
                // The song's only chunk is the sequence its stream holds: completed, not
                // prefilled again.
                let mut s = sem.song(stages, i)?;
                stages.complete(&mut s)?;
                s.kv
            } else {
                stages.prefill_sequence(sem.prefix(i).to_vec(), &[], &codes[span.context..span.end])?.kv
            };
            emit(ChunkEvent::Chunk { song, span, kv });
            self.next[i] += 1;
        }
        if let Some(ended) = done {
            emit(ChunkEvent::End { song, codes: codes.to_vec(), ended });
        }
        Ok(())
    }
}

/// What a [`Planner`] step did: one token sampled (the attempt's progress), and the score
/// once it is accepted.
pub struct PlanStep {
    pub progress: ArProgress,
    pub plan: Option<Plan>,
}

/// The planning stage of one song as a stepper ([`ArStages::plan_start`]): what is still to
/// run comes out as a [`Feed`] (the prefix in pieces, then each sampled token), and once it
/// ran, each [`step`](Self::step) samples one score token; a malformed score starts the next
/// attempt (its own seed, its prefix queued again) within the step that ended it. The caller
/// owns the loop (cancel, progress) and runs the feeds, alone ([`ArStages::run_alone`]) or
/// beside other jobs' ([`crate::nn::batch::run`]).
pub struct Planner {
    /// The prompt up to the open score slot, then the opening of a continued score.
    prefix: Vec<u32>,
    /// The opening's ids (`abc_continue`): the score's first tokens, never sampled.
    opening: Vec<u32>,
    preset: Sampling,
    song: u32,
    lm_seed: u64,
    /// Seeds of one song's retries lie `stride` apart (the songs of the batch between).
    stride: u64,
    attempts: u32,
    attempt: u32,
    seed: u64,
    sets: Vec<KvSet>,
    /// What is still to run through the model before the next sample.
    pending: Pending,
    rows: Range<u32>,
    logits: Vec<f32>,
    ids: Vec<u32>,
    reason: String,
    last_abc: String,
}

impl Fed for Planner {
    fn feed(&mut self) -> Option<Feed<'_>> {
        let (piece, kernels) = self.pending.piece()?;
        Some(Feed { sets: &mut self.sets, seqs: vec![(piece, 0, kernels)], rows: self.rows.clone() })
    }

    fn fed(&mut self, mut logits: Vec<Vec<f32>>) {
        if self.pending.ran() {
            self.logits = logits.pop().expect("one sequence");
        }
    }
}

impl Planner {
    /// Whether the next token can be sampled.
    pub fn ready(&self) -> bool {
        self.pending.is_empty()
    }

    /// Starts attempt `self.attempt`: its seed, a fresh set, the prefix queued.
    fn begin(&mut self, stages: &mut ArStages<'_>) -> Result<(), GenError> {
        let (song, k) = (self.song, self.attempt);
        let seed = (self.lm_seed as i128) + song as i128 + k as i128 * self.stride as i128;
        self.seed = u64::try_from(seed).ok().filter(|&s| s <= i64::MAX as u64).ok_or_else(|| {
            Invalid::new("lm_seed", format!("retry {k} of song {song} needs seed {seed}, which is not representable"))
        })?;
        let budget = self.preset.max_tokens as usize;
        let cap = (self.prefix.len() + budget).min(stages.max_seq);
        self.sets = vec![KvSet::new(stages.backend, stages.model.cfg.kv_dims(), cap)?];
        self.ids.clone_from(&self.opening);
        self.pending.clear();
        self.pending.push(&self.prefix);
        Ok(())
    }

    /// Samples the next score token (queued to run before the next); at the attempt's end,
    /// the score checked. Call it once the feeds ran ([`Planner::ready`]).
    pub fn step(&mut self, stages: &mut ArStages<'_>) -> Result<PlanStep, GenError> {
        assert!(self.ready(), "a planner stepped before its feed ran");
        let budget = self.preset.max_tokens as usize;
        if budget == 0 {
            let progress = ArProgress { stage: ArStage::Plan, song: self.song, done: 0, total: 0 };
            return Ok(PlanStep { progress, plan: self.end(stages, false)? });
        }
        let step = self.ids.len() - self.opening.len();
        let rows = stages.tokens.score_rows();
        let end = stages.tokens.abc_end;
        let cx = SampleContext { rows: rows.clone(), allowed: rows.clone(), end_id: end, step, history: &self.ids };
        let t = sample(&self.logits, &cx, &self.preset, self.seed);
        let progress = ArProgress { stage: ArStage::Plan, song: self.song, done: step + 1, total: budget };
        if t == end {
            return Ok(PlanStep { progress, plan: self.end(stages, true)? });
        }
        self.ids.push(t);
        if step + 1 == budget || self.sets[0].len() == self.sets[0].capacity() {
            return Ok(PlanStep { progress, plan: self.end(stages, false)? });
        }
        self.pending.push_exact(&[t]);
        Ok(PlanStep { progress, plan: None })
    }

    /// The attempt ended (`ended`: at abc_end): the score if it is well formed, else the
    /// next attempt begun (`None`), or the error once every attempt failed.
    fn end(&mut self, stages: &mut ArStages<'_>, ended: bool) -> Result<Option<Plan>, GenError> {
        let abc = stages.tokenizer.decode(&self.ids);
        let (song, attempt, seed) = (self.song, self.attempt, self.seed);
        match check_abc(&abc) {
            Ok(()) => {
                let ids = std::mem::take(&mut self.ids);
                self.sets.clear();
                return Ok(Some(Plan { abc, ids, seed, attempts: attempt + 1, truncated: !ended }));
            }
            Err(r) => {
                tracing::warn!(song, attempt = attempt + 1, seed, reason = %r, "malformed score");
                self.reason = r;
                self.last_abc = abc;
            }
        }
        self.attempt += 1;
        if self.attempt == self.attempts {
            let (reason, last_abc) = (std::mem::take(&mut self.reason), std::mem::take(&mut self.last_abc));
            return Err(GenError::PlanExhausted { attempts: self.attempts, reason, last_abc });
        }
        self.begin(stages)?;
        Ok(None)
    }
}

/// The semantic stage of a batch of songs in lockstep, as a stepper: [`ArStages::semantic_start`]
/// prefills every stream, each [`step`](Self::step) samples every open song's next code and
/// runs it, [`finish`](Self::finish) hands the songs out with their sets. The caller owns the
/// loop (cancel, progress, the chunk feed).
pub struct Semantic {
    n: usize,
    cfg: f32,
    guided: bool,
    preset: Sampling,
    lm_seed: u64,
    /// Steps to take at most (the budget beyond the source's codes).
    steps: usize,
    step: usize,
    finished: bool,
    scores: Vec<Vec<u32>>,
    /// Each song's conditional prefix (with the source's codes) and the source's codes.
    prefixes: Vec<(Vec<u32>, Vec<u32>)>,
    sets: Vec<KvSet>,
    rows: Range<u32>,
    /// What each stream (the songs, then under guidance their unconditional twins) has still
    /// to run: its prompt in pieces, then each sampled code.
    pending: Vec<Pending>,
    /// The streams of the feed in flight, in its order.
    flight: Vec<usize>,
    /// A stream's logits once its pending ran, until its song's pair is complete.
    raw: Vec<Option<Vec<f32>>>,
    /// Each song's logits to sample from (guidance combined).
    logits: Vec<Vec<f32>>,
    codes: Vec<Vec<u32>>,
    generated: Vec<Vec<u32>>,
    ended: Vec<bool>,
}

impl Fed for Semantic {
    /// The streams with something to run: a piece of each prompt, or the codes the last
    /// step sampled (under guidance in both streams of each song). Ended songs leave the
    /// batch: their sets keep exactly prefix + codes. The last step's codes never run.
    fn feed(&mut self) -> Option<Feed<'_>> {
        if self.finished {
            return None;
        }
        self.flight.clear();
        let mut seqs = Vec::new();
        for (k, p) in self.pending.iter_mut().enumerate() {
            if let Some((piece, kernels)) = p.piece() {
                self.flight.push(k);
                seqs.push((piece, k, kernels));
            }
        }
        if seqs.is_empty() {
            return None;
        }
        Some(Feed { sets: &mut self.sets, seqs, rows: self.rows.clone() })
    }

    fn fed(&mut self, logits: Vec<Vec<f32>>) {
        for (&k, l) in self.flight.iter().zip(logits) {
            if self.pending[k].ran() {
                self.raw[k] = Some(l);
            }
        }
        self.flight.clear();
        let n = self.n;
        for i in 0..n {
            let pair = if self.guided { self.raw[i].is_some() && self.raw[n + i].is_some() } else { true };
            if !pair {
                continue;
            }
            let Some(mut l) = self.raw[i].take() else { continue };
            if self.guided {
                let u = self.raw[n + i].take().expect("checked above");
                cfg_combine(&mut l, &u, self.cfg);
            }
            self.logits[i] = l;
        }
    }
}

impl Semantic {
    /// Whether every stream ran what it had (the next codes can be sampled).
    pub fn ready(&self) -> bool {
        self.pending.iter().all(Pending::is_empty)
    }

    /// Whether every song ended, or the budget is spent.
    pub fn done(&self) -> bool {
        self.finished || self.step >= self.steps
    }

    /// Steps the budget allows (the progress bar's total).
    pub fn total(&self) -> usize {
        self.steps
    }

    /// Song `i`'s codes so far (the source's first).
    pub fn codes(&self, i: usize) -> &[u32] {
        &self.codes[i]
    }

    /// Songs written side by side.
    pub fn songs(&self) -> usize {
        self.n
    }

    /// Whether song `i` wrote music_end.
    pub fn ended(&self, i: usize) -> bool {
        self.ended[i]
    }

    /// Song `i`'s semantic prefix (everything before its first code).
    pub fn prefix(&self, i: usize) -> &[u32] {
        let (p, source) = &self.prefixes[i];
        &p[..p.len() - source.len()]
    }

    /// Samples every open song's next code (queued to run before the next step); the steps
    /// done so far. Call it once the feeds ran ([`Semantic::ready`]).
    pub fn step(&mut self, stages: &mut ArStages<'_>) -> Result<usize, GenError> {
        assert!(self.ready(), "the semantic stage stepped before its feed ran");
        let (t, n, step) = (stages.tokens, self.n, self.step);
        let rows = t.semantic_rows();
        let mut active = 0;
        for i in 0..n {
            if self.ended[i] {
                continue;
            }
            let cx = SampleContext {
                rows: rows.clone(),
                allowed: rows.clone(),
                end_id: t.music_end,
                step,
                history: &self.generated[i],
            };
            let seed = self.lm_seed.wrapping_add(i as u64);
            let tok = sample(&self.logits[i], &cx, &self.preset, seed);
            self.generated[i].push(tok);
            if tok == t.music_end {
                self.ended[i] = true;
            } else {
                self.codes[i].push(t.token_code(tok).expect("semantic rows hold only codes and music_end"));
                self.pending[i].push_exact(&[tok]);
                if self.guided {
                    self.pending[n + i].push_exact(&[tok]);
                }
                active += 1;
            }
        }
        self.step += 1;
        // The new codes run at the next step: the caller hands out what this one wrote
        // first. The last step's never run.
        if active == 0 || self.step == self.steps {
            self.finished = true;
        }
        Ok(self.step)
    }

    /// The songs, each with its own copy of its stream's set.
    pub fn finish(self, stages: &ArStages<'_>) -> Result<Vec<Song>, GenError> {
        (0..self.n).map(|i| self.song(stages, i)).collect()
    }

    /// Song `i` as it stands, with a copy of its stream's set that has just the room
    /// [`ArStages::complete`] needs.
    pub fn song(&self, stages: &ArStages<'_>, i: usize) -> Result<Song, GenError> {
        let set = &self.sets[0];
        let pending = self.pending[i].tokens().to_vec();
        let kv = set.copy_stream(stages.backend, i, set.stream_len(i) + pending.len() + 1)?;
        let prefix_len = self.prefixes[i].0.len() - self.prefixes[i].1.len();
        Ok(Song {
            index: i as u32,
            score_ids: self.scores[i].clone(),
            codes: self.codes[i].clone(),
            ended: self.ended[i],
            prefix_len,
            prefix: self.prefixes[i].0[..prefix_len].to_vec(),
            kv,
            pending,
        })
    }
}

/// Conditional prompt, unconditional prompt, and the continuation's source codes.
type Prefixes = (Vec<u32>, Vec<u32>, Vec<u32>);

/// Everything the stages need.
pub struct ArStages<'a> {
    pub model: &'a mut ArModel,
    pub backend: &'a Backend,
    pub tokenizer: &'a BpeTokenizer,
    pub tokens: TokenLayout,
    pub instructions: &'a Instructions,
    /// KV cache bound (`--max-seq`, else the model context).
    pub max_seq: usize,
    /// Tokens a prompt is prefilled in at most per forward (`--prefill-chunk`).
    pub prefill_chunk: usize,
}

impl ArStages<'_> {
    /// Runs a stepper's feeds alone until it can sample again.
    pub fn run_alone(&mut self, stepper: &mut dyn Fed) -> Result<(), GenError> {
        while let Some(feed) = stepper.feed() {
            let mut feeds = [feed];
            let mut out = self.model.run_feeds(self.backend, &mut feeds)?;
            stepper.fed(out.pop().expect("one feed"));
        }
        Ok(())
    }

    fn prompts(&self) -> PromptBuilder<'_> {
        PromptBuilder { tokenizer: self.tokenizer, tokens: self.tokens, instructions: self.instructions }
    }

    /// Refuses, before any compute, a request whose prefix plus budgets cannot fit the
    /// KV cache (see [`check_fits`]).
    pub fn check_fits(&self, s: &Settings) -> Result<(), GenError> {
        check_fits(&self.prompts(), self.max_seq, s).map_err(GenError::from)
    }

    /// Stage 1 for song `song`: decodes from the open score slot to abc_end or the budget,
    /// retrying malformed scores with seed `lm_seed + song + k * songs`. A [`Planner`]
    /// stepped to the end.
    pub fn plan(
        &mut self,
        s: &Settings,
        song: u32,
        cancel: &CancelToken,
        progress: &mut dyn FnMut(ArProgress),
    ) -> Result<Plan, GenError> {
        let mut planner = self.plan_start(s, song)?;
        loop {
            cancel.check()?;
            self.run_alone(&mut planner)?;
            let step = planner.step(self)?;
            progress(step.progress);
            if let Some(plan) = step.plan {
                return Ok(plan);
            }
        }
    }

    /// The planning stage's start for song `song`: its first attempt's prefix queued.
    pub fn plan_start(&mut self, s: &Settings, song: u32) -> Result<Planner, GenError> {
        let mut prefix = self.prompts().conditional(s.cot, &s.style, &s.lyrics, &Score::Open);
        let opening = if s.abc_continue { self.tokenizer.encode(&s.abc) } else { Vec::new() };
        prefix.extend_from_slice(&opening);
        let preset = s.plan;
        let attempts = if preset.temperature == 0.0 { 1 } else { s.plan_retries + 1 };
        let mut p = Planner {
            prefix,
            opening,
            preset,
            song,
            lm_seed: s.lm_seed,
            stride: s.songs as u64,
            attempts,
            attempt: 0,
            seed: 0,
            sets: Vec::new(),
            pending: Pending::new(self.prefill_chunk),
            rows: self.tokens.score_rows(),
            logits: Vec::new(),
            ids: Vec::new(),
            reason: String::new(),
            last_abc: String::new(),
        };
        p.begin(self)?;
        Ok(p)
    }

    /// The conditional semantic prefix for a score (no continuation codes).
    pub fn semantic_prefix(&self, s: &Settings, score: &[u32]) -> Vec<u32> {
        self.semantic_prefixes(s, score).0
    }

    /// The semantic prefixes of a song: (conditional, unconditional, source section codes).
    fn semantic_prefixes(&self, s: &Settings, score: &[u32]) -> Prefixes {
        let slot = if s.cot == Cot::Off && score.is_empty() { Score::None } else { Score::Ids(score) };
        let p = self.prompts();
        let cond = p.conditional(s.cot, &s.style, &s.lyrics, &slot);
        let uncond = p.unconditional(s.cot, &slot);
        (cond, uncond, s.source.clone())
    }

    /// Stage 2 for every song of the batch in lockstep: decodes codes until music_end or
    /// the budget, under guidance when `cfg_scale != 1`. `scores[i]` is song i's score ids
    /// (empty in off mode). A [`Semantic`] stepped to the end.
    pub fn semantic(
        &mut self,
        s: &Settings,
        scores: &[Vec<u32>],
        cancel: &CancelToken,
        progress: &mut dyn FnMut(ArProgress),
    ) -> Result<Vec<Song>, GenError> {
        let mut sem = self.semantic_start(s, scores)?;
        // The prompts run even when no code is to be written: the sets hold them.
        self.run_alone(&mut sem)?;
        while !sem.done() {
            cancel.check()?;
            self.run_alone(&mut sem)?;
            let done = sem.step(self)?;
            progress(ArProgress { stage: ArStage::Semantic, song: 0, done, total: sem.total() });
        }
        sem.finish(self)
    }

    /// The semantic stage's start: every song's stream (and, under guidance, its
    /// unconditional twin) queued to prefill, in pieces of at most `prefill_chunk` tokens,
    /// all streams' pieces in one forward.
    pub fn semantic_start(&mut self, s: &Settings, scores: &[Vec<u32>]) -> Result<Semantic, GenError> {
        let n = scores.len();
        let cfg = s.cfg_scale;
        let guided = cfg != 1.0;
        let budget = s.budget;
        let t = self.tokens;
        let rows = t.semantic_rows();
        let mut prefixes = Vec::with_capacity(n);
        let mut uncond_prefixes = Vec::new();
        let mut caps = Vec::with_capacity(n);
        for score in scores {
            let (mut cond, mut uncond, source) = self.semantic_prefixes(s, score);
            let codes_room = budget.max(source.len());
            for c in &source {
                cond.push(t.code_token(*c));
                uncond.push(t.code_token(*c));
            }
            caps.push((cond.len() - source.len() + codes_room + 1).min(self.max_seq));
            prefixes.push((cond, source));
            uncond_prefixes.push(uncond);
        }
        // One set whose streams are the songs (0..n) and, under guidance, their
        // unconditional twins (n..2n): a decode step attends over all of them in one node
        // per layer. Each song gets its own copy of its stream at the end.
        let mut capacity = caps.iter().copied().max().unwrap_or(1);
        if guided {
            for (u, cap) in uncond_prefixes.iter().zip(&caps) {
                capacity = capacity.max((*cap).max(u.len() + budget + 1).min(self.max_seq));
            }
        }
        let streams = if guided { 2 * n } else { n };
        let sets = vec![KvSet::with_streams(self.backend, self.model.cfg.kv_dims(), capacity, streams)?];
        // A stream's prompt runs on the fast kernels, the source's codes on the row-exact ones,
        // as every code does (see `Kernels`): what a replay of its codes prefills the same.
        let pending: Vec<Pending> = prefixes
            .iter()
            .map(|(p, source)| (p, source.len()))
            .chain(uncond_prefixes.iter().zip(&prefixes).filter(|_| guided).map(|(u, (_, s))| (u, s.len())))
            .map(|(p, source)| {
                let mut q = Pending::new(self.prefill_chunk);
                q.push(&p[..p.len() - source]);
                q.push_exact(&p[p.len() - source..]);
                q
            })
            .collect();
        debug_assert_eq!(pending.len(), streams);
        let codes: Vec<Vec<u32>> = prefixes.iter().map(|(_, s)| s.clone()).collect();
        let steps = s.semantic_steps();
        Ok(Semantic {
            n,
            cfg,
            guided,
            preset: s.semantic,
            lm_seed: s.lm_seed,
            steps,
            step: 0,
            finished: false,
            scores: scores.to_vec(),
            prefixes,
            sets,
            rows,
            pending,
            flight: Vec::new(),
            raw: vec![None; streams],
            logits: vec![Vec::new(); n],
            codes,
            generated: vec![Vec::new(); n],
            ended: vec![false; n],
        })
    }

    /// Runs the tokens still pending and music_end, so the set holds the whole sequence
    /// the NAR half attends to.
    pub fn complete(&mut self, song: &mut Song) -> Result<(), GenError> {
        if song.is_complete() {
            return Ok(());
        }
        let mut tail = std::mem::take(&mut song.pending);
        tail.push(self.tokens.music_end);
        self.run_exact(&mut song.kv, &tail)
    }

    /// `tokens` behind what `kv` holds, in one forward on the row-exact kernels.
    fn run_exact(&mut self, kv: &mut KvSet, tokens: &[u32]) -> Result<(), GenError> {
        let end = self.tokens.music_end;
        let seqs = [SeqInput { tokens, set: 0 }];
        let sets = std::slice::from_mut(kv);
        self.model.forward_on(self.backend, sets, &seqs, end..end + 1, Positions::Last, Kernels::RowExact)?;
        Ok(())
    }

    /// Replay: the prefix and the given codes (plus music_end) prefilled.
    pub fn replay(&mut self, s: &Settings, score: &[u32], codes: &[u32]) -> Result<Song, GenError> {
        let (cond, _, _) = self.semantic_prefixes(s, score);
        self.prefill_sequence(cond, score, codes)
    }

    /// `prefix + codes + music_end` prefilled into a fresh set exactly as the semantic
    /// stage writes it: the prefix in the pieces a song's prompt runs in, on the fast
    /// kernels, then every code and the end in one forward on the row-exact ones, which
    /// gives the bits the stage's steps gave them one at a time (see [`Kernels`]).
    pub fn prefill_sequence(&mut self, prefix: Vec<u32>, score: &[u32], codes: &[u32]) -> Result<Song, GenError> {
        let prefix_len = prefix.len();
        let mut seq = prefix;
        seq.extend(codes.iter().map(|&c| self.tokens.code_token(c)));
        seq.push(self.tokens.music_end);
        if seq.len() > self.max_seq {
            return Err(Invalid::new(
                "semantic_tokens",
                format!("{} tokens with the prefix exceed the KV cache of {}", seq.len(), self.max_seq),
            )
            .into());
        }
        let mut kv = KvSet::new(self.backend, self.model.cfg.kv_dims(), seq.len())?;
        let mut prompt = Pending::new(self.prefill_chunk);
        prompt.push(&seq[..prefix_len]);
        let end = self.tokens.music_end;
        while let Some((piece, kernels)) = prompt.piece() {
            let seqs = [SeqInput { tokens: piece, set: 0 }];
            let sets = std::slice::from_mut(&mut kv);
            self.model.forward_on(self.backend, sets, &seqs, end..end + 1, Positions::Last, kernels)?;
            prompt.ran();
        }
        self.run_exact(&mut kv, &seq[prefix_len..])?;
        Ok(Song {
            index: 0,
            score_ids: score.to_vec(),
            codes: codes.to_vec(),
            ended: true,
            prefix_len,
            prefix: seq[..prefix_len].to_vec(),
            kv,
            pending: vec![],
        })
    }
}

/// Whether a request's prefix, score (an unplanned one at its full budget), codes and end
/// fit a KV cache of `max_seq` positions: the daemon checks it at submission, where the
/// tokens are known, so a request that cannot render is a 400 rather than a job that fails.
pub fn check_fits(p: &PromptBuilder<'_>, max_seq: usize, s: &Settings) -> Result<(), Invalid> {
    let score_ids = p.tokenizer.encode(&s.abc);
    let needs_plan = s.plans();
    let score_len = match (needs_plan, s.abc_continue) {
        (true, true) => s.plan.max_tokens as usize + score_ids.len(),
        (true, false) => s.plan.max_tokens as usize,
        (false, _) => score_ids.len(),
    };
    let base = p.conditional(s.cot, &s.style, &s.lyrics, &Score::Ids(&[])).len();
    // A replayed stream renders in chunks, so it only needs room for one frame per chunk; a
    // generated one must hold every code in one KV set.
    let (codes, what) =
        if s.replay.is_some() { (2, "semantic_tokens") } else { (s.source.len().max(s.budget), "duration") };
    let need = base + score_len + codes + 1;
    if need > max_seq {
        // Name what to shorten: the prompt alone, the score, or the codes.
        let what = if base + 2 > max_seq {
            // The longer of the prompt's two texts is the one to shorten.
            if p.tokenizer.encode(&s.style).len() > p.tokenizer.encode(&s.lyrics).len() {
                "style"
            } else {
                "lyrics"
            }
        } else if base + score_len + 2 > max_seq {
            if needs_plan {
                "abc_sampling.max_tokens"
            } else {
                "abc"
            }
        } else {
            what
        };
        return Err(Invalid::new(
            what,
            format!(
                "prefix ({base} tokens) + score ({score_len}) + codes ({codes}) + end = {need} tokens do not fit \
                the KV cache of {max_seq} (shorten {what} or raise --max-seq)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
