//! What the numeric tests compare with: error measures against a reference, and the raw
//! little-endian f32 fixtures the reference scripts (`scripts/ref`) write.
use std::path::Path;

/// ‖got − want‖ / ‖want‖.
pub fn rel_rms(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths");
    let n: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let d: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (n / d).sqrt()
}

/// The largest elementwise difference.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, x)| if *x > v[best] { i } else { best })
}

/// A file of little-endian f32 values.
pub fn read_f32(p: impl AsRef<Path>) -> Vec<f32> {
    std::fs::read(p.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
