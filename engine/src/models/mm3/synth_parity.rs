//! Parity of the synthesis half with the reference (diffusers 0.42.1 on the tiny checkpoint
//! of fixtures/mm3/ckpt; scripts/ref/mm3_synth_reference.py): the condition encoder (and
//! torch's nearest source frames for every length up to 200), the schedule, the DiT's
//! velocities (both branches, guided, a batch of two), one window denoised from injected
//! noise, two windows with their overlap and carry, the VAE decoder, and the stitched song.
use super::cond::{nearest_sources, CondEncoder};
use super::convert::{convert_checkpoint, ConvertOptions};
use super::dit::DitModel;
use super::synth::*;
use super::vae::VaeModel;
use crate::ggml::Backend;
use crate::gguf::GgufFile;
use crate::test_util::{max_abs, tol};
use serde_json::Value;
use std::path::PathBuf;

fn repo(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn cases() -> Value {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("fixtures/mm3/synth/cases.json")).unwrap()).unwrap();
    v["cases"].clone()
}

fn f32s(name: &str) -> Vec<f32> {
    let raw = std::fs::read(repo("fixtures/mm3/synth").join(name)).unwrap();
    raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn file(v: &Value) -> Vec<f32> {
    f32s(v["file"].as_str().unwrap())
}

/// `[T][C]` to `[C][T]`.
fn channel_major(tm: &[f32], c: usize) -> Vec<f32> {
    let t = tm.len() / c;
    (0..c).flat_map(|ch| (0..t).map(move |i| tm[i * c + ch])).collect()
}

struct Models {
    backend: Backend,
    cond: CondEncoder,
    dit: DitModel,
    vae: VaeModel,
    _dir: tempfile::TempDir,
}

fn models() -> Models {
    let dir = tempfile::tempdir().unwrap();
    let done = convert_checkpoint(
        &repo("fixtures/mm3/ckpt"),
        dir.path(),
        &ConvertOptions { semantic_codes: Some(64) },
        &mut |_| {},
    )
    .unwrap();
    let backend = Backend::for_tests(1);
    let open = |i: usize| GgufFile::open(&done[i].path).unwrap();
    let cond = CondEncoder::load(&open(2), &backend).unwrap();
    let dit = DitModel::load(&open(3), &backend).unwrap();
    let vae = VaeModel::load(&open(4), &backend).unwrap();
    Models { backend, cond, dit, vae, _dir: dir }
}

#[test]
fn the_condition_encoder_and_torchs_nearest_frames() {
    let mut m = models();
    let c = &cases()["condition_encoder"];
    assert!(max_abs(&m.cond.mix, &file(&c["folded_weights"])) < 1e-6);
    let states = std::fs::read(repo("fixtures/mm3/ar/budget_5_frames_frame_hiddens.f32")).unwrap();
    let states: Vec<f32> = states.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let out = m.cond.encode(&m.backend, &states, 5).unwrap();
    let want = file(&c["output"]);
    assert!(max_abs(&out, &want) < tol(&m.backend, 1e-5), "condition: {}", max_abs(&out, &want));
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("fixtures/mm3/synth/nearest_table.json")).unwrap()).unwrap();
    for n in 1..=200usize {
        let e = &table[n.to_string()];
        let l = e["latent_length"].as_u64().unwrap() as usize;
        assert_eq!(m.cond.cfg.latent_length(n), l, "latent length of {n} frames");
        let src: Vec<usize> = e["src"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(nearest_sources(n, l), src, "source frames of {n}");
    }
}

#[test]
fn the_schedule_bit_for_bit() {
    for n in [2, 4, 8, 30] {
        let want = f32s(&format!("sched_sigmas_n{n}.f32"));
        assert_eq!(
            sigmas(n).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "N = {n}"
        );
    }
}

#[test]
fn dit_velocities_match_for_both_branches_and_a_batch() {
    let mut m = models();
    let c = &cases()["dit"];
    for case in c["cases"].as_array().unwrap() {
        let t = case["T"].as_u64().unwrap() as usize;
        let tt = case["t"].as_f64().unwrap() as f32;
        let (x, cond) = (file(&case["x"]), file(&case["cond"]));
        let vc = m.dit.velocity(&m.backend, &x, &cond, t, 1, tt).unwrap();
        assert!(
            max_abs(&vc, &file(&case["v_cond"])) < tol(&m.backend, 1e-4),
            "T={t} t={tt} cond: {}",
            max_abs(&vc, &file(&case["v_cond"]))
        );
        let vu = m.dit.velocity(&m.backend, &x, &vec![0.0; cond.len()], t, 1, tt).unwrap();
        assert!(max_abs(&vu, &file(&case["v_uncond"])) < tol(&m.backend, 1e-4), "T={t} t={tt} uncond");
        for batch in [true, false] {
            let g = m.dit.guided(&m.backend, &x, &cond, t, 1, tt, 1.7, batch).unwrap();
            assert!(
                max_abs(&g, &file(&case["v_guided"])) < tol(&m.backend, 2e-4),
                "T={t} t={tt} guided (batch {batch})"
            );
        }
    }
    let b = &c["batch2"];
    let x: Vec<f32> = [f32s("dit_T20_x.f32"), file(&b["x2"])].concat();
    let g = m.dit.guided(&m.backend, &x, &f32s("dit_T20_cond.f32"), 20, 2, 0.37, 1.7, true).unwrap();
    assert!(max_abs(&g, &file(&b["v_guided"])) < tol(&m.backend, 2e-4), "two variations in one batch");
}

#[test]
fn the_vae_decodes_both_tracks() {
    let mut m = models();
    let c = &cases()["vae"];
    assert_eq!(m.vae.info.hop(), 4);
    let out = m.vae.decode(&m.backend, &file(&c["latent"])).unwrap();
    assert!(max_abs(&out, &file(&c["audio"])) < tol(&m.backend, 1e-5), "VAE: {}", max_abs(&out, &file(&c["audio"])));
}

fn frame_noise(windows: &[Vec<f32>], c: usize) -> FixedNoise {
    FixedNoise(windows.iter().flat_map(|w| channel_major(w, c)).collect())
}

#[test]
fn one_window_denoises_as_the_reference() {
    let mut m = models();
    let cs = cases();
    let states: Vec<f32> = {
        let raw = std::fs::read(repo("fixtures/mm3/ar/budget_5_frames_frame_hiddens.f32")).unwrap();
        raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    for case in cs["one_window"]["cases"].as_array().unwrap() {
        let steps = case["steps"].as_u64().unwrap() as usize;
        let mut noise: Vec<Box<dyn Noise + Send>> = vec![Box::new(frame_noise(&[file(&case["noise"])], 8))];
        let mut got = Vec::new();
        let s = SynthSettings { steps, dit_cfg: 1.7, batch_cfg: true };
        render(&m.backend, &mut m.cond, &mut m.dit, &states, 5, &mut noise, &s, &|| false, &mut |_, _| {}, &mut |w| {
            got.push(w);
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 1);
        let lat = &got[0].latents[0];
        assert!(
            max_abs(lat, &file(&case["final_latent"])) < tol(&m.backend, 2e-4),
            "{steps} steps: {}",
            max_abs(lat, &file(&case["final_latent"]))
        );
        let audio = decode_window(&m.backend, &mut m.vae, lat, 0, 1).unwrap();
        assert!(max_abs(&audio, &file(&case["audio"])) < tol(&m.backend, 2e-4), "{steps} steps: audio");
    }
}

#[test]
fn two_windows_carry_their_overlap_and_stitch() {
    let mut m = models();
    let c = &cases()["two_windows"];
    let states = file(&c["frame_hiddens"]);
    let wins = c["windows"].as_array().unwrap();
    let noises: Vec<Vec<f32>> = wins.iter().map(|w| file(&w["noise"])).collect();
    let mut noise: Vec<Box<dyn Noise + Send>> = vec![Box::new(frame_noise(&noises, 8))];
    let s = SynthSettings { steps: 2, dit_cfg: 1.7, batch_cfg: true };
    let mut audio: Vec<Vec<f32>> = Vec::new();
    let backend = Backend::for_tests(1);
    let vae = &mut m.vae;
    render(&m.backend, &mut m.cond, &mut m.dit, &states, 250, &mut noise, &s, &|| false, &mut |_, _| {}, &mut |w| {
        let want = &wins[w.index];
        assert!(max_abs(&w.condition, &file(&want["cond"])) < tol(&m.backend, 1e-5), "window {} condition", w.index);
        let e = max_abs(&w.latents[0], &file(&want["latent"]));
        assert!(e < tol(&m.backend, 2e-4), "window {} latent: {e}", w.index);
        audio.push(decode_window(&backend, vae, &w.latents[0], w.index, 2).unwrap());
        Ok(())
    })
    .unwrap();
    assert_eq!(audio.len(), 2);
    // Stitch the planar windows: left sides, then right sides.
    let halves = |a: &Vec<f32>| (a[..a.len() / 2].to_vec(), a[a.len() / 2..].to_vec());
    let (l0, r0) = halves(&audio[0]);
    let (l1, r1) = halves(&audio[1]);
    let stitched = [l0, l1, r0, r1].concat();
    let want = file(&c["audio"]);
    assert!(max_abs(&stitched, &want) < tol(&m.backend, 2e-4), "stitched audio: {}", max_abs(&stitched, &want));
}
