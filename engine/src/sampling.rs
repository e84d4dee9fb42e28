//! The token sampler of both AR stages, in the protocol's fixed order:
//! mask to the stage's ids, block the end token below the floor, windowed frequency
//! repetition penalty, temperature, top-k, top-p; then the draw, conformant with
//! `torch.multinomial(p, 1)`: argmax of p / E over the nucleus, each entry's Exp(1) variate
//! E drawn from its own Philox subsequence. The keying is the reference implementation's,
//! so a seed renders the same tokens here and there: key = the stage seed (low word
//! first), counter = (step low, step high, absolute vocabulary id, 0), word 0 — curand's
//! subsequence = the id, offset = 4 x the step.
use crate::rng::philox::{curand_uniform, exponential_from_uniform};
use std::ops::Range;

/// A stage's sampler: the chain's knobs and the stage's token floor and budget (the
/// request's sampling preset, in the engine's terms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: u32,
    pub repetition_penalty: f64,
    /// Tokens looked back over by the repetition penalty.
    pub penalty_window: u32,
    /// The end token is blocked until this many tokens were sampled.
    pub min_tokens: u32,
    /// The stage's token budget.
    pub max_tokens: u32,
}

/// Everything the chain needs besides the logits.
#[derive(Clone, Debug)]
pub struct SampleContext<'a> {
    /// Ids the logits cover: index 0 is id `rows.start`.
    pub rows: Range<u32>,
    /// Ids the stage may emit (a sub-range of `rows`).
    pub allowed: Range<u32>,
    pub end_id: u32,
    /// Tokens sampled so far in this stage (the floor and the draw offset count them).
    pub step: usize,
    /// Tokens generated so far in this stage (the penalty window looks at their tail).
    pub history: &'a [u32],
}

/// Guidance: `uncond + scale * (cond - uncond)`, in place on `cond`.
pub fn cfg_combine(cond: &mut [f32], uncond: &[f32], scale: f32) {
    for (c, u) in cond.iter_mut().zip(uncond) {
        *c = u + scale * (*c - u);
    }
}

/// Applies mask, floor and penalty; returns the processed logits (f64, -inf = removed).
fn masked_penalised(logits: &[f32], cx: &SampleContext<'_>, p: &Sampling) -> Vec<f64> {
    let start = cx.rows.start;
    let mut l: Vec<f64> = logits
        .iter()
        .enumerate()
        .map(|(i, &x)| if cx.allowed.contains(&(start + i as u32)) { x as f64 } else { f64::NEG_INFINITY })
        .collect();
    if cx.step < p.min_tokens as usize && cx.rows.contains(&cx.end_id) {
        l[(cx.end_id - start) as usize] = f64::NEG_INFINITY;
    }
    if p.repetition_penalty != 1.0 {
        let window = &cx.history[cx.history.len().saturating_sub(p.penalty_window as usize)..];
        let mut counts: std::collections::BTreeMap<u32, i32> = Default::default();
        for &t in window {
            if cx.rows.contains(&t) {
                *counts.entry(t).or_default() += 1;
            }
        }
        for (t, f) in counts {
            let alpha = p.repetition_penalty.powi(f);
            let x = &mut l[(t - start) as usize];
            if *x < 0.0 {
                *x *= alpha;
            } else {
                *x /= alpha;
            }
        }
    }
    l
}

fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold(0, |b, (i, x)| if *x > v[b] { i } else { b })
}

/// The probability of every row after the chain (0 for removed rows), or `None` for greedy
/// decoding (temperature 0), where the caller takes [`greedy`].
pub fn probabilities(logits: &[f32], cx: &SampleContext<'_>, p: &Sampling) -> Option<Vec<f32>> {
    if p.temperature == 0.0 {
        return None;
    }
    let mut l = masked_penalised(logits, cx, p);
    for x in l.iter_mut() {
        // A NaN (weights or a guidance gone out of range) is no token: it must not stop the
        // sort below, which fails every song of the batch step.
        *x = if x.is_nan() { f64::NEG_INFINITY } else { *x / p.temperature };
    }
    // top-k: everything below the k-th largest value goes (ties at the k-th stay).
    let k = (p.top_k as usize).min(l.len()).max(1);
    let mut sorted = l.clone();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let kth = sorted[k - 1];
    for x in l.iter_mut() {
        if *x < kth {
            *x = f64::NEG_INFINITY;
        }
    }
    // top-p: ascending order, drop the low tail whose cumulative mass is <= 1 - top_p,
    // always keeping the most likely token.
    if p.top_p < 1.0 {
        let mut order: Vec<usize> = (0..l.len()).collect();
        order.sort_by(|&a, &b| l[a].partial_cmp(&l[b]).unwrap().then(a.cmp(&b)));
        let probs = softmax(&l);
        let mut cum = 0.0;
        let last = order.len() - 1;
        for (rank, &i) in order.iter().enumerate() {
            cum += probs[i];
            if cum <= 1.0 - p.top_p && rank != last {
                l[i] = f64::NEG_INFINITY;
            }
        }
    }
    Some(softmax(&l).into_iter().map(|x| x as f32).collect())
}

fn softmax(l: &[f64]) -> Vec<f64> {
    let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = l.iter().map(|x| if x.is_finite() { (x - m).exp() } else { 0.0 }).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// The greedy choice (temperature 0): argmax after mask, floor and penalty.
pub fn greedy(logits: &[f32], cx: &SampleContext<'_>, p: &Sampling) -> u32 {
    cx.rows.start + argmax(&masked_penalised(logits, cx, p)) as u32
}

/// The Exp(1) variate of vocabulary id `id` at stage step `step`: word 0 of the Philox
/// block with key `seed` and counter `(step, id)`.
pub fn draw_exponential(seed: u64, id: u32, step: u64) -> f32 {
    // curand_init(seed, subsequence = id, offset = 4 * step) starts at word 0 of block `step`.
    exponential_from_uniform(curand_uniform(seed, id as u64, step.wrapping_mul(4)))
}

/// torch.multinomial(p, 1) conformant draw over rows whose first is vocabulary id
/// `first_id`: the row index of argmax p_i / E_i (the first on ties).
pub fn draw(probs: &[f32], first_id: u32, seed: u64, step: u64) -> usize {
    let mut best = None::<(usize, f32)>;
    for (i, &p) in probs.iter().enumerate() {
        if p <= 0.0 {
            continue;
        }
        let e = draw_exponential(seed, first_id + i as u32, step);
        let q = p / e;
        if best.is_none_or(|(_, b)| q > b) {
            best = Some((i, q));
        }
    }
    best.map(|(i, _)| i).unwrap_or(0)
}

/// The whole chain and the draw: the sampled id.
pub fn sample(logits: &[f32], cx: &SampleContext<'_>, p: &Sampling, seed: u64) -> u32 {
    match probabilities(logits, cx, p) {
        None => greedy(logits, cx, p),
        Some(probs) => cx.rows.start + draw(&probs, cx.rows.start, seed, cx.step as u64) as u32,
    }
}

#[cfg(test)]
mod tests;
