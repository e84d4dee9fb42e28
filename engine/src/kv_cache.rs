//! KV cache sets: per layer, K and V of `head_dim` F16 values for every KV head and every
//! position up to the set's capacity, for one or more sequences (streams). The AR half
//! appends to a set; the NAR half only reads it. A request holds one set per song (one set
//! of two streams per song under guidance while the codes are decoded) and frees them at
//! its end.
//!
//! Layout `[head_dim, capacity, n_kv_heads, streams]`: one head's positions are contiguous.
//! A decode step's attention sweeps each head's keys and values in order, so it streams
//! them from memory; with llama.cpp's position-major rows (`[head_dim * n_kv_heads,
//! capacity]`) the same sweep reads 256 bytes out of every 2 KB and ran at a tenth of the
//! read bandwidth at 8192 cached positions.
//!
//! Why streams: the sequences of a batched decode step (the guidance pair, the songs of
//! `lm_batch_size`) attend in one attention node when their caches are the streams of one
//! tensor, instead of one node per sequence; at small sizes the per-node thread barriers
//! are the step.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};

/// The shape of a model's cache: what a set needs to know of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvDims {
    pub layers: usize,
    pub head_dim: usize,
    pub kv_heads: usize,
}

/// Element type of the cache.
pub const KV_TYPE: GgmlType = GgmlType::F16;

/// The caches of one or more sequences (streams) of equal capacity.
pub struct KvSet {
    store: TensorStore,
    capacity: usize,
    /// Positions written so far, per stream.
    lens: Vec<usize>,
    layers: usize,
}

impl KvSet {
    /// Allocates a single-sequence set holding `capacity` positions.
    pub fn new(backend: &Backend, dims: KvDims, capacity: usize) -> Result<Self, GgmlError> {
        Self::with_streams(backend, dims, capacity, 1)
    }

    /// Allocates a set of `streams` sequences holding `capacity` positions each.
    pub fn with_streams(backend: &Backend, dims: KvDims, capacity: usize, streams: usize) -> Result<Self, GgmlError> {
        Self::alloc(backend, dims.layers, dims.head_dim, dims.kv_heads, capacity, streams, KV_TYPE)
    }

    /// A set of `streams` sequences whose entries are `ty` (F32: exact, twice the memory;
    /// for precision checks against an f32 reference).
    pub fn with_type(
        backend: &Backend,
        dims: KvDims,
        capacity: usize,
        streams: usize,
        ty: GgmlType,
    ) -> Result<Self, GgmlError> {
        Self::alloc(backend, dims.layers, dims.head_dim, dims.kv_heads, capacity, streams, ty)
    }

    fn alloc(
        backend: &Backend,
        layers: usize,
        head_dim: usize,
        kv_heads: usize,
        capacity: usize,
        streams: usize,
        ty: GgmlType,
    ) -> Result<Self, GgmlError> {
        assert!(streams >= 1, "a KV set holds at least one stream");
        let shape = [head_dim as i64, capacity as i64, kv_heads as i64, streams as i64];
        let mut store = TensorStore::new(2 * layers)?;
        for l in 0..layers {
            store.declare(&format!("k{l}"), ty, &shape);
            store.declare(&format!("v{l}"), ty, &shape);
        }
        store.allocate(backend, "KV cache set", false)?;
        store.clear();
        Ok(KvSet { store, capacity, lens: vec![0; streams], layers })
    }

    /// Bytes one stream of `capacity` positions takes.
    pub fn bytes_for(dims: KvDims, capacity: usize) -> usize {
        2 * dims.layers * dims.kv_heads * dims.head_dim * capacity * KV_TYPE.type_size()
    }

    /// The tensors and memory of the set (graph builders reach the layers through
    /// [`KvSet::k_of`] and [`KvSet::v_of`]).
    pub fn store(&self) -> &TensorStore {
        &self.store
    }
    /// Layer `layer`'s K, `[head_dim, capacity, n_kv_heads, streams]`.
    pub fn k(&self, layer: usize) -> Tensor<'_> {
        Self::k_of(&self.store, layer)
    }
    /// Layer `layer`'s V, same shape as K.
    pub fn v(&self, layer: usize) -> Tensor<'_> {
        Self::v_of(&self.store, layer)
    }
    /// Layer `layer`'s K in a set's store.
    pub fn k_of(store: &TensorStore, layer: usize) -> Tensor<'_> {
        store.at(2 * layer)
    }
    /// Layer `layer`'s V in a set's store.
    pub fn v_of(store: &TensorStore, layer: usize) -> Tensor<'_> {
        store.at(2 * layer + 1)
    }
    /// Sequences the set holds.
    pub fn streams(&self) -> usize {
        self.lens.len()
    }
    /// Positions written so far in stream 0 (a single-sequence set's length).
    pub fn len(&self) -> usize {
        self.lens[0]
    }
    /// Positions written so far in `stream`.
    pub fn stream_len(&self, stream: usize) -> usize {
        self.lens[stream]
    }
    pub fn is_empty(&self) -> bool {
        self.lens.iter().all(|&n| n == 0)
    }
    /// Positions each stream can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn layers(&self) -> usize {
        self.layers
    }
    pub fn bytes(&self) -> usize {
        self.store.bytes()
    }
    /// Records that `n` more positions were written to `stream` (after a successful compute).
    pub(crate) fn advance(&mut self, stream: usize, n: usize) {
        let len = &mut self.lens[stream];
        assert!(*len + n <= self.capacity, "KV set overflow: {} + {n} > {}", *len, self.capacity);
        *len += n;
    }
    /// Treats the first `n` positions of every stream as written, whatever they hold (zeros
    /// after allocation). For benchmarks: a decode step's cost depends on the cache length,
    /// not on its contents, and filling 8192 positions of a 3B model by prefill takes
    /// minutes on a CPU.
    pub fn assume_filled(&mut self, n: usize) {
        assert!(n <= self.capacity, "KV set of {} positions cannot hold {n}", self.capacity);
        self.lens.fill(n);
    }
    /// Forgets everything written (the memory is reused).
    pub fn reset(&mut self) {
        self.lens.fill(0);
    }

    /// A single-sequence set of `capacity` positions holding a copy of `stream`'s
    /// positions: how a song keeps its own cache once the batch it was decoded in ends.
    /// One graph of copies on the sets' backend (no trip through the host on a GPU).
    pub fn copy_stream(&self, backend: &Backend, stream: usize, capacity: usize) -> Result<KvSet, GgmlError> {
        let len = self.lens[stream];
        assert!(len <= capacity, "a copy of {len} positions into a set of {capacity}");
        let k = self.k(0);
        let mut out = KvSet::alloc(backend, self.layers, k.ne()[0] as usize, k.ne()[2] as usize, capacity, 1, k.ty())?;
        if len > 0 {
            // Each of the 2 x layers copies is three nodes (the two views and the copy).
            let nodes = 3 * 2 * self.layers;
            let ctx = Context::for_graph(nodes)?;
            let mut g = ctx.new_graph("KV stream copy", nodes);
            for l in 0..self.layers {
                for (src, dst) in [(self.k(l), out.k(l)), (self.v(l), out.v(l))] {
                    let (hd, heads) = (src.ne()[0], src.ne()[2]);
                    let from = ctx.view_3d(src, hd, len as i64, heads, src.nb()[1], src.nb()[2], stream * src.nb()[3]);
                    let to = ctx.view_3d(dst, hd, len as i64, heads, dst.nb()[1], dst.nb()[2], 0);
                    g.expand(ctx.cpy(from, to));
                }
            }
            Allocator::new(backend).alloc_graph(&g)?;
            backend.compute(&g)?;
        }
        out.lens[0] = len;
        Ok(out)
    }

    /// Stream 0's written K of `layer` as F32, position-major (`[len, n_kv_heads,
    /// head_dim]`, the order the projections produce): for tests and inspection.
    pub fn read_k(&self, layer: usize) -> Vec<f32> {
        let k = self.k(layer);
        let (hd, heads) = (k.ne()[0] as usize, k.ne()[2] as usize);
        let all = k.read_as_f32(); // [hd, capacity, heads, streams]
        let mut out = Vec::with_capacity(self.len() * heads * hd);
        for p in 0..self.len() {
            for h in 0..heads {
                let at = (h * self.capacity + p) * hd;
                out.extend_from_slice(&all[at..at + hd]);
            }
        }
        out
    }
}
