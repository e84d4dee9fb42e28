//! The front end against `scripts/ref/mert_frontend_reference.py` (numpy, float64): a small
//! case and the published sizes (n_fft 2048, hop 240, 128 mels).
use super::*;

/// The reference's closed-form inputs, computed the same way (f64, rounded to f32).
fn inputs(n: usize, n_fft: usize, hop: usize, mels: usize) -> (Vec<f32>, MelFrontend) {
    let signal = (0..n)
        .map(|i| {
            let x = i as f64;
            (0.5 * (0.01 * x * (1.0 + (i % 7) as f64)).sin() + 0.25 * (0.037 * x).cos()) as f32
        })
        .collect();
    let window =
        (0..n_fft).map(|j| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * j as f64 / n_fft as f64).cos()) as f32).collect();
    let bins = n_fft / 2 + 1;
    let width = bins as f64 / (mels + 1) as f64;
    let mut filterbank = Vec::with_capacity(bins * mels);
    for b in 0..bins {
        for k in 0..mels {
            let centre = (k as f64 + 1.0) * width;
            filterbank.push((1.0 - (b as f64 - centre).abs() / width).max(0.0) as f32);
        }
    }
    let mean = (0..mels).map(|k| (-20.0 + 0.1 * k as f64) as f32).collect();
    let mut std: Vec<f32> = (0..mels).map(|k| (5.0 + 0.01 * k as f64) as f32).collect();
    std[0] = 1e-7; // below the floor: divided by 1e-5
    (signal, MelFrontend { n_fft, hop, window, filterbank, mean, std })
}

#[test]
fn the_log_mel_matches_the_numpy_reference() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mert/frontend.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let get = |k: &str| case[k].as_u64().unwrap() as usize;
        let (signal, fe) = inputs(get("n"), get("n_fft"), get("hop"), get("mels"));
        let want: Vec<f32> = case["log_mel"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(fe.frames(signal.len()), get("frames"));
        let got = fe.log_mel(&signal);
        assert_eq!(got.len(), want.len());
        let err: f64 = got.iter().zip(&want).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = want.iter().map(|b| f64::from(*b).powi(2)).sum::<f64>().sqrt();
        assert!(err / norm < 1e-5, "n_fft {}: rel. RMS {}", fe.n_fft, err / norm);
    }
}
