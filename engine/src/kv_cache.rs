//! KV cache sets: per layer, K and V rows of `n_kv_heads * head_dim` F16 values for every
//! position up to the set's capacity. The AR half appends to a set; the NAR half only reads
//! it. A request holds one set per song (two under guidance) and frees them at its end.
use crate::ggml::{Backend, GgmlError, GgmlType, Tensor, TensorStore};
use crate::model::Yue2Config;

/// Element type of the cache.
pub const KV_TYPE: GgmlType = GgmlType::F16;

/// One sequence's cache.
pub struct KvSet {
    store: TensorStore,
    capacity: usize,
    len: usize,
    layers: usize,
}

impl KvSet {
    /// Allocates a set holding `capacity` positions.
    pub fn new(backend: &Backend, cfg: &Yue2Config, capacity: usize) -> Result<Self, GgmlError> {
        let row = (cfg.num_key_value_heads * cfg.head_dim) as i64;
        let mut store = TensorStore::new(2 * cfg.num_hidden_layers)?;
        for l in 0..cfg.num_hidden_layers {
            store.declare(&format!("k{l}"), KV_TYPE, &[row, capacity as i64]);
            store.declare(&format!("v{l}"), KV_TYPE, &[row, capacity as i64]);
        }
        store.allocate(backend, "KV cache set", false)?;
        store.clear();
        Ok(KvSet { store, capacity, len: 0, layers: cfg.num_hidden_layers })
    }

    /// Bytes a set of `capacity` positions takes.
    pub fn bytes_for(cfg: &Yue2Config, capacity: usize) -> usize {
        2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * capacity * KV_TYPE.type_size()
    }

    /// The tensors and memory of the set (graph builders reach the layers through
    /// [`KvSet::k_of`] and [`KvSet::v_of`]).
    pub fn store(&self) -> &TensorStore {
        &self.store
    }
    /// Layer `layer`'s K rows, `[n_kv_heads * head_dim, capacity]`.
    pub fn k(&self, layer: usize) -> Tensor<'_> {
        Self::k_of(&self.store, layer)
    }
    /// Layer `layer`'s V rows, same shape as K.
    pub fn v(&self, layer: usize) -> Tensor<'_> {
        Self::v_of(&self.store, layer)
    }
    /// Layer `layer`'s K rows in a set's store.
    pub fn k_of(store: &TensorStore, layer: usize) -> Tensor<'_> {
        store.at(2 * layer)
    }
    /// Layer `layer`'s V rows in a set's store.
    pub fn v_of(store: &TensorStore, layer: usize) -> Tensor<'_> {
        store.at(2 * layer + 1)
    }
    /// Positions written so far.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn layers(&self) -> usize {
        self.layers
    }
    pub fn bytes(&self) -> usize {
        self.store.bytes()
    }
    /// Records that `n` more positions were written (after a successful compute).
    pub(crate) fn advance(&mut self, n: usize) {
        assert!(self.len + n <= self.capacity, "KV set overflow: {} + {n} > {}", self.len, self.capacity);
        self.len += n;
    }
    /// Treats the first `n` positions as written, whatever they hold (zeros after
    /// allocation). For benchmarks: a decode step's cost depends on the cache length, not on
    /// its contents, and filling 8192 positions of a 3B model by prefill takes minutes on a CPU.
    pub fn assume_filled(&mut self, n: usize) {
        assert!(n <= self.capacity, "KV set of {} positions cannot hold {n}", self.capacity);
        self.len = n;
    }
    /// Forgets everything written (the memory is reused).
    pub fn reset(&mut self) {
        self.len = 0;
    }
    /// Keeps only the first `n` positions.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }
}
