//! What the numeric tests compare with: error measures against a reference, and the raw
//! little-endian f32 fixtures the reference scripts (`scripts/ref`) write.
use crate::ggml::Backend;
use crate::models::yue2::prompt::Cot;
use crate::models::yue2::settings::Settings;
use crate::sampling::Sampling;
use std::path::Path;

/// ‖got − want‖ / ‖want‖.
pub fn rel_rms(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths");
    let n: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let d: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (n / d).sqrt()
}

/// The least tolerance a comparison with a reference gets on a device: a GPU's kernels round
/// in F16 where the CPU's do not (ggml-cuda's attention converts F32 keys and values to F16;
/// ggml-vulkan's shaders on a card with F16 keep their tiles in F16). Measured with ggml-vulkan's
/// F16 shaders on Mesa's lavapipe (`scripts/test-device.sh`): up to 1.7e-2 apart on the MiniMax
/// tiny demo (Q8_0 depth decoder, stepped against whole sequences), 8.4e-3 on its DiT after four
/// Euler steps, 2e-3 on most single forwards. A wrong graph is off by O(1).
pub const DEVICE_TOL: f32 = 3e-2;

/// The tolerance of a comparison on `backend`: `cpu` on the CPU, at least [`DEVICE_TOL`] on a
/// device.
pub fn tol(backend: &Backend, cpu: f32) -> f32 {
    if backend.is_cpu() {
        cpu
    } else {
        cpu.max(DEVICE_TOL)
    }
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

/// YuE2 settings as a request at its defaults maps them (every preset the published
/// one), with `cot` and its guidance, `lyrics` and `style`, and a budget of `frames`.
pub fn yue2_settings(cot: Cot, frames: usize) -> Settings {
    let plan = Sampling {
        temperature: 0.7,
        top_p: 0.9,
        top_k: 30,
        repetition_penalty: 1.005,
        penalty_window: 100,
        min_tokens: 32,
        max_tokens: 4096,
    };
    let semantic = Sampling {
        temperature: 1.0,
        top_p: 0.95,
        top_k: 100,
        repetition_penalty: 1.2,
        penalty_window: 50,
        min_tokens: 200,
        max_tokens: 9000,
    };
    Settings {
        style: String::new(),
        lyrics: String::new(),
        abc: String::new(),
        abc_continue: false,
        cot,
        songs: 1,
        variations: 1,
        lm_seed: 0,
        seed: 0,
        steps: 8,
        solver: crate::models::yue2::nar::Solver::Midpoint,
        cfg_scale: if cot == Cot::Off { 1.01 } else { 1.0 },
        plan,
        plan_retries: 2,
        semantic,
        budget: frames,
        source: Vec::new(),
        replay: None,
        stream: None,
    }
}
