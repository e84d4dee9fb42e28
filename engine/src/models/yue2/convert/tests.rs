use super::*;
use crate::gguf::GgufFile;
use crate::models::yue2::config::{backbone_tensor_shapes, BackboneInfo};
use crate::tokenizer::BpeTokenizer;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::PathBuf;

fn repo(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn write_shard(path: &Path, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, &None, path).unwrap();
}

#[test]
fn backbone_folder_converts_with_native_dtypes_and_the_real_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("YuE2-tiny");
    std::fs::create_dir_all(&ck).unwrap();
    let config = r#"{"architectures": ["YuE2ForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
        "vocab_size": 184704, "max_position_embeddings": 24576}"#;
    std::fs::write(ck.join("config.json"), config).unwrap();
    let tk = std::env::var_os("YUED_QWEN_TIKTOKEN").map(PathBuf::from).unwrap_or_else(|| repo(".cache/qwen.tiktoken"));
    std::fs::copy(&tk, ck.join("qwen.tiktoken"))
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-qwen-tiktoken.sh", tk.display()));
    let cfg = Yue2Config::from_json(config).unwrap();
    let mut all: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, (name, ne)) in backbone_tensor_shapes(&cfg, 64, 256).into_iter().enumerate() {
        let shape: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
        let n: usize = shape.iter().product();
        let (dt, size) = if ne.len() == 1 { (Dtype::F32, 4) } else { (Dtype::BF16, 2) };
        let bytes: Vec<u8> = (0..n * size).map(|k| ((k * 31 + i * 7) % 251) as u8).collect();
        all.push((name, dt, shape, bytes));
    }
    all.push(("latent_pos_embed.pe".into(), Dtype::BF16, vec![8, 32], vec![1u8; 8 * 32 * 2]));
    let half = all.len() / 2;
    write_shard(&ck.join("model-00001-of-00002.safetensors"), &all[..half]);
    write_shard(&ck.join("model-00002-of-00002.safetensors"), &all[half..]);
    let out = dir.path().join("yue2.gguf");
    let n = convert_backbone(&ck, &out).unwrap();
    assert_eq!(n, all.len() - 1, "latent_pos_embed.pe is dropped");
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_str("yue2.config_json").unwrap(), config, "the config travels verbatim");
    assert_eq!(f.get_i64("yue2.block_count").unwrap(), 1);
    assert!(f.tensor("latent_pos_embed.pe").is_none());
    for (name, dt, _, bytes) in &all[..all.len() - 1] {
        let t = f.require_tensor(name).unwrap();
        assert_eq!(t.ty, if *dt == Dtype::BF16 { GgmlType::BF16 } else { GgmlType::F32 }, "{name}");
        assert_eq!(f.tensor_bytes(t), &bytes[..], "{name} byte for byte");
    }
    let q = f.require_tensor("model.layers.0.self_attn.q_proj.weight").unwrap();
    assert_eq!(q.ne, vec![32, 32], "ne is the torch shape reversed");
    BackboneInfo::from_gguf(&f).unwrap();
    let tok = BpeTokenizer::from_gguf(&f).unwrap();
    assert_eq!(tok.len(), 151851);
    assert_eq!(tok.special_id("<abc>"), Some(151847));
    assert_eq!(tok.special_id("</abc>"), Some(151848));
    let fixture = std::fs::read_to_string(repo("fixtures/tokenizer/expected.jsonl")).unwrap();
    for line in fixture.lines().take(20) {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(c["text"].as_str().unwrap()), want);
    }
    // Errors name the file.
    std::fs::remove_file(ck.join("qwen.tiktoken")).unwrap();
    let e = convert_backbone(&ck, &out).unwrap_err().to_string();
    assert!(e.contains("qwen.tiktoken"), "{e}");
}

/// The block-vocabulary name of the tiny VAE fixture as stable-audio-tools writes it.
fn positional(name: &str, n_blocks: usize) -> String {
    let p: Vec<&str> = name.split('.').collect();
    let side = p[0];
    let param = p[p.len() - 1];
    let unit = |s: &str| ["snake1", "conv1", "snake2", "conv2"].iter().position(|x| *x == s).unwrap();
    let body = match p[1] {
        "conv1" => "layers.0".to_string(),
        "snake1" => format!("layers.{}", n_blocks + 1),
        "conv2" => format!("layers.{}", n_blocks + 2),
        "block" => {
            let b: usize = p[2].parse().unwrap();
            let leaf = p[3];
            let inner = if let Some(r) = leaf.strip_prefix("res_unit") {
                let r: usize = r.parse().unwrap();
                let k = if side == "decoder" { r + 1 } else { r - 1 };
                format!("{k}.layers.{}", unit(p[4]))
            } else if side == "decoder" {
                if leaf == "snake1" {
                    "0".into()
                } else {
                    "1".into()
                }
            } else if leaf == "snake1" {
                "3".into()
            } else {
                "4".into()
            };
            format!("layers.{}.layers.{inner}", b + 1)
        }
        other => panic!("{other}"),
    };
    format!("{side}.{body}.{param}")
}

#[test]
fn positional_vae_folder_converts_to_the_block_vocabulary() {
    let src = GgufFile::open(repo("fixtures/vae/tiny-vae.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("YuE2-Vae");
    std::fs::create_dir_all(&ck).unwrap();
    let mut tensors = Vec::new();
    for t in src.tensors() {
        let mut shape: Vec<usize> = t.ne.iter().rev().map(|&d| d as usize).collect();
        if t.name.ends_with(".alpha") || t.name.ends_with(".beta") {
            shape = vec![1, shape[0], 1]; // as checkpoints store them
        }
        let pos = positional(&t.name, 6);
        assert_eq!(vae_block_name(&pos, 6).as_deref(), Some(t.name.as_str()), "{pos}");
        tensors.push((pos, Dtype::F32, shape, src.tensor_bytes(t).to_vec()));
    }
    write_shard(&ck.join("model.safetensors"), &tensors);
    std::fs::write(
        ck.join("config.json"),
        r#"{"downsampling_ratios": [2, 2, 4, 4, 5, 6], "decoder_input_channels": 64,
        "sampling_rate": 48000, "audio_channels": 2}"#,
    )
    .unwrap();
    let out = dir.path().join("vae.gguf");
    assert_eq!(convert_vae(&ck, &out).unwrap(), src.tensors().len());
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_i64_array("yue2-vae.upsampling_ratios").unwrap(), vec![6, 5, 4, 4, 2, 2]);
    for t in src.tensors() {
        let g = f.require_tensor(&t.name).unwrap();
        assert_eq!(g.ne, t.ne, "{}", t.name);
        assert_eq!(f.tensor_bytes(g), src.tensor_bytes(t), "{}", t.name);
    }
    // A decoder output conv saved without bias gets a zero bias.
    let no_bias: Vec<_> = tensors.into_iter().filter(|(n, ..)| n != "decoder.layers.8.bias").collect();
    write_shard(&ck.join("model.safetensors"), &no_bias);
    convert_vae(&ck, &out).unwrap();
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.tensor_f32("decoder.conv2.bias").unwrap(), vec![0.0, 0.0]);
}
