//! LoRA adapters on the YuE2 backbone (yue2.cpp's architecture reference, "LoRA adapters"): the `--adapters`
//! directory's scan and key normalization ([`scan`]), and the merge engine that adds their
//! terms to a tensor at load ([`merge`]).
pub mod scan;

pub use crate::nn::lora::{merge, Term};
pub use scan::{shapes_of, stack_terms, Adapter, AdapterDir, Layout, Shapes, Unusable};

/// The terms of merge, per half: what `load_with` of the AR and NAR halves take.
pub type HalfTerms = std::collections::HashMap<String, Vec<Term>>;

/// One adapter of a job: its name in the directory and its strength on each half.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterUse {
    pub name: String,
    pub ar: f32,
    pub nar: f32,
}

impl AdapterUse {
    /// One strength on both halves.
    pub fn both(name: impl Into<String>, scale: f32) -> Self {
        AdapterUse { name: name.into(), ar: scale, nar: scale }
    }
}

/// A job's adapters against a directory: each entry's adapter and its strength on one half
/// (`nar`); an error names the entry (`adapters[i].name: ...`).
pub fn request_stack<'a>(
    dir: &'a AdapterDir,
    refs: &[AdapterUse],
    nar: bool,
) -> Result<Vec<(&'a Adapter, f32)>, String> {
    refs.iter()
        .enumerate()
        .map(|(i, r)| {
            let scale = if nar { r.nar } else { r.ar };
            dir.get(&r.name).map(|a| (a, scale)).map_err(|e| format!("adapters[{i}].name: {e}"))
        })
        .collect()
}

/// The AR and NAR terms of a request's adapters on the backbone file `model`, read from
/// `dir` (both empty without adapters); an error says which entry or key is at fault.
pub fn request_terms(
    dir: Option<&std::path::Path>,
    model: &std::path::Path,
    refs: &[AdapterUse],
) -> Result<(HalfTerms, HalfTerms), String> {
    if refs.is_empty() {
        return Ok(Default::default());
    }
    let dir = dir
        .ok_or_else(|| format!("adapters[0].name: '{}': give the adapter directory (--adapters DIR)", refs[0].name))?;
    let f = crate::gguf::GgufFile::open(model).map_err(|e| e.to_string())?;
    let shapes = shapes_of(&f);
    let scanned = AdapterDir::scan(dir, &shapes).map_err(|e| format!("--adapters {}: {e}", dir.display()))?;
    let half = |nar: bool| stack_terms(&request_stack(&scanned, refs, nar)?, &shapes, nar);
    Ok((half(false)?, half(true)?))
}

/// A `--companion` adapter (a NAR-only file or folder) read against the backbone file `model`:
/// refused when it changes the AR half.
pub fn open_companion(path: &std::path::Path, model: &std::path::Path) -> Result<Adapter, String> {
    let f = crate::gguf::GgufFile::open(model).map_err(|e| e.to_string())?;
    let a = Adapter::open(path, &shapes_of(&f))?;
    if a.ar || !a.nar {
        return Err(format!("{}: a companion changes the NAR half alone; this adapter changes the AR half", a.name));
    }
    Ok(a)
}

/// Adds the companion's NAR terms at `scale` to a request's (`nar`), unless the strength is 0
/// or `named` (the request names the same file among its adapters: it is merged once, at the
/// request's strength).
pub fn add_companion(
    nar: &mut HalfTerms,
    companion: &Adapter,
    model: &std::path::Path,
    scale: f32,
    named: bool,
) -> Result<(), String> {
    if named || scale == 0.0 {
        return Ok(());
    }
    let f = crate::gguf::GgufFile::open(model).map_err(|e| e.to_string())?;
    for (tensor, terms) in stack_terms(&[(companion, scale)], &shapes_of(&f), true)? {
        nar.entry(tensor).or_default().extend(terms);
    }
    Ok(())
}

/// A stack of adapters as a ModelStore key part of one half: the names and strengths of
/// those that change it at a non-zero strength, in request order ("" when none).
pub fn half_key(stack: &[(&Adapter, f32)], nar: bool) -> String {
    stack
        .iter()
        .filter(|(a, s)| *s != 0.0 && if nar { a.nar } else { a.ar })
        .map(|(a, s)| format!("{}@{s}", a.name))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
