//! Parsing a GGUF file over a read-only memory map.
use super::{GgufError, Value, DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::ggml::GgmlType;
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One entry of the tensor table.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// Elements per dimension, innermost first (the numpy shape reversed).
    pub ne: Vec<i64>,
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    pub nbytes: usize,
}

impl TensorInfo {
    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }
    /// `ne` padded to 4 dimensions with ones.
    pub fn ne4(&self) -> [i64; 4] {
        let mut out = [1i64; 4];
        out[..self.ne.len()].copy_from_slice(&self.ne);
        out
    }
}

/// An open GGUF file: metadata, tensor table and a map of the whole file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    pub version: u32,
    pub alignment: u64,
    metadata: BTreeMap<String, Value>,
    /// Metadata keys in file order (the map above is sorted).
    key_order: Vec<String>,
    tensors: Vec<TensorInfo>,
    by_name: BTreeMap<String, usize>,
    data_offset: usize,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if self.buf.len().saturating_sub(self.pos) < n {
            return Err(GgufError::Truncated { path: self.path.to_path_buf(), what: what() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let n = self.u64(what)?;
        if n > self.remaining() as u64 {
            return Err(GgufError::Truncated { path: self.path.to_path_buf(), what: what() });
        }
        let b = self.take(n as usize, what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| GgufError::Corrupt { path: self.path.to_path_buf(), what: format!("{} is not UTF-8", what()) })
    }
    fn value(&mut self, ty: u32, what: &dyn Fn() -> String, depth: u32) -> Result<Value, GgufError> {
        let corrupt = |msg: String| GgufError::Corrupt { path: self.path.to_path_buf(), what: msg };
        Ok(match ty {
            0 => Value::U8(self.take(1, what)?[0]),
            1 => Value::I8(self.take(1, what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap())),
            3 => Value::I16(i16::from_le_bytes(self.take(2, what)?.try_into().unwrap())),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(self.u32(what)? as i32),
            6 => Value::F32(f32::from_bits(self.u32(what)?)),
            7 => match self.take(1, what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(corrupt(format!("{}: bool byte {b}", what()))),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth > 0 {
                    return Err(corrupt(format!("{}: nested arrays are not supported", what())));
                }
                let elem = self.u32(what)?;
                let n = self.u64(what)?;
                let min_size = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    _ => return Err(corrupt(format!("{}: unknown array element type {elem}", what()))),
                };
                if n.saturating_mul(min_size) > self.remaining() as u64 {
                    return Err(GgufError::Truncated { path: self.path.to_path_buf(), what: what() });
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(self.value(elem, what, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(self.u64(what)? as i64),
            12 => Value::F64(f64::from_bits(self.u64(what)?)),
            t => return Err(corrupt(format!("{}: unknown value type {t}", what()))),
        })
    }
}

impl GgufFile {
    /// Opens and validates a GGUF file (header, metadata, tensor table, data bounds).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io { path: path.clone(), error: source };
        let file = std::fs::File::open(&path).map_err(io)?;
        if file.metadata().map_err(io)?.is_dir() {
            return Err(io(std::io::Error::other("a directory, not a GGUF file")));
        }
        let map = crate::ggml::map_file(&file).map_err(io)?;
        Self::parse(path, map)
    }

    fn parse(path: PathBuf, map: Mmap) -> Result<Self, GgufError> {
        let mut c = Cursor { buf: &map, pos: 0, path: &path };
        let magic = c.take(4, &|| "the magic".into()).map_err(|_| GgufError::BadMagic { path: path.clone() })?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { path });
        }
        let version = c.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version { path, version });
        }
        let n_tensors = c.u64(&|| "the tensor count".into())?;
        let n_kv = c.u64(&|| "the metadata count".into())?;
        // Each key needs at least 12 bytes, each tensor entry at least 24.
        if n_kv.saturating_mul(12) > c.remaining() as u64 || n_tensors.saturating_mul(24) > c.remaining() as u64 {
            return Err(GgufError::Truncated {
                path,
                what: format!("a header announcing {n_kv} keys and {n_tensors} tensors"),
            });
        }
        let mut metadata = BTreeMap::new();
        let mut key_order = Vec::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = c.string(&|| format!("metadata key #{i}"))?;
            let ty = c.u32(&|| format!("the type of metadata key '{key}'"))?;
            let val = c.value(ty, &|| format!("metadata key '{key}'"), 0)?;
            if metadata.insert(key.clone(), val).is_some() {
                return Err(GgufError::Corrupt { path, what: format!("duplicate metadata key '{key}'") });
            }
            key_order.push(key);
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_i64() {
                Some(a) if a > 0 && (a as u64).is_power_of_two() => a as u64,
                _ => {
                    return Err(GgufError::Corrupt {
                        path,
                        what: format!("general.alignment {} is not a power of two", v.summary()),
                    })
                }
            },
        };
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut by_name = BTreeMap::new();
        for i in 0..n_tensors {
            let t = tensor_info(&mut c, i, alignment)?;
            let name = t.name.clone();
            if by_name.insert(name.clone(), tensors.len()).is_some() {
                return Err(GgufError::Corrupt { path, what: format!("duplicate tensor '{name}'") });
            }
            tensors.push(t);
        }
        let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
        let data_len = (map.len() as u64).saturating_sub(data_offset);
        for t in &tensors {
            if t.offset.checked_add(t.nbytes as u64).is_none_or(|end| end > data_len) {
                return Err(GgufError::Truncated {
                    path,
                    what: format!("the data of tensor '{}' ({} bytes at offset {})", t.name, t.nbytes, t.offset),
                });
            }
        }
        Ok(GgufFile {
            path,
            map,
            version,
            alignment,
            metadata,
            key_order,
            tensors,
            by_name,
            data_offset: data_offset as usize,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn file_size(&self) -> usize {
        self.map.len()
    }
    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }
    /// Metadata in file order.
    pub fn metadata_ordered(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.key_order.iter().map(|k| (k.as_str(), &self.metadata[k]))
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn key_err(&self, key: &str, found: &Value, expected: &str) -> GgufError {
        GgufError::KeyType {
            path: self.path.clone(),
            key: key.into(),
            found: found.type_name().into(),
            expected: expected.into(),
        }
    }
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.metadata.get(key).ok_or_else(|| GgufError::MissingKey { path: self.path.clone(), key: key.into() })
    }
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| self.key_err(key, v, "string"))
    }
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        let v = self.require(key)?;
        v.as_i64().ok_or_else(|| self.key_err(key, v, "integer"))
    }
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| self.key_err(key, v, "number"))
    }
    /// An array of strings (token lists, merges).
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let v = self.require(key)?;
        let a = v.as_array().ok_or_else(|| self.key_err(key, v, "array of strings"))?;
        a.iter().map(|e| e.as_str().ok_or_else(|| self.key_err(key, e, "array of strings"))).collect()
    }
    /// An array of integers.
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        let v = self.require(key)?;
        let a = v.as_array().ok_or_else(|| self.key_err(key, v, "array of integers"))?;
        a.iter().map(|e| e.as_i64().ok_or_else(|| self.key_err(key, e, "array of integers"))).collect()
    }

    /// Checks `general.architecture`.
    pub fn expect_arch(&self, arch: &str) -> Result<(), GgufError> {
        let got = self.get_str("general.architecture")?;
        if got != arch {
            return Err(GgufError::Corrupt {
                path: self.path.clone(),
                what: format!("general.architecture is '{got}', expected '{arch}'"),
            });
        }
        Ok(())
    }

    /// The tensor's info, or an error naming it.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name).ok_or_else(|| GgufError::MissingTensor { path: self.path.clone(), name: name.into() })
    }
    /// The tensor's info after checking its shape (`ne`, innermost first).
    pub fn expect_tensor(&self, name: &str, ne: &[i64]) -> Result<&TensorInfo, GgufError> {
        let t = self.require_tensor(name)?;
        if t.ne != ne {
            return Err(GgufError::TensorShape {
                path: self.path.clone(),
                name: name.into(),
                found: t.ne.clone(),
                expected: ne.to_vec(),
            });
        }
        Ok(t)
    }

    /// The raw bytes of a tensor, borrowed from the map.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        let start = self.data_offset + t.offset as usize;
        &self.map[start..start + t.nbytes]
    }
    /// A tensor's values as f32 (dequantizing), for small tensors and tests.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let t = self.require_tensor(name)?;
        crate::ggml::decode_to_f32(t.ty, self.tensor_bytes(t)).ok_or_else(|| GgufError::TensorType {
            path: self.path.clone(),
            name: name.into(),
            found: t.ty.name(),
            expected: "a float or quantized type".into(),
        })
    }
}

/// Tensor entry #`i` of the header: its name, shape, type and offset, checked (a known
/// type, whole blocks, an aligned offset, no overflow).
fn tensor_info(c: &mut Cursor<'_>, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let name = c.string(&|| format!("the name of tensor #{i}"))?;
    let what = |s: &str| format!("{s} of tensor '{name}'");
    let n_dims = c.u32(&|| what("the rank"))?;
    if !(1..=4).contains(&n_dims) {
        return Err(GgufError::Corrupt {
            path: c.path.to_path_buf(),
            what: format!("tensor '{name}' has rank {n_dims}"),
        });
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let n = c.u64(&|| what("the shape"))?;
        if n > i64::MAX as u64 / 2 {
            return Err(GgufError::Corrupt {
                path: c.path.to_path_buf(),
                what: format!("tensor '{name}' has dimension {n}"),
            });
        }
        ne.push(n as i64);
    }
    let ty = GgmlType(c.u32(&|| what("the type"))?);
    if !ty.is_valid() {
        return Err(GgufError::Corrupt {
            path: c.path.to_path_buf(),
            what: format!("tensor '{name}' has unknown type id {}", ty.0),
        });
    }
    let offset = c.u64(&|| what("the offset"))?;
    let nel = ne.iter().try_fold(1i64, |a, &n| a.checked_mul(n));
    let Some(nel) = nel else {
        return Err(GgufError::Corrupt {
            path: c.path.to_path_buf(),
            what: format!("tensor '{name}' shape {ne:?} overflows"),
        });
    };
    if ne[0] % ty.block_size() as i64 != 0 {
        return Err(GgufError::Corrupt {
            path: c.path.to_path_buf(),
            what: format!("tensor '{name}' rows of {} are not whole {} blocks", ne[0], ty.name()),
        });
    }
    let nbytes = (nel as u128 / ty.block_size() as u128) * ty.type_size() as u128;
    if offset % alignment != 0 {
        return Err(GgufError::Corrupt {
            path: c.path.to_path_buf(),
            what: format!("tensor '{name}' offset {offset} is not {alignment}-aligned"),
        });
    }
    Ok(TensorInfo { name, ne, ty, offset, nbytes: nbytes.min(usize::MAX as u128) as usize })
}
