//! LoRA adapters through the real daemon: `--adapters DIR` scanned against the backbone,
//! listed in `/props` (an unusable one with its reason), stacked per request, a second
//! strength reloading only the half it changes (counted in the job's metrics), the replay
//! rendering the same bytes, and the 400s naming `adapters[i].name`.
use serde_json::json;
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

/// `--companion` merges a NAR-only adapter under every render at the request's
/// `companion_scale` (once, when the request names the same file), and `ar_scale` /
/// `nar_scale` give one adapter its own strength on each half.
#[test]
fn a_companion_merges_under_every_render_once_and_each_half_takes_its_own_strength() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (backbone, _) = yued_engine::models::yue2::demo::write_demo(
        &data.join("models"),
        yued_engine::models::yue2::demo::Preset::Tiny,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let shapes = yued_engine::models::yue2::adapter::shapes_of(&GgufFile::open(&backbone).unwrap());
    let shape = |n: &str| shapes[n].clone();
    let adapters = dir.path().join("adapters");
    std::fs::create_dir_all(&adapters).unwrap();
    let mut both = lora("layers.0.self_attn.q_proj", &shape("model.layers.0.self_attn.q_proj.weight"), 5);
    both.extend(lora("layers.0.nar_mlp.up_proj", &shape("model.layers.0.nar_mlp.up_proj.weight"), 6));
    write(&adapters.join("both.safetensors"), &both);
    let comp = adapters.join("comp.safetensors");
    write(&comp, &lora("layers.1.nar_self_attn.o_proj", &shape("model.layers.1.nar_self_attn.o_proj.weight"), 8));

    // A companion that changes the AR half is refused at start, naming the flag.
    let bad = ["--companion".to_string(), adapters.join("both.safetensors").display().to_string()];
    let mut child = Daemon::spawn(&dir.path().join("refused"), free_port(), &bad, &[]);
    assert!(wait_exit(&mut child, Duration::from_secs(120)).is_some_and(|s| !s.success()));
    let log = std::fs::read_to_string(dir.path().join("refused.log")).unwrap();
    assert!(log.contains("--companion") && log.contains("AR half"), "{log}");

    let args = ["--keep-loaded", "--adapters", adapters.to_str().unwrap(), "--companion", comp.to_str().unwrap()];
    let d = Daemon::start(&data, &args);
    let props: serde_json::Value = d.http.get(d.url("/props")).send().unwrap().json().unwrap();
    assert_eq!(props["companion"], "comp.safetensors", "{props}");
    let with = |extra: serde_json::Value| -> String {
        let mut v: serde_json::Value = serde_json::from_str(&song(3.0, 2)).unwrap();
        v["seed"] = 9.into();
        v["lm_seed"] = 9.into();
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let run = |body: String| -> (Vec<u8>, serde_json::Value) {
        let id = d.submit(&body);
        let st = d.wait(&id, Duration::from_secs(300));
        assert_eq!(st["status"], "done", "{st}; log: {}", d.log());
        let parts = result(&d, &id);
        let wav = parts.iter().find(|(h, _)| h.contains("audio/wav")).unwrap().1.clone();
        let replay = serde_json::from_slice(&parts.iter().find(|(h, _)| h.contains("json")).unwrap().1).unwrap();
        (wav, replay)
    };
    let codes = |r: &serde_json::Value| r["semantic_tokens"].as_str().unwrap().to_string();
    let (off, off_r) = run(with(json!({"companion_scale": 0})));
    let (on, on_r) = run(with(json!({})));
    assert_eq!(codes(&on_r), codes(&off_r), "a companion changes the NAR half alone");
    assert!(on != off, "the companion changes the render");
    assert!(on_r.get("companion_scale").is_none(), "the default strength stays out of the replay: {on_r}");
    let (named, _) = run(with(json!({"adapters": [{"name": "comp.safetensors"}]})));
    assert!(named == on, "a request naming the companion merges it once");
    let (twice, _) = run(with(json!({"companion_scale": 0, "adapters": [{"name": "comp.safetensors", "scale": 2}]})));
    assert!(twice != on, "at twice the strength it renders otherwise");
    let (half, half_r) = run(with(json!({"companion_scale": 0.5})));
    assert!(half != on && half != off);
    assert_eq!(half_r["companion_scale"], 0.5, "{half_r}");

    // Per-half strengths: AR at 0 keeps the plain codes; NAR at 0 keeps the adapted codes.
    let (_, full) = run(with(json!({"companion_scale": 0, "adapters": [{"name": "both.safetensors"}]})));
    assert_ne!(codes(&full), codes(&off_r), "the AR half of the adapter changes the codes");
    let (nar_only, nar_r) = run(with(json!({"companion_scale": 0,
        "adapters": [{"name": "both.safetensors", "ar_scale": 0}]})));
    assert_eq!(codes(&nar_r), codes(&off_r));
    assert!(nar_only != off, "its NAR half still applies");
    let (_, ar_r) =
        run(with(json!({"companion_scale": 0, "adapters": [{"name": "both.safetensors", "nar_scale": 0}]})));
    assert_eq!(codes(&ar_r), codes(&full));
    assert_eq!(ar_r["adapters"][0]["nar_scale"], 0.0, "the replay keeps the per-half strength: {ar_r}");
    let (s, v, _) = d.submit_as(&with(json!({"companion_scale": 3})), None);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("companion_scale"), "{v}");
}
