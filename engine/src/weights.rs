//! Loading a set of GGUF tensors into device memory, shapes checked against the model.
use crate::ggml::{Backend, GgmlError, TensorStore};
use crate::gguf::{GgufError, GgufFile};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Ggml(#[from] GgmlError),
}

/// Declares, allocates and uploads `tensors` (name, expected `ne`) from `f`. The data goes
/// from the file's memory map straight into the backend buffer.
pub fn load_tensors(f: &GgufFile, tensors: &[(String, Vec<i64>)], backend: &Backend, what: &str) -> Result<TensorStore, LoadError> {
    let mut store = TensorStore::new(tensors.len())?;
    for (name, ne) in tensors {
        let info = f.expect_tensor(name, ne)?;
        store.declare(name, info.ty, &info.ne);
    }
    store.allocate(backend, what, true)?;
    for (name, _) in tensors {
        let info = f.require_tensor(name)?;
        store.get(name).write_bytes(0, f.tensor_bytes(info));
    }
    Ok(store)
}
