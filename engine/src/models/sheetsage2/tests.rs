//! The transcriber end to end on the tiny demo (random weights): the files load beside each
//! other, a recording runs step by step to an event stream the grammar allows, progress
//! rises, and the result is a score or a reason for none. The windows' joins are checked
//! against the reference in `parity.rs`.
use super::config::Kind;
use super::pipeline::{TranscribeError, Transcriber, SAMPLE_RATE};
use crate::ggml::Backend;
use crate::nn::demo::Preset;

#[test]
fn the_tiny_demo_transcribes_a_recording() {
    let tmp = tempfile::tempdir().unwrap();
    crate::models::audio_tokenizer::demo::write_demo(tmp.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
    let head = super::demo::write_demo(tmp.path(), Preset::Tiny, 1).unwrap();
    let backend = Backend::for_tests(1);
    let mut tr = Transcriber::open(&head, &backend).unwrap();
    let window = tr.head.cfg.input_audio_length;
    let mono = crate::models::mert::fixture::audio((window * 0.4 * SAMPLE_RATE as f64) as usize, 5);
    let mut run = tr.start(mono).unwrap();
    assert_eq!(run.windows().len(), 1);
    let budget = tr.head.cfg.max_output_seq_len;
    let mut last = 0.0;
    while run.step(&mut tr, &backend).unwrap() {
        let p = run.progress(budget);
        assert!(p >= last && p <= 1.0, "progress {last} then {p}");
        last = p;
    }
    assert_eq!(run.progress(budget), 1.0);
    let v = &tr.head.vocab;
    for w in run.log() {
        assert_eq!(&w.tokens[..8], v.task_prefix().as_slice(), "window {} starts with the task", w.window.index);
        assert_eq!(w.tokens.last(), Some(&v.eos));
        assert!(w.tokens.len() <= budget + 1);
        let drawn = &w.tokens[w.prefix_len..w.tokens.len() - 1];
        assert!(drawn.iter().all(|&t| v.kind_of(t).is_some_and(|(k, _)| k != Kind::Prompt && k != Kind::MajminChord)));
    }
    let times: Vec<f64> = run.stitched().iter().map(|s| s.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "stitched in time order");
    assert!(times.iter().all(|&t| (0.0..run.duration()).contains(&t)));
    // Either a score or a reason: random weights decode random events.
    match run.abc(false) {
        Ok(abc) => assert!(abc.starts_with("X:1\n"), "{abc}"),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

#[test]
fn a_recording_under_mert_s_minimum_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    crate::models::audio_tokenizer::demo::write_demo(tmp.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
    let head = super::demo::write_demo(tmp.path(), Preset::Tiny, 1).unwrap();
    let backend = Backend::for_tests(1);
    let tr = Transcriber::open(&head, &backend).unwrap();
    assert!(matches!(tr.start(vec![0.0; 1024]), Err(TranscribeError::TooShort(1024))));
    std::fs::remove_file(tmp.path().join("MERT-v2-demo-tiny-F32.gguf")).unwrap();
    let e = Transcriber::open(&head, &backend).err().unwrap().to_string();
    assert!(e.contains("MERT-v2-demo-tiny-F32.gguf"), "{e}");
}
