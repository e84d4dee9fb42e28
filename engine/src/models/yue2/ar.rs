//! The autoregressive half of the YuE2 backbone: a Qwen3 decoder ([`CausalLm`]) under the
//! checkpoint's names.
//!
//! Per layer: input_layernorm, self-attention with RMS-normalised q and k (before NeoX RoPE,
//! theta from the config) and grouped KV heads, post_attention_layernorm, SwiGLU MLP; then
//! the shared final norm and the untied lm_head. The LM head runs only on the rows a stage
//! samples from, so a semantic decode step multiplies 32769 rows, not 184704.
use crate::ggml::{Backend, GgmlError, GgmlType, Kernels};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::models::yue2::config::{backbone_tensor_shapes, is_nar_tensor, names, BackboneInfo, Yue2Config};
use crate::nn::batch::Feed;
use crate::nn::causal_lm::{CausalLm, LmSpec};
pub use crate::nn::causal_lm::{Logits, Positions, SeqInput, DEVICE_WINDOW_STEP, WINDOW_STEP};
use crate::nn::qwen3::Role;
use crate::weights::LoadError;
use std::ops::Range;

/// The AR weights on a backend plus the reusable compute allocator.
pub struct ArModel {
    pub cfg: Yue2Config,
    lm: CausalLm,
    vocab_type: GgmlType,
}

/// Names and shapes of the AR tensors (311 at the published dimensions).
pub fn ar_tensors(cfg: &Yue2Config) -> Vec<(String, Vec<i64>)> {
    // The AR half never reads the flow-matching heads, so their shapes do not matter here.
    backbone_tensor_shapes(cfg, 1, 1).into_iter().filter(|(n, _)| !is_nar_tensor(n)).collect()
}

/// The AR half as the shared LM graph sees it.
pub fn lm_spec(cfg: &Yue2Config) -> LmSpec {
    LmSpec {
        dims: cfg.qwen3_dims(),
        hidden: cfg.hidden_size,
        vocab: cfg.vocab_size,
        embed: names::EMBED.into(),
        norm: names::NORM.into(),
        head: names::LM_HEAD.into(),
        layers: (0..cfg.num_hidden_layers).map(|l| Role::ALL.map(|r| names::layer_role(l, false, r))).collect(),
    }
}

impl ArModel {
    /// Loads the AR half of a backbone file onto `backend`.
    pub fn load(f: &GgufFile, info: &BackboneInfo, backend: &Backend) -> Result<Self, LoadError> {
        Self::load_with(f, info, backend, &Default::default())
    }

    /// [`ArModel::load`] with adapter terms merged into the AR tensors they name
    /// ([`crate::models::yue2::adapter::stack_terms`] of the AR half).
    pub fn load_with(
        f: &GgufFile,
        info: &BackboneInfo,
        backend: &Backend,
        terms: &std::collections::HashMap<String, Vec<crate::models::yue2::adapter::Term>>,
    ) -> Result<Self, LoadError> {
        let weights = crate::weights::load_tensors_merged(
            f,
            &ar_tensors(&info.config),
            backend,
            "AR weights",
            |_, _| false,
            terms,
        )?;
        let vocab_type = weights.get(names::LM_HEAD).ty();
        Ok(ArModel {
            cfg: info.config.clone(),
            lm: CausalLm::new(lm_spec(&info.config), weights, backend, "AR step"),
            vocab_type,
        })
    }

    /// Weight bytes one forward step must read when it samples `rows` logit rows: every
    /// layer, the final norm, the sampled rows of the LM head, and one embedding row per
    /// new token (a gather, not a scan of the table).
    pub fn step_read_bytes(&self, rows: usize, tokens: usize) -> usize {
        let w = self.lm.weights();
        let embed = w.get(names::EMBED).nbytes();
        let head = w.get(names::LM_HEAD).nbytes();
        let vocab = self.cfg.vocab_size.max(1);
        w.bytes() - embed - head + head * rows / vocab + embed * tokens / vocab
    }

    /// Device bytes of the weights.
    pub fn weight_bytes(&self) -> usize {
        self.lm.weights().bytes()
    }
    /// Bytes of the compute buffer (grows to the largest graph seen).
    pub fn compute_bytes(&self) -> usize {
        self.lm.compute_bytes()
    }
    pub fn lm_head_type(&self) -> GgmlType {
        self.vocab_type
    }

    /// Runs the new tokens of every sequence through the model, appends their K/V to the
    /// sequences' sets and returns the logits of `rows` at `positions`
    /// (see [`CausalLm::step`] for the batching and the kept graph).
    pub fn forward(
        &mut self,
        backend: &Backend,
        sets: &mut [KvSet],
        seqs: &[SeqInput<'_>],
        rows: Range<u32>,
        positions: Positions,
    ) -> Result<Logits, GgmlError> {
        self.lm.forward(backend, sets, seqs, rows, positions)
    }

    /// [`ArModel::forward`] on the kernels asked for.
    pub fn forward_on(
        &mut self,
        backend: &Backend,
        sets: &mut [KvSet],
        seqs: &[SeqInput<'_>],
        rows: Range<u32>,
        positions: Positions,
        kernels: Kernels,
    ) -> Result<Logits, GgmlError> {
        self.lm.forward_on(backend, sets, seqs, rows, positions, kernels)
    }

    /// Runs the feeds of several steppers in one decode step ([`crate::nn::batch::run`]).
    pub fn run_feeds(&mut self, backend: &Backend, feeds: &mut [Feed<'_>]) -> Result<Vec<Vec<Vec<f32>>>, GgmlError> {
        crate::nn::batch::run(&mut self.lm, backend, feeds)
    }

    /// Drops the kept step graph, so the next call builds its own (tests, and a caller that
    /// wants the compute memory of a big prefill graph back).
    pub fn forget_graph(&mut self) {
        self.lm.forget_graph();
    }

    /// Nodes of the last step graph computing `op` (ggml's op name): for tests.
    pub fn graph_op_count(&self, op: &str) -> usize {
        self.lm.graph_op_count(op)
    }

    /// How many forward calls built a graph and how many reused the previous one.
    pub fn graph_stats(&self) -> (u64, u64) {
        self.lm.graph_stats()
    }
}

#[cfg(test)]
mod tests;
