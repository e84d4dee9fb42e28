//! What the demo models of every family share: the presets, and tensors of deterministic
//! random values (seeded by name, scaled by role) written into a GGUF.
use crate::ggml::{quantize, GgmlType};
use crate::gguf::{GgufError, GgufWriter};
use std::path::Path;

/// Which demo to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    Tiny,
    Deep,
    Full,
}

impl Preset {
    /// The name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Deep => "deep",
            Preset::Full => "full",
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tiny" => Ok(Preset::Tiny),
            "deep" => Ok(Preset::Deep),
            "full" => Ok(Preset::Full),
            _ => Err(format!("unknown preset '{s}' (tiny, deep or full)")),
        }
    }
}

/// Deterministic stream of uniforms in [-1, 1), one per tensor (seeded by name), so a
/// tensor's values do not depend on which others are written.
struct SplitMix(u64);
impl SplitMix {
    fn for_tensor(seed: u64, name: &str) -> Self {
        let mut h = 0xcbf29ce484222325u64 ^ seed.wrapping_mul(0x9e3779b97f4a7c15);
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        SplitMix(h)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Values of one random tensor, scaled by its role.
pub fn random_values(seed: u64, name: &str, ne: &[i64]) -> Vec<f32> {
    let n: i64 = ne.iter().product();
    let mut rng = SplitMix::for_tensor(seed, name);
    let (offset, scale) = if name.ends_with("norm.weight") {
        (1.0, 0.2) // random norms, so a missing QK-norm changes the output
    } else if name.ends_with(".bias") {
        (0.0, 0.02)
    } else if name.ends_with(".alpha") || name.ends_with(".beta") {
        (0.0, 0.3) // log-scale snake parameters around exp(0) = 1
    } else if name.ends_with(".weight_g") {
        (1.0, 0.2)
    } else if name == crate::nn::qwen3::hf::EMBED {
        (0.0, 1.0)
    } else {
        (0.0, 3f32.sqrt() / (ne[0] as f32).sqrt()) // unit variance out of a fan-in of ne[0]
    };
    (0..n).map(|_| offset + scale * rng.uniform()).collect()
}

pub fn tensor_type(spec_matrix: GgmlType, ne: &[i64]) -> GgmlType {
    if ne.len() >= 2 && ne[0] % spec_matrix.block_size() as i64 == 0 {
        spec_matrix
    } else {
        GgmlType::F32
    }
}

pub fn write_tensors(
    path: &Path,
    w: &GgufWriter,
    tensors: &[(String, GgmlType, Vec<i64>)],
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(), GgufError> {
    let mut data = w.create(path)?;
    for (i, (name, ty, ne)) in tensors.iter().enumerate() {
        let v = random_values(seed, name, ne);
        let bytes = if *ty == GgmlType::F32 {
            crate::ggml::encode_f32(GgmlType::F32, &v).unwrap()
        } else {
            quantize(*ty, &v, ne[0] as usize)
        };
        data.write(&bytes)?;
        progress(i + 1, tensors.len());
    }
    data.finish()
}
