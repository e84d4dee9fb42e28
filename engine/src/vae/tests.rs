use super::*;
use crate::demo::{write_demo, Preset};

fn demo_vae() -> (Backend, VaeModel) {
    let dir = tempfile::tempdir().unwrap();
    let (_, vae) = write_demo(dir.path(), Preset::Tiny, 9, &mut |_, _| {}).unwrap();
    let f = GgufFile::open(vae).unwrap();
    let backend = Backend::cpu(2).unwrap();
    let m = VaeModel::load(&f, &backend).unwrap();
    (backend, m)
}

fn latents(frames: usize, seed: u64) -> Vec<f32> {
    crate::rng::torch_cpu::randn(seed, frames * 64)
}

#[test]
fn output_length_is_1920_t_minus_64() {
    let (backend, mut m) = demo_vae();
    assert_eq!(m.info.hop(), 1920);
    for t in [1usize, 2, 7] {
        let pcm = m.decode(&backend, &latents(t, 1)).unwrap();
        assert_eq!(pcm.len(), 2 * (1920 * t - 64), "T = {t}");
        assert!(pcm.iter().all(|x| x.is_finite()));
    }
    assert!(m.decode(&backend, &[0.0; 65]).is_err());
}

#[test]
fn tiled_decode_equals_one_pass() {
    let (backend, mut m) = demo_vae();
    let z = latents(23, 2);
    let whole = m.decode(&backend, &z).unwrap();
    let mut tiles = Vec::new();
    let tiled = m.decode_tiled(&backend, &z, 5, 16, &CancelToken::new(), &mut |t| tiles.push((t.index, t.start_sample, t.samples))).unwrap();
    assert_eq!(tiles.len(), 5);
    assert_eq!(tiles[1], (1, 5 * 1920, 5 * 1920));
    assert_eq!(tiles[4].2, 3 * 1920 - 64);
    let err = whole.iter().zip(&tiled).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let peak = whole.iter().map(|a| a.abs()).fold(0f32, f32::max);
    assert!(err <= 1e-5 * peak.max(1.0), "tiled differs from one pass by {err} (peak {peak})");
}

#[test]
fn cancel_stops_between_tiles() {
    let (backend, mut m) = demo_vae();
    let z = latents(12, 3);
    let cancel = CancelToken::new();
    let mut n = 0;
    let r = m.decode_tiled(&backend, &z, 4, 2, &cancel, &mut |_| {
        n += 1;
        cancel.cancel();
    });
    assert!(matches!(r, Err(VaeError::Cancelled)));
    assert_eq!(n, 1);
}

#[test]
fn encoder_maps_audio_to_frames() {
    let (backend, mut m) = demo_vae();
    let audio: Vec<f32> = (0..2 * 1920 * 3).map(|i| ((i as f32) * 0.01).sin() * 0.5).collect();
    let z = m.encode(&backend, &audio).unwrap();
    assert_eq!(z.len(), 3 * 64);
    assert!(m.encode(&backend, &audio[..1000]).is_err());
}
