//! GGUF files: a reader over a memory map and a streaming writer.
//!
//! The reader parses the header, metadata and tensor table in Rust, checking every length
//! and offset against the file size, so a truncated or corrupted file is an error that names
//! the file and the key or tensor at fault instead of a crash. Tensor data is never copied
//! into Rust vectors: [`GgufFile::tensor_bytes`] hands out slices of the map, which the
//! loader uploads straight into backend buffers.

mod reader;
mod writer;

pub use reader::{GgufFile, TensorInfo};
pub use writer::{remove_partials, GgufWriter, TensorDataWriter};

use std::path::PathBuf;

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
pub const GGUF_VERSION: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// GGUF type code of the value.
    pub fn type_code(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }
    pub fn type_name(&self) -> &'static str {
        ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"]
            [self.type_code() as usize]
    }
    /// Any integer value as i64 (u64 beyond i64 range is None).
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Value::U8(v) => v as i64,
            Value::I8(v) => v as i64,
            Value::U16(v) => v as i64,
            Value::I16(v) => v as i64,
            Value::U32(v) => v as i64,
            Value::I32(v) => v as i64,
            Value::U64(v) => i64::try_from(v).ok()?,
            Value::I64(v) => v,
            _ => return None,
        })
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    /// Short human rendering for `gguf inspect` (long arrays and strings elided).
    pub fn summary(&self) -> String {
        match self {
            Value::String(s) if s.chars().count() > 80 => {
                format!("{:?}... ({} bytes)", s.chars().take(60).collect::<String>(), s.len())
            }
            Value::String(s) => format!("{s:?}"),
            Value::Array(a) if a.len() > 8 => {
                let head: Vec<String> = a.iter().take(4).map(|v| v.summary()).collect();
                format!(
                    "[{}, ...] ({} x {})",
                    head.join(", "),
                    a.len(),
                    a.first().map(|v| v.type_name()).unwrap_or("?")
                )
            }
            Value::Array(a) => format!("[{}]", a.iter().map(|v| v.summary()).collect::<Vec<_>>().join(", ")),
            Value::Bool(b) => b.to_string(),
            Value::F32(v) => v.to_string(),
            Value::F64(v) => v.to_string(),
            other => other.as_i64().map(|v| v.to_string()).unwrap_or_default(),
        }
    }
}

/// What went wrong with which GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// (Not a `source`: the message carries it, and a chain would print it twice.)
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: not a GGUF file (bad magic)")]
    BadMagic { path: PathBuf },
    #[error("{path}: unsupported GGUF version {version}")]
    Version { path: PathBuf, version: u32 },
    #[error("{path}: truncated or corrupt while reading {what}")]
    Truncated { path: PathBuf, what: String },
    #[error("{path}: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error("{path}: missing metadata key '{key}'")]
    MissingKey { path: PathBuf, key: String },
    #[error("{path}: metadata key '{key}' has type {found}, expected {expected}")]
    KeyType { path: PathBuf, key: String, found: String, expected: String },
    #[error("{path}: missing tensor '{name}'")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor '{name}' has shape {found:?}, expected {expected:?}")]
    TensorShape { path: PathBuf, name: String, found: Vec<i64>, expected: Vec<i64> },
    #[error("{path}: tensor '{name}' has type {found}, expected {expected}")]
    TensorType { path: PathBuf, name: String, found: String, expected: String },
}

#[cfg(test)]
mod tests;
