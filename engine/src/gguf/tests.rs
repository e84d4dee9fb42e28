use super::*;
use crate::ggml::GgmlType;

fn sample(dir: &std::path::Path) -> std::path::PathBuf {
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", "yue2").set_u32("yue2.block_count", 2).set_f32("x.eps", 1e-6);
    w.set_strs("tokenizer.ggml.tokens", &["a", "b", "c"]);
    w.set_i32s("ids", &[1, -2, 3]);
    w.set("flag", Value::Bool(true))
        .set("big", Value::U64(1 << 40))
        .set("neg", Value::I64(-5))
        .set("pi", Value::F64(3.5));
    w.add_tensor("w", GgmlType::F32, &[4, 3]).add_tensor("q", GgmlType::Q8_0, &[32, 2]).add_tensor(
        "b",
        GgmlType::F32,
        &[5],
    );
    let path = dir.join("s.gguf");
    let mut d = w.create(&path).unwrap();
    let wv: Vec<f32> = (0..12).map(|i| i as f32).collect();
    d.write(&crate::ggml::encode_f32(GgmlType::F32, &wv).unwrap()).unwrap();
    d.write(&crate::ggml::quantize(GgmlType::Q8_0, &[0.5f32; 64], 32)).unwrap();
    d.write(&crate::ggml::encode_f32(GgmlType::F32, &[1., 2., 3., 4., 5.]).unwrap()).unwrap();
    d.finish().unwrap();
    path
}

#[test]
fn write_then_read_round_trips_metadata_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "yue2");
    assert_eq!(f.get_i64("yue2.block_count").unwrap(), 2);
    assert!((f.get_f64("x.eps").unwrap() - 1e-6).abs() < 1e-12);
    assert_eq!(f.get_str_array("tokenizer.ggml.tokens").unwrap(), vec!["a", "b", "c"]);
    assert_eq!(f.get_i64_array("ids").unwrap(), vec![1, -2, 3]);
    assert_eq!(f.get("flag"), Some(&Value::Bool(true)));
    assert_eq!(f.get_i64("big").unwrap(), 1 << 40);
    assert_eq!(f.metadata_ordered().next().unwrap().0, "general.architecture");
    let w = f.expect_tensor("w", &[4, 3]).unwrap();
    assert_eq!(w.offset % 32, 0);
    assert_eq!(f.tensor_f32("w").unwrap(), (0..12).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(f.tensor_f32("b").unwrap(), vec![1., 2., 3., 4., 5.]);
    let q = f.tensor_f32("q").unwrap();
    assert!(q.iter().all(|v| (v - 0.5).abs() < 0.01));
    assert_eq!(f.require_tensor("q").unwrap().nbytes, 68);
}

#[test]
fn errors_name_the_key_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let f = GgufFile::open(sample(dir.path())).unwrap();
    let e = f.get_str("nope").unwrap_err().to_string();
    assert!(e.contains("s.gguf") && e.contains("'nope'"), "{e}");
    let e = f.get_str("yue2.block_count").unwrap_err().to_string();
    assert!(e.contains("yue2.block_count") && e.contains("u32") && e.contains("string"), "{e}");
    let e = f.expect_tensor("w", &[3, 4]).unwrap_err().to_string();
    assert!(e.contains("'w'") && e.contains("[4, 3]"), "{e}");
    let e = f.require_tensor("missing.weight").unwrap_err().to_string();
    assert!(e.contains("missing.weight"), "{e}");
}

#[test]
fn missing_file_and_bad_magic() {
    let dir = tempfile::tempdir().unwrap();
    let e = GgufFile::open(dir.path().join("absent.gguf")).err().unwrap().to_string();
    assert!(e.contains("absent.gguf"), "{e}");
    let p = dir.path().join("junk.gguf");
    std::fs::write(&p, b"NOPE and some bytes").unwrap();
    assert!(matches!(GgufFile::open(&p), Err(GgufError::BadMagic { .. })));
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(GgufFile::open(&p), Err(GgufError::BadMagic { .. })));
}

/// Every truncation point of a valid file is an error, never a panic.
#[test]
fn every_truncation_is_a_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(sample(dir.path())).unwrap();
    let p = dir.path().join("t.gguf");
    // The last tensor ("b", 20 bytes) is followed by 12 bytes of alignment padding: cutting
    // only padding leaves a complete file.
    let data_end = bytes.len() - 12;
    for cut in 0..bytes.len() {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let r = GgufFile::open(&p);
        if cut >= data_end {
            assert!(r.is_ok(), "cut at {cut} only removed padding");
            continue;
        }
        assert!(r.is_err(), "truncated at {cut} of {} parsed", bytes.len());
        let msg = r.err().unwrap().to_string();
        assert!(msg.contains("t.gguf"), "{msg}");
    }
}

/// Random byte flips in the header give either a valid parse or an error, never a crash.
#[test]
fn corrupted_headers_never_crash() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(sample(dir.path())).unwrap();
    let p = dir.path().join("c.gguf");
    let mut state = 12345u64;
    let header_len = 400.min(bytes.len());
    let mut errors = 0;
    for _ in 0..2000 {
        let mut b = bytes.clone();
        for _ in 0..3 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (state >> 33) as usize % header_len;
            b[i] = (state >> 20) as u8;
        }
        std::fs::write(&p, &b).unwrap();
        if let Ok(f) = GgufFile::open(&p) {
            for t in f.tensors() {
                let _ = f.tensor_bytes(t);
            }
        } else {
            errors += 1;
        }
    }
    assert!(errors > 100, "corruption went unnoticed: {errors} errors");
}

#[test]
fn writer_checks_sizes_and_completeness() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = GgufWriter::new();
    w.add_tensor("a", GgmlType::F32, &[2]).add_tensor("b", GgmlType::F32, &[2]);
    let mut d = w.create(dir.path().join("w.gguf")).unwrap();
    assert!(d.write(&[0u8; 4]).unwrap_err().to_string().contains("'a'"));
    d.write(&[0u8; 8]).unwrap();
    assert!(d.finish().unwrap_err().to_string().contains("'b'"));
}

/// A model is written aside and named at its end: a write cut short (here: a tensor never
/// written, the writer dropped) leaves neither a file under the name nor its partial file; a
/// finished one leaves only the file.
#[test]
fn a_write_cut_short_leaves_nothing_under_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", "yue2").add_tensor("a", GgmlType::F32, &[2]).add_tensor("b", GgmlType::F32, &[2]);
    let mut d = w.create(&path).unwrap();
    d.write(&crate::ggml::encode_f32(GgmlType::F32, &[1., 2.]).unwrap()).unwrap();
    assert!(!path.exists(), "not under its name while written");
    drop(d);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left behind");
    let mut d = w.create(&path).unwrap();
    d.write(&crate::ggml::encode_f32(GgmlType::F32, &[1., 2.]).unwrap()).unwrap();
    assert!(d.finish().is_err(), "a tensor is missing");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let path = sample(dir.path());
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![path.file_name().unwrap().to_os_string()]);
    // A writer killed mid-write (no drop ran) leaves its partial file: swept, the model kept.
    std::fs::write(dir.path().join(".cut.gguf.partial-4242"), b"GGUF").unwrap();
    assert_eq!(remove_partials(dir.path()), 1);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
