//! The whole tokenizer against `scripts/ref/mert_reference.py` (torch, float64 on the same
//! f32 weights): two recordings of several chunks, one whose tail MERT keeps and one whose
//! tail it drops, through the converted files.
use super::*;
use crate::models::mert::fixture;
use crate::test_util::{read_f32, rel_rms};

#[test]
fn recordings_tokenize_to_the_reference_codes() {
    let tmp = tempfile::tempdir().unwrap();
    fixture::mert_gguf(tmp.path());
    let (head, n) =
        crate::models::audio_tokenizer::convert::convert(&fixture::dir().join("ckpt/tokenizer"), tmp.path()).unwrap();
    assert_eq!(head.file_name().unwrap(), "yue2-mothersuperior-realaudio-tokenizer-v4-F32.gguf");
    assert_eq!(n, 7 + 12 * 2, "the head's tensors");
    let backend = Backend::for_tests(2);
    // The MERT file is found beside the head.
    let mut tok = AudioTokenizer::open(&head, &backend).unwrap();
    assert_eq!(tok.head.cfg.window, 64);
    assert!(tok.start(vec![0.0; 23_999]).is_none(), "under a second: no MERT chunk");
    let cases = fixture::cases();
    for name in ["kept_tail", "dropped_tail"] {
        let case = &cases[name];
        let get = |k: &str| case[k].as_u64().unwrap() as usize;
        let mono = fixture::audio(get("samples"), get("salt") as u32);
        let mut t = tok.start(mono).unwrap();
        assert_eq!(t.frames(), get("frames"), "{name}");
        let starts: Vec<usize> = t.windows().iter().map(|w| w.start).collect();
        let want: Vec<usize> =
            case["windows"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(starts, want, "{name}: windows");
        let mut steps = 0;
        while t.step(&mut tok, &backend).unwrap() {
            steps += 1;
        }
        assert_eq!(steps + 1, t.steps(), "{name}: one step per chunk and per window");
        let e = rel_rms(t.features(), &read_f32(fixture::dir().join(format!("model/{name}.features.f32"))));
        assert!(e < crate::test_util::tol(&backend, 1e-5) as f64, "{name}: features off by {e}");
        let want: Vec<u32> = case["codes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        if backend.is_cpu() {
            assert_eq!(t.codes(), want.as_slice(), "{name}: codes");
        } else {
            // A device's F16 rounding (features ~2e-3 apart) tips the nearest code of some
            // frames: say how many, and hold most of them.
            let same = t.codes().iter().zip(&want).filter(|(a, b)| a == b).count();
            eprintln!("{}: {name}: {same} of {} codes are the reference's", backend.name(), want.len());
            assert!(t.codes().len() == want.len() && same * 10 >= want.len() * 9, "{name}: {same} of {}", want.len());
        }
        assert!(!t.step(&mut tok, &backend).unwrap(), "a finished tokenization stays finished");
    }
}

#[test]
fn q8_0_files_quantize_the_linear_projections_only_and_still_agree() {
    use crate::ggml::GgmlType;
    use crate::models::quantize::{quantize_file, QuantTarget};
    let f32s = tempfile::tempdir().unwrap();
    let mert = fixture::mert_gguf(f32s.path());
    let (head, _) =
        crate::models::audio_tokenizer::convert::convert(&fixture::dir().join("ckpt/tokenizer"), f32s.path()).unwrap();
    let q8 = tempfile::tempdir().unwrap();
    let (mert_q, head_q) = (
        q8.path().join("MERT-v2-FullSong-Q8_0.gguf"),
        q8.path().join("yue2-mothersuperior-realaudio-tokenizer-v4-Q8_0.gguf"),
    );
    quantize_file(&mert, &mert_q, QuantTarget::Q8_0, &mut |_, _| {}).unwrap();
    quantize_file(&head, &head_q, QuantTarget::Q8_0, &mut |_, _| {}).unwrap();
    assert!(quantize_file(&mert, &q8.path().join("x.gguf"), QuantTarget::Q6K, &mut |_, _| {}).is_err(), "Q8_0 only");
    let types = |p: &std::path::Path| -> std::collections::BTreeMap<String, GgmlType> {
        GgufFile::open(p).unwrap().tensors().iter().map(|t| (t.name.clone(), t.ty)).collect()
    };
    let (m, h) = (types(&mert_q), types(&head_q));
    assert_eq!(m["layers.0.attn.query_proj.weight"], GgmlType::Q8_0);
    assert_eq!(m["subsampling_module.1.convnext_layers.0.pointwise_block.1.weight"], GgmlType::Q8_0);
    for kept in [
        "feature_extractor.mel_scale.fb",
        "subsampling_module.1.resampling_layer.2.weight",
        "layers.0.conv_module.conv_block.1.weight",
        "layers.0.conv_module.conv_block.3.weight",
    ] {
        assert_eq!(m[kept], GgmlType::F32, "{kept}");
    }
    assert_eq!((h["enc.layers.0.self_attn.in_proj_weight"], h["head.weight"]), (GgmlType::Q8_0, GgmlType::Q8_0));
    assert_eq!(h["pos"], GgmlType::F32);
    // The quantized pair (found beside each other in the same quant) still reads the song (measured: the
    // features 4.8e-2 off, 91% of the codes the same, on these tiny random weights).
    let backend = Backend::for_tests(2);
    let mut tok = AudioTokenizer::open(&head_q, &backend).unwrap();
    let case = &fixture::cases()["kept_tail"];
    let get = |k: &str| case[k].as_u64().unwrap() as usize;
    let mut t = tok.start(fixture::audio(get("samples"), get("salt") as u32)).unwrap();
    while t.step(&mut tok, &backend).unwrap() {}
    let e = rel_rms(t.features(), &read_f32(fixture::dir().join("model/kept_tail.features.f32")));
    let want: Vec<u32> = case["codes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let same = t.codes().iter().zip(&want).filter(|(a, b)| a == b).count() as f64 / want.len() as f64;
    assert!(e < 0.1 && same > 0.8, "Q8_0: features off by {e}, {:.1}% of the codes agree", 100.0 * same);
}
