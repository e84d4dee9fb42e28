//! The encoder against `scripts/ref/mert_reference.py` (torch, float64 on the same f32
//! weights): every stage and every state of one chunk.
use super::*;
use crate::models::mert::fixture;
use crate::test_util::{read_f32, rel_rms};

#[test]
fn the_converted_file_holds_every_tensor_and_the_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fixture::mert_gguf(tmp.path());
    assert_eq!(path.file_name().unwrap(), "MERT-v2-FullSong-F32.gguf");
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), ARCH);
    let cfg = MertConfig::from_json(f.get_str(CONFIG_KEY).unwrap()).unwrap();
    assert_eq!((cfg.hidden_size, cfg.num_hidden_layers, cfg.inputs_to_logits_ratio), (64, 4, 960));
    assert_eq!(f.tensors().len(), tensor_shapes(&cfg).len() + 4, "the encoder's tensors and the 4 host tables");
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted by name");
}

#[test]
fn every_stage_and_state_matches_the_torch_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let f = GgufFile::open(fixture::mert_gguf(tmp.path())).unwrap();
    let backend = Backend::for_tests(2);
    let mut mert = Mert::load(&f, &backend).unwrap();
    let case = &fixture::cases()["short"];
    let n = case["samples"].as_u64().unwrap() as usize;
    let mono = fixture::audio(n, case["salt"].as_u64().unwrap() as u32);
    let out = fixture::dir().join("model");
    let mel = mert.frontend.log_mel(&mono);
    let e = rel_rms(&mel, &read_f32(out.join("short.mel.f32")));
    assert!(e < 1e-5, "mel off by {e}");
    let blocks = mert.cfg.num_hidden_layers;
    let got = mert.encode(&backend, &mono, blocks, Taps::All).unwrap();
    assert_eq!(got.frames, mert.cfg.frames(n));
    assert_eq!(got.stages.len(), 3);
    assert_eq!(got.states.len(), blocks + 1);
    let tensors = got.stages.iter().enumerate().map(|(i, s)| (format!("stage{i}"), s));
    for (what, got) in tensors.chain(got.states.iter().enumerate().map(|(i, s)| (format!("state{i}"), s))) {
        let e = rel_rms(got, &read_f32(out.join(format!("short.{what}.f32"))));
        assert!(e < crate::test_util::tol(&backend, 1e-5) as f64, "{what} off by {e}");
    }
    // The last state alone is the same numbers.
    let last = mert.encode(&backend, &mono, blocks, Taps::Last).unwrap();
    assert_eq!(last.states.len(), 1);
    let e = rel_rms(&last.states[0], &read_f32(out.join(format!("short.state{blocks}.f32"))));
    assert!(e < crate::test_util::tol(&backend, 1e-5) as f64, "the last state alone off by {e}");
}
