//! A causal Qwen3 language model over KV sets: the YuE2 AR half and the MiniMax Music 3
//! LM are both this, under their own tensor names ([`LmSpec`]).
//!
//! One entry point, [`CausalLm::step`], serves both the prefill of one sequence and the
//! batched decode of N sequences over N caches with different lengths: the projections,
//! norms, RoPE and MLP run on all tokens of the batch at once; the cache write and the
//! attention run once per run of sequences on consecutive streams of one set with equal
//! token counts (a batched decode step of a guidance pair or of a batch of songs: one
//! attention node per layer), otherwise once per sequence.
//!
//! A step's input is token ids (looked up in the embedding table inside the graph) or
//! input embeddings given by the caller (MiniMax's frame feedback). The LM head runs only
//! on the rows a stage samples from (a contiguous id range), and only on the positions
//! asked for; the final-normed hidden states of those positions come back on request.
use crate::ggml::{Backend, Context, GgmlError, GgmlType, Graph, GraphCache, KeptGraph, Kernels, Tensor, TensorStore};
use crate::kv_cache::{KvDims, KvSet};
use crate::nn::qwen3::{Qwen3Dims, Qwen3Layer, Role};
use crate::nn::rms_norm;
use std::ops::Range;

/// What the graph needs to know of a model: its dimensions and where its tensors are.
#[derive(Clone, Debug)]
pub struct LmSpec {
    pub dims: Qwen3Dims,
    pub hidden: usize,
    pub vocab: usize,
    pub embed: String,
    pub norm: String,
    pub head: String,
    /// Per layer, the tensor names in the order of [`Role::ALL`].
    pub layers: Vec<[String; 11]>,
}

impl LmSpec {
    pub fn kv_dims(&self) -> KvDims {
        KvDims { layers: self.layers.len(), head_dim: self.dims.head_dim, kv_heads: self.dims.kv_heads }
    }
    fn layer_tensor(&self, l: usize, role: Role) -> &str {
        &self.layers[l][role as usize]
    }
}

/// One sequence of a forward call: new tokens appended to one cache stream.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    /// The sequence's cache: a stream index counted across the sets passed to the call
    /// (a set of S streams takes S consecutive indices; with single-stream sets it is the
    /// set's index in the slice).
    pub set: usize,
}

/// One sequence of a forward call given as input embeddings: `embeds` holds `hidden`
/// values per new position.
pub struct SeqEmbeds<'a> {
    pub embeds: &'a [f32],
    pub set: usize,
}

/// The new positions of a step: all token ids, or all input embeddings.
#[derive(Clone, Copy)]
pub enum StepInput<'a> {
    Ids(&'a [SeqInput<'a>]),
    Embeds(&'a [SeqEmbeds<'a>]),
}

impl StepInput<'_> {
    fn len(&self) -> usize {
        match self {
            StepInput::Ids(s) => s.len(),
            StepInput::Embeds(s) => s.len(),
        }
    }
    fn set(&self, i: usize) -> usize {
        match self {
            StepInput::Ids(s) => s[i].set,
            StepInput::Embeds(s) => s[i].set,
        }
    }
    fn tokens(&self, i: usize, hidden: usize) -> usize {
        match self {
            StepInput::Ids(s) => s[i].tokens.len(),
            StepInput::Embeds(s) => s[i].embeds.len() / hidden,
        }
    }
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// The last new token of each sequence (generation).
    Last,
    /// Every new token (evaluation, `lm-eval`, replay).
    All,
}

/// Logits of one forward call: for each sequence, `rows.len()` values per requested position.
#[derive(Debug)]
pub struct Logits {
    pub rows: Range<u32>,
    /// `per_seq[i]` holds the positions of sequence i, each `rows.len()` values.
    pub per_seq: Vec<Vec<Vec<f32>>>,
    /// When asked for: the final-normed hidden states of the same positions, `hidden`
    /// values each; else empty.
    pub hidden: Vec<Vec<Vec<f32>>>,
}

/// The weights of a model on a backend plus the reusable compute allocator.
pub struct CausalLm {
    pub spec: LmSpec,
    weights: TensorStore,
    /// The compute allocator, keeping the last step's graph (see [`CausalLm::step`]).
    graphs: GraphCache<StepKey>,
}

impl CausalLm {
    /// A model over `weights` (which hold every tensor `spec` names); `name` names its
    /// graphs in errors.
    pub fn new(spec: LmSpec, weights: TensorStore, backend: &Backend, name: &'static str) -> Self {
        CausalLm { spec, weights, graphs: GraphCache::new(backend, name) }
    }

    pub fn weights(&self) -> &TensorStore {
        &self.weights
    }

    /// Rows `ids` of the embedding table, as f32 on the host (`hidden` values each).
    pub fn embedding_rows(&self, ids: &[u32]) -> Vec<f32> {
        read_rows(self.weights.get(&self.spec.embed), ids)
    }

    /// Runs token ids through the model: see [`CausalLm::step`].
    pub fn forward(
        &mut self,
        backend: &Backend,
        sets: &mut [KvSet],
        seqs: &[SeqInput<'_>],
        rows: Range<u32>,
        positions: Positions,
    ) -> Result<Logits, GgmlError> {
        self.forward_on(backend, sets, seqs, rows, positions, Kernels::Fast)
    }

    /// [`CausalLm::forward`] on the kernels asked for (see [`Kernels`]).
    pub fn forward_on(
        &mut self,
        backend: &Backend,
        sets: &mut [KvSet],
        seqs: &[SeqInput<'_>],
        rows: Range<u32>,
        positions: Positions,
        kernels: Kernels,
    ) -> Result<Logits, GgmlError> {
        let mut refs: Vec<&mut KvSet> = sets.iter_mut().collect();
        self.step_over(backend, &mut refs, StepInput::Ids(seqs), rows, positions, false, kernels)
    }

    /// Runs the new positions of every sequence through the model, appends their K/V to
    /// the sequences' sets and returns the logits of `rows` at `positions` (and the
    /// final-normed hidden states there when `hidden`).
    ///
    /// Sequences on consecutive streams of one set with equal token counts form a run: one
    /// cache write per K and V and one attention node per layer for the whole run.
    ///
    /// The graph of a call is kept and reused by the next call of the same shape (same sets
    /// in the same order, same runs, token counts, attention windows, input kind, rows and
    /// positions): the per-step differences — token ids or embeddings, positions, where the
    /// new K/V go, which cache entries are visible — are all graph inputs. A window is a
    /// stream's length rounded up to [`WINDOW_STEP`] (CPU) or [`DEVICE_WINDOW_STEP`] (the
    /// largest of a run's members), so a decode loop rebuilds once per 64 (256) steps.
    pub fn step(
        &mut self,
        backend: &Backend,
        sets: &mut [KvSet],
        input: StepInput<'_>,
        rows: Range<u32>,
        positions: Positions,
        hidden: bool,
    ) -> Result<Logits, GgmlError> {
        let mut refs: Vec<&mut KvSet> = sets.iter_mut().collect();
        self.step_over(backend, &mut refs, input, rows, positions, hidden, Kernels::Fast)
    }

    /// [`step`](Self::step) over sets that live apart (the sequences of different jobs in
    /// one decode step: each job keeps its own sets; see [`crate::nn::batch`]), on the
    /// kernels asked for.
    #[allow(clippy::too_many_arguments)]
    pub fn step_over(
        &mut self,
        backend: &Backend,
        sets: &mut [&mut KvSet],
        input: StepInput<'_>,
        rows: Range<u32>,
        positions: Positions,
        hidden: bool,
        kernels: Kernels,
    ) -> Result<Logits, GgmlError> {
        let c = &self.spec;
        let n_seq = input.len();
        assert!(n_seq > 0, "forward of no sequence");
        assert!(
            rows.start < rows.end && rows.end as usize <= c.vocab,
            "logit rows {rows:?} outside the vocabulary of {}",
            c.vocab
        );
        // Where each sequence's cache is: (set, stream).
        let slots: Vec<(usize, usize)> =
            sets.iter().enumerate().flat_map(|(i, s)| (0..s.streams()).map(move |k| (i, k))).collect();
        let at: Vec<(usize, usize)> = (0..n_seq)
            .map(|i| {
                *slots
                    .get(input.set(i))
                    .unwrap_or_else(|| panic!("sequence cache {} of {} streams", input.set(i), slots.len()))
            })
            .collect();
        let counts: Vec<usize> = (0..n_seq).map(|i| input.tokens(i, c.hidden)).collect();
        check_step(c, sets, &input, &at, &counts);
        // The graph reads the weights and the sets, in order of first use.
        let mut used: Vec<usize> = Vec::new();
        for &(si, _) in &at {
            if !used.contains(&si) {
                used.push(si);
            }
        }
        let runs = run_shapes(sets, &at, &counts, &used, window_step(backend));
        let embeds = matches!(input, StepInput::Embeds(_));
        let head_from = head_view_start(rows.start, self.weights.get(&c.head).nb()[1], backend.is_cpu());
        let key = StepKey { runs, rows: rows.clone(), head_from, positions, embeds, hidden };
        let mut stores = vec![&self.weights];
        stores.extend(used.iter().map(|&si| sets[si].store()));
        let n_nodes = graph_nodes(c.layers.len(), key.runs.len());
        let shape = key.clone();
        // On the CPU the Q8_0 products of two rows or more take `mul_mat_q8_rows` (the bits of
        // ggml's products on either set of kernels, each weight block loaded once for several rows).
        let q8_rows = backend.is_cpu();
        let g = self.graphs.get(key, &stores, n_nodes, |ctx, graph, stores| {
            ctx.set_q8_row_products(q8_rows);
            build_step(ctx, graph, c, stores, &shape)
        })?;
        write_inputs(&g, sets, &at, &counts, &shape, input);
        g.compute_on(backend, kernels)?;
        let flat = g.tensor(LOGITS).read_f32();
        let flat_hidden = if hidden { g.tensor(HIDDEN).read_f32() } else { Vec::new() };
        for (i, &n) in counts.iter().enumerate() {
            let (si, k) = at[i];
            sets[si].advance(k, n);
        }
        let skip = (rows.start - head_from) as usize;
        let per_seq = split_rows(&flat, skip, rows.len(), &counts, positions);
        let hidden = if hidden { split_rows(&flat_hidden, 0, c.hidden, &counts, positions) } else { Vec::new() };
        Ok(Logits { rows, per_seq, hidden })
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

    /// Bytes of the compute buffer (grows to the largest graph seen).
    pub fn compute_bytes(&self) -> usize {
        self.graphs.buffer_size()
    }
}

/// Rows `ids` of a 2-D table `t` ([width, rows], any type) as f32 on the host.
pub fn read_rows(t: Tensor<'_>, ids: &[u32]) -> Vec<f32> {
    let row_bytes = t.nb()[1];
    let mut raw = vec![0u8; row_bytes];
    let mut out = Vec::with_capacity(ids.len() * t.ne()[0] as usize);
    for &id in ids {
        assert!((id as i64) < t.ne()[1], "row {id} of a table of {}", t.ne()[1]);
        t.read_bytes(id as usize * row_bytes, &mut raw);
        out.extend(
            crate::ggml::decode_to_f32(t.ty(), &raw)
                .unwrap_or_else(|| panic!("no f32 conversion of {}", t.ty().name())),
        );
    }
    out
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

/// Indices of the kept tensors of a step graph: the shared inputs (token ids or input
/// embeddings, positions, output rows), the logits, the hidden states, then per run its
/// cache row indices and its mask.
const IDS: usize = 0;
const POS: usize = 1;
const OUT_IDX: usize = 2;
const LOGITS: usize = 3;
const HIDDEN: usize = 4;
const INPUTS: usize = 5;

/// What a step graph depends on besides its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StepKey {
    runs: Vec<RunShape>,
    rows: Range<u32>,
    /// The head row the graph's logits start at: `rows.start`, or a few rows before it on a
    /// device ([`head_view_start`]).
    head_from: u32,
    positions: Positions,
    embeds: bool,
    hidden: bool,
}

/// The largest storage-buffer offset alignment a ggml device asks of a view it reads
/// (Vulkan's `minStorageBufferOffsetAlignment` is at most 256 bytes).
const DEVICE_VIEW_ALIGN: usize = 256;

/// Where a step's view of the LM head starts for logit rows from `start`. The CPU reads a
/// view at any offset; a device may not (ggml-vulkan aborts on a quantized weight viewed at
/// an offset that is not a multiple of its alignment, e.g. a Q8_0 row of 68 bytes): there
/// the view starts at the nearest row at or before `start` whose offset is a multiple of
/// [`DEVICE_VIEW_ALIGN`], and the rows before `start` are computed and dropped.
fn head_view_start(start: u32, row_bytes: usize, cpu: bool) -> u32 {
    if cpu {
        return start;
    }
    let (mut a, mut b) = (row_bytes, DEVICE_VIEW_ALIGN);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let every = (DEVICE_VIEW_ALIGN / a) as u32;
    start - start % every
}

/// A step's sequences against their caches: each has new tokens, a stream of its own with
/// room for them, and ids in the vocabulary or whole embedding rows.
fn check_step(c: &LmSpec, sets: &[&mut KvSet], input: &StepInput<'_>, at: &[(usize, usize)], counts: &[usize]) {
    let n_seq = counts.len();
    for i in 0..n_seq {
        assert!(counts[i] > 0, "sequence {i} has no new token");
        assert!(
            (0..n_seq).filter(|&o| input.set(o) == input.set(i)).count() == 1,
            "KV stream {} used twice in one forward",
            input.set(i)
        );
        let (si, k) = at[i];
        let set = &sets[si];
        assert!(
            set.stream_len(k) + counts[i] <= set.capacity(),
            "KV stream {} full: {} + {} > {}",
            input.set(i),
            set.stream_len(k),
            counts[i],
            set.capacity()
        );
    }
    match input {
        StepInput::Ids(seqs) => assert!(
            seqs.iter().all(|s| s.tokens.iter().all(|&t| (t as usize) < c.vocab)),
            "token id outside the vocabulary"
        ),
        StepInput::Embeds(seqs) => assert!(
            seqs.iter().all(|s| s.embeds.len() % c.hidden == 0),
            "input embeddings are not whole rows of {}",
            c.hidden
        ),
    }
}

/// Runs of consecutive sequences on consecutive streams of one set with equal token counts
/// (`used`: the sets in the order the graph's stores hold them; `step`: the window step).
fn run_shapes(
    sets: &[&mut KvSet],
    at: &[(usize, usize)],
    counts: &[usize],
    used: &[usize],
    step: usize,
) -> Vec<RunShape> {
    let mut runs: Vec<RunShape> = Vec::new();
    for (i, &(si, k)) in at.iter().enumerate() {
        let set = &sets[si];
        let t = counts[i];
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
    runs
}

/// A step graph's inputs: the tokens or embeddings, their positions, the rows read out,
/// and each run's cache rows and mask.
fn write_inputs(
    g: &KeptGraph<'_>,
    sets: &[&mut KvSet],
    at: &[(usize, usize)],
    counts: &[usize],
    shape: &StepKey,
    input: StepInput<'_>,
) {
    let positions = shape.positions;
    let mut pos_v = Vec::new();
    let mut out_v = Vec::new();
    let mut row_at = 0i32;
    for (i, &(si, k)) in at.iter().enumerate() {
        let past = sets[si].stream_len(k);
        let t = counts[i];
        for j in 0..t {
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
    match input {
        StepInput::Ids(seqs) => {
            g.tensor(IDS).write_i32(&seqs.iter().flat_map(|s| s.tokens.iter().map(|&t| t as i32)).collect::<Vec<_>>())
        }
        StepInput::Embeds(seqs) => {
            g.tensor(IDS).write_f32(&seqs.iter().flat_map(|s| s.embeds.iter().copied()).collect::<Vec<_>>())
        }
    }
    g.tensor(POS).write_i32(&pos_v);
    g.tensor(OUT_IDX).write_i32(&out_v);
}

/// The rows a step read out, per sequence (all its tokens', or its last): `width` values of
/// each, after the first `skip` of the row.
fn split_rows(flat: &[f32], skip: usize, width: usize, counts: &[usize], positions: Positions) -> Vec<Vec<Vec<f32>>> {
    let stride = skip + width;
    let mut per_seq = Vec::with_capacity(counts.len());
    let mut row = 0usize;
    for &t in counts {
        let n = if positions == Positions::All { t } else { 1 };
        per_seq.push((0..n).map(|j| flat[(row + j) * stride + skip..(row + j + 1) * stride].to_vec()).collect());
        row += n;
    }
    per_seq
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

fn graph_nodes(layers: usize, n_runs: usize) -> usize {
    256 + layers * (48 + 24 * n_runs)
}

/// Builds the forward graph of one step shape over `stores`: the weights, then the KV
/// sets. Returns the kept tensors in the order of the index constants above.
fn build_step<'a>(
    gctx: &'a Context,
    graph: &mut Graph<'a>,
    c: &LmSpec,
    stores: &[&'a TensorStore],
    key: &StepKey,
) -> Vec<Tensor<'a>> {
    let weights = stores[0];
    let n_tok: i64 = key.runs.iter().map(|r| (r.tokens * r.streams) as i64).sum();
    let n_out: i64 = match key.positions {
        Positions::Last => key.runs.iter().map(|r| r.streams as i64).sum(),
        Positions::All => n_tok,
    };
    let ids = if key.embeds {
        gctx.new_tensor(GgmlType::F32, &[c.hidden as i64, n_tok]).set_name("embeds").set_input()
    } else {
        gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("ids").set_input()
    };
    let pos = gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("pos").set_input();
    let out_idx = gctx.new_tensor(GgmlType::I32, &[n_out]).set_name("out_idx").set_input();
    let mut per_run = Vec::with_capacity(2 * key.runs.len());
    for (i, r) in key.runs.iter().enumerate() {
        per_run.push(
            gctx.new_tensor(GgmlType::I64, &[r.tokens as i64, 1, r.streams as i64])
                .set_name(&format!("kv_pos{i}"))
                .set_input(),
        );
        per_run.push(
            gctx.new_tensor(GgmlType::F16, &[r.window as i64, r.tokens as i64, 1, r.streams as i64])
                .set_name(&format!("mask{i}"))
                .set_input(),
        );
    }

    let mut x = if key.embeds { ids } else { gctx.get_rows(weights.get(&c.embed), ids) };
    for l in 0..c.layers.len() {
        let layer = Qwen3Layer::from_fn(|role| weights.get(c.layer_tensor(l, role)));
        x = layer.forward(gctx, &c.dims, x, pos, |q, k, v| attend_runs(gctx, graph, stores, key, &per_run, l, q, k, v));
    }
    let x = gctx.get_rows(x, out_idx);
    let x = rms_norm(gctx, x, weights.get(&c.norm), c.dims.eps);
    let head = weights.get(&c.head);
    let n_rows = (key.rows.end - key.head_from) as i64;
    let head = gctx.view_2d(head, head.ne()[0], n_rows, head.nb()[1], key.head_from as usize * head.nb()[1]);
    let logits = gctx.mul_mat(head, x).set_name("logits").set_output();
    graph.expand(logits);
    let hidden = if key.hidden {
        let h = gctx.cont(x).set_name("hidden").set_output();
        graph.expand(h);
        h
    } else {
        x
    };
    let mut kept = vec![ids, pos, out_idx, logits, hidden];
    kept.extend(per_run);
    kept
}

/// The attention of layer `l` for every run of a step: each run writes its new K/V at its
/// members' positions in their streams, then attends over each member's window. `q`, `k`,
/// `v`: [head_dim, heads, tokens] in run order; returns [heads x head_dim, tokens].
#[allow(clippy::too_many_arguments)]
fn attend_runs<'a>(
    gctx: &'a Context,
    graph: &mut Graph<'a>,
    stores: &[&'a TensorStore],
    key: &StepKey,
    per_run: &[Tensor<'a>],
    l: usize,
    q: Tensor<'a>,
    k: Tensor<'a>,
    v: Tensor<'a>,
) -> Tensor<'a> {
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
            let src = gctx.view_4d(
                new,
                [hd, nkv, t, ns],
                new.nb()[1],
                new.nb()[2],
                t as usize * new.nb()[2],
                start as usize * new.nb()[2],
            );
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
mod tests {
    use super::{head_view_start, DEVICE_VIEW_ALIGN};

    #[test]
    fn a_devices_head_view_starts_at_an_aligned_row_at_or_before_the_first_logit_row() {
        // The CPU views the head at its first row.
        assert_eq!(head_view_start(1023, 68, true), 1023);
        // Q8_0 rows of 64 values (68 bytes): every 64th row is 256-aligned.
        assert_eq!(head_view_start(1023, 68, false), 960);
        // Q8_0 rows of the published widths (4096 values: 4352 bytes) and F32 rows of 64 values
        // are aligned at every row.
        assert_eq!(head_view_start(1023, 4352, false), 1023);
        assert_eq!(head_view_start(1023, 256, false), 1023);
        for (start, bytes) in [(1u32, 68usize), (77, 34 * 3), (500, 4 * 24), (64, 68), (0, 6)] {
            let from = head_view_start(start, bytes, false);
            assert!(from <= start && start - from < DEVICE_VIEW_ALIGN as u32, "{start}, {bytes}: {from}");
            assert_eq!(from as usize * bytes % DEVICE_VIEW_ALIGN, 0, "{start}, {bytes}: {from}");
        }
    }
}
