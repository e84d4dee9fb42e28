use super::*;

/// The published checkpoint's values (MERT2Config's defaults).
fn published() -> serde_json::Value {
    serde_json::json!({
        "sampling_rate": 24000, "n_fft": 2048, "hop_length": 240, "win_length": 2048, "num_mel_bins": 128,
        "subsampling_channels": [128, 512, 1024], "subsampling_depths": [3, 4, 5],
        "subsampling_layer_norm_eps": 1e-6, "hidden_size": 1024, "intermediate_size": 4096,
        "num_hidden_layers": 24, "num_attention_heads": 16, "conv_depthwise_kernel_size": 31,
        "layer_norm_eps": 1e-5, "rotary_embedding_base": 10000.0, "inputs_to_logits_ratio": 960,
        "model_type": "mert2"
    })
}

#[test]
fn the_published_configuration_parses_and_unknown_keys_are_ignored() {
    let c = MertConfig::from_json(&published().to_string()).unwrap();
    assert_eq!((c.head_dim(), c.subsampling_depths, c.num_hidden_layers), (64, [3, 4, 5], 24));
    // 30 s at 24 kHz: 3000 front-end frames, 750 states (25 Hz).
    assert_eq!(c.frames(720_000), 750);
    assert_eq!(c.frames(24_001), 25);
}

#[test]
fn a_configuration_the_encoder_cannot_run_names_its_key() {
    for (key, value) in [
        ("sampling_rate", serde_json::json!(44100)),
        ("num_hidden_layers", serde_json::json!(25)),
        ("num_attention_heads", serde_json::json!(3)),
        ("win_length", serde_json::json!(1024)),
        ("inputs_to_logits_ratio", serde_json::json!(480)),
    ] {
        let mut j = published();
        j[key] = value;
        let e = MertConfig::from_json(&j.to_string()).unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
    let mut j = published();
    j.as_object_mut().unwrap().remove("hidden_size");
    let e = MertConfig::from_json(&j.to_string()).unwrap_err().to_string();
    assert!(e.contains("hidden_size"), "{e}");
}

#[test]
fn a_head_finds_its_mert_in_the_same_quant() {
    let head = Path::new("models/yue2-mothersuperior-realaudio-tokenizer-v4-Q8_0.gguf");
    assert_eq!(beside(head, "m-a-p/MERT-v2-FullSong"), Some(PathBuf::from("models/MERT-v2-FullSong-Q8_0.gguf")));
    let f32 = Path::new("SheetSage2-F32.gguf");
    assert_eq!(beside(f32, "m-a-p/MERT-v2-FullSong"), Some(PathBuf::from("MERT-v2-FullSong-F32.gguf")));
    assert_eq!(beside(Path::new("head.gguf"), "m-a-p/MERT-v2-FullSong"), None);
}
