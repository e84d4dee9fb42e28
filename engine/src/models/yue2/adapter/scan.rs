//! The `--adapters` directory: every `.safetensors` file and every folder holding one is an
//! adapter. Each key is normalized to the backbone's GGUF names whatever the layout the
//! community shipped it in (PEFT, ComfyUI and AI Toolkit, native, GGUF-style `blk.N.*`,
//! slider tools, a bundled adapter's `companion.*` / `io.*`), fused `qkv_proj` /
//! `gate_up_proj` factors are split back onto the separate projections by rows, and the
//! halves an adapter changes are recorded. A file holds LoRA factors (`W += s·alpha/rank·B@A`,
//! alpha/√rank under rsLoRA), LoKr ones (`W += s·alpha/dim·kron(W1, W2)`, each factor whole or
//! a product of two; scale `s` alone when neither is factorised; `dim` the `lokr_dim`
//! metadata, else the rank), diffs (`.diff`, `.diff_b`) or whole replacements (`vae2llm`,
//! `llm2vae`). DoRA, LoHa, HiRA and PiSSA deltas are refused by name: their delta is not one
//! of those. A key that names nothing of the backbone is counted and skipped (an adapter none
//! of whose keys does is unusable, with the first key as the reason), never a crash.
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
    /// `[yue2.]blk.N.{attn_q,...,nar_ffn_up,...}.*`, `time_embd.*`: the GGUF tensor names.
    Gguf,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Peft => "peft",
            Layout::ComfyUi => "comfyui",
            Layout::Native => "native",
            Layout::Slider => "slider",
            Layout::Bundled => "bundled",
            Layout::Gguf => "gguf",
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
    /// Keys that name nothing of the backbone, skipped.
    pub ignored: usize,
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
                Ok(a) => {
                    if a.ignored > 0 {
                        tracing::warn!(adapter = %name, keys = a.ignored, "skipped keys outside the backbone");
                    }
                    out.adapters.push(a)
                }
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
    /// LoKr's factors: `W1` whole or `W1a @ W1b`, `W2` whole or `W2a @ W2b`.
    W1,
    W1a,
    W1b,
    W2,
    W2a,
    W2b,
    /// `W += s·D` on `module.weight` or, with `bias`, on `module.bias`.
    Diff {
        bias: bool,
    },
    /// A replacement of `module.weight` or, with `bias`, of `module.bias`.
    Full {
        bias: bool,
    },
}

/// A key's role, from its last component(s).
fn part_of(suffix: &str) -> Option<Part> {
    Some(match suffix {
        "lora_A" | "lora_down" | "lora.down" | "lora_a" => Part::A,
        "lora_B" | "lora_up" | "lora.up" | "lora_b" => Part::B,
        "alpha" | "lora_alpha" => Part::Alpha,
        "lokr_w1" => Part::W1,
        "lokr_w1_a" => Part::W1a,
        "lokr_w1_b" => Part::W1b,
        "lokr_w2" => Part::W2,
        "lokr_w2_a" => Part::W2a,
        "lokr_w2_b" => Part::W2b,
        "diff" => Part::Diff { bias: false },
        "diff_b" => Part::Diff { bias: true },
        "bias" => Part::Full { bias: true },
        "weight" => Part::Full { bias: false },
        _ => return None,
    })
}

/// The role alternatives of the key patterns (the longer spellings first).
const PARTS: &str = concat!(
    r"(?P<part>lora_A|lora_B|lora_down|lora_up|lora\.down|lora\.up|lora_a|lora_b|lora_alpha|alpha|",
    r"lokr_w1_a|lokr_w1_b|lokr_w2_a|lokr_w2_b|lokr_w1|lokr_w2|diff_b|diff)(?:\.default)?(?:\.weight)?$"
);

fn projection_key() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(&format!(
            "{}{}{}{PARTS}",
            r"^(?P<pre>(?:.*?\.)??)(?:model[.-])?layers[.-](?P<l>\d+)[.-]",
            r"(?P<m>nar_self_attn|self_attn|nar_mlp|mlp)[.-]",
            r"(?P<p>qkv_proj|q_proj|k_proj|v_proj|o_proj|gate_up_proj|gate_proj|up_proj|down_proj)\.",
        ))
        .expect("a valid pattern")
    })
}

/// The GGUF-style names of the block projections: `[yue2.]blk.N.[nar_]attn_q...`.
fn gguf_key() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(&format!(
            "{}{}{PARTS}",
            r"^(?:yue2\.)?blk\.(?P<l>\d+)\.(?P<nar>nar_)?",
            r"(?P<s>attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.",
        ))
        .expect("a valid pattern")
    })
}

/// The flat NAR tensors: the latent projections and the time embedder, in every spelling.
fn io_key() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(&format!(
            "{}{}",
            r"^(?P<pre>(?:.*?\.)??)(?P<m>vae2llm|llm2vae|time_embedder\.mlp\.[02]|time_embd\.[01]|time_embed\.[02])\.",
            PARTS.replace("|diff)", "|diff|weight|bias)"),
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
        "yue2." => Layout::Gguf,
        _ => return None,
    })
}

/// The GGUF site tag of a block projection as its module path.
fn gguf_site(tag: &str) -> &'static str {
    match tag {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        _ => "mlp.down_proj",
    }
}

/// The backbone module and part a key names; an error says why it names none.
fn normalize(key: &str) -> Result<Key, String> {
    let part = |c: &regex::Captures<'_>| part_of(&c["part"]);
    if let Some(c) = projection_key().captures(key) {
        let pre = &c["pre"];
        let layout =
            layout_of(pre).ok_or_else(|| format!("'{key}': the prefix '{pre}' is not one of a known layout"))?;
        let mut m = c["m"].to_string();
        // ComfyUI's (and AI Toolkit's) NAR half carries the AR projection names; its AR half
        // has no NAR projection.
        if pre.starts_with("diffusion_model.") && !m.starts_with("nar_") {
            m = format!("nar_{m}");
        }
        if pre.starts_with("text_encoders.") && m.starts_with("nar_") {
            return Err(format!("'{key}': a NAR projection under the AR half's text_encoders prefix"));
        }
        let part = part(&c).expect("the pattern's parts");
        if part == (Part::Diff { bias: true }) {
            return Err(format!("'{key}': a block projection has no bias to change"));
        }
        return Ok(Key { layout, module: format!("model.layers.{}.{m}.{}", &c["l"], &c["p"]), part });
    }
    if let Some(c) = gguf_key().captures(key) {
        let part = part(&c).expect("the pattern's parts");
        if part == (Part::Diff { bias: true }) {
            return Err(format!("'{key}': a block projection has no bias to change"));
        }
        let site = format!("{}{}", c.name("nar").map_or("", |m| m.as_str()), gguf_site(&c["s"]));
        return Ok(Key { layout: Layout::Gguf, module: format!("model.layers.{}.{site}", &c["l"]), part });
    }
    if let Some(c) = io_key().captures(key) {
        let pre = &c["pre"];
        let layout =
            layout_of(pre).ok_or_else(|| format!("'{key}': the prefix '{pre}' is not one of a known layout"))?;
        if pre.starts_with("text_encoders.") {
            return Err(format!("'{key}': a NAR tensor under the AR half's text_encoders prefix"));
        }
        let module = match &c["m"] {
            "time_embd.0" | "time_embed.0" => "time_embedder.mlp.0",
            "time_embd.1" | "time_embed.2" => "time_embedder.mlp.2",
            m => m,
        };
        return Ok(Key { layout, module: module.to_string(), part: part(&c).expect("the pattern's parts") });
    }
    Err(format!(
        "'{key}' names no tensor of the backbone yued merges (self_attn.{{q,k,v,o}}_proj, \
        mlp.{{gate,up,down}}_proj, their nar_ twins, vae2llm, llm2vae, time_embedder)"
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

/// The backbone tensors a module's factors address: a fused module (`qkv_proj`, …) splits its
/// rows over its targets.
struct Geometry {
    targets: Vec<String>,
    /// Rows `[r0, r1)` of a fused factor or diff, per target.
    splits: Vec<(usize, usize)>,
    out_rows: usize,
    in_cols: usize,
}

impl Geometry {
    fn new(module: &str, shapes: &Shapes) -> Result<Self, String> {
        let targets = unfused(module);
        let target_shapes: Vec<Vec<usize>> = targets
            .iter()
            .map(|t| {
                let name = format!("{t}.weight");
                shapes.get(&name).cloned().ok_or_else(|| format!("{module}: the backbone has no {name}"))
            })
            .collect::<Result<_, _>>()?;
        let out_rows: usize = target_shapes.iter().map(|s| s[0]).sum();
        let in_cols = target_shapes[0].get(1).copied().unwrap_or(1);
        let splits = target_shapes
            .iter()
            .scan(0usize, |r, s| {
                let a = *r;
                *r += s[0];
                Some((a, *r))
            })
            .collect();
        Ok(Geometry { targets, splits, out_rows, in_cols })
    }

    /// Adds `term(r0, r1)` to each target's weight.
    fn per_target(&self, out: &mut BTreeMap<String, Vec<Term>>, term: impl Fn(usize, usize) -> Term) {
        for (t, &(r0, r1)) in self.targets.iter().zip(&self.splits) {
            out.entry(format!("{t}.weight")).or_default().push(term(r0, r1));
        }
    }
}

/// A full replacement `f` (key `n`) of a module's weight or bias: taken for the projections
/// between the VAE and the LM and the time embedder only.
fn full_replacement(
    module: &str,
    g: &Geometry,
    n: &str,
    f: &Loaded,
    bias: bool,
    s: f32,
    shapes: &Shapes,
) -> Result<(String, Term), String> {
    let tensor = format!("{module}.{}", if bias { "bias" } else { "weight" });
    let want = shapes.get(&tensor).ok_or_else(|| format!("'{n}': the backbone has no {tensor}"))?;
    let replaceable = matches!(module, "vae2llm" | "llm2vae" | "time_embedder.mlp.0" | "time_embedder.mlp.2");
    if g.targets.len() != 1 || !replaceable {
        return Err(format!("'{n}': a full replacement is only taken for vae2llm and llm2vae"));
    }
    if f.data.len() != want.iter().product::<usize>() {
        return Err(format!("'{n}' {:?} does not replace a {want:?} tensor", f.shape));
    }
    Ok((tensor, Term::Replace { f: f.data.clone(), scale: s }))
}

/// One tensor of an adapter file, as f32.
struct Loaded {
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// An adapter file read: its normalized keys and values, its file-level settings.
struct Source {
    keys: Vec<(String, Key, Loaded)>,
    /// The alpha of the safetensors metadata, else of `adapter_config.json` beside it.
    alpha: Option<f32>,
    /// rsLoRA (`use_rslora`): LoRA scales by alpha / √rank.
    rslora: bool,
    /// LoKr's `lokr_dim` (metadata): the divisor of its alpha, else the rank.
    lokr_dim: Option<f32>,
    /// The keys naming nothing of the backbone, each with why.
    ignored: Vec<String>,
}

/// Why a parameterisation whose delta is neither `B @ A`, a Kronecker product nor a diff is
/// refused (by name), if the file is one; `meta` is its safetensors metadata.
fn refused(
    names: &[String],
    meta: Option<&HashMap<String, String>>,
    scalar: impl Fn(&str) -> Option<f32>,
) -> Option<String> {
    for n in names {
        if n.ends_with(".lora_magnitude_vector")
            || n.ends_with(".lora_magnitude_vector.weight")
            || n.ends_with(".dora_scale")
        {
            return Some(format!("'{n}': DoRA adapters are not supported, only LoRA and LoKr"));
        }
        if n.contains(".hada_w") {
            return Some(format!("'{n}': LoHa adapters are not supported, only LoRA and LoKr"));
        }
        if n == "hot_step.param_method" && scalar(n).is_some_and(|m| m != 0.0) {
            return Some("this adapter applies as DoRA, HiRA, LoHa or a PiSSA delta, not as plain LoRA".into());
        }
    }
    if meta.is_some_and(|m| m.contains_key("hot_step_pissa_delta")) {
        return Some("a PiSSA delta adapter needs its residual base; export it as plain LoRA".into());
    }
    None
}

impl Source {
    fn read(file: &Path) -> Result<Source, String> {
        let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let map = crate::ggml::map_file(&f).map_err(|e| format!("{}: {e}", file.display()))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| format!("{}: not a safetensors file: {e}", file.display()))?;
        let st = safetensors::SafeTensors::deserialize(&map)
            .map_err(|e| format!("{}: not a safetensors file: {e}", file.display()))?;
        let mut names: Vec<String> = st.names().into_iter().cloned().collect();
        names.sort();
        let scalar = |n: &str| {
            let t = st.tensor(n).ok()?;
            (t.dtype() == safetensors::Dtype::F32 && t.data().len() == 4)
                .then(|| f32::from_le_bytes([t.data()[0], t.data()[1], t.data()[2], t.data()[3]]))
        };
        if let Some(why) = refused(&names, meta.metadata().as_ref(), scalar) {
            return Err(format!("{}: {why}", file.display()));
        }
        // adapter_config.json beside it: its alpha, rsLoRA, and the settings a merge of one
        // scale per file cannot honour.
        let config: Option<serde_json::Value> = file
            .parent()
            .map(|d| d.join("adapter_config.json"))
            .filter(|p| p.is_file())
            .and_then(|p| serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok());
        if let Some(c) = &config {
            for key in ["rank_pattern", "alpha_pattern"] {
                if c.get(key).and_then(|v| v.as_object()).is_some_and(|o| !o.is_empty()) {
                    return Err(format!("{}: {key} in adapter_config.json is not supported", file.display()));
                }
            }
        }
        let config_alpha = config.as_ref().and_then(|v| {
            ["lora_alpha", "alpha"].iter().find_map(|k| v.get(*k).and_then(|a| a.as_f64())).map(|a| a as f32)
        });
        let rslora = config.as_ref().and_then(|v| v.get("use_rslora")).and_then(|v| v.as_bool()).unwrap_or(false);
        let meta_num = |keys: &[&str]| {
            meta.metadata().as_ref().and_then(|m| keys.iter().find_map(|k| m.get(*k)?.trim().parse::<f32>().ok()))
        };
        let meta_alpha = meta_num(&["lora_alpha", "alpha", "ss_network_alpha"]);
        let lokr_dim = meta_num(&["lokr_dim"]).filter(|d| *d > 0.0);
        let mut keys = Vec::new();
        let mut ignored = Vec::new();
        for name in names {
            // HOT-Step's trainer marks its files with tensors of its own.
            if name.starts_with("hot_step.") {
                continue;
            }
            let key = match normalize(&name) {
                Ok(k) => k,
                Err(why) => {
                    ignored.push(why);
                    continue;
                }
            };
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
            return Err(match ignored.first() {
                Some(why) => format!("{}: no key names a YuE2 backbone tensor; the first: {why}", file.display()),
                None => format!("{}: no tensor", file.display()),
            });
        }
        Ok(Source { keys, alpha: meta_alpha.or(config_alpha), rslora, lokr_dim, ignored })
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
        let mut module_names: Vec<String> = modules.keys().map(|(m, _)| m.clone()).collect();
        module_names.dedup();
        for module in module_names {
            let get = |p: Part| modules.get(&(module.clone(), p)).copied();
            self.module_terms(&module, &get, s, shapes, &mut out)?;
        }
        Ok(out)
    }

    /// One module's terms (LoKr, LoRA, diffs, full replacements), added to `out`.
    fn module_terms<'s>(
        &'s self,
        module: &str,
        get: &dyn Fn(Part) -> Option<(&'s str, &'s Loaded)>,
        s: f32,
        shapes: &Shapes,
        out: &mut BTreeMap<String, Vec<Term>>,
    ) -> Result<(), String> {
        let g = Geometry::new(module, shapes)?;
        let (out_rows, in_cols) = (g.out_rows, g.in_cols);
        let alpha = match get(Part::Alpha) {
            Some((_, al)) => al.data.first().copied().map(Some).ok_or_else(|| format!("{module}.alpha is empty")),
            None => Ok(self.alpha),
        };
        if let Some((scale, d)) = self.lokr(module, get, alpha.clone()?, out_rows, in_cols)? {
            g.per_target(out, |r0, r1| Term::Diff { d: d[r0 * in_cols..r1 * in_cols].to_vec(), scale: s * scale });
        }
        match (get(Part::A), get(Part::B)) {
            (Some((an, a)), Some((bn, b))) => {
                let rank = a.shape[0];
                if a.shape != [rank, in_cols] || b.shape != [out_rows, rank] {
                    return Err(format!(
                        "'{an}' {:?} / '{bn}' {:?} do not make a [{out_rows}, {in_cols}] weight",
                        a.shape, b.shape
                    ));
                }
                let alpha = alpha?.unwrap_or(rank as f32);
                let divisor = if self.rslora { (rank as f32).sqrt() } else { rank as f32 };
                let scale = s * alpha / divisor;
                g.per_target(out, |r0, r1| Term::Lora {
                    a: a.data.clone(),
                    b: b.data[r0 * rank..r1 * rank].to_vec(),
                    rank,
                    scale,
                });
            }
            (Some((n, _)), None) | (None, Some((n, _))) => {
                return Err(format!("'{n}': a LoRA factor without its pair"))
            }
            (None, None) => {
                let lokr = [Part::W1, Part::W1a, Part::W2, Part::W2a].iter().any(|p| get(*p).is_some());
                if let (Some((n, _)), false) = (get(Part::Alpha), lokr) {
                    return Err(format!("'{n}': an alpha without LoRA or LoKr factors"));
                }
            }
        }
        if let Some((n, d)) = get(Part::Diff { bias: false }) {
            if d.data.len() != out_rows * in_cols {
                return Err(format!("'{n}' {:?} is not a [{out_rows}, {in_cols}] weight", d.shape));
            }
            g.per_target(out, |r0, r1| Term::Diff { d: d.data[r0 * in_cols..r1 * in_cols].to_vec(), scale: s });
        }
        if let Some((n, d)) = get(Part::Diff { bias: true }) {
            let tensor = format!("{module}.bias");
            let want = shapes.get(&tensor).ok_or_else(|| format!("'{n}': the backbone has no {tensor}"))?;
            if d.data.len() != want.iter().product::<usize>() {
                return Err(format!("'{n}' {:?} does not fit a {want:?} bias", d.shape));
            }
            out.entry(tensor).or_default().push(Term::Diff { d: d.data.clone(), scale: s });
        }
        for bias in [false, true] {
            if let Some((n, f)) = get(Part::Full { bias }) {
                let (tensor, term) = full_replacement(module, &g, n, f, bias, s, shapes)?;
                out.entry(tensor).or_default().push(term);
            }
        }
        Ok(())
    }

    /// A module's LoKr delta, when it has LoKr factors: its scale (before the strength:
    /// alpha / dim when a factor is a product and alpha is known, else 1) and the dense
    /// `kron(W1, W2)` (`[out_rows, in_cols]`, row-major).
    #[allow(clippy::type_complexity)]
    fn lokr<'s>(
        &'s self,
        module: &str,
        get: &dyn Fn(Part) -> Option<(&'s str, &'s Loaded)>,
        alpha: Option<f32>,
        out_rows: usize,
        in_cols: usize,
    ) -> Result<Option<(f32, Vec<f32>)>, String> {
        let product = |a: &Loaded, b: &Loaded, what: &str| -> Result<(Vec<f32>, usize, usize, usize), String> {
            let (m, r, n) = (a.shape[0], a.shape.get(1).copied().unwrap_or(0), b.shape.get(1).copied().unwrap_or(0));
            if a.shape.len() != 2 || b.shape.len() != 2 || b.shape[0] != r {
                return Err(format!("{module}: LoKr {what} factors {:?} @ {:?} do not chain", a.shape, b.shape));
            }
            let mut w = vec![0f32; m * n];
            for i in 0..m {
                for k in 0..r {
                    let x = a.data[i * r + k];
                    for j in 0..n {
                        w[i * n + j] += x * b.data[k * n + j];
                    }
                }
            }
            Ok((w, m, n, r))
        };
        let factor = |whole: Part,
                      a: Part,
                      b: Part,
                      what: &str|
         -> Result<Option<(Vec<f32>, usize, usize, usize, bool)>, String> {
            match (get(whole), get(a), get(b)) {
                (None, None, None) => Ok(None),
                (Some((n, w)), None, None) => {
                    if w.shape.len() != 2 {
                        return Err(format!("'{n}': a LoKr {what} of shape {:?}, not a matrix", w.shape));
                    }
                    Ok(Some((w.data.clone(), w.shape[0], w.shape[1], 0, false)))
                }
                (None, Some((_, fa)), Some((_, fb))) => {
                    let (w, m, n, r) = product(fa, fb, what)?;
                    Ok(Some((w, m, n, r, true)))
                }
                _ => Err(format!("{module}: an incomplete LoKr {what} (whole, or both halves of its product)")),
            }
        };
        let w1 = factor(Part::W1, Part::W1a, Part::W1b, "w1")?;
        let w2 = factor(Part::W2, Part::W2a, Part::W2b, "w2")?;
        let ((w1, a, b, r1, f1), (w2, c, d, r2, f2)) = match (w1, w2) {
            (None, None) => return Ok(None),
            (Some(w1), Some(w2)) => (w1, w2),
            _ => return Err(format!("{module}: a LoKr factor without the other (w1 and w2 go together)")),
        };
        if a * c != out_rows || b * d != in_cols {
            return Err(format!("{module}: LoKr kron([{a}, {b}], [{c}, {d}]) is not a [{out_rows}, {in_cols}] weight"));
        }
        let rank = if f2 { r2 } else { r1 } as f32;
        let dim = self.lokr_dim.unwrap_or(rank);
        let scale = match alpha {
            Some(alpha) if (f1 || f2) && alpha > 0.0 && dim > 0.0 => alpha / dim,
            _ => 1.0,
        };
        let mut k = vec![0f32; out_rows * in_cols];
        for i in 0..a {
            for j in 0..b {
                let x = w1[i * b + j];
                for p in 0..c {
                    let row = (i * c + p) * in_cols + j * d;
                    for (q, y) in w2[p * d..(p + 1) * d].iter().enumerate() {
                        k[row + q] = x * y;
                    }
                }
            }
        }
        Ok(Some((scale, k)))
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
            ignored: self.ignored.len(),
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
            ("model.layers.3.self_attn.q_proj.diff", Layout::Native, Part::Diff { bias: false }),
            ("text_encoders.model.layers.3.self_attn.q_proj.lora.down.weight", Layout::ComfyUi, Part::A),
            ("text_encoders.model.layers.3.self_attn.q_proj.lokr_w2_b", Layout::ComfyUi, Part::W2b),
            ("layers.3.self_attn.q_proj.lokr_w1", Layout::Native, Part::W1),
            ("layers.3.self_attn.q_proj.lora_alpha", Layout::Native, Part::Alpha),
            ("yue2.blk.3.attn_q.lora_A.weight", Layout::Gguf, Part::A),
            ("blk.3.attn_q.lokr_w1_a", Layout::Gguf, Part::W1a),
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
            m("diffusion_model.vae2llm.diff_b"),
            Ok((Layout::ComfyUi, "vae2llm".into(), Part::Diff { bias: true }))
        );
        assert_eq!(
            m("yue2.blk.2.nar_ffn_up.lokr_w2"),
            Ok((Layout::Gguf, "model.layers.2.nar_mlp.up_proj".into(), Part::W2))
        );
        assert_eq!(m("yue2.time_embd.1.lora_B.weight").unwrap().1, "time_embedder.mlp.2");
        assert_eq!(m("diffusion_model.time_embed.0.lora_down.weight").unwrap().1, "time_embedder.mlp.0");
        assert_eq!(
            unfused("model.layers.0.self_attn.qkv_proj"),
            ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"]
        );
        for bad in [
            "lora_unet_down_blocks_0.lora_down.weight",
            "something.layers.0.self_attn.q_proj.lora_A.weight",
            "model.layers.0.self_attn.q_norm.weight",
            "text_encoders.model.layers.0.nar_mlp.up_proj.lora_A.weight",
            "text_encoders.vae2llm.diff",
            "layers.0.self_attn.q_proj.diff_b",
            "layers.0.self_attn.q_proj.weight",
            "blk.0.attn_norm.lora_A.weight",
        ] {
            assert!(m(bad).is_err(), "{bad}");
        }
    }
}
