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
        assert!(e < 1e-5, "{name}: features off by {e}");
        let want: Vec<u32> = case["codes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(t.codes(), want.as_slice(), "{name}: codes");
        assert!(!t.step(&mut tok, &backend).unwrap(), "a finished tokenization stays finished");
    }
}
