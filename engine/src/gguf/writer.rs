//! Writing GGUF files: header, metadata and tensor table first, then the data streamed
//! tensor by tensor, so a multi-gigabyte model never sits whole in memory.
use super::{GgufError, Value, DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION};
use crate::ggml::GgmlType;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Collects metadata and the tensor table of a file to write.
#[derive(Default)]
pub struct GgufWriter {
    kv: Vec<(String, Value)>,
    /// Element type of array keys set through a typed setter: an empty array still
    /// declares it (readers such as llama.cpp check the type of an empty merges list).
    array_types: std::collections::HashMap<String, u32>,
    tensors: Vec<(String, GgmlType, Vec<i64>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets a metadata key (replacing an earlier value of the same key).
    pub fn set(&mut self, key: &str, v: Value) -> &mut Self {
        if let Some(e) = self.kv.iter_mut().find(|(k, _)| k == key) {
            e.1 = v;
        } else {
            self.kv.push((key.to_string(), v));
        }
        self
    }
    pub fn set_str(&mut self, key: &str, v: &str) -> &mut Self {
        self.set(key, Value::String(v.to_string()))
    }
    pub fn set_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.set(key, Value::U32(v))
    }
    pub fn set_f32(&mut self, key: &str, v: f32) -> &mut Self {
        self.set(key, Value::F32(v))
    }
    pub fn set_strs<S: AsRef<str>>(&mut self, key: &str, v: &[S]) -> &mut Self {
        self.array_types.insert(key.to_string(), Value::String(String::new()).type_code());
        self.set(key, Value::Array(v.iter().map(|s| Value::String(s.as_ref().to_string())).collect()))
    }
    pub fn set_i32s(&mut self, key: &str, v: &[i32]) -> &mut Self {
        self.array_types.insert(key.to_string(), Value::I32(0).type_code());
        self.set(key, Value::Array(v.iter().map(|&x| Value::I32(x)).collect()))
    }
    /// Declares a tensor (`ne` innermost first). Data is written later in the same order.
    pub fn add_tensor(&mut self, name: &str, ty: GgmlType, ne: &[i64]) -> &mut Self {
        self.tensors.push((name.to_string(), ty, ne.to_vec()));
        self
    }
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Writes the header and returns the writer of the tensor data. The file is written
    /// aside (`.NAME.partial-PID` beside it) and takes its name at [`TensorDataWriter::finish`]:
    /// a write cut short (a full disk, a kill) leaves no truncated model under the name.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<TensorDataWriter, GgufError> {
        let path = path.as_ref().to_path_buf();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
        let file = std::fs::File::create(&tmp).map_err(|source| GgufError::Io { path: tmp.clone(), error: source })?;
        let w = BufWriter::with_capacity(1 << 20, file);
        let mut head = Vec::new();
        head.extend_from_slice(GGUF_MAGIC);
        head.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut head, k);
            head.extend_from_slice(&v.type_code().to_le_bytes());
            match (v, self.array_types.get(k)) {
                (Value::Array(a), Some(elem)) if a.is_empty() => {
                    head.extend_from_slice(&elem.to_le_bytes());
                    head.extend_from_slice(&0u64.to_le_bytes());
                }
                _ => put_value(&mut head, v),
            }
        }
        let align = DEFAULT_ALIGNMENT;
        let mut offset = 0u64;
        let mut expected = Vec::with_capacity(self.tensors.len());
        for (name, ty, ne) in &self.tensors {
            put_str(&mut head, name);
            head.extend_from_slice(&(ne.len() as u32).to_le_bytes());
            for &n in ne {
                head.extend_from_slice(&(n as u64).to_le_bytes());
            }
            head.extend_from_slice(&ty.0.to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            let nel: i64 = ne.iter().product();
            let nbytes = (nel as usize / ty.block_size()) * ty.type_size();
            expected.push((name.clone(), nbytes));
            offset += (nbytes as u64).div_ceil(align) * align;
        }
        let pad = (head.len() as u64).div_ceil(align) * align - head.len() as u64;
        head.resize(head.len() + pad as usize, 0);
        // Made before the first write: dropped on an error, it removes the partial file.
        let mut out = TensorDataWriter { path, tmp, w: Some(w), expected, next: 0, align };
        let path = out.path.clone();
        out.w.as_mut().expect("open").write_all(&head).map_err(|source| GgufError::Io { path, error: source })?;
        Ok(out)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => {
            let elem = a.first().map(|e| e.type_code()).unwrap_or(4);
            assert!(a.iter().all(|e| e.type_code() == elem), "GGUF arrays must be homogeneous");
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            for e in a {
                put_value(out, e);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// Removes the partial files (`.NAME.partial-PID`) that writers killed mid-write left in
/// `dir`; how many went. For a folder only yued writes models into (the daemon's demo models).
pub fn remove_partials(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with('.') && name.contains(".partial-")
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Streams tensor data in declaration order, checking each size.
pub struct TensorDataWriter {
    path: PathBuf,
    /// The file being written, renamed to `path` at the end.
    tmp: PathBuf,
    /// `None` once finished.
    w: Option<BufWriter<std::fs::File>>,
    expected: Vec<(String, usize)>,
    next: usize,
    align: u64,
}

impl TensorDataWriter {
    /// Writes the data of the next declared tensor.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), GgufError> {
        let Some((name, size)) = self.expected.get(self.next) else {
            return Err(GgufError::Corrupt {
                path: self.path.clone(),
                what: "more tensor data than declared tensors".into(),
            });
        };
        if bytes.len() != *size {
            return Err(GgufError::Corrupt {
                path: self.path.clone(),
                what: format!("tensor '{name}': {} bytes given, {size} declared", bytes.len()),
            });
        }
        let io = |source| GgufError::Io { path: self.path.clone(), error: source };
        let w = self.w.as_mut().expect("open until finished");
        w.write_all(bytes).map_err(io)?;
        let pad = (bytes.len() as u64).div_ceil(self.align) * self.align - bytes.len() as u64;
        w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        self.next += 1;
        Ok(())
    }
    /// Flushes and closes; fails if a declared tensor was not written.
    pub fn finish(mut self) -> Result<(), GgufError> {
        if let Some((name, _)) = self.expected.get(self.next) {
            return Err(GgufError::Corrupt {
                path: self.path.clone(),
                what: format!("tensor '{name}' declared but never written"),
            });
        }
        let io = |source| GgufError::Io { path: self.tmp.clone(), error: source };
        let w = self.w.as_mut().expect("open until finished");
        w.flush().map_err(io)?;
        w.get_ref().sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path)
            .map_err(|source| GgufError::Io { path: self.path.clone(), error: source })?;
        // Named: nothing for the drop to remove.
        self.w = None;
        Ok(())
    }
}

impl Drop for TensorDataWriter {
    /// A writer dropped before its file took its name (an error, a failed finish, a panic)
    /// takes its partial file with it.
    fn drop(&mut self) {
        if self.w.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
