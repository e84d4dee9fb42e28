//! The global LM: a stock Qwen3 ([`CausalLm`]) under the checkpoint's names, its tokenizer
//! from the GGUF, and the two entry points of the frame loop: the prompt prefill and the
//! frame-feedback step, each for the conditional and unconditional streams of the songs.
use crate::ggml::{Backend, GgmlError, Kernels};
use crate::gguf::GgufFile;
use crate::kv_cache::KvSet;
use crate::models::mm3::config::{lm_names, LmInfo};
use crate::nn::causal_lm::{CausalLm, LmSpec, Logits, Positions, SeqEmbeds, SeqInput, StepInput};
use crate::nn::qwen3::Role;
use crate::tokenizer::{token_type, BpeTokenizer as Tokenizer, TokenizerError};
use crate::weights::{load_tensors_upcast, LoadError};

pub struct LmModel {
    pub info: LmInfo,
    /// Element type of the KV sets the AR loop makes (F16; F32 for precision checks).
    pub kv_type: crate::ggml::GgmlType,
    /// Tokens a prompt goes in at most per forward ([`crate::nn::batch::PREFILL_CHUNK`]
    /// unless its owner says otherwise: `--prefill-chunk`). The pieces are part of a song's
    /// bits: a replay prefills in the same pieces as the composer that wrote it.
    pub prefill_chunk: usize,
    lm: CausalLm,
}

/// The LM as the shared graph sees it.
pub fn lm_spec(info: &LmInfo) -> LmSpec {
    let c = &info.config;
    LmSpec {
        dims: c.qwen3_dims(),
        hidden: c.hidden_size,
        vocab: c.vocab_size,
        embed: lm_names::EMBED.into(),
        norm: lm_names::NORM.into(),
        head: lm_names::LM_HEAD.into(),
        layers: (0..c.num_hidden_layers).map(|l| Role::ALL.map(|r| lm_names::layer_role(l, r))).collect(),
    }
}

/// The LM file's tokenizer. minimaxmusic.cpp's files carry no token types: the ids from
/// the first added token on are then control tokens.
pub fn tokenizer(f: &GgufFile, info: &LmInfo) -> Result<Tokenizer, TokenizerError> {
    if f.get("tokenizer.ggml.token_type").is_some() {
        return Tokenizer::from_gguf(f);
    }
    let tokens: Vec<String> = f.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    let types = (0..tokens.len())
        .map(|i| if (i as u32) < info.tokens.text_vocab { token_type::NORMAL } else { token_type::CONTROL })
        .collect();
    let merges: Vec<String> = f.get_str_array("tokenizer.ggml.merges")?.into_iter().map(String::from).collect();
    Tokenizer::from_parts(tokens, types, &merges)
        .map_err(|e| TokenizerError::Build(format!("{}: {e}", f.path().display())))
}

/// One step's output for every stream it ran: the logits of the sampled rows
/// ([`crate::models::mm3::config::TokenLayout::sample_rows`]) and the final-normed hidden
/// state, per stream in the order given.
pub struct LmOut {
    pub logits: Vec<Vec<f32>>,
    pub hidden: Vec<Vec<f32>>,
}

impl LmOut {
    fn from(l: Logits) -> Self {
        LmOut { logits: l.per_seq.into_iter().flatten().collect(), hidden: l.hidden.into_iter().flatten().collect() }
    }
}

impl LmModel {
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        let info = LmInfo::read(f)?;
        // Norms in F32 (a native BF16 file keeps them BF16).
        let weights =
            load_tensors_upcast(f, &info.config.tensor_shapes(), backend, "LM weights", |_, ne| ne.len() == 1)?;
        Ok(LmModel {
            lm: CausalLm::new(lm_spec(&info), weights, backend, "LM step"),
            info,
            kv_type: crate::kv_cache::KV_TYPE,
            prefill_chunk: crate::nn::batch::PREFILL_CHUNK,
        })
    }

    /// A KV set of `streams` sequences of `capacity` positions, of [`LmModel::kv_type`].
    pub fn kv_set(&self, backend: &Backend, capacity: usize, streams: usize) -> Result<KvSet, GgmlError> {
        KvSet::with_type(backend, self.info.config.kv_dims(), capacity, streams, self.kv_type)
    }

    pub fn hidden(&self) -> usize {
        self.info.config.hidden_size
    }

    pub fn weight_bytes(&self) -> usize {
        self.lm.weights().bytes()
    }

    /// The input embedding of each id (`hidden` values each), read from the device table.
    pub fn embeddings(&self, ids: &[u32]) -> Vec<f32> {
        self.lm.embedding_rows(ids)
    }

    /// Prefills `prompts[i]` into stream `streams[i]` of `set` and returns the last
    /// position's logits and hidden state of each. With `batch`, prompts of equal length
    /// on consecutive streams run as one forward; else one forward each.
    pub fn prefill(
        &mut self,
        backend: &Backend,
        set: &mut KvSet,
        prompts: &[(&[u32], usize)],
        batch: bool,
    ) -> Result<LmOut, GgmlError> {
        let rows = self.info.tokens.sample_rows();
        if batch {
            let seqs: Vec<SeqInput<'_>> = prompts.iter().map(|&(tokens, set)| SeqInput { tokens, set }).collect();
            return Ok(LmOut::from(self.lm.step(
                backend,
                std::slice::from_mut(set),
                StepInput::Ids(&seqs),
                rows,
                Positions::Last,
                true,
            )?));
        }
        let mut out = LmOut { logits: Vec::new(), hidden: Vec::new() };
        for &(tokens, stream) in prompts {
            let seq = [SeqInput { tokens, set: stream }];
            let o = LmOut::from(self.lm.step(
                backend,
                std::slice::from_mut(set),
                StepInput::Ids(&seq),
                rows.clone(),
                Positions::Last,
                true,
            )?);
            out.logits.extend(o.logits);
            out.hidden.extend(o.hidden);
        }
        Ok(out)
    }

    /// Appends one input embedding to each listed stream (`inputs[i]`: its embedding and
    /// stream) and returns their logits and hidden states; batched or one forward each.
    pub fn feed(
        &mut self,
        backend: &Backend,
        set: &mut KvSet,
        inputs: &[(&[f32], usize)],
        batch: bool,
    ) -> Result<LmOut, GgmlError> {
        if batch {
            return self.feed_over(backend, &mut [set], inputs);
        }
        let rows = self.info.tokens.sample_rows();
        let mut out = LmOut { logits: Vec::new(), hidden: Vec::new() };
        for &(embeds, stream) in inputs {
            let seq = [SeqEmbeds { embeds, set: stream }];
            let o = LmOut::from(self.lm.step(
                backend,
                std::slice::from_mut(set),
                StepInput::Embeds(&seq),
                rows.clone(),
                Positions::Last,
                true,
            )?);
            out.logits.extend(o.logits);
            out.hidden.extend(o.hidden);
        }
        Ok(out)
    }

    /// [`feed`](Self::feed) as one forward over the caches of several composers (each job
    /// keeps its own set): a stream is counted across `sets`, in order.
    pub fn feed_over(
        &mut self,
        backend: &Backend,
        sets: &mut [&mut KvSet],
        inputs: &[(&[f32], usize)],
    ) -> Result<LmOut, GgmlError> {
        let seqs: Vec<SeqEmbeds<'_>> = inputs.iter().map(|&(embeds, set)| SeqEmbeds { embeds, set }).collect();
        let rows = self.info.tokens.sample_rows();
        let l =
            self.lm.step_over(backend, sets, StepInput::Embeds(&seqs), rows, Positions::Last, true, Kernels::Fast)?;
        Ok(LmOut::from(l))
    }

    /// Replay: the whole feedback sequence `embeds` (`n` rows) after a prefilled prompt on
    /// `stream`, as one forward; the hidden state of every position.
    pub fn feed_all(
        &mut self,
        backend: &Backend,
        set: &mut KvSet,
        embeds: &[f32],
        stream: usize,
    ) -> Result<Vec<Vec<f32>>, GgmlError> {
        let rows = self.info.tokens.sample_rows();
        let seq = [SeqEmbeds { embeds, set: stream }];
        let l = self.lm.step(
            backend,
            std::slice::from_mut(set),
            StepInput::Embeds(&seq),
            rows.start..rows.start + 1,
            Positions::All,
            true,
        )?;
        Ok(l.hidden.into_iter().flatten().collect())
    }

    /// Logits of every prompt position of the full vocabulary (parity tests).
    pub fn prompt_logits(
        &mut self,
        backend: &Backend,
        set: &mut KvSet,
        tokens: &[u32],
        stream: usize,
    ) -> Result<Vec<Vec<f32>>, GgmlError> {
        let seq = [SeqInput { tokens, set: stream }];
        let l = self.lm.step(
            backend,
            std::slice::from_mut(set),
            StepInput::Ids(&seq),
            0..self.info.config.vocab_size as u32,
            Positions::All,
            false,
        )?;
        Ok(l.per_seq.into_iter().flatten().collect())
    }
}

/// The LM as a standard llama.cpp `qwen3` GGUF ([`crate::nn::export_qwen3`]): the same
/// bytes under llama.cpp's names, for `yued bench --family mm3 --llama-cpp`; returns the
/// number of tensors written.
pub fn export_qwen3(model: &std::path::Path, out: &std::path::Path) -> Result<usize, crate::gguf::GgufError> {
    use crate::nn::export_qwen3::{write, Qwen3Hparams};
    let f = GgufFile::open(model)?;
    let info = LmInfo::read(&f)?;
    let corrupt = |what| crate::gguf::GgufError::Corrupt { path: model.to_path_buf(), what };
    let hp = Qwen3Hparams::from_config(&info.config).map_err(corrupt)?;
    let tokens: Vec<String> = f.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    // minimaxmusic.cpp's files carry no types: the ids from the first added token on are
    // control tokens, as `tokenizer` reads them.
    let types: Vec<i32> = match f.get_i64_array("tokenizer.ggml.token_type") {
        Ok(t) => t.into_iter().map(|t| t as i32).collect(),
        Err(_) => (0..tokens.len())
            .map(|i| if (i as u32) < info.tokens.text_vocab { token_type::NORMAL } else { token_type::CONTROL })
            .collect(),
    };
    write(&f, &hp, "MiniMax Music 3 LM", tokens, types, &|_| true, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exported LM loads in llama.cpp and its logits are ours for the same prompt: an
    /// independent implementation of the LM's forward, beside the diffusers fixtures.
    #[test]
    fn the_lm_exports_to_llama_cpp_and_computes_our_logits() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::models::mm3::demo::write_demo(
            dir.path(),
            crate::models::yue2::demo::Preset::Tiny,
            4,
            &mut |_, _| {},
        )
        .unwrap();
        let out = dir.path().join("lm.qwen3.gguf");
        let src = GgufFile::open(&files[0]).unwrap();
        let info = LmInfo::read(&src).unwrap();
        let c = info.config.clone();
        assert_eq!(export_qwen3(&files[0], &out).unwrap(), 3 + 11 * c.num_hidden_layers);
        let q = GgufFile::open(&out).unwrap();
        assert_eq!(q.get_str_array("tokenizer.ggml.tokens").unwrap().len(), c.vocab_size, "padded to the vocabulary");
        let (a, b) =
            (src.tensor("model.layers.0.mlp.down_proj.weight").unwrap(), q.tensor("blk.0.ffn_down.weight").unwrap());
        assert_eq!(src.tensor_bytes(a), q.tensor_bytes(b));
        let l = crate::ggml::llama_ref::LlamaRef::load(&out, false).unwrap();
        let vocab = c.vocab_size as u32;
        let tokens: Vec<u32> = (0..29u32).map(|i| (i * 97 + 5) % vocab).collect();
        let theirs = l.last_logits(&tokens.iter().map(|&t| t as i32).collect::<Vec<_>>(), 1).unwrap();
        let backend = crate::ggml::Backend::for_tests(1);
        let mut lm = LmModel::load(&src, &backend).unwrap();
        let mut set = lm.kv_set(&backend, tokens.len(), 1).unwrap();
        let ours = lm.prompt_logits(&backend, &mut set, &tokens, 0).unwrap();
        let ours = ours.last().unwrap();
        assert_eq!(ours.len(), theirs.len());
        let diff: f64 = ours.iter().zip(&theirs).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = theirs.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
        assert!(diff / norm < 1e-3, "relative RMS {:e} against llama.cpp", diff / norm);
    }
}
