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
use crate::ggml::{Backend, GgmlError};
use crate::kv_cache::KvSet;
use crate::nn::causal_lm::{CausalLm, Positions, SeqInput, StepInput};
use std::ops::Range;

/// Tokens a prompt is prefilled in at most, per piece, unless a caller says otherwise.
pub const PREFILL_CHUNK: usize = 512;

/// One stepper's part of a shared decode step.
pub struct Feed<'a> {
    /// The stepper's sets; `seqs` count their streams in this order.
    pub sets: &'a mut [KvSet],
    pub seqs: Vec<(&'a [u32], usize)>,
    /// The logit rows the stepper samples from.
    pub rows: Range<u32>,
}

impl Feed<'_> {
    /// New positions the feed carries.
    pub fn tokens(&self) -> usize {
        self.seqs.iter().map(|(t, _)| t.len()).sum()
    }

    /// Whether it carries more than one token for some sequence (a prompt's piece).
    pub fn prefills(&self) -> bool {
        self.seqs.iter().any(|(t, _)| t.len() > 1)
    }
}

/// Runs every feed's sequences and returns, per feed and per sequence, the logits of the
/// sequence's last new position. Feeds with the same logit rows share one forward; the
/// order of the forwards follows the first feed of each range.
pub fn run(lm: &mut CausalLm, backend: &Backend, feeds: &mut [Feed<'_>]) -> Result<Vec<Vec<Vec<f32>>>, GgmlError> {
    let mut out: Vec<Vec<Vec<f32>>> = feeds.iter().map(|_| Vec::new()).collect();
    let mut ranges: Vec<Range<u32>> = Vec::new();
    for f in feeds.iter() {
        if !ranges.contains(&f.rows) {
            ranges.push(f.rows.clone());
        }
    }
    for rows in ranges {
        let mut sets: Vec<&mut KvSet> = Vec::new();
        let mut seqs: Vec<SeqInput<'_>> = Vec::new();
        let mut counts = Vec::new();
        let mut base = 0usize;
        for (i, f) in feeds.iter_mut().enumerate() {
            if f.rows != rows {
                continue;
            }
            seqs.extend(f.seqs.iter().map(|&(tokens, stream)| SeqInput { tokens, set: base + stream }));
            counts.push((i, f.seqs.len()));
            for s in f.sets.iter_mut() {
                base += s.streams();
                sets.push(s);
            }
        }
        if seqs.is_empty() {
            continue;
        }
        let logits = lm.step_over(backend, &mut sets, StepInput::Ids(&seqs), rows, Positions::Last, false)?;
        let mut per_seq = logits.per_seq.into_iter();
        for (i, n) in counts {
            out[i] = per_seq.by_ref().take(n).map(|mut p| p.pop().expect("one position each")).collect();
        }
    }
    Ok(out)
}

/// Tokens of one sequence still to run through the model, handed out in pieces of at most
/// `chunk` (a sampled token is a piece of one).
#[derive(Clone, Debug, Default)]
pub struct Pending {
    tokens: Vec<u32>,
    /// Tokens of `tokens` handed out in the feed now in flight.
    out: usize,
    chunk: usize,
}

impl Pending {
    pub fn new(chunk: usize) -> Self {
        Pending { tokens: Vec::new(), out: 0, chunk: chunk.max(1) }
    }

    /// Queues `tokens` behind what is pending.
    pub fn push(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }

    /// The next piece (and it counts as handed out until [`Pending::ran`]).
    pub fn piece(&mut self) -> Option<&[u32]> {
        if self.tokens.is_empty() {
            return None;
        }
        self.out = self.tokens.len().min(self.chunk);
        Some(&self.tokens[..self.out])
    }

    /// The piece handed out ran; true when nothing is left (its logits are the sequence's).
    pub fn ran(&mut self) -> bool {
        self.tokens.drain(..self.out);
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
        self.out = 0;
    }

    pub fn chunk(&self) -> usize {
        self.chunk
    }
}
