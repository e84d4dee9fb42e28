//! Tensor element types, as ggml numbers them (the same ids GGUF stores).
use ggml_sys as sys;
use std::ffi::CStr;

/// A ggml tensor type id. Only ids ggml still implements are valid (see [`GgmlType::is_valid`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

impl GgmlType {
    pub const F32: GgmlType = GgmlType(sys::GGML_TYPE_F32);
    pub const F16: GgmlType = GgmlType(sys::GGML_TYPE_F16);
    pub const BF16: GgmlType = GgmlType(sys::GGML_TYPE_BF16);
    pub const I32: GgmlType = GgmlType(sys::GGML_TYPE_I32);
    pub const I64: GgmlType = GgmlType(sys::GGML_TYPE_I64);
    pub const Q8_0: GgmlType = GgmlType(sys::GGML_TYPE_Q8_0);
    pub const Q6_K: GgmlType = GgmlType(sys::GGML_TYPE_Q6_K);
    pub const Q5_K: GgmlType = GgmlType(sys::GGML_TYPE_Q5_K);
    pub const Q4_K: GgmlType = GgmlType(sys::GGML_TYPE_Q4_K);

    pub(crate) fn raw(self) -> sys::ggml_type {
        self.0 as sys::ggml_type
    }

    /// Whether ggml implements this id (removed and out-of-range ids are not).
    pub fn is_valid(self) -> bool {
        // SAFETY: ggml_blck_size indexes a static table; we bound the index first.
        self.0 < sys::GGML_TYPE_COUNT && unsafe { sys::ggml_blck_size(self.raw()) } > 0
    }
    /// Elements per block (1 for plain types, 32 for Q8_0, 256 for K-quants).
    pub fn block_size(self) -> usize {
        assert!(self.is_valid(), "invalid ggml type {}", self.0);
        // SAFETY: valid type id.
        unsafe { sys::ggml_blck_size(self.raw()) as usize }
    }
    /// Bytes per block.
    pub fn type_size(self) -> usize {
        assert!(self.is_valid(), "invalid ggml type {}", self.0);
        // SAFETY: valid type id.
        unsafe { sys::ggml_type_size(self.raw()) }
    }
    /// Bytes of a row of `n` elements (`n` must be whole blocks).
    pub fn row_size(self, n: usize) -> usize {
        n / self.block_size() * self.type_size()
    }
    pub fn is_quantized(self) -> bool {
        // SAFETY: valid type id checked by block_size's callers; this only reads a table.
        self.is_valid() && unsafe { sys::ggml_is_quantized(self.raw()) }
    }
    pub fn name(self) -> String {
        if !self.is_valid() {
            return format!("type#{}", self.0);
        }
        // SAFETY: valid type id, static string.
        unsafe { CStr::from_ptr(sys::ggml_type_name(self.raw())) }.to_string_lossy().into_owned()
    }
    /// Parses a type name as the CLI accepts it (`F32`, `q8_0`, `Q5_K_M` maps to Q5_K).
    pub fn from_name(s: &str) -> Option<GgmlType> {
        let up = s.to_ascii_uppercase();
        let ty = match up.as_str() {
            "F32" => Self::F32,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            "Q8_0" => Self::Q8_0,
            "Q6_K" => Self::Q6_K,
            "Q5_K" | "Q5_K_M" | "Q5_K_S" => Self::Q5_K,
            "Q4_K" | "Q4_K_M" | "Q4_K_S" => Self::Q4_K,
            _ => return None,
        };
        Some(ty)
    }
}

impl std::fmt::Debug for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Converts f32 values to the bytes of a float tensor type.
pub fn encode_f32(ty: GgmlType, v: &[f32]) -> Option<Vec<u8>> {
    Some(match ty {
        GgmlType::F32 => super::as_bytes(v).to_vec(),
        GgmlType::F16 => v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        GgmlType::BF16 => v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
        _ => return None,
    })
}

/// Converts the bytes of a float or quantized tensor to f32 values.
pub fn decode_to_f32(ty: GgmlType, raw: &[u8]) -> Option<Vec<f32>> {
    Some(match ty {
        GgmlType::F32 => raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        GgmlType::F16 => raw.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        GgmlType::BF16 => raw.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        t if t.is_quantized() => {
            let n = raw.len() / t.type_size() * t.block_size();
            let mut out = vec![0f32; n];
            // SAFETY: the type's traits table has a to_float for every quantized type; raw
            // holds n / block_size whole blocks and out has room for n floats.
            unsafe {
                let traits = ggml_sys::ggml_get_type_traits(t.raw());
                let f = (*traits).to_float?;
                f(raw.as_ptr().cast(), out.as_mut_ptr(), n as i64);
            }
            out
        }
        _ => return None,
    })
}
