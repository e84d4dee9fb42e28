//! The tiny MERT and head of `scripts/ref/mert_reference.py` (`fixtures/mert/ckpt`), the
//! reference's outputs (`fixtures/mert/model`) and its audio, rebuilt bit for bit.
use std::path::PathBuf;

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mert")
}

pub fn cases() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("model/cases.json")).unwrap()).unwrap()
}

/// `n` samples of the reference's generator: xorshift32 noise plus a square wave whose period
/// drifts every 0.2 s, as int16 over 32768.
pub fn audio(n: usize, salt: u32) -> Vec<f32> {
    let mut x = 0x9E37_79B9u32 ^ salt;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let noise = (x >> 20) as i32 - 2048;
            let period = 40 + (i / 4800) % 60;
            let square = if (i / period).is_multiple_of(2) { 8192 } else { -8192 };
            (square + 2 * noise) as f32 / 32768.0
        })
        .collect()
}

/// The tiny MERT converted into `out` (a folder), its path.
pub fn mert_gguf(out: &std::path::Path) -> PathBuf {
    super::convert::convert(&dir().join("ckpt/mert"), out).unwrap().0
}
