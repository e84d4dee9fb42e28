//! A checkpoint folder's safetensors (sharded or not), read by the families' converters:
//! every tensor under its name, in its native dtype, straight from the memory map.
use crate::ggml::GgmlType;
use crate::gguf::GgufError;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {message}")]
    Input { path: PathBuf, message: String },
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

pub fn input(path: &Path, message: impl Into<String>) -> ConvertError {
    ConvertError::Input { path: path.to_path_buf(), message: message.into() }
}

/// The safetensors files of a folder, memory-mapped.
pub struct Shards {
    maps: Vec<(PathBuf, Mmap)>,
}

impl Shards {
    pub fn open(dir: &Path) -> Result<Self, ConvertError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| input(dir, e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(input(dir, "no .safetensors file"));
        }
        let mut maps = Vec::new();
        for f in files {
            let file = std::fs::File::open(&f).map_err(|e| input(&f, e.to_string()))?;
            let map = crate::ggml::map_file(&file).map_err(|e| input(&f, e.to_string()))?;
            SafeTensors::deserialize(&map).map_err(|e| input(&f, format!("not a safetensors file: {e}")))?;
            maps.push((f, map));
        }
        Ok(Shards { maps })
    }

    /// Every tensor: name -> (shard index), sorted by name.
    pub fn index(&self) -> Result<BTreeMap<String, usize>, ConvertError> {
        let mut idx = BTreeMap::new();
        for (i, (path, map)) in self.maps.iter().enumerate() {
            let st = SafeTensors::deserialize(map).unwrap();
            for name in st.names() {
                if idx.insert(name.to_string(), i).is_some() {
                    return Err(input(path, format!("tensor '{name}' appears in two shards")));
                }
            }
        }
        Ok(idx)
    }

    /// (GGUF type, ne innermost first, bytes) of a tensor.
    pub fn get(&self, shard: usize, name: &str) -> Result<(GgmlType, Vec<i64>, &[u8]), ConvertError> {
        let (path, map) = &self.maps[shard];
        let st = SafeTensors::deserialize(map).unwrap();
        let t = st.tensor(name).map_err(|e| input(path, format!("tensor '{name}': {e}")))?;
        let ty = match t.dtype() {
            Dtype::BF16 => GgmlType::BF16,
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            d => {
                return Err(input(
                    path,
                    format!("tensor '{name}' has dtype {d:?}; only BF16, F16 and F32 are converted"),
                ))
            }
        };
        let ne: Vec<i64> = t.shape().iter().rev().map(|&d| d as i64).collect();
        let ne = if ne.is_empty() { vec![1] } else { ne };
        Ok((ty, ne, t.data()))
    }

    /// The dtype most of the folder's bytes are in (names the file, as the published ones).
    pub fn native_dtype(&self) -> Result<GgmlType, ConvertError> {
        let mut bytes: BTreeMap<String, (usize, GgmlType)> = BTreeMap::new();
        for (name, shard) in self.index()? {
            let (ty, _, b) = self.get(shard, &name)?;
            bytes.entry(ty.name()).or_insert((0, ty)).0 += b.len();
        }
        Ok(bytes.values().max_by_key(|(n, _)| *n).map(|&(_, t)| t).unwrap_or(GgmlType::F32))
    }

    /// Every tensor, sorted by name: (name, (GGUF type, ne, bytes)).
    pub fn tensors(&self) -> Result<Vec<Tensor<'_>>, ConvertError> {
        self.index()?.into_iter().map(|(name, shard)| Ok((name.clone(), self.get(shard, &name)?))).collect()
    }
}

/// A checkpoint's tensor: its name, then its GGUF type, `ne` and bytes.
pub type Tensor<'a> = (String, (GgmlType, Vec<i64>, &'a [u8]));

/// Writes `tensors` verbatim into a GGUF at `path` after `w`'s metadata.
pub fn write_verbatim(mut w: crate::gguf::GgufWriter, tensors: &[Tensor<'_>], path: &Path) -> Result<(), ConvertError> {
    for (name, (ty, ne, _)) in tensors {
        w.add_tensor(name, *ty, ne);
    }
    let mut data = w.create(path)?;
    for (_, (_, _, bytes)) in tensors {
        data.write(bytes)?;
    }
    Ok(data.finish()?)
}
