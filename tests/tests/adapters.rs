//! LoRA adapters through the real daemon: `--adapters DIR` scanned against the backbone,
//! listed in `/props` (an unusable one with its reason), stacked per request, a second
//! strength reloading only the half it changes (counted in the job's metrics), the replay
//! rendering the same bytes, and the 400s naming `adapters[i].name`.
use std::path::Path;
use std::time::Duration;
use yued_e2e::*;
use yued_engine::gguf::GgufFile;

/// A LoRA of rank 2 on `module` (`layers.N.self_attn.q_proj` style, native layout).
fn lora(module: &str, weight: &[usize], seed: u32) -> Vec<(String, Vec<f32>, Vec<usize>)> {
    let (out, inp) = (weight[0], weight[1]);
    let val = |i: usize, k: u32| ((i as f32 * 0.731 + k as f32 * 1.37).sin()) * 0.5;
    vec![
        (format!("{module}.lora_A.weight"), (0..2 * inp).map(|i| val(i, seed)).collect(), vec![2, inp]),
        (format!("{module}.lora_B.weight"), (0..out * 2).map(|i| val(i, seed + 7)).collect(), vec![out, 2]),
    ]
}

fn write(path: &Path, tensors: &[(String, Vec<f32>, Vec<usize>)]) {
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(n, v, s)| (n.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect(), s.clone()))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, b, s)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

fn result(d: &Daemon, id: &str) -> Vec<(String, Vec<u8>)> {
    let body = d.http.get(d.url(&format!("/job?id={id}&result=1"))).send().unwrap().bytes().unwrap();
    multipart_parts(&body, yued_protocol::MULTIPART_BOUNDARY)
}

#[test]
fn adapters_stack_per_request_and_reload_only_the_half_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The demo backbone the daemon will serve (written as it would write it), so the
    // adapters can be shaped for it.
    let models = data.join("models");
    let (backbone, _) = yued_engine::models::yue2::demo::write_demo(
        &models,
        yued_engine::models::yue2::demo::Preset::Tiny,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let shapes = yued_engine::models::yue2::adapter::shapes_of(&GgufFile::open(&backbone).unwrap());
    let adapters = dir.path().join("adapters");
    std::fs::create_dir_all(&adapters).unwrap();
    let shape = |n: &str| shapes[n].clone();
    let mut ar = lora("layers.0.self_attn.q_proj", &shape("model.layers.0.self_attn.q_proj.weight"), 1);
    ar.extend(lora("layers.1.mlp.down_proj", &shape("model.layers.1.mlp.down_proj.weight"), 2));
    write(&adapters.join("ar.safetensors"), &ar);
    write(
        &adapters.join("nar.safetensors"),
        &lora("layers.0.nar_self_attn.v_proj", &shape("model.layers.0.nar_self_attn.v_proj.weight"), 3),
    );
    write(&adapters.join("bad.safetensors"), &lora("layers.0.self_attn.z_proj", &[8, 8], 4));

    let d = Daemon::start(&data, &["--keep-loaded", "--adapters", adapters.to_str().unwrap()]);
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    let listed = props["adapters"].as_array().unwrap();
    let entry =
        |n: &str| listed.iter().find(|a| a["name"] == n).unwrap_or_else(|| panic!("{n} not in {listed:?}")).clone();
    assert_eq!(
        (entry("ar.safetensors")["ar"].as_bool(), entry("ar.safetensors")["nar"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(
        (entry("nar.safetensors")["ar"].as_bool(), entry("nar.safetensors")["nar"].as_bool()),
        (Some(false), Some(true))
    );
    assert!(entry("bad.safetensors")["error"].as_str().unwrap().contains("z_proj"), "{listed:?}");

    let with = |adapters: &str| -> String {
        let mut v: serde_json::Value = serde_json::from_str(&song(4.0, 2)).unwrap();
        v["seed"] = 5.into();
        v["lm_seed"] = 5.into();
        v["adapters"] = serde_json::from_str(adapters).unwrap();
        v.to_string()
    };
    // Bad names are 400s naming the entry.
    for (body, needle) in [
        (with(r#"[{"name": "nope.safetensors"}]"#), "adapters[0].name"),
        (with(r#"[{"name": "ar.safetensors"}, {"name": "bad.safetensors"}]"#), "adapters[1].name"),
    ] {
        let (s, v, _) = d.submit_as(&body, None);
        assert_eq!(s, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{v}");
    }

    let run = |body: &str| -> (serde_json::Value, Vec<(String, Vec<u8>)>) {
        let id = d.submit(body);
        let st = d.wait(&id, Duration::from_secs(300));
        assert_eq!(st["status"], "done", "{st}; log: {}", d.log());
        (st, result(&d, &id))
    };
    let wav = |p: &[(String, Vec<u8>)]| p.iter().find(|(h, _)| h.contains("audio/wav")).unwrap().1.clone();
    let replay = |p: &[(String, Vec<u8>)]| -> serde_json::Value {
        serde_json::from_slice(&p.iter().find(|(h, _)| h.contains("json")).unwrap().1).unwrap()
    };
    let (_, plain) = run(&with("[]"));
    let (a, parts_a) =
        run(&with(r#"[{"name": "ar.safetensors", "scale": 1.0}, {"name": "nar.safetensors", "scale": 1.0}]"#));
    assert_eq!(a["metrics"]["module_loads"], 2, "both halves under their adapters: {a}");
    assert_ne!(
        replay(&parts_a)["semantic_tokens"],
        replay(&plain)["semantic_tokens"],
        "the AR adapter changes the codes"
    );
    // Another strength of the NAR adapter alone: only the NAR half loads again.
    let (b, parts_b) =
        run(&with(r#"[{"name": "ar.safetensors", "scale": 1.0}, {"name": "nar.safetensors", "scale": 0.5}]"#));
    assert_eq!(b["metrics"]["module_loads"], 1, "the NAR half alone: {b}");
    assert_eq!(
        replay(&parts_b)["semantic_tokens"],
        replay(&parts_a)["semantic_tokens"],
        "the AR half is the same variant"
    );
    assert_ne!(wav(&parts_b), wav(&parts_a));
    // A zero strength is no adapter at all: the plain halves, nothing loaded.
    let (z, parts_z) = run(&with(r#"[{"name": "ar.safetensors", "scale": 0.0}]"#));
    assert_eq!(z["metrics"]["module_loads"], 0, "{z}");
    assert!(wav(&parts_z) == wav(&plain));
    // The replay carries the adapters and renders the same bytes.
    let r = replay(&parts_a);
    assert_eq!(r["adapters"].as_array().unwrap().len(), 2);
    let (_, again) = run(&r.to_string());
    assert!(wav(&again) == wav(&parts_a), "the replay with adapters renders the same WAV");
    let metrics = d.http.get(d.url("/metrics")).send().unwrap().text().unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("yued_module_loads_total ")
            && l.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() >= 6.0),
        "{metrics}"
    );
}
