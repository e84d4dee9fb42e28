//! LoRA adapters on the YuE2 backbone (seed 000, "LoRA adapters"): the `--adapters`
//! directory's scan and key normalization ([`scan`]), and the merge engine that adds their
//! terms to a tensor at load ([`merge`]).
pub mod merge;
pub mod scan;

pub use merge::{merge, Term};
pub use scan::{shapes_of, stack_terms, Adapter, AdapterDir, Layout, Shapes, Unusable};

/// A stack of adapters as a ModelStore key part of one half: the names and strengths of
/// those that change it at a non-zero strength, in request order ("" when none).
pub fn half_key(stack: &[(&Adapter, f32)], nar: bool) -> String {
    stack.iter().filter(|(a, s)| *s != 0.0 && if nar { a.nar } else { a.ar }).map(|(a, s)| format!("{}@{s}", a.name)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests;
