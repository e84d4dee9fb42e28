//! Decode steps shared across jobs: the sequences of several steppers (each job's AR half,
//! each with its own KV sets) run through the model in one forward, as llama.cpp's server
//! steps its slots together. A step reads the weights once for every row it carries, which
//! is what a decode step costs (on a GPU nearly all of it).
//!
//! A stepper says what it needs run before it can sample again as a [`Feed`]: its sets and
//! its sequences' new tokens, counted in its own streams. [`run`] lays the feeds side by
//! side (the streams renumbered across every feed's sets), runs them in one
//! [`CausalLm::step_over`] per distinct logit range, and gives each feed back the logits of
//! its sequences' last positions. A row's result does not depend on the rows beside it:
//! each sequence attends only to its own stream, and the matrix products are computed row
//! by row (the batching tests check that songs come out the same alone or batched).
//!
//! A long prompt is fed in pieces of at most [`Pending::chunk`] tokens, at fixed offsets
//! from its start, so a song that joins a running batch holds the others up by one piece
//! at a time, and it is prefilled the same way alone or beside others.
//!
//! Each piece says which kernels it runs on ([`Kernels`]): a prompt on the fast ones, what
//! a stepper pushes as row-exact (the tokens it sampled, the codes of a song) on the
//! reference ones, whose every row is the same bits alone, beside other jobs' rows, one a
//! step or all in one forward. The two never share a forward.
use crate::ggml::{Backend, GgmlError, Kernels};
use crate::kv_cache::KvSet;
use crate::nn::causal_lm::{CausalLm, Positions, SeqInput, StepInput};
use std::ops::Range;

/// Tokens a prompt is prefilled in at most, per piece, unless a caller says otherwise.
pub const PREFILL_CHUNK: usize = 512;

/// One stepper's part of a shared decode step.
pub struct Feed<'a> {
    /// The stepper's sets; `seqs` count their streams in this order.
    pub sets: &'a mut [KvSet],
    /// Each sequence's new tokens, its stream, and the kernels they run on.
    pub seqs: Vec<(&'a [u32], usize, Kernels)>,
    /// The logit rows the stepper samples from.
    pub rows: Range<u32>,
}

impl Feed<'_> {
    /// New positions the feed carries.
    pub fn tokens(&self) -> usize {
        self.seqs.iter().map(|(t, _, _)| t.len()).sum()
    }

    /// Whether it carries more than one token for some sequence (a prompt's piece).
    pub fn prefills(&self) -> bool {
        self.seqs.iter().any(|(t, _, _)| t.len() > 1)
    }
}

/// Runs every feed's sequences and returns, per feed and per sequence, the logits of the
/// sequence's last new position. Sequences with the same logit rows and kernels share one
/// forward; the order of the forwards follows the first sequence of each.
pub fn run(lm: &mut CausalLm, backend: &Backend, feeds: &mut [Feed<'_>]) -> Result<Vec<Vec<Vec<f32>>>, GgmlError> {
    let mut out: Vec<Vec<Option<Vec<f32>>>> = feeds.iter().map(|f| vec![None; f.seqs.len()]).collect();
    let mut groups: Vec<(Range<u32>, Kernels)> = Vec::new();
    for f in feeds.iter() {
        for &(_, _, k) in &f.seqs {
            if !groups.contains(&(f.rows.clone(), k)) {
                groups.push((f.rows.clone(), k));
            }
        }
    }
    for (rows, kernels) in groups {
        let mut sets: Vec<&mut KvSet> = Vec::new();
        let mut seqs: Vec<SeqInput<'_>> = Vec::new();
        // (feed, sequence) of each forward sequence.
        let mut whose = Vec::new();
        let mut base = 0usize;
        for (i, f) in feeds.iter_mut().enumerate() {
            if f.rows != rows {
                continue;
            }
            for (j, &(tokens, stream, k)) in f.seqs.iter().enumerate() {
                if k == kernels {
                    seqs.push(SeqInput { tokens, set: base + stream });
                    whose.push((i, j));
                }
            }
            for s in f.sets.iter_mut() {
                base += s.streams();
                sets.push(s);
            }
        }
        let logits = lm.step_over(backend, &mut sets, StepInput::Ids(&seqs), rows, Positions::Last, false, kernels)?;
        for ((i, j), mut p) in whose.into_iter().zip(logits.per_seq) {
            out[i][j] = Some(p.pop().expect("one position each"));
        }
    }
    Ok(out.into_iter().map(|f| f.into_iter().map(|l| l.expect("every sequence ran")).collect()).collect())
}

/// Tokens of one sequence still to run through the model, handed out in pieces of at most
/// `chunk` (a sampled token is a piece of one): first the prompt, on the fast kernels, in
/// pieces at fixed offsets from its start; then the row-exact tokens.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    tokens: Vec<u32>,
    /// How many of `tokens`, from the front, are the prompt (fast kernels).
    prompt: usize,
    /// Tokens of `tokens` handed out in the feed now in flight.
    out: usize,
    chunk: usize,
}

impl Pending {
    pub fn new(chunk: usize) -> Self {
        Pending { tokens: Vec::new(), prompt: 0, out: 0, chunk: chunk.max(1) }
    }

    /// Queues a prompt behind what is pending (before any row-exact token).
    pub fn push(&mut self, tokens: &[u32]) {
        assert_eq!(self.prompt, self.tokens.len(), "a prompt queued behind row-exact tokens");
        self.tokens.extend_from_slice(tokens);
        self.prompt = self.tokens.len();
    }

    /// Queues tokens to run on the row-exact kernels (see [`Kernels`]).
    pub fn push_exact(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }

    /// The next piece and its kernels (it counts as handed out until [`Pending::ran`]).
    pub fn piece(&mut self) -> Option<(&[u32], Kernels)> {
        if self.tokens.is_empty() {
            return None;
        }
        let (room, kernels) =
            if self.prompt > 0 { (self.prompt, Kernels::Fast) } else { (self.tokens.len(), Kernels::RowExact) };
        self.out = room.min(self.chunk);
        Some((&self.tokens[..self.out], kernels))
    }

    /// The piece handed out ran; true when nothing is left (its logits are the sequence's).
    pub fn ran(&mut self) -> bool {
        self.tokens.drain(..self.out);
        self.prompt = self.prompt.saturating_sub(self.out);
        self.out = 0;
        self.tokens.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// What is still to run.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.prompt = 0;
        self.out = 0;
    }

    pub fn chunk(&self) -> usize {
        self.chunk
    }
}
