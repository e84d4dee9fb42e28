use super::*;
use crate::models::yue2::demo::{write_demo, Preset};

fn demo_vae() -> (Backend, VaeModel) {
    let dir = tempfile::tempdir().unwrap();
    let (_, vae) = write_demo(dir.path(), Preset::Tiny, 9, &mut |_, _| {}).unwrap();
    let f = GgufFile::open(vae).unwrap();
    let backend = Backend::for_tests(2);
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
    let tiled = m
        .decode_tiled(&backend, &z, 5, 16, &CancelToken::new(), &mut |t| {
            tiles.push((t.index, t.start_sample, t.samples))
        })
        .unwrap();
    assert_eq!(tiles.len(), 5);
    assert_eq!(tiles[1], (1, 5 * 1920, 5 * 1920));
    assert_eq!(tiles[4].2, 3 * 1920 - 64);
    let err = whole.iter().zip(&tiled).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let peak = whole.iter().map(|a| a.abs()).fold(0f32, f32::max);
    assert!(err <= 1e-5 * peak.max(1.0), "tiled differs from one pass by {err} (peak {peak})");
}

#[test]
fn a_tile_stream_fed_in_uneven_chunks_equals_the_tiled_decode() {
    let (backend, mut m) = demo_vae();
    let z = latents(23, 4);
    let cancel = CancelToken::new();
    let tiled = m.decode_tiled(&backend, &z, 5, 3, &cancel, &mut |_| {}).unwrap();
    let mut s = TileStream::new(&m.info, 23, 5, 3).unwrap();
    let mut seen = Vec::new();
    // Chunks of 7, 1, 9, 6 frames: tiles wait for their right halo.
    for (a, b) in [(0, 7), (7, 8), (8, 17), (17, 23)] {
        s.push(&mut m, &backend, &z[a * 64..b * 64], &cancel, &mut |t| seen.push((t.index, t.start_sample / 1920, b)))
            .unwrap();
    }
    assert!(s.is_complete());
    // Tile k's core [5k, 5k+5) needs frames up to 5k+8: tile 0 after the second chunk,
    // tile 1 (needs 13) after the third, tiles 2, 3 and 4 (18, 23, 23) after the fourth.
    assert_eq!(seen, vec![(0, 0, 8), (1, 5, 17), (2, 10, 23), (3, 15, 23), (4, 20, 23)]);
    let (pcm, lat) = s.finish();
    assert_eq!(pcm, tiled, "bit-identical to the one-call tiled decode");
    assert_eq!(lat, z);
    let mut s = TileStream::new(&m.info, 4, 5, 3).unwrap();
    assert!(s.push(&mut m, &backend, &z[..5 * 64], &cancel, &mut |_| {}).is_err(), "more frames than the track holds");
}

#[test]
fn an_open_tile_stream_equals_one_whose_length_was_known() {
    let (backend, mut m) = demo_vae();
    let z = latents(23, 5);
    let cancel = CancelToken::new();
    let tiled = m.decode_tiled(&backend, &z, 5, 3, &cancel, &mut |_| {}).unwrap();
    let mut s = TileStream::open(&m.info, 5, 3).unwrap();
    let mut seen = Vec::new();
    for (a, b) in [(0, 7), (7, 8), (8, 17), (17, 23)] {
        s.push(&mut m, &backend, &z[a * 64..b * 64], &cancel, &mut |t| seen.push((t.index, b))).unwrap();
    }
    // Without the length, tile 3 (core 15..20, halo to 23) is decoded, tile 4 (core
    // 20..25) waits: frame 23 might not be the last.
    assert_eq!(seen, vec![(0, 8), (1, 17), (2, 23), (3, 23)]);
    assert!(!s.is_complete());
    assert!(s.set_frames(22).is_err(), "shorter than what was received");
    s.set_frames(23).unwrap();
    assert!(s.set_frames(23).is_err(), "the length is fixed once");
    s.push(&mut m, &backend, &[], &cancel, &mut |t| seen.push((t.index, 0))).unwrap();
    assert!(s.is_complete());
    assert_eq!(seen[4..], [(4, 0)]);
    assert_eq!(s.finish().0, tiled, "bit-identical to the one-call tiled decode");
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

/// Parity with the torch Oobleck reference (scripts/ref/vae_reference.py) on tiny widths.
mod torch_reference {
    use super::*;
    use crate::test_util::rel_rms;
    use std::path::PathBuf;

    fn path(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vae").join(name)
    }
    fn f32s(name: &str) -> Vec<f32> {
        std::fs::read(path(name)).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn f16s(name: &str) -> Vec<f32> {
        std::fs::read(path(name))
            .unwrap()
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()
    }
    fn model() -> (Backend, VaeModel) {
        let f = GgufFile::open(path("tiny-vae.gguf")).unwrap();
        let b = Backend::for_tests(2);
        let m = VaeModel::load(&f, &b).unwrap();
        (b, m)
    }

    #[test]
    fn decoder_matches_torch_for_short_sequences() {
        let (b, mut m) = model();
        assert_eq!(m.info.channels, vec![16, 8, 8, 4, 4, 4, 4]);
        for t in [1usize, 7, 64] {
            let got = m.decode(&b, &f32s(&format!("z_{t}.f32"))).unwrap();
            let e = rel_rms(&got, &f32s(&format!("dec_{t}.f32")));
            assert!(e < 1e-2, "T = {t}: relative RMS {e:.3e}");
        }
    }

    #[test]
    fn tiled_decoder_matches_the_torch_whole_sequence() {
        let (b, mut m) = model();
        let got = m.decode_tiled(&b, &f32s("z_200.f32"), 64, 16, &CancelToken::new(), &mut |_| {}).unwrap();
        let e = rel_rms(&got, &f16s("dec_200.f16"));
        assert!(e < 1e-2, "tiled T = 200, core 64: relative RMS {e:.3e}");
    }

    #[test]
    fn encoder_mean_matches_torch() {
        let (b, mut m) = model();
        let got = m.encode(&b, &f32s("enc_in.f32")).unwrap();
        let e = rel_rms(&got, &f32s("enc_mean.f32"));
        assert!(e < 1e-2, "encoder: relative RMS {e:.3e}");
    }
}
