//! A named set of tensors with their device memory: model weights, one KV cache set.
use super::{Backend, Buffer, Context, GgmlError, GgmlType, Tensor};
use std::collections::HashMap;

/// Tensors created by name, then allocated together in one backend buffer. The store owns
/// the metadata context and the buffer; [`TensorStore::get`] hands out handles that borrow
/// the store, so none can outlive the memory.
pub struct TensorStore {
    ctx: Context,
    buffer: Option<Buffer>,
    index: HashMap<String, usize>,
    order: Vec<String>,
}

impl TensorStore {
    /// A store with room for `capacity` tensors.
    pub fn new(capacity: usize) -> Result<Self, GgmlError> {
        Ok(TensorStore { ctx: Context::new(capacity, 0)?, buffer: None, index: HashMap::new(), order: Vec::new() })
    }

    /// Declares a tensor (before [`TensorStore::allocate`]).
    pub fn declare(&mut self, name: &str, ty: GgmlType, ne: &[i64]) {
        assert!(self.buffer.is_none(), "declare after allocate");
        assert!(!self.index.contains_key(name), "tensor '{name}' declared twice");
        self.ctx.new_tensor(ty, ne).set_name(name);
        self.index.insert(name.to_string(), self.order.len());
        self.order.push(name.to_string());
    }

    /// Allocates device memory for every declared tensor.
    pub fn allocate(&mut self, backend: &Backend, what: &str, weights: bool) -> Result<(), GgmlError> {
        let buf = Buffer::alloc_ctx_tensors(&self.ctx, backend, what)?;
        if weights {
            buf.mark_weights();
        }
        self.buffer = Some(buf);
        Ok(())
    }

    /// A declared tensor by name.
    pub fn get(&self, name: &str) -> Tensor<'_> {
        assert!(self.index.contains_key(name), "no tensor '{name}' in this store");
        self.ctx.get_tensor(name).unwrap_or_else(|| panic!("tensor '{name}' lost its metadata (name longer than ggml allows?)"))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
    pub fn names(&self) -> &[String] {
        &self.order
    }
    /// Bytes of device memory held.
    pub fn bytes(&self) -> usize {
        self.buffer.as_ref().map(|b| b.size()).unwrap_or(0)
    }
    /// Zeroes the whole buffer.
    pub fn clear(&self) {
        if let Some(b) = &self.buffer {
            b.clear(0);
        }
    }
}
