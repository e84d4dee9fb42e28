//! The plan against `scripts/ref/audio_tokenizer_plan_reference.py` (numpy).
use super::*;

fn fixture() -> serde_json::Value {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mert/tokenizer_plan.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn usizes(v: &serde_json::Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// The reference's features, computed the same way (f64, rounded to f32).
fn feats(t: usize, dim: usize) -> Vec<f32> {
    (0..t)
        .flat_map(|i| (0..dim).map(move |c| ((0.1 * i as f64 + 0.3 * c as f64).sin() + 0.01 * c as f64) as f32))
        .collect()
}

#[test]
fn chunks_and_code_counts_follow_the_reference() {
    for case in fixture()["plan"].as_array().unwrap() {
        let n = case["n"].as_u64().unwrap() as usize;
        let want: Vec<Range<usize>> =
            case["chunks"].as_array().unwrap().iter().map(usizes).map(|r| r[0]..r[1]).collect();
        assert_eq!(Grid::PUBLISHED.chunks(n), want, "{n} samples");
        assert_eq!(Grid::PUBLISHED.code_frames(n), case["codes"].as_u64().unwrap() as usize, "{n} samples");
    }
}

#[test]
fn windows_follow_the_reference_and_cover_every_frame_once() {
    for case in fixture()["windows"].as_array().unwrap() {
        let t = case["t"].as_u64().unwrap() as usize;
        let want: Vec<Window> = case["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(usizes)
            .map(|w| Window { start: w[0], len: w[1], keep: w[2]..w[3] })
            .collect();
        let got = Grid::PUBLISHED.windows(t);
        assert_eq!(got, want, "{t} frames");
        // Written in order, the kept ranges decide every frame.
        let mut decided = vec![false; t];
        for w in &got {
            assert!(w.keep.start >= w.start && w.keep.end <= w.start + w.len, "{w:?} keeps what it read");
            decided[w.keep.clone()].iter_mut().for_each(|d| *d = true);
        }
        assert!(decided.iter().all(|&d| d), "{t} frames: every frame decided");
    }
}

#[test]
fn resampling_and_standardisation_match_numpy() {
    for case in fixture()["resample"].as_array().unwrap() {
        let get = |k: &str| case[k].as_u64().unwrap() as usize;
        let (t_in, t_out, dim) = (get("t_in"), get("t_out"), get("dim"));
        let mut got = resample(&feats(t_in, dim), t_in, dim, t_out);
        let close = |a: &[f32], b: &[f32], what: &str| {
            assert_eq!(a.len(), b.len());
            let most = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(most < 1e-5, "{t_in} -> {t_out}: {what} off by {most}");
        };
        close(&got, &floats(&case["resampled"]), "resampled");
        Grid::PUBLISHED.standardise(&mut got, dim);
        close(&got, &floats(&case["standardised"]), "standardised");
    }
}
