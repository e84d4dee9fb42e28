//! A named set of tensors with their device memory: model weights, one KV cache set.
use super::{Backend, Buffer, Context, GgmlError, GgmlType, Tensor};
use ggml_sys as sys;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of [`TensorStore::id`]s, never reused in a process: a kept graph names the stores
/// it points into by id (see `GraphCache`).
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// Tensors created by name, then allocated together in one backend buffer. The store owns
/// the metadata context and the buffer; [`TensorStore::get`] hands out handles that borrow
/// the store, so none can outlive the memory.
///
/// The buffer itself is not reachable outside the ggml layer, so no code can drop it under
/// tensors still in use:
///
/// ```compile_fail
/// use yued_engine::ggml::{Backend, Context, GgmlType};
/// let backend = Backend::cpu(1).unwrap();
/// let ctx = Context::new(1, 0).unwrap();
/// let t = ctx.new_tensor(GgmlType::F32, &[4]);
/// drop(yued_engine::ggml::Buffer::alloc_ctx_tensors(&ctx, &backend, "w")); // private
/// t.write_f32(&[0.0; 4]);
/// ```
pub struct TensorStore {
    id: u64,
    ctx: Context,
    buffer: Option<Buffer>,
    /// Name -> position in `order`/`tensors`.
    index: HashMap<String, usize>,
    order: Vec<String>,
    /// The tensor structs, in declaration order. They live in `ctx` (heap memory of ggml
    /// that does not move with the store), so handing them out by pointer is a lookup,
    /// not ggml's linear scan of the context by name — graph builders call `get` per layer.
    tensors: Vec<NonNull<sys::ggml_tensor>>,
}

// SAFETY: the pointers point into `ctx`, which the store owns and which is Send; the store is
// used from one thread at a time (no Sync), as before it held them.
unsafe impl Send for TensorStore {}

impl TensorStore {
    /// A store with room for `capacity` tensors.
    pub fn new(capacity: usize) -> Result<Self, GgmlError> {
        Ok(TensorStore {
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            ctx: Context::new(capacity, 0)?,
            buffer: None,
            index: HashMap::new(),
            order: Vec::new(),
            tensors: Vec::new(),
        })
    }

    /// Declares a tensor (before [`TensorStore::allocate`]).
    pub fn declare(&mut self, name: &str, ty: GgmlType, ne: &[i64]) {
        assert!(self.buffer.is_none(), "declare after allocate");
        assert!(!self.index.contains_key(name), "tensor '{name}' declared twice");
        let t = self.ctx.new_tensor(ty, ne).set_name(name);
        self.tensors.push(NonNull::new(t.raw()).expect("declared tensor is NULL"));
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
        let i = *self.index.get(name).unwrap_or_else(|| panic!("no tensor '{name}' in this store"));
        self.at(i)
    }

    /// Unique in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The `i`-th declared tensor.
    pub fn at(&self, i: usize) -> Tensor<'_> {
        Tensor::from_raw(self.tensors[i].as_ptr())
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
