//! The autoregressive half of the YuE2 backbone: a Qwen3 decoder.
//!
//! Per layer: input_layernorm, self-attention with RMS-normalised q and k (before NeoX RoPE,
//! theta from the config) and grouped KV heads, post_attention_layernorm, SwiGLU MLP; then
//! the shared final norm and the untied lm_head. One entry point, [`ArModel::forward`],
//! serves both the prefill of one sequence and the batched decode of N sequences over N
//! caches with different lengths: the projections, norms, RoPE and MLP run on all tokens of
//! the batch at once; the cache write and the attention run once per run of sequences on
//! consecutive streams of one set with equal token counts (a batched decode step of the
//! guidance pair or of `lm_batch_size` songs: one attention node per layer), otherwise
//! once per sequence.
//!
//! The LM head runs only on the rows a stage samples from (a contiguous id range), and only
//! on the positions asked for, so a semantic decode step multiplies 32769 rows, not 184704.
use crate::ggml::{Backend, Context, GgmlError, GgmlType, Graph, GraphCache, Tensor, TensorStore};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::models::yue2::config::{backbone_tensor_shapes, is_nar_tensor, names, BackboneInfo, Yue2Config};
use crate::nn::qwen3::Qwen3Layer;
use crate::nn::rms_norm;
use crate::weights::{load_tensors, LoadError};
use std::ops::Range;

/// One sequence of a forward call: new tokens appended to one cache stream.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    /// The sequence's cache: a stream index counted across the sets passed to `forward`
    /// (a set of S streams takes S consecutive indices; with single-stream sets it is the
    /// set's index in the slice).
    pub set: usize,
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// The last new token of each sequence (generation).
    Last,
    /// Every new token (evaluation, `lm-eval`).
    All,
}

/// Logits of one forward call: for each sequence, `rows.len()` values per requested position.
#[derive(Debug)]
pub struct Logits {
    pub rows: Range<u32>,
    /// `per_seq[i]` holds the positions of sequence i, each `rows.len()` values.
    pub per_seq: Vec<Vec<Vec<f32>>>,
}

/// The AR weights on a backend plus the reusable compute allocator.
pub struct ArModel {
    pub cfg: Yue2Config,
    weights: TensorStore,
    vocab_type: GgmlType,
    /// The compute allocator, keeping the last step's graph (see [`ArModel::forward`]).
    graphs: GraphCache<StepKey>,
}

/// Names and shapes of the AR tensors (311 at the published dimensions).
pub fn ar_tensors(cfg: &Yue2Config) -> Vec<(String, Vec<i64>)> {
    // The AR half never reads the flow-matching heads, so their shapes do not matter here.
    backbone_tensor_shapes(cfg, 1, 1).into_iter().filter(|(n, _)| !is_nar_tensor(n)).collect()
}

impl ArModel {
    /// Loads the AR half of a backbone file onto `backend`.
    pub fn load(f: &GgufFile, info: &BackboneInfo, backend: &Backend) -> Result<Self, LoadError> {
        let weights = load_tensors(f, &ar_tensors(&info.config), backend, "AR weights")?;
        let vocab_type = weights.get(names::LM_HEAD).ty();
        Ok(ArModel { cfg: info.config.clone(), weights, vocab_type, graphs: GraphCache::new(backend, "AR step") })
    }

    /// Device bytes of the weights.
    /// Weight bytes one forward step must read when it samples `rows` logit rows: every
    /// layer, the final norm, the sampled rows of the LM head, and one embedding row per
    /// new token (a gather, not a scan of the table).
    pub fn step_read_bytes(&self, rows: usize, tokens: usize) -> usize {
        let embed = self.weights.get(names::EMBED).nbytes();
        let head = self.weights.get(names::LM_HEAD).nbytes();
        let vocab = self.cfg.vocab_size.max(1);
        self.weights.bytes() - embed - head + head * rows / vocab + embed * tokens / vocab
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }
    /// Bytes of the compute buffer (grows to the largest graph seen).
    pub fn compute_bytes(&self) -> usize {
        self.graphs.buffer_size()
    }
    pub fn lm_head_type(&self) -> GgmlType {
        self.vocab_type
    }

    /// Runs the new tokens of every sequence through the model, appends their K/V to the
    /// sequences' sets and returns the logits of `rows` at `positions`.
    ///
    /// Sequences on consecutive streams of one set with equal token counts form a run: one
    /// cache write per K and V and one attention node per layer for the whole run.
    ///
    /// The graph of a call is kept and reused by the next call of the same shape (same sets
    /// in the same order, same runs, token counts, attention windows, rows and positions):
    /// the per-step differences — token ids, positions, where the new K/V go, which cache
    /// entries are visible — are all graph inputs. A window is a stream's length rounded up
    /// to [`WINDOW_STEP`] (CPU) or [`DEVICE_WINDOW_STEP`] (the largest of a run's members),
    /// so a decode loop rebuilds once per 64 (256) steps.
    pub fn forward(&mut self, backend: &Backend, sets: &mut [KvSet], seqs: &[SeqInput<'_>], rows: Range<u32>, positions: Positions) -> Result<Logits, GgmlError> {
        let c = &self.cfg;
        assert!(!seqs.is_empty(), "forward of no sequence");
        assert!(rows.start < rows.end && rows.end as usize <= c.vocab_size, "logit rows {rows:?} outside the vocabulary of {}", c.vocab_size);
        // Where each sequence's cache is: (set, stream).
        let slots: Vec<(usize, usize)> = sets.iter().enumerate().flat_map(|(i, s)| (0..s.streams()).map(move |k| (i, k))).collect();
        let at: Vec<(usize, usize)> = seqs.iter().map(|s| *slots.get(s.set).unwrap_or_else(|| panic!("sequence cache {} of {} streams", s.set, slots.len()))).collect();
        for (i, s) in seqs.iter().enumerate() {
            assert!(!s.tokens.is_empty(), "sequence {i} has no new token");
            assert!(seqs.iter().filter(|o| o.set == s.set).count() == 1, "KV stream {} used twice in one forward", s.set);
            let (si, k) = at[i];
            let set = &sets[si];
            assert!(set.stream_len(k) + s.tokens.len() <= set.capacity(), "KV stream {} full: {} + {} > {}", s.set, set.stream_len(k), s.tokens.len(), set.capacity());
            assert!(s.tokens.iter().all(|&t| (t as usize) < c.vocab_size), "token id outside the vocabulary");
        }
        // The graph reads the weights and the sets, in order of first use.
        let mut used: Vec<usize> = Vec::new();
        for &(si, _) in &at {
            if !used.contains(&si) {
                used.push(si);
            }
        }
        // Runs of consecutive sequences on consecutive streams of one set, equal token counts.
        let step = window_step(backend);
        let mut runs: Vec<RunShape> = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            let (si, k) = at[i];
            let set = &sets[si];
            let t = s.tokens.len();
            let window = (set.stream_len(k) + t).next_multiple_of(step).min(set.capacity());
            let store = used.iter().position(|&u| u == si).expect("listed above");
            match runs.last_mut() {
                Some(r) if r.store == store && r.stream0 + r.streams == k && r.tokens == t => {
                    r.streams += 1;
                    r.window = r.window.max(window);
                }
                _ => runs.push(RunShape { store, stream0: k, streams: 1, tokens: t, window }),
            }
        }
        let key = StepKey { runs, rows: rows.clone(), positions };
        let mut stores = vec![&self.weights];
        stores.extend(used.iter().map(|&si| sets[si].store()));
        let n_nodes = graph_nodes(c, key.runs.len());
        let shape = key.clone();
        let g = self.graphs.get(key, &stores, n_nodes, |ctx, graph, stores| build_step(ctx, graph, c, stores, &shape))?;

        // Inputs.
        let mut id_v = Vec::new();
        let mut pos_v = Vec::new();
        let mut out_v = Vec::new();
        let mut row_at = 0i32;
        for (i, s) in seqs.iter().enumerate() {
            let (si, k) = at[i];
            let past = sets[si].stream_len(k);
            let t = s.tokens.len();
            for (j, &tok) in s.tokens.iter().enumerate() {
                id_v.push(tok as i32);
                pos_v.push((past + j) as i32);
                if positions == Positions::All {
                    out_v.push(row_at + j as i32);
                }
            }
            row_at += t as i32;
            if positions == Positions::Last {
                out_v.push(row_at - 1);
            }
        }
        let mut first = 0usize;
        for (ri, r) in shape.runs.iter().enumerate() {
            let mut kv_pos = Vec::with_capacity(r.tokens * r.streams);
            // Query j of member m sees its stream's entries 0..=past+j; the rest is -inf.
            let mut mask = vec![F16_NEG_INF; r.window * r.tokens * r.streams];
            for m in 0..r.streams {
                let (si, k) = at[first + m];
                let past = sets[si].stream_len(k);
                for j in 0..r.tokens {
                    kv_pos.push((past + j) as i64);
                    let q = (m * r.tokens + j) * r.window;
                    mask[q..q + past + j + 1].fill(0);
                }
            }
            g.tensor(INPUTS + 2 * ri).write_i64(&kv_pos);
            g.tensor(INPUTS + 2 * ri + 1).write_f16_bits(&mask);
            first += r.streams;
        }
        g.tensor(IDS).write_i32(&id_v);
        g.tensor(POS).write_i32(&pos_v);
        g.tensor(OUT_IDX).write_i32(&out_v);
        g.compute(backend)?;
        let flat = g.tensor(LOGITS).read_f32();
        for (i, s) in seqs.iter().enumerate() {
            let (si, k) = at[i];
            sets[si].advance(k, s.tokens.len());
        }
        let nr = rows.len();
        let mut per_seq = Vec::with_capacity(seqs.len());
        let mut row = 0usize;
        for s in seqs {
            let n = if positions == Positions::All { s.tokens.len() } else { 1 };
            per_seq.push((0..n).map(|j| flat[(row + j) * nr..(row + j + 1) * nr].to_vec()).collect());
            row += n;
        }
        Ok(Logits { rows, per_seq })
    }

    /// Drops the kept step graph, so the next call builds its own (tests, and a caller that
    /// wants the compute memory of a big prefill graph back).
    pub fn forget_graph(&mut self) {
        self.graphs.forget();
    }

    /// Nodes of the last step graph computing `op` (ggml's op name): for tests.
    pub fn graph_op_count(&self, op: &str) -> usize {
        self.graphs.op_count(op)
    }

    /// How many forward calls built a graph and how many reused the previous one.
    pub fn graph_stats(&self) -> (u64, u64) {
        self.graphs.stats()
    }
}

/// Attention windows on the CPU grow in steps of this many cache entries. Smaller steps
/// rebuild more often (a graph build is ~0.1% of a full-size step); larger ones scan more
/// masked entries, and on the CPU they unbalance the threads: ggml splits a single-query
/// attention's window evenly between threads, so the thread holding the masked tail
/// idles. 64 measured better than llama.cpp's 256 for the guidance pair on 2 cores.
pub const WINDOW_STEP: usize = 64;

/// On GPUs the step is 256, as in llama.cpp: ggml-cuda's decode attention kernel (and its
/// grouped-query path) only takes a window that is a multiple of 256 entries.
pub const DEVICE_WINDOW_STEP: usize = 256;

fn window_step(backend: &Backend) -> usize {
    if backend.is_cpu() {
        WINDOW_STEP
    } else {
        DEVICE_WINDOW_STEP
    }
}

/// F16 bit pattern of -inf (a masked cache entry); 0 is 0.0.
const F16_NEG_INF: u16 = 0xFC00;

/// Indices of the kept tensors of a step graph: the shared inputs, the logits, then per
/// run its cache row indices and its mask.
const IDS: usize = 0;
const POS: usize = 1;
const OUT_IDX: usize = 2;
const LOGITS: usize = 3;
const INPUTS: usize = 4;

/// What a step graph depends on besides its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StepKey {
    runs: Vec<RunShape>,
    rows: Range<u32>,
    positions: Positions,
}

/// Consecutive sequences of a step on consecutive streams of one set, with equal token
/// counts: one cache write and one attention node per layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunShape {
    /// The set, as its index among the graph's stores after the weights.
    store: usize,
    stream0: usize,
    streams: usize,
    /// New tokens of each member.
    tokens: usize,
    /// Cache entries the attention reads (a multiple of the window step, or the capacity;
    /// the largest of the members').
    window: usize,
}

fn graph_nodes(c: &Yue2Config, n_runs: usize) -> usize {
    256 + c.num_hidden_layers * (48 + 24 * n_runs)
}

/// Builds the forward graph of one step shape over `stores`: the weights, then the KV
/// sets. Returns the kept tensors in the order of the index constants above.
fn build_step<'a>(gctx: &'a Context, graph: &mut Graph<'a>, c: &Yue2Config, stores: &[&'a TensorStore], key: &StepKey) -> Vec<Tensor<'a>> {
    let weights = stores[0];
    let n_tok: i64 = key.runs.iter().map(|r| (r.tokens * r.streams) as i64).sum();
    let eps = c.rms_norm_eps as f32;
    let n_out: i64 = match key.positions {
        Positions::Last => key.runs.iter().map(|r| r.streams as i64).sum(),
        Positions::All => n_tok,
    };
    let ids = gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("ids").set_input();
    let pos = gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("pos").set_input();
    let out_idx = gctx.new_tensor(GgmlType::I32, &[n_out]).set_name("out_idx").set_input();
    let mut per_run = Vec::with_capacity(2 * key.runs.len());
    for (i, r) in key.runs.iter().enumerate() {
        per_run.push(gctx.new_tensor(GgmlType::I64, &[r.tokens as i64, 1, r.streams as i64]).set_name(&format!("kv_pos{i}")).set_input());
        per_run.push(gctx.new_tensor(GgmlType::F16, &[r.window as i64, r.tokens as i64, 1, r.streams as i64]).set_name(&format!("mask{i}")).set_input());
    }

    let w = |name: &str| weights.get(name);
    let dims = c.qwen3_dims();
    let mut x = gctx.get_rows(w(names::EMBED), ids);
    for l in 0..c.num_hidden_layers {
        let layer = Qwen3Layer::from_fn(|role| weights.get(&names::layer_role(l, false, role)));
        x = layer.forward(gctx, &dims, x, pos, |q, k, v| attend_runs(gctx, graph, stores, key, &per_run, l, q, k, v));
    }
    let x = gctx.get_rows(x, out_idx);
    let x = rms_norm(gctx, x, w(names::NORM), eps);
    let head = w(names::LM_HEAD);
    let n_rows = (key.rows.end - key.rows.start) as i64;
    let head = gctx.view_2d(head, head.ne()[0], n_rows, head.nb()[1], key.rows.start as usize * head.nb()[1]);
    let logits = gctx.mul_mat(head, x).set_name("logits").set_output();
    graph.expand(logits);
    let mut kept = vec![ids, pos, out_idx, logits];
    kept.extend(per_run);
    kept
}

/// The attention of layer `l` for every run of a step: each run writes its new K/V at its
/// members' positions in their streams, then attends over each member's window. `q`, `k`,
/// `v`: [head_dim, heads, tokens] in run order; returns [heads x head_dim, tokens].
#[allow(clippy::too_many_arguments)]
fn attend_runs<'a>(gctx: &'a Context, graph: &mut Graph<'a>, stores: &[&'a TensorStore], key: &StepKey, per_run: &[Tensor<'a>], l: usize, q: Tensor<'a>, k: Tensor<'a>, v: Tensor<'a>) -> Tensor<'a> {
    let (hd, nh, nkv) = (q.ne()[0], q.ne()[1], k.ne()[1]);
    let scale = 1.0 / (hd as f32).sqrt();
    let mut outs: Option<Tensor<'_>> = None;
    let mut start = 0i64;
    for (i, r) in key.runs.iter().enumerate() {
        let (t, ns) = (r.tokens as i64, r.streams as i64);
        let n = t * ns;
        let store = stores[1 + r.store];
        let (kc, vc) = (KvSet::k_of(store, l), KvSet::v_of(store, l)); // [hd, capacity, nkv, streams]
        let (nb1, nb2, nb3) = (kc.nb()[1], kc.nb()[2], kc.nb()[3]);
        let (cap, off) = (kc.ne()[1], r.stream0 * nb3);
        for (cache, new) in [(kc, k), (vc, v)] {
            let dst = gctx.view_4d(cache, [hd, cap, nkv, ns], nb1, nb2, nb3, off);
            let src = gctx.view_4d(new, [hd, nkv, t, ns], new.nb()[1], new.nb()[2], t as usize * new.nb()[2], start as usize * new.nb()[2]);
            graph.expand(gctx.set_rows(dst, gctx.permute(src, [0, 2, 1, 3]), per_run[2 * i]));
        }
        let n_kv = r.window as i64;
        let kw = gctx.view_4d(kc, [hd, n_kv, nkv, ns], nb1, nb2, nb3, off);
        let vw = gctx.view_4d(vc, [hd, n_kv, nkv, ns], nb1, nb2, nb3, off);
        let q_i = gctx.view_3d(q, hd, nh, n, q.nb()[1], q.nb()[2], start as usize * q.nb()[2]);
        let q_i = gctx.permute(gctx.reshape_4d(q_i, hd, nh, t, ns), [0, 2, 1, 3]); // [hd, t, nh, ns]
        let a = gctx.flash_attn_ext(q_i, kw, vw, Some(per_run[2 * i + 1]), scale); // [hd, nh, t, ns]
        let a = gctx.reshape_2d(a, hd * nh, n);
        outs = Some(match outs {
            None => a,
            Some(prev) => gctx.concat(prev, a, 1),
        });
        start += n;
    }
    outs.expect("a step has at least one run")
}

#[cfg(test)]
mod tests;
