//! The `--adapters` directory: every `.safetensors` file and every folder holding one is an
//! adapter. Each key is normalized to the backbone's GGUF names whatever the layout the
//! community shipped it in (PEFT, ComfyUI, native, slider tools, a bundled adapter's
//! `companion.*` / `io.*`), fused `qkv_proj` / `gate_up_proj` factors are split back onto
//! the separate projections by rows of B, and the halves an adapter changes are recorded.
//! A key that names nothing of the backbone makes the adapter unusable, with that key as
//! the reason, never a crash.
use crate::models::yue2::config::is_nar_tensor;
use crate::nn::lora::Term;
use regex::Regex;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The key layouts yued reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layout {
    /// `base_model.model.model.layers.N...lora_A/lora_B` (+ `adapter_config.json`).
    Peft,
    /// `text_encoders.*` (the AR half) and `diffusion_model.*` (the NAR half, under the AR
    /// projection names).
    ComfyUi,
    /// `layers.N.{self_attn,mlp,nar_self_attn,nar_mlp}.*`, fused projections allowed.
    Native,
    /// `adapters.model-layers-N-*` (slider tools).
    Slider,
    /// `companion.*` / `io.*` around a bundled acoustic adapter.
    Bundled,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Peft => "peft",
            Layout::ComfyUi => "comfyui",
            Layout::Native => "native",
            Layout::Slider => "slider",
            Layout::Bundled => "bundled",
        }
    }
}

/// An adapter of the directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapter {
    /// How a request names it: the file name, or the folder's name.
    pub name: String,
    /// Its safetensors file.
    pub file: PathBuf,
    /// Its layouts (one, except for a file that mixes them).
    pub layouts: Vec<Layout>,
    /// The largest LoRA rank (0 when it has only diff or replacement terms).
    pub rank: usize,
    /// The file-level alpha (`adapter_config.json`, else the metadata), when it has one.
    pub alpha: Option<f32>,
    /// Whether it changes the AR half, the NAR half.
    pub ar: bool,
    pub nar: bool,
    /// Backbone tensors it changes.
    pub tensors: usize,
}

/// An adapter the scan could not use, and why (the key at fault).
#[derive(Clone, Debug, PartialEq)]
pub struct Unusable {
    pub name: String,
    pub reason: String,
}

/// The directory's adapters, usable ones first, each list by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdapterDir {
    pub dir: PathBuf,
    pub adapters: Vec<Adapter>,
    pub unusable: Vec<Unusable>,
}

/// Torch shapes (`[out, in]`, `[n]`) of the backbone's tensors, by GGUF name.
pub type Shapes = HashMap<String, Vec<usize>>;

/// The backbone's tensor shapes, from its GGUF.
pub fn shapes_of(f: &crate::gguf::GgufFile) -> Shapes {
    f.tensors().iter().map(|t| (t.name.clone(), t.ne.iter().rev().map(|&d| d as usize).collect())).collect()
}

impl AdapterDir {
    /// Scans `dir` against the backbone's `shapes`.
    pub fn scan(dir: &Path, shapes: &Shapes) -> std::io::Result<AdapterDir> {
        let mut found: Vec<(String, PathBuf)> = Vec::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if p.is_file() && is_safetensors(&p) {
                found.push((name, p));
            } else if p.is_dir() {
                if let Some(file) = folder_file(&p) {
                    found.push((name, file));
                }
            }
        }
        let mut out = AdapterDir { dir: dir.to_path_buf(), ..Default::default() };
        for (name, file) in found {
            match Source::read(&file).and_then(|s| s.describe(&name, &file, shapes)) {
                Ok(a) => out.adapters.push(a),
                Err(reason) => {
                    tracing::warn!(adapter = %name, %reason, "adapter skipped");
                    out.unusable.push(Unusable { name, reason });
                }
            }
        }
        Ok(out)
    }

    pub fn get(&self, name: &str) -> Result<&Adapter, String> {
        if let Some(a) = self.adapters.iter().find(|a| a.name == name) {
            return Ok(a);
        }
        if let Some(u) = self.unusable.iter().find(|u| u.name == name) {
            return Err(format!("'{name}' is not usable: {}", u.reason));
        }
        Err(format!("'{name}' is not in the adapter directory {}", self.dir.display()))
    }
}

impl Adapter {
    /// One adapter outside a directory (a `--companion`): a safetensors file, or a folder
    /// holding one, read against the backbone's `shapes`; named after the file or folder.
    pub fn open(path: &Path, shapes: &Shapes) -> Result<Adapter, String> {
        let file = if path.is_dir() {
            folder_file(path).ok_or_else(|| format!("{}: no .safetensors file in it", path.display()))?
        } else {
            path.to_path_buf()
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Source::read(&file).and_then(|s| s.describe(&name, &file, shapes))
    }
}

fn is_safetensors(p: &Path) -> bool {
    p.extension().is_some_and(|x| x.eq_ignore_ascii_case("safetensors"))
}

/// The safetensors file of an adapter folder: `adapter_model.safetensors`, else the first.
fn folder_file(dir: &Path) -> Option<PathBuf> {
    let preferred = dir.join("adapter_model.safetensors");
    if preferred.is_file() {
        return Some(preferred);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_safetensors(p))
        .collect();
    files.sort();
    files.into_iter().next()
}

/// What one key of an adapter file names.
#[derive(Clone, Debug, PartialEq)]
struct Key {
    layout: Layout,
    /// The module, GGUF-named without `.weight`: `model.layers.3.self_attn.q_proj`,
    /// `model.layers.3.self_attn.qkv_proj` (fused), `vae2llm`.
    module: String,
    part: Part,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    A,
    B,
    Alpha,
    Diff,
    /// A replacement of `module.weight` or, with `bias`, of `module.bias`.
    Full {
        bias: bool,
    },
}

fn projection_key() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(concat!(
            r"^(?P<pre>(?:.*?\.)??)(?:model[.-])?layers[.-](?P<l>\d+)[.-]",
            r"(?P<m>nar_self_attn|self_attn|nar_mlp|mlp)[.-]",
            r"(?P<p>qkv_proj|q_proj|k_proj|v_proj|o_proj|gate_up_proj|gate_proj|up_proj|down_proj)\.",
            r"(?P<part>lora_A|lora_B|lora_down|lora_up|alpha|diff)(?:\.default)?(?:\.weight)?$",
        ))
        .expect("a valid pattern")
    })
}

fn io_key() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(concat!(
            r"^(?P<pre>(?:.*?\.)??)(?P<m>vae2llm|llm2vae)\.",
            r"(?P<part>lora_A|lora_B|lora_down|lora_up|alpha|diff|weight|bias)(?:\.default)?(?:\.weight)?$",
        ))
        .expect("a valid pattern")
    })
}

fn layout_of(pre: &str) -> Option<Layout> {
    Some(match pre {
        "" => Layout::Native,
        p if p.starts_with("base_model.model.") => Layout::Peft,
        p if p.starts_with("text_encoders.") || p.starts_with("diffusion_model.") => Layout::ComfyUi,
        "adapters." => Layout::Slider,
        "companion." | "io." => Layout::Bundled,
        _ => return None,
    })
}

/// The backbone module and part a key names; an error says why it names none.
fn normalize(key: &str) -> Result<Key, String> {
    if let Some(c) = projection_key().captures(key) {
        let pre = &c["pre"];
        let layout =
            layout_of(pre).ok_or_else(|| format!("'{key}': the prefix '{pre}' is not one of a known layout"))?;
        let mut m = c["m"].to_string();
        // ComfyUI's NAR half carries the AR projection names.
        if pre.starts_with("diffusion_model.") && !m.starts_with("nar_") {
            m = format!("nar_{m}");
        }
        let part = match &c["part"] {
            "lora_A" | "lora_down" => Part::A,
            "lora_B" | "lora_up" => Part::B,
            "alpha" => Part::Alpha,
            _ => Part::Diff,
        };
        return Ok(Key { layout, module: format!("model.layers.{}.{m}.{}", &c["l"], &c["p"]), part });
    }
    if let Some(c) = io_key().captures(key) {
        let pre = &c["pre"];
        let layout =
            layout_of(pre).ok_or_else(|| format!("'{key}': the prefix '{pre}' is not one of a known layout"))?;
        let part = match &c["part"] {
            "lora_A" | "lora_down" => Part::A,
            "lora_B" | "lora_up" => Part::B,
            "alpha" => Part::Alpha,
            "diff" => Part::Diff,
            "bias" => Part::Full { bias: true },
            _ => Part::Full { bias: false },
        };
        return Ok(Key { layout, module: c["m"].to_string(), part });
    }
    Err(format!(
        "'{key}' names no tensor of the backbone yued merges (self_attn.{{q,k,v,o}}_proj, \
        mlp.{{gate,up,down}}_proj, their nar_ twins, vae2llm, llm2vae)"
    ))
}

/// The projections a fused module splits into, in row order.
fn unfused(module: &str) -> Vec<String> {
    let (base, last) = module.rsplit_once('.').unwrap_or(("", module));
    let parts: &[&str] = match last {
        "qkv_proj" => &["q_proj", "k_proj", "v_proj"],
        "gate_up_proj" => &["gate_proj", "up_proj"],
        _ => return vec![module.to_string()],
    };
    parts.iter().map(|p| format!("{base}.{p}")).collect()
}

/// One tensor of an adapter file, as f32.
struct Loaded {
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// An adapter file read: its normalized keys and values, its file-level alpha.
struct Source {
    keys: Vec<(String, Key, Loaded)>,
    alpha: Option<f32>,
}

impl Source {
    fn read(file: &Path) -> Result<Source, String> {
        let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let map = crate::ggml::map_file(&f).map_err(|e| format!("{}: {e}", file.display()))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| format!("{}: not a safetensors file: {e}", file.display()))?;
        let st = safetensors::SafeTensors::deserialize(&map)
            .map_err(|e| format!("{}: not a safetensors file: {e}", file.display()))?;
        // alpha: adapter_config.json beside it, then the metadata.
        let config_alpha = file.parent().map(|d| d.join("adapter_config.json")).filter(|p| p.is_file()).and_then(|p| {
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
            v.get("lora_alpha").and_then(|a| a.as_f64()).map(|a| a as f32)
        });
        let meta_alpha = meta.metadata().as_ref().and_then(|m| {
            ["lora_alpha", "alpha", "ss_network_alpha"]
                .iter()
                .find_map(|k| m.get(*k).and_then(|v| v.trim().parse::<f32>().ok()))
        });
        let mut keys = Vec::new();
        let mut names: Vec<String> = st.names().into_iter().cloned().collect();
        names.sort();
        for name in names {
            let key = normalize(&name)?;
            let t = st.tensor(&name).map_err(|e| format!("'{name}': {e}"))?;
            let data: Vec<f32> = match t.dtype() {
                safetensors::Dtype::F32 => {
                    t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
                }
                safetensors::Dtype::F16 => {
                    t.data().chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
                }
                safetensors::Dtype::BF16 => {
                    t.data().chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
                }
                other => return Err(format!("'{name}': element type {other:?} (F32, F16, BF16 are read)")),
            };
            keys.push((name, key, Loaded { shape: t.shape().to_vec(), data }));
        }
        if keys.is_empty() {
            return Err(format!("{}: no tensor", file.display()));
        }
        Ok(Source { keys, alpha: config_alpha.or(meta_alpha) })
    }

    /// The adapter's terms at strength `s`, by backbone tensor name, checked against the
    /// backbone's shapes.
    fn terms(&self, s: f32, shapes: &Shapes) -> Result<BTreeMap<String, Vec<Term>>, String> {
        let mut modules: BTreeMap<(String, Part), (&str, &Loaded)> = BTreeMap::new();
        for (name, k, t) in &self.keys {
            if modules.insert((k.module.clone(), k.part), (name.as_str(), t)).is_some() {
                return Err(format!("'{name}': a second key for {} ({:?})", k.module, k.part));
            }
        }
        let mut out: BTreeMap<String, Vec<Term>> = BTreeMap::new();
        let module_names: Vec<String> = {
            let mut v: Vec<String> = modules.keys().map(|(m, _)| m.clone()).collect();
            v.dedup();
            v
        };
        for module in module_names {
            let get = |p: Part| modules.get(&(module.clone(), p)).copied();
            let targets = unfused(&module);
            let target_shapes: Vec<Vec<usize>> = targets
                .iter()
                .map(|t| {
                    shapes
                        .get(&format!("{t}.weight"))
                        .cloned()
                        .ok_or_else(|| format!("{module}: the backbone has no {t}.weight"))
                })
                .collect::<Result<_, _>>()?;
            let out_rows: usize = target_shapes.iter().map(|s| s[0]).sum();
            let in_cols = target_shapes[0].get(1).copied().unwrap_or(1);
            // Rows [r0, r1) of a fused factor or diff, per target.
            let splits: Vec<(usize, usize)> = target_shapes
                .iter()
                .scan(0usize, |r, s| {
                    let a = *r;
                    *r += s[0];
                    Some((a, *r))
                })
                .collect();
            match (get(Part::A), get(Part::B)) {
                (Some((an, a)), Some((bn, b))) => {
                    let rank = a.shape[0];
                    if a.shape != [rank, in_cols] || b.shape != [out_rows, rank] {
                        return Err(format!(
                            "'{an}' {:?} / '{bn}' {:?} do not make a [{out_rows}, {in_cols}] weight",
                            a.shape, b.shape
                        ));
                    }
                    let alpha = match get(Part::Alpha) {
                        Some((_, al)) => *al.data.first().ok_or_else(|| format!("{module}.alpha is empty"))?,
                        None => self.alpha.unwrap_or(rank as f32),
                    };
                    let scale = s * alpha / rank as f32;
                    for (t, (r0, r1)) in targets.iter().zip(&splits) {
                        out.entry(format!("{t}.weight")).or_default().push(Term::Lora {
                            a: a.data.clone(),
                            b: b.data[r0 * rank..r1 * rank].to_vec(),
                            rank,
                            scale,
                        });
                    }
                }
                (Some((n, _)), None) | (None, Some((n, _))) => {
                    return Err(format!("'{n}': a LoRA factor without its pair"))
                }
                (None, None) => {
                    if let Some((n, _)) = get(Part::Alpha) {
                        return Err(format!("'{n}': an alpha without LoRA factors"));
                    }
                }
            }
            if let Some((n, d)) = get(Part::Diff) {
                if d.data.len() != out_rows * in_cols {
                    return Err(format!("'{n}' {:?} is not a [{out_rows}, {in_cols}] weight", d.shape));
                }
                for (t, (r0, r1)) in targets.iter().zip(&splits) {
                    out.entry(format!("{t}.weight"))
                        .or_default()
                        .push(Term::Diff { d: d.data[r0 * in_cols..r1 * in_cols].to_vec(), scale: s });
                }
            }
            for bias in [false, true] {
                if let Some((n, f)) = get(Part::Full { bias }) {
                    let tensor = format!("{module}.{}", if bias { "bias" } else { "weight" });
                    let want = shapes.get(&tensor).ok_or_else(|| format!("'{n}': the backbone has no {tensor}"))?;
                    if targets.len() != 1 || !matches!(module.as_str(), "vae2llm" | "llm2vae") {
                        return Err(format!("'{n}': a full replacement is only taken for vae2llm and llm2vae"));
                    }
                    if f.data.len() != want.iter().product::<usize>() {
                        return Err(format!("'{n}' {:?} does not replace a {want:?} tensor", f.shape));
                    }
                    out.entry(tensor).or_default().push(Term::Replace { f: f.data.clone(), scale: s });
                }
            }
        }
        Ok(out)
    }

    fn describe(&self, name: &str, file: &Path, shapes: &Shapes) -> Result<Adapter, String> {
        let terms = self.terms(1.0, shapes)?;
        let mut layouts: Vec<Layout> = self.keys.iter().map(|(_, k, _)| k.layout).collect();
        layouts.sort();
        layouts.dedup();
        let rank =
            self.keys.iter().filter(|(_, k, _)| k.part == Part::A).map(|(_, _, t)| t.shape[0]).max().unwrap_or(0);
        Ok(Adapter {
            name: name.to_string(),
            file: file.to_path_buf(),
            layouts,
            rank,
            alpha: self.alpha,
            ar: terms.keys().any(|t| !is_nar_tensor(t)),
            nar: terms.keys().any(|t| is_nar_tensor(t)),
            tensors: terms.len(),
        })
    }
}

/// The terms of a stack of adapters (each at its strength) on the tensors of one half
/// (`nar`), by backbone tensor name; an adapter at strength 0 adds none.
pub fn stack_terms(
    stack: &[(&Adapter, f32)],
    shapes: &Shapes,
    nar: bool,
) -> Result<HashMap<String, Vec<Term>>, String> {
    let mut out: HashMap<String, Vec<Term>> = HashMap::new();
    for (a, s) in stack {
        if *s == 0.0 || !(if nar { a.nar } else { a.ar }) {
            continue;
        }
        let src = Source::read(&a.file).map_err(|e| format!("{}: {e}", a.name))?;
        for (t, terms) in src.terms(*s, shapes).map_err(|e| format!("{}: {e}", a.name))? {
            if is_nar_tensor(&t) == nar {
                out.entry(t).or_default().extend(terms);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout's spelling of one projection normalizes to the GGUF module, and
    /// ComfyUI's `diffusion_model.*` (the NAR half under the AR names) to the `nar_` twin.
    #[test]
    fn each_layout_names_the_same_module() {
        let m = |k: &str| normalize(k).map(|k| (k.layout, k.module, k.part));
        let q = "model.layers.3.self_attn.q_proj".to_string();
        for (key, layout, part) in [
            ("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight", Layout::Peft, Part::A),
            ("base_model.model.model.layers.3.self_attn.q_proj.lora_B.default.weight", Layout::Peft, Part::B),
            (
                "text_encoders.qwen3.transformer.model.layers.3.self_attn.q_proj.lora_down.weight",
                Layout::ComfyUi,
                Part::A,
            ),
            ("text_encoders.qwen3.model.layers.3.self_attn.q_proj.alpha", Layout::ComfyUi, Part::Alpha),
            ("layers.3.self_attn.q_proj.lora_up.weight", Layout::Native, Part::B),
            ("model.layers.3.self_attn.q_proj.diff", Layout::Native, Part::Diff),
            ("adapters.model-layers-3-self_attn-q_proj.lora_A.weight", Layout::Slider, Part::A),
            ("companion.layers.3.self_attn.q_proj.lora_B.weight", Layout::Bundled, Part::B),
        ] {
            assert_eq!(m(key), Ok((layout, q.clone(), part)), "{key}");
        }
        assert_eq!(
            m("diffusion_model.layers.3.self_attn.q_proj.lora_A.weight"),
            Ok((Layout::ComfyUi, "model.layers.3.nar_self_attn.q_proj".into(), Part::A))
        );
        assert_eq!(
            m("diffusion_model.layers.0.mlp.gate_up_proj.lora_B.weight"),
            Ok((Layout::ComfyUi, "model.layers.0.nar_mlp.gate_up_proj".into(), Part::B))
        );
        assert_eq!(
            m("diffusion_model.layers.0.nar_mlp.down_proj.lora_B.weight").unwrap().1,
            "model.layers.0.nar_mlp.down_proj"
        );
        assert_eq!(m("io.llm2vae.bias"), Ok((Layout::Bundled, "llm2vae".into(), Part::Full { bias: true })));
        assert_eq!(m("vae2llm.lora_A.weight"), Ok((Layout::Native, "vae2llm".into(), Part::A)));
        assert_eq!(
            unfused("model.layers.0.self_attn.qkv_proj"),
            ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"]
        );
        for bad in [
            "lora_unet_down_blocks_0.lora_down.weight",
            "something.layers.0.self_attn.q_proj.lora_A.weight",
            "model.layers.0.self_attn.q_norm.weight",
        ] {
            assert!(m(bad).is_err(), "{bad}");
        }
    }
}
