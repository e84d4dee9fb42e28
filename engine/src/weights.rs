//! Loading a set of GGUF tensors into device memory, shapes checked against the model.
use crate::ggml::{Backend, GgmlError, GgmlType, TensorStore};
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
pub fn load_tensors(
    f: &GgufFile,
    tensors: &[(String, Vec<i64>)],
    backend: &Backend,
    what: &str,
) -> Result<TensorStore, LoadError> {
    load_tensors_upcast(f, tensors, backend, what, |_, _| false)
}

/// [`load_tensors`], with the tensors `upcast(name, ne)` picks stored as F32 on the device
/// (norms and tables a graph adds or multiplies element-wise: ggml's element-wise ops do
/// not take BF16 or quantized operands, and a native BF16 file keeps its norms in BF16).
pub fn load_tensors_upcast(
    f: &GgufFile,
    tensors: &[(String, Vec<i64>)],
    backend: &Backend,
    what: &str,
    upcast: impl Fn(&str, &[i64]) -> bool,
) -> Result<TensorStore, LoadError> {
    load_tensors_merged(f, tensors, backend, what, upcast, &Default::default())
}

/// [`load_tensors_upcast`] with adapter terms merged into the tensors they name, between
/// reading the file and placing the weights on the device ([`crate::nn::lora`]: the
/// base dequantized, the terms summed in one graph, the sum quantized back to the file's
/// type once).
pub fn load_tensors_merged(
    f: &GgufFile,
    tensors: &[(String, Vec<i64>)],
    backend: &Backend,
    what: &str,
    upcast: impl Fn(&str, &[i64]) -> bool,
    terms: &std::collections::HashMap<String, Vec<crate::nn::lora::Term>>,
) -> Result<TensorStore, LoadError> {
    if let Some(name) = terms.keys().find(|n| !tensors.iter().any(|(t, _)| t == *n)) {
        return Err(GgufError::Corrupt {
            path: f.path().to_path_buf(),
            what: format!("an adapter term for '{name}', not a tensor of the {what}"),
        }
        .into());
    }
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut merger = crate::nn::lora::Merger::new(backend, threads);
    let mut store = TensorStore::new(tensors.len())?;
    let mut to_f32 = Vec::with_capacity(tensors.len());
    for (name, ne) in tensors {
        let info = f.expect_tensor(name, ne)?;
        let up = info.ty != GgmlType::F32 && upcast(name, &info.ne);
        to_f32.push(up);
        store.declare(name, if up { GgmlType::F32 } else { info.ty }, &info.ne);
    }
    store.allocate(backend, what, true)?;
    for ((name, _), up) in tensors.iter().zip(to_f32) {
        let info = f.require_tensor(name)?;
        let merged;
        let mut bytes = f.tensor_bytes(info);
        if let Some(t) = terms.get(name) {
            merged = merger.merge(info.ty, &info.ne, bytes, t).map_err(|e| GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: format!("merging the adapters into '{name}': {e}"),
            })?;
            bytes = &merged;
        }
        if up {
            let v = crate::ggml::decode_to_f32(info.ty, bytes).ok_or_else(|| GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: format!("tensor '{name}' of type {} has no f32 form", info.ty.name()),
            })?;
            store.get(name).write_f32(&v);
        } else {
            store.get(name).write_bytes(0, bytes);
        }
    }
    Ok(store)
}
