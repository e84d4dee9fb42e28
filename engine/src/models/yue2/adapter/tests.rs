//! The adapters against fixtures/lora (scripts/ref/lora_reference.py: a PEFT LoRA on the tiny
//! backbone of fixtures/ar, rewritten in the other layouts, and the reference merges).
use super::*;
use crate::ggml::{Backend, GgmlType};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::models::yue2::ar::{ArModel, Positions, SeqInput};
use crate::models::yue2::config::BackboneInfo;
use crate::models::yue2::nar::NarModel;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn backbone() -> (GgufFile, Shapes) {
    let f = GgufFile::open(root().join("ar/tiny-qwen3.gguf")).unwrap();
    let s = shapes_of(&f);
    (f, s)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn st_tensors(p: &Path) -> HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.names().into_iter().map(|n| (n.clone(), f32s(st.tensor(n).unwrap().data()))).collect()
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Every AR tensor an adapter stack changes, merged (bytes by name).
fn merged(f: &GgufFile, stack: &[(&Adapter, f32)], shapes: &Shapes, nar: bool) -> HashMap<String, Vec<u8>> {
    let backend = Backend::for_tests(2);
    stack_terms(stack, shapes, nar)
        .unwrap()
        .into_iter()
        .map(|(name, terms)| {
            let t = f.require_tensor(&name).unwrap();
            (name, merge(&backend, t.ty, &t.ne, f.tensor_bytes(t), &terms, 2).unwrap())
        })
        .collect()
}

#[test]
fn the_scan_reads_every_layout_and_records_the_halves() {
    let (_, shapes) = backbone();
    let d = AdapterDir::scan(&root().join("lora/adapters"), &shapes).unwrap();
    assert!(d.unusable.is_empty(), "{:?}", d.unusable);
    let names: Vec<&str> = d.adapters.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "comfy.safetensors",
            "diff.safetensors",
            "nar.safetensors",
            "native.safetensors",
            "peft",
            "slider.safetensors"
        ]
    );
    let by = |n: &str| d.get(n).unwrap();
    for (n, layout) in [
        ("peft", Layout::Peft),
        ("comfy.safetensors", Layout::ComfyUi),
        ("native.safetensors", Layout::Native),
        ("slider.safetensors", Layout::Slider),
        ("nar.safetensors", Layout::Bundled),
    ] {
        assert_eq!(by(n).layouts, vec![layout], "{n}");
    }
    for n in ["peft", "comfy.safetensors", "native.safetensors", "slider.safetensors"] {
        let a = by(n);
        assert!(a.ar && !a.nar, "{n} changes the AR half only");
        assert_eq!(a.tensors, 2 * 7, "{n}: 7 projections in each of 2 layers");
    }
    assert_eq!((by("peft").rank, by("peft").alpha), (4, Some(8.0)), "alpha from adapter_config.json");
    assert_eq!(by("native.safetensors").rank, 12, "the fused qkv factor has rank 3r");
    let nar = by("nar.safetensors");
    assert!(nar.nar && !nar.ar && nar.tensors == 3);
    assert!(d.get("nope.safetensors").unwrap_err().contains("not in the adapter directory"));
}

#[test]
fn every_layout_merges_to_the_same_bytes_as_peft_merges_its_weights() {
    let (f, shapes) = backbone();
    let d = AdapterDir::scan(&root().join("lora/adapters"), &shapes).unwrap();
    let reference = merged(&f, &[(d.get("peft").unwrap(), 1.0)], &shapes, false);
    assert_eq!(reference.len(), 14);
    for n in ["comfy.safetensors", "native.safetensors", "slider.safetensors"] {
        let m = merged(&f, &[(d.get(n).unwrap(), 1.0)], &shapes, false);
        assert_eq!(m.len(), reference.len(), "{n}");
        for (name, bytes) in &reference {
            assert!(m[name] == *bytes, "{n}: {name} differs from the PEFT layout's merge");
        }
    }
    // merge_and_unload()'s own weights, to f32 rounding.
    let peft = st_tensors(&root().join("lora/merged.safetensors"));
    for (name, bytes) in &reference {
        let r = rel(&f32s(bytes), &peft[name]);
        assert!(r < 1e-6, "{name}: relative RMS {r:e} against PEFT's merge");
    }
}

#[test]
fn the_merged_model_computes_the_logits_of_peft_merge_and_unload() {
    let (f, shapes) = backbone();
    let d = AdapterDir::scan(&root().join("lora/adapters"), &shapes).unwrap();
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("lora/cases.json")).unwrap()).unwrap();
    let seq: Vec<u32> = cases["seq"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let want = f32s(&std::fs::read(root().join("lora/logits.f32")).unwrap());
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::for_tests(2);
    let vocab = info.config.vocab_size as u32;
    let logits = |terms: &HashMap<String, Vec<Term>>| -> Vec<f32> {
        let mut ar = ArModel::load_with(&f, &info, &backend, terms).unwrap();
        // An F32 KV set: the comparison is of the weights, not of the F16 cache.
        let mut sets = vec![KvSet::with_type(&backend, info.config.kv_dims(), seq.len(), 1, GgmlType::F32).unwrap()];
        ar.forward(&backend, &mut sets, &[SeqInput { tokens: &seq, set: 0 }], 0..vocab, Positions::All).unwrap().per_seq
            [0]
        .concat()
    };
    let got = logits(&stack_terms(&[(d.get("native.safetensors").unwrap(), 1.0)], &shapes, false).unwrap());
    let r = rel(&got, &want);
    assert!(r < crate::test_util::tol(&backend, 1e-5) as f64, "relative RMS {r:e} against PEFT's merged model");
    let argmax: Vec<usize> = got
        .chunks(vocab as usize)
        .map(|row| row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0)
        .collect();
    let want_argmax: Vec<usize> =
        cases["argmax"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    assert_eq!(argmax, want_argmax);
    // The adapter matters: without it the logits are far from the merged model's.
    assert!(rel(&logits(&HashMap::new()), &want) > 1e-2);
}

#[test]
fn two_stacked_adapters_add_at_their_strengths() {
    let (f, shapes) = backbone();
    let d = AdapterDir::scan(&root().join("lora/adapters"), &shapes).unwrap();
    let name = "model.layers.1.mlp.up_proj.weight";
    let m = merged(&f, &[(d.get("peft").unwrap(), 0.5), (d.get("diff.safetensors").unwrap(), -1.0)], &shapes, false);
    let got = f32s(&m[name]);
    let base = f32s(f.tensor_bytes(f.require_tensor(name).unwrap()));
    let full = st_tensors(&root().join("lora/merged.safetensors"))[name].clone(); // W + 2 B A
    let diff = st_tensors(&root().join("lora/adapters/diff.safetensors"))["layers.1.mlp.up_proj.diff"].clone();
    let want: Vec<f32> = (0..base.len()).map(|i| base[i] + 0.5 * (full[i] - base[i]) - diff[i]).collect();
    assert!(rel(&got, &want) < 1e-6, "{:e}", rel(&got, &want));
    // A zero strength adds nothing, and names no variant of the half.
    assert!(stack_terms(&[(d.get("peft").unwrap(), 0.0)], &shapes, false).unwrap().is_empty());
    assert_eq!(half_key(&[(d.get("peft").unwrap(), 0.0), (d.get("nar.safetensors").unwrap(), 1.0)], false), "");
    assert_eq!(half_key(&[(d.get("peft").unwrap(), 0.5), (d.get("nar.safetensors").unwrap(), 1.0)], false), "peft@0.5");
}

#[test]
fn the_nar_adapter_changes_the_nar_half_and_not_the_ar() {
    let (f, shapes) = backbone();
    let d = AdapterDir::scan(&root().join("lora/adapters"), &shapes).unwrap();
    let stack = [(d.get("nar.safetensors").unwrap(), 1.0f32)];
    assert!(stack_terms(&stack, &shapes, false).unwrap().is_empty(), "nothing for the AR half");
    let terms = stack_terms(&stack, &shapes, true).unwrap();
    let mut names: Vec<&String> = terms.keys().collect();
    names.sort();
    assert_eq!(
        names,
        ["model.layers.0.nar_self_attn.q_proj.weight", "model.layers.1.nar_mlp.down_proj.weight", "vae2llm.weight"]
    );
    // At strength 1 the replacement is the adapter's tensor.
    let m = merged(&f, &stack, &shapes, true);
    let full = st_tensors(&root().join("lora/adapters/nar.safetensors"))["io.vae2llm.weight"].clone();
    assert!(rel(&f32s(&m["vae2llm.weight"]), &full) < 1e-6);
    // And the NAR's velocity moves.
    let info = BackboneInfo::from_gguf(&f).unwrap();
    let backend = Backend::for_tests(2);
    let mut kv = KvSet::new(&backend, info.config.kv_dims(), 8).unwrap();
    let mut ar = ArModel::load(&f, &info, &backend).unwrap();
    let toks: Vec<u32> = (0..8).map(|i| 256 + i).collect();
    ar.forward(&backend, std::slice::from_mut(&mut kv), &[SeqInput { tokens: &toks, set: 0 }], 0..1, Positions::Last)
        .unwrap();
    let mut plain = NarModel::load(&f, &info, &backend).unwrap();
    let mut adapted = NarModel::load_with(&f, &info, &backend, &terms).unwrap();
    let x: Vec<f32> = (0..3 * plain.latent).map(|i| (i as f32 * 0.37).sin()).collect();
    let (a, b) = (
        plain.velocity(&backend, &kv, &x, 3, 1, 0.5).unwrap(),
        adapted.velocity(&backend, &kv, &x, 3, 1, 0.5).unwrap(),
    );
    assert!(rel(&a, &b) > 1e-3, "the NAR adapter changes the velocity");
}

#[test]
fn a_q8_0_base_merges_to_the_bytes_of_numpys_dequantize_add_requantize() {
    let q8 = root().join("lora/q8");
    let base = std::fs::read(q8.join("base.q8_0")).unwrap();
    let want = std::fs::read(q8.join("merged.q8_0")).unwrap();
    let fac = st_tensors(&q8.join("factors.safetensors"));
    let backend = Backend::for_tests(2);
    let terms = [Term::Lora { a: fac["lora_A"].clone(), b: fac["lora_B"].clone(), rank: 4, scale: 0.75 * 2.0 }];
    let got = merge(&backend, GgmlType::Q8_0, &[64, 64], &base, &terms, 3).unwrap();
    assert_eq!(got.len(), want.len());
    // Q8_0 blocks: an f16 scale and 32 int8 values (34 bytes).
    let differing = got.chunks(34).zip(want.chunks(34)).filter(|(a, b)| a != b).count();
    assert_eq!(differing, 0, "{differing} of {} blocks differ from gguf-py's", want.len() / 34);
}

#[test]
fn a_q6_k_base_merges_within_one_quantization_step() {
    let (rows, cols, rank) = (6usize, 512usize, 3usize);
    let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1000) as f32 / 700.0 - 0.7).collect();
    let base = crate::ggml::quantize(GgmlType::Q6_K, &w, cols);
    let a: Vec<f32> = (0..rank * cols).map(|i| (i as f32 * 0.013).sin() * 0.2).collect();
    let b: Vec<f32> = (0..rows * rank).map(|i| (i as f32 * 0.7).cos() * 0.2).collect();
    let backend = Backend::for_tests(2);
    let got = merge(
        &backend,
        GgmlType::Q6_K,
        &[cols as i64, rows as i64],
        &base,
        &[Term::Lora { a: a.clone(), b: b.clone(), rank, scale: 1.5 }],
        2,
    )
    .unwrap();
    let deq = crate::ggml::decode_to_f32(GgmlType::Q6_K, &base).unwrap();
    let exact: Vec<f32> = (0..rows * cols)
        .map(|k| {
            let (o, i) = (k / cols, k % cols);
            deq[k] + 1.5 * (0..rank).map(|r| b[o * rank + r] * a[r * cols + i]).sum::<f32>()
        })
        .collect();
    let direct =
        crate::ggml::decode_to_f32(GgmlType::Q6_K, &crate::ggml::quantize(GgmlType::Q6_K, &exact, cols)).unwrap();
    let merged = crate::ggml::decode_to_f32(GgmlType::Q6_K, &got).unwrap();
    let step = exact.iter().zip(&direct).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let err = exact.iter().zip(&merged).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(err <= step * 1.01 + 1e-6, "the merge is off by {err}, one quantization step is {step}");
    assert!(got == crate::ggml::quantize(GgmlType::Q6_K, &exact, cols) || err <= step * 1.01);
}

/// A key naming nothing of the backbone, or a layer it does not have, leaves the adapter
/// unusable with the key named, beside the usable ones.
#[test]
fn a_key_outside_the_backbone_skips_the_adapter_with_the_key_named() {
    let (_, shapes) = backbone();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, keys: &[(&str, Vec<usize>)]| {
        let data: Vec<(String, Vec<u8>, Vec<usize>)> =
            keys.iter().map(|(k, s)| (k.to_string(), vec![0u8; 4 * s.iter().product::<usize>()], s.clone())).collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
            .iter()
            .map(|(k, b, s)| {
                (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
            })
            .collect();
        std::fs::write(dir.path().join(name), safetensors::serialize(views, &None).unwrap()).unwrap();
    };
    write(
        "x.safetensors",
        &[
            ("layers.0.self_attn.x_proj.lora_A.weight", vec![2, 64]),
            ("layers.0.self_attn.x_proj.lora_B.weight", vec![64, 2]),
        ],
    );
    write(
        "deep.safetensors",
        &[
            ("layers.9.self_attn.q_proj.lora_A.weight", vec![2, 64]),
            ("layers.9.self_attn.q_proj.lora_B.weight", vec![64, 2]),
        ],
    );
    write("half.safetensors", &[("layers.0.self_attn.q_proj.lora_A.weight", vec![2, 64])]);
    write(
        "ok.safetensors",
        &[
            ("layers.0.self_attn.q_proj.lora_A.weight", vec![2, 64]),
            ("layers.0.self_attn.q_proj.lora_B.weight", vec![64, 2]),
        ],
    );
    std::fs::write(dir.path().join("junk.safetensors"), b"not safetensors").unwrap();
    let d = AdapterDir::scan(dir.path(), &shapes).unwrap();
    assert_eq!(d.adapters.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["ok.safetensors"]);
    let reason = |n: &str| d.unusable.iter().find(|u| u.name == n).unwrap().reason.clone();
    assert!(reason("x.safetensors").contains("layers.0.self_attn.x_proj.lora_A.weight"), "{}", reason("x.safetensors"));
    assert!(reason("deep.safetensors").contains("model.layers.9.self_attn.q_proj"), "{}", reason("deep.safetensors"));
    assert!(reason("half.safetensors").contains("without its pair"), "{}", reason("half.safetensors"));
    assert!(reason("junk.safetensors").contains("not a safetensors file"), "{}", reason("junk.safetensors"));
    assert!(d.get("x.safetensors").unwrap_err().contains("not usable"));
}

/// The dense delta of a tensor's terms (LoRA's `scale·B@A`, a diff's `scale·D`).
fn dense(terms: &[Term], n: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    for t in terms {
        match t {
            Term::Lora { a, b, rank, scale } => {
                for (i, row) in out.chunks_mut(cols).enumerate() {
                    for (j, x) in row.iter_mut().enumerate() {
                        *x += scale * (0..*rank).map(|r| b[i * rank + r] * a[r * cols + j]).sum::<f32>();
                    }
                }
            }
            Term::Diff { d, scale } => out.iter_mut().zip(d).for_each(|(x, y)| *x += scale * y),
            Term::Replace { .. } => panic!("no replacement in the LoKr fixtures"),
        }
    }
    out
}

/// LoKr (whole and factorised factors, fused, `lokr_dim`), AI Toolkit's and the GGUF-style
/// keys, `.diff_b`, the time embedder and rsLoRA give LyCORIS's and torch's deltas
/// (scripts/ref/lokr_reference.py); DoRA, LoHa, PiSSA and a rank_pattern are refused by name;
/// a key naming nothing of the backbone is skipped and counted.
#[test]
fn lokr_and_the_other_layouts_give_the_reference_deltas_and_the_rest_is_refused_by_name() {
    let dir = root().join("lora/lokr");
    let shapes: Shapes =
        serde_json::from_str::<HashMap<String, Vec<usize>>>(&std::fs::read_to_string(dir.join("shapes.json")).unwrap())
            .unwrap();
    let d = AdapterDir::scan(&dir.join("adapters"), &shapes).unwrap();
    let reason = |n: &str| d.unusable.iter().find(|u| u.name == n).map(|u| u.reason.clone()).unwrap_or_default();
    for (name, needle) in
        [("dora", "DoRA"), ("loha.safetensors", "LoHa"), ("pissa.safetensors", "PiSSA"), ("pattern", "rank_pattern")]
    {
        assert!(reason(name).contains(needle), "{name}: {:?}", d.unusable);
    }
    assert_eq!(d.get("ignored.safetensors").unwrap().ignored, 1);
    assert_eq!(d.get("gguf_lokr_dim.safetensors").unwrap().layouts, vec![Layout::Gguf]);
    let expected = st_tensors(&dir.join("expected.safetensors"));
    let mut seen = 0;
    for a in &d.adapters {
        let mut got: HashMap<String, Vec<Term>> = HashMap::new();
        for nar in [false, true] {
            got.extend(stack_terms(&[(a, 0.75)], &shapes, nar).unwrap());
        }
        let want: Vec<(&str, &Vec<f32>)> =
            expected.iter().filter_map(|(k, v)| k.strip_prefix(&format!("{}/", a.name)).map(|t| (t, v))).collect();
        assert_eq!(got.len(), want.len(), "{}: {:?}", a.name, got.keys().collect::<Vec<_>>());
        for (tensor, w) in want {
            let s = &shapes[tensor];
            let cols = s.get(1).copied().unwrap_or(1);
            let delta = dense(&got[tensor], w.len(), cols);
            assert!(rel(&delta, w) < 1e-6, "{}: {tensor}: rel {}", a.name, rel(&delta, w));
            seen += 1;
        }
        assert_eq!(a.nar, got.keys().any(|t| crate::models::yue2::config::is_nar_tensor(t)), "{}", a.name);
    }
    assert_eq!(seen, expected.len(), "every expected delta was checked");
}
