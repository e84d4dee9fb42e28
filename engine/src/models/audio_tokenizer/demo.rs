//! The listening demo: a MERT-v2 and a tokenizer head of the exact architectures with random
//! weights (`yued demo-model --family listen`), for tests, the cover flow on the demo
//! backbone and benchmarks. The head's codebook is the demo backbone's of the same preset, so
//! its codes feed that backbone's `semantic_tokens`.
use super::head::{HeadConfig, ARCH as HEAD_ARCH, CONFIG_KEY as HEAD_KEY};
use crate::ggml::GgmlType;
use crate::gguf::{GgufError, GgufWriter};
use crate::models::mert::config::{MertConfig, CONFIG_KEY as MERT_KEY};
use crate::models::mert::model::{tensor_shapes, ARCH as MERT_ARCH};
use crate::nn::demo::{random_values, Preset};
use std::path::{Path, PathBuf};

/// The MERT of a preset: tiny widths (a 64-wide, 4-block encoder on the published front end),
/// tiny widths at the published depths (`deep`), or the published configuration (`full`).
pub fn mert_config(preset: Preset) -> MertConfig {
    let published = MertConfig {
        sampling_rate: 24_000,
        n_fft: 2048,
        hop_length: 240,
        win_length: 2048,
        num_mel_bins: 128,
        subsampling_channels: [128, 512, 1024],
        subsampling_depths: [3, 4, 5],
        subsampling_layer_norm_eps: 1e-6,
        hidden_size: 1024,
        intermediate_size: 4096,
        num_hidden_layers: 24,
        num_attention_heads: 16,
        conv_depthwise_kernel_size: 31,
        layer_norm_eps: 1e-5,
        rotary_embedding_base: 1e4,
        inputs_to_logits_ratio: 960,
    };
    let tiny = MertConfig {
        subsampling_channels: [128, 32, 64],
        subsampling_depths: [1, 2, 1],
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 4,
        num_attention_heads: 4,
        ..published.clone()
    };
    match preset {
        Preset::Tiny => tiny,
        Preset::Deep => MertConfig { subsampling_depths: [3, 4, 5], num_hidden_layers: 24, ..tiny },
        Preset::Full => published,
    }
}

/// The head of a preset, on [`mert_config`]'s MERT of the same preset.
pub fn head_config(preset: Preset) -> HeadConfig {
    let codebook = crate::models::yue2::demo::DemoSpec::new(preset).tokens.codebook_size as usize;
    let published = HeadConfig { base_model_name_or_path: base_model(preset), ..HeadConfig::published() };
    match preset {
        Preset::Full => HeadConfig { vocab_size: codebook, ..published },
        Preset::Tiny => HeadConfig {
            mert_layer: 2,
            hidden_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 64,
            vocab_size: codebook,
            ..published
        },
        Preset::Deep => HeadConfig {
            hidden_size: 32,
            num_attention_heads: 4,
            intermediate_size: 64,
            vocab_size: codebook,
            ..published
        },
    }
}

/// The head's base model, naming the MERT file beside it: `MERT-v2-demo-{preset}-F32.gguf`.
pub(crate) fn base_model(preset: Preset) -> String {
    format!("yued/MERT-v2-demo-{}", preset.name())
}

/// The front end's tables: a periodic Hann window, a triangular filterbank on the mel scale,
/// and per-bin statistics near a song's.
fn host_tables(c: &MertConfig) -> Vec<(&'static str, Vec<i64>, Vec<f32>)> {
    let (n_fft, mels) = (c.n_fft, c.num_mel_bins);
    let bins = n_fft / 2 + 1;
    let window =
        (0..n_fft).map(|j| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * j as f64 / n_fft as f64).cos()) as f32).collect();
    let mel = |b: usize| 2595.0 * (1.0 + b as f64 * c.sampling_rate as f64 / n_fft as f64 / 700.0).log10();
    let top = mel(bins - 1);
    let edge = |k: usize| top * k as f64 / (mels + 1) as f64;
    let mut fb = Vec::with_capacity(bins * mels);
    for b in 0..bins {
        let m = mel(b);
        for k in 0..mels {
            let (lo, mid, hi) = (edge(k), edge(k + 1), edge(k + 2));
            fb.push(((m - lo) / (mid - lo)).min((hi - m) / (hi - mid)).max(0.0) as f32);
        }
    }
    vec![
        ("feature_extractor.spectrogram.window", vec![n_fft as i64], window),
        ("feature_extractor.mel_scale.fb", vec![mels as i64, bins as i64], fb),
        ("feature_extractor.mel_mean", vec![mels as i64], vec![-30.0; mels]),
        ("feature_extractor.mel_std", vec![mels as i64], vec![12.0; mels]),
    ]
}

/// A random tensor: LayerNorm scales (1-D weights) around 1, the rest by role.
pub(crate) fn values(seed: u64, name: &str, ne: &[i64]) -> Vec<f32> {
    let v = random_values(seed, name, ne);
    if ne.len() == 1 && name.ends_with(".weight") && !name.ends_with("norm.weight") {
        let scale = 3f32.sqrt() / (ne[0] as f32).sqrt(); // random_values' scale for this role
        v.into_iter().map(|x| 1.0 + 0.2 * x / scale).collect()
    } else {
        v
    }
}

pub(crate) fn write(
    path: &Path,
    w: &mut GgufWriter,
    tensors: Vec<(String, Vec<i64>, Vec<f32>)>,
) -> Result<(), GgufError> {
    for (name, ne, _) in &tensors {
        w.add_tensor(name, GgmlType::F32, ne);
    }
    let mut data = w.create(path)?;
    for (_, _, v) in &tensors {
        data.write(&crate::ggml::encode_f32(GgmlType::F32, v).expect("F32 encodes"))?;
    }
    data.finish()
}

/// Writes `MERT-v2-demo-{preset}-F32.gguf` and `yue2-tokenizer-demo-{preset}-F32.gguf` into
/// `dir` (the head finds the MERT beside it); returns (MERT, head).
pub fn write_demo(
    dir: &Path,
    preset: Preset,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(PathBuf, PathBuf), GgufError> {
    std::fs::create_dir_all(dir).map_err(|source| GgufError::Io { path: dir.to_path_buf(), error: source })?;
    let (mc, hc) = (mert_config(preset), head_config(preset));
    let tag = preset.name();
    let shapes = tensor_shapes(&mc);
    let heads = hc.tensor_shapes(mc.hidden_size);
    let total = shapes.len() + heads.len();
    let mut tensors: Vec<(String, Vec<i64>, Vec<f32>)> =
        host_tables(&mc).into_iter().map(|(n, ne, v)| (n.to_string(), ne, v)).collect();
    for (i, (name, ne)) in shapes.into_iter().enumerate() {
        let v = values(seed, &name, &ne);
        tensors.push((name, ne, v));
        progress(i + 1, total);
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mert = dir.join(format!("MERT-v2-demo-{tag}-F32.gguf"));
    let mut w = GgufWriter::new();
    let json = serde_json::to_string(&mert_json(&mc)).expect("a configuration serialises");
    w.set_str("general.architecture", MERT_ARCH)
        .set_str("general.name", &format!("yued demo MERT-v2 ({tag}, RANDOM WEIGHTS)"))
        .set_str(MERT_KEY, &json);
    write(&mert, &mut w, tensors)?;
    let done = total - heads.len();
    let mut tensors = Vec::new();
    for (i, (name, ne)) in heads.into_iter().enumerate() {
        let v = values(seed, &name, &ne);
        tensors.push((name, ne, v));
        progress(done + i + 1, total);
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let head = dir.join(format!("yue2-tokenizer-demo-{tag}-F32.gguf"));
    let mut w = GgufWriter::new();
    w.set_str("general.architecture", HEAD_ARCH)
        .set_str("general.name", &format!("yued demo audio tokenizer ({tag}, RANDOM WEIGHTS)"))
        .set_str(HEAD_KEY, &serde_json::to_string(&hc).expect("a configuration serialises"));
    write(&head, &mut w, tensors)?;
    Ok((mert, head))
}

/// The MERT configuration as its checkpoint's `config.json` holds it.
fn mert_json(c: &MertConfig) -> serde_json::Value {
    serde_json::json!({
        "model_type": "mert2",
        "sampling_rate": c.sampling_rate,
        "n_fft": c.n_fft,
        "hop_length": c.hop_length,
        "win_length": c.win_length,
        "num_mel_bins": c.num_mel_bins,
        "subsampling_channels": c.subsampling_channels,
        "subsampling_depths": c.subsampling_depths,
        "subsampling_layer_norm_eps": c.subsampling_layer_norm_eps,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "conv_depthwise_kernel_size": c.conv_depthwise_kernel_size,
        "layer_norm_eps": c.layer_norm_eps,
        "rotary_embedding_base": c.rotary_embedding_base,
        "inputs_to_logits_ratio": c.inputs_to_logits_ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::Backend;
    use crate::models::audio_tokenizer::pipeline::AudioTokenizer;

    #[test]
    fn the_tiny_demo_loads_and_writes_codes_the_demo_backbone_takes() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, head) = write_demo(tmp.path(), Preset::Tiny, 3, &mut |_, _| {}).unwrap();
        let backend = Backend::for_tests(2);
        let mut tok = AudioTokenizer::open(&head, &backend).unwrap();
        let mono = crate::models::mert::fixture::audio(3 * 24_000, 9);
        let mut t = tok.start(mono).unwrap();
        while t.step(&mut tok, &backend).unwrap() {}
        let codebook = crate::models::yue2::demo::DemoSpec::new(Preset::Tiny).tokens.codebook_size;
        assert_eq!(t.codes().len(), 75);
        assert!(t.codes().iter().all(|&c| c < codebook), "codes within the demo backbone's codebook");
        let distinct: std::collections::BTreeSet<_> = t.codes().iter().collect();
        assert!(distinct.len() > 5, "random weights still give varied codes: {distinct:?}");
    }
}
