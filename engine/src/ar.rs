//! The autoregressive half of the YuE2 backbone: a Qwen3 decoder.
//!
//! Per layer: input_layernorm, self-attention with RMS-normalised q and k (before NeoX RoPE,
//! theta from the config) and grouped KV heads, post_attention_layernorm, SwiGLU MLP; then
//! the shared final norm and the untied lm_head. One entry point, [`ArModel::forward`],
//! serves both the prefill of one sequence and the batched decode of N sequences over N
//! KV sets with different lengths: the projections, norms, RoPE and MLP run on all tokens of
//! the batch at once, only the cache write and the attention are per sequence.
//!
//! The LM head runs only on the rows a stage samples from (a contiguous id range), and only
//! on the positions asked for, so a semantic decode step multiplies 32769 rows, not 184704.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Tensor, TensorStore};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::model::{backbone_tensor_shapes, is_nar_tensor, names, BackboneInfo, Yue2Config};
use crate::weights::{load_tensors, LoadError};
use std::ops::Range;

/// One sequence of a forward call: new tokens appended to one KV set.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    /// Index of the KV set in the slice passed to `forward`.
    pub set: usize,
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// The last new token of each sequence (generation).
    Last,
    /// Every new token (evaluation, `lm-eval`).
    All,
}

/// Logits of one forward call: for each sequence, `rows.len()` values per requested position.
#[derive(Debug)]
pub struct Logits {
    pub rows: Range<u32>,
    /// `per_seq[i]` holds the positions of sequence i, each `rows.len()` values.
    pub per_seq: Vec<Vec<Vec<f32>>>,
}

/// The AR weights on a backend plus the reusable compute allocator.
pub struct ArModel {
    pub cfg: Yue2Config,
    weights: TensorStore,
    alloc: Allocator,
    vocab_type: GgmlType,
}

/// Names and shapes of the AR tensors (311 at the published dimensions).
pub fn ar_tensors(cfg: &Yue2Config) -> Vec<(String, Vec<i64>)> {
    // The AR half never reads the flow-matching heads, so their shapes do not matter here.
    backbone_tensor_shapes(cfg, 1, 1).into_iter().filter(|(n, _)| !is_nar_tensor(n)).collect()
}

impl ArModel {
    /// Loads the AR half of a backbone file onto `backend`.
    pub fn load(f: &GgufFile, info: &BackboneInfo, backend: &Backend) -> Result<Self, LoadError> {
        let weights = load_tensors(f, &ar_tensors(&info.config), backend, "AR weights")?;
        let vocab_type = weights.get(names::LM_HEAD).ty();
        Ok(ArModel { cfg: info.config.clone(), weights, alloc: Allocator::new(backend), vocab_type })
    }

    /// Device bytes of the weights.
    /// Weight bytes one forward step must read when it samples `rows` logit rows: every
    /// layer, the final norm, the sampled rows of the LM head, and one embedding row per
    /// new token (a gather, not a scan of the table).
    pub fn step_read_bytes(&self, rows: usize, tokens: usize) -> usize {
        let embed = self.weights.get(names::EMBED).nbytes();
        let head = self.weights.get(names::LM_HEAD).nbytes();
        let vocab = self.cfg.vocab_size.max(1);
        self.weights.bytes() - embed - head + head * rows / vocab + embed * tokens / vocab
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }
    /// Bytes of the compute buffer (grows to the largest graph seen).
    pub fn compute_bytes(&self) -> usize {
        self.alloc.buffer_size()
    }
    pub fn lm_head_type(&self) -> GgmlType {
        self.vocab_type
    }

    /// Runs the new tokens of every sequence through the model, appends their K/V to the
    /// sequences' sets and returns the logits of `rows` at `positions`.
    pub fn forward(&mut self, backend: &Backend, sets: &mut [KvSet], seqs: &[SeqInput<'_>], rows: Range<u32>, positions: Positions) -> Result<Logits, GgmlError> {
        let c = &self.cfg;
        assert!(!seqs.is_empty(), "forward of no sequence");
        assert!(rows.start < rows.end && rows.end as usize <= c.vocab_size, "logit rows {rows:?} outside the vocabulary of {}", c.vocab_size);
        for (i, s) in seqs.iter().enumerate() {
            assert!(!s.tokens.is_empty(), "sequence {i} has no new token");
            assert!(seqs.iter().filter(|o| o.set == s.set).count() == 1, "KV set {} used twice in one forward", s.set);
            let set = &sets[s.set];
            assert!(set.len() + s.tokens.len() <= set.capacity(), "KV set {} full: {} + {} > {}", s.set, set.len(), s.tokens.len(), set.capacity());
            assert!(s.tokens.iter().all(|&t| (t as usize) < c.vocab_size), "token id outside the vocabulary");
        }
        let (hd, nh, nkv) = (c.head_dim as i64, c.num_attention_heads as i64, c.num_key_value_heads as i64);
        let n_tok: i64 = seqs.iter().map(|s| s.tokens.len() as i64).sum();
        let n_layers = c.num_hidden_layers;
        let eps = c.rms_norm_eps as f32;
        let n_nodes = 256 + n_layers * (48 + 24 * seqs.len());
        let gctx = Context::new(n_nodes, n_nodes)?;
        let mut graph = gctx.new_graph(n_nodes);

        // Inputs.
        let ids = gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("ids").set_input();
        let pos = gctx.new_tensor(GgmlType::I32, &[n_tok]).set_name("pos").set_input();
        let mut masks: Vec<Option<Tensor<'_>>> = Vec::with_capacity(seqs.len());
        for (i, s) in seqs.iter().enumerate() {
            let t = s.tokens.len() as i64;
            masks.push((t > 1).then(|| {
                let n_kv = (sets[s.set].len() as i64) + t;
                gctx.new_tensor(GgmlType::F16, &[n_kv, t]).set_name(&format!("mask{i}")).set_input()
            }));
        }
        let n_out: i64 = match positions {
            Positions::Last => seqs.len() as i64,
            Positions::All => n_tok,
        };
        let out_idx = gctx.new_tensor(GgmlType::I32, &[n_out]).set_name("out_idx").set_input();

        let weights = &self.weights;
        let w = |name: &str| weights.get(name);
        let lw = |l: usize, s: &str| weights.get(&names::layer(l, s));
        let mut x = gctx.get_rows(w(names::EMBED), ids);
        let scale = 1.0 / (hd as f32).sqrt();
        for l in 0..n_layers {
            let h = gctx.mul(gctx.rms_norm(x, eps), lw(l, "input_layernorm.weight"));
            let q = gctx.reshape_3d(gctx.mul_mat(lw(l, "self_attn.q_proj.weight"), h), hd, nh, n_tok);
            let k = gctx.reshape_3d(gctx.mul_mat(lw(l, "self_attn.k_proj.weight"), h), hd, nkv, n_tok);
            let v = gctx.mul_mat(lw(l, "self_attn.v_proj.weight"), h); // [hd*nkv, n_tok]
            let q = gctx.mul(gctx.rms_norm(q, eps), lw(l, "self_attn.q_norm.weight"));
            let k = gctx.mul(gctx.rms_norm(k, eps), lw(l, "self_attn.k_norm.weight"));
            let q = gctx.rope_neox(q, pos, hd as i32, c.rope_theta as f32);
            let k = gctx.rope_neox(k, pos, hd as i32, c.rope_theta as f32);
            let k = gctx.reshape_2d(k, hd * nkv, n_tok);

            let mut outs: Option<Tensor<'_>> = None;
            let mut start = 0i64;
            for (i, s) in seqs.iter().enumerate() {
                let t = s.tokens.len() as i64;
                let set = &sets[s.set];
                let (kc, vc) = (set.k(l), set.v(l));
                let past = set.len() as i64;
                let row_bytes = kc.nb()[1];
                // Append this sequence's K/V, then attend over the whole window.
                let k_i = gctx.view_2d(k, hd * nkv, t, k.nb()[1], (start as usize) * k.nb()[1]);
                let v_i = gctx.view_2d(v, hd * nkv, t, v.nb()[1], (start as usize) * v.nb()[1]);
                graph.expand(gctx.cpy(k_i, gctx.view_2d(kc, hd * nkv, t, row_bytes, past as usize * row_bytes)));
                graph.expand(gctx.cpy(v_i, gctx.view_2d(vc, hd * nkv, t, row_bytes, past as usize * row_bytes)));
                let n_kv = past + t;
                let elt = kc.ty().type_size();
                let kw = gctx.view_3d(kc, hd, n_kv, nkv, row_bytes, hd as usize * elt, 0);
                let vw = gctx.view_3d(vc, hd, n_kv, nkv, row_bytes, hd as usize * elt, 0);
                let q_i = gctx.view_3d(q, hd, nh, t, q.nb()[1], q.nb()[2], start as usize * q.nb()[2]);
                let q_i = gctx.permute(q_i, [0, 2, 1, 3]); // [hd, t, nh]
                let a = gctx.flash_attn_ext(q_i, kw, vw, masks[i], scale); // [hd, nh, t]
                let a = gctx.reshape_2d(a, hd * nh, t);
                outs = Some(match outs {
                    None => a,
                    Some(prev) => gctx.concat(prev, a, 1),
                });
                start += t;
            }
            let attn = gctx.mul_mat(lw(l, "self_attn.o_proj.weight"), outs.unwrap());
            x = gctx.add(x, attn);
            let h2 = gctx.mul(gctx.rms_norm(x, eps), lw(l, "post_attention_layernorm.weight"));
            let g = gctx.mul_mat(lw(l, "mlp.gate_proj.weight"), h2);
            let u = gctx.mul_mat(lw(l, "mlp.up_proj.weight"), h2);
            x = gctx.add(x, gctx.mul_mat(lw(l, "mlp.down_proj.weight"), gctx.swiglu(g, u)));
        }
        let x = gctx.get_rows(x, out_idx);
        let x = gctx.mul(gctx.rms_norm(x, eps), w(names::NORM));
        let head = w(names::LM_HEAD);
        let n_rows = (rows.end - rows.start) as i64;
        let head = gctx.view_2d(head, head.ne()[0], n_rows, head.nb()[1], rows.start as usize * head.nb()[1]);
        let logits = gctx.mul_mat(head, x).set_name("logits").set_output();
        graph.expand(logits);

        self.alloc.alloc_graph(&graph)?;
        // Upload inputs.
        let mut id_v = Vec::with_capacity(n_tok as usize);
        let mut pos_v = Vec::with_capacity(n_tok as usize);
        let mut out_v = Vec::with_capacity(n_out as usize);
        let mut at = 0i32;
        for s in seqs {
            let past = sets[s.set].len() as i32;
            for (j, &t) in s.tokens.iter().enumerate() {
                id_v.push(t as i32);
                pos_v.push(past + j as i32);
                if positions == Positions::All {
                    out_v.push(at + j as i32);
                }
            }
            at += s.tokens.len() as i32;
            if positions == Positions::Last {
                out_v.push(at - 1);
            }
        }
        ids.write_i32(&id_v);
        pos.write_i32(&pos_v);
        out_idx.write_i32(&out_v);
        for (i, s) in seqs.iter().enumerate() {
            if let Some(m) = masks[i] {
                let past = sets[s.set].len();
                let t = s.tokens.len();
                let n_kv = past + t;
                let mut mv = vec![0f32; n_kv * t];
                for qi in 0..t {
                    for kj in (past + qi + 1)..n_kv {
                        mv[qi * n_kv + kj] = f32::NEG_INFINITY;
                    }
                }
                m.write_f32_as_own_type(&mv);
            }
        }
        backend.compute(&graph)?;
        let flat = logits.read_f32();
        for s in seqs {
            sets[s.set].advance(s.tokens.len());
        }
        let nr = n_rows as usize;
        let mut per_seq = Vec::with_capacity(seqs.len());
        let mut row = 0usize;
        for s in seqs {
            let n = if positions == Positions::All { s.tokens.len() } else { 1 };
            per_seq.push((0..n).map(|j| flat[(row + j) * nr..(row + j + 1) * nr].to_vec()).collect());
            row += n;
        }
        Ok(Logits { rows, per_seq })
    }
}

#[cfg(test)]
mod tests;
