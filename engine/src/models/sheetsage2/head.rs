//! The transcriber's head on a GGML backend (`docs/design/listening-part2.md` section 2): the
//! memory (a linear map of the softmax-weighted mix of MERT's states), projected once per
//! window into each layer's cross-attention keys and values, and a post-LN BART decoder
//! stepped one token at a time on a self-attention cache, its output tied to the token
//! embedding.
//!
//! Keys are kept `[hidden, rows]` and values transposed, `[rows, hidden]`, both in the cross
//! memory and in the self-attention cache, so that a step reads each head's slice in place
//! through a strided view: no copy of the window's 7 500 frames per token (ggml's `mul_mat`
//! takes a source whose rows are contiguous and whose heads are strided).
use super::config::{HeadConfig, Vocab, ARCH, CONFIG_KEY, POSITION_OFFSET, TOKENIZER_KEY};
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, Graph, Tensor, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::nn::encoder::Blocks;
use crate::weights::{load_tensors, LoadError};

/// BART's LayerNorm epsilon.
const EPS: f32 = 1e-5;

pub struct Head {
    pub cfg: HeadConfig,
    pub vocab: Vocab,
    /// `softmax(layer_weight)`: each MERT state's share of the mix.
    pub mix: Vec<f32>,
    weights: TensorStore,
    alloc: Allocator,
}

/// The configuration and vocabulary of a head file, checked.
pub fn read_config(f: &GgufFile) -> Result<(HeadConfig, Vocab), GgufError> {
    f.expect_arch(ARCH)?;
    let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
    let cfg: HeadConfig =
        serde_json::from_str(f.get_str(CONFIG_KEY)?).map_err(|e| corrupt(format!("{CONFIG_KEY}: {e}")))?;
    cfg.check().map_err(|e| corrupt(format!("{CONFIG_KEY}: {e}")))?;
    let vocab = Vocab::from_json(f.get_str(TOKENIZER_KEY)?).map_err(|e| corrupt(format!("{TOKENIZER_KEY}: {e}")))?;
    if vocab.n_tokens as usize != cfg.vocab_size || vocab.time_ids() as usize != cfg.time_ids() {
        return Err(corrupt(format!(
            "{TOKENIZER_KEY} has {} tokens and {} time ids; the configuration says {} and {}",
            vocab.n_tokens,
            vocab.time_ids(),
            cfg.vocab_size,
            cfg.time_ids()
        )));
    }
    Ok((cfg, vocab))
}

impl Head {
    /// Reads a head file whose MERT has `mert_hidden` channels and `mert_layers` blocks.
    pub fn load(f: &GgufFile, mert_hidden: usize, mert_layers: usize, backend: &Backend) -> Result<Self, LoadError> {
        let (cfg, vocab) = read_config(f)?;
        let shapes = cfg.tensor_shapes(mert_hidden, mert_layers + 1);
        let weights = load_tensors(f, &shapes, backend, "SheetSage2 head weights")?;
        let logits = f.tensor_f32("layer_weight")?;
        let top = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let e: Vec<f64> = logits.iter().map(|&l| ((l - top) as f64).exp()).collect();
        let sum: f64 = e.iter().sum();
        let mix = e.iter().map(|x| (x / sum) as f32).collect();
        Ok(Head { cfg, vocab, mix, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// A window's memory from MERT's mixed states (`frames` rows of its width): the
    /// projection, then every layer's cross-attention keys and values. `keep` also returns
    /// the memory itself (parity checks).
    pub fn memory(&mut self, backend: &Backend, mixed: &[f32], frames: usize, keep: bool) -> Result<Memory, GgmlError> {
        let (d, layers) = (self.cfg.hidden_size as i64, self.cfg.decoder_layers);
        let mut kv = TensorStore::new(2 * layers)?;
        for n in 0..layers {
            kv.declare(&format!("k.{n}"), GgmlType::F32, &[d, frames as i64]);
            kv.declare(&format!("v.{n}"), GgmlType::F32, &[frames as i64, d]);
        }
        kv.allocate(backend, "SheetSage2 cross-attention keys and values", false)?;
        let dm = self.weights.get("encoder_projection.weight").ne()[0];
        let nodes = 16 * layers + 32;
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("SheetSage2 memory", nodes);
        let b = Blocks { ctx: &ctx, w: &self.weights };
        let x = ctx.new_tensor(GgmlType::F32, &[dm, frames as i64]).set_input();
        let mem = b.linear("encoder_projection", x).set_output();
        for n in 0..layers {
            let p = format!("decoder.layers.{n}.encoder_attn");
            g.expand(ctx.cpy(b.linear(&format!("{p}.k_proj"), mem), kv.get(&format!("k.{n}"))));
            let v = ctx.transpose(b.linear(&format!("{p}.v_proj"), mem));
            g.expand(ctx.cpy(v, kv.get(&format!("v.{n}"))));
        }
        g.expand(mem);
        g.check_capacity()?;
        self.alloc.alloc_graph(&g)?;
        x.write_f32(mixed);
        backend.compute(&g)?;
        let memory = if keep { mem.read_f32() } else { Vec::new() };
        Ok(Memory { kv, frames, memory })
    }

    /// A decoder with an empty self-attention cache.
    pub fn decoder(&self, backend: &Backend) -> Result<Decoder, GgmlError> {
        let (d, layers, len) = (self.cfg.hidden_size as i64, self.cfg.decoder_layers, self.cfg.max_output_seq_len);
        let mut cache = TensorStore::new(2 * layers)?;
        for n in 0..layers {
            cache.declare(&format!("k.{n}"), GgmlType::F32, &[d, len as i64]);
            cache.declare(&format!("v.{n}"), GgmlType::F32, &[len as i64, d]);
        }
        cache.allocate(backend, "SheetSage2 self-attention cache", false)?;
        Ok(Decoder { cache, pos: 0 })
    }

    /// Feeds `token` at the decoder's next position; the logits of the next token.
    pub fn step(
        &mut self,
        backend: &Backend,
        dec: &mut Decoder,
        mem: &Memory,
        token: u32,
    ) -> Result<Vec<f32>, GgmlError> {
        let c = &self.cfg;
        assert!(dec.pos < c.max_output_seq_len, "position {} past the head's {}", dec.pos, c.max_output_seq_len);
        let nodes = 96 * c.decoder_layers + 64;
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("SheetSage2 decoder step", nodes);
        let b = Blocks { ctx: &ctx, w: &self.weights };
        let tok = ctx.new_tensor(GgmlType::I32, &[1]).set_input();
        let pos = ctx.new_tensor(GgmlType::I32, &[1]).set_input();
        let row = ctx.new_tensor(GgmlType::I64, &[1]).set_input();
        let embed = ctx.get_rows(self.weights.get("token_embedding.weight"), tok);
        let h = ctx.add(embed, ctx.get_rows(self.weights.get("decoder.embed_positions.weight"), pos));
        let mut h = b.layer_norm("decoder.layernorm_embedding", h, EPS);
        for n in 0..c.decoder_layers {
            let layer = Layer { b, cfg: c, p: format!("decoder.layers.{n}"), n };
            h = layer.forward(&mut g, h, &dec.cache, mem, row, dec.pos);
        }
        let logits = ctx.mul_mat(self.weights.get("token_embedding.weight"), h).set_output();
        g.expand(logits);
        g.check_capacity()?;
        self.alloc.alloc_graph(&g)?;
        tok.write_i32(&[token as i32]);
        pos.write_i32(&[(dec.pos + POSITION_OFFSET) as i32]);
        row.write_i64(&[dec.pos as i64]);
        backend.compute(&g)?;
        dec.pos += 1;
        Ok(logits.read_f32())
    }
}

/// A window's cross-attention keys, per layer `[hidden, frames]`, and values `[frames, hidden]`.
pub struct Memory {
    kv: TensorStore,
    pub frames: usize,
    /// The memory itself, when asked for.
    pub memory: Vec<f32>,
}

/// One sequence's self-attention cache, per layer: keys `[hidden, max_output_seq_len]`, values
/// `[max_output_seq_len, hidden]`.
pub struct Decoder {
    cache: TensorStore,
    pos: usize,
}

impl Decoder {
    /// Tokens fed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
}

/// One post-LN decoder layer over one token.
struct Layer<'a> {
    b: Blocks<'a>,
    cfg: &'a HeadConfig,
    p: String,
    n: usize,
}

impl<'a> Layer<'a> {
    /// `LN(h + SA(h))`, `LN(h + CA(h, memory))`, `LN(h + FFN(h))`, for the token at `pos`:
    /// its key and value are written to the cache (in `g` before anything reads it), then
    /// positions `0..=pos` are attended.
    fn forward(
        &self,
        g: &mut Graph<'a>,
        h: Tensor<'a>,
        cache: &'a TensorStore,
        mem: &'a Memory,
        row: Tensor<'a>,
        pos: usize,
    ) -> Tensor<'a> {
        let (ctx, p, d) = (self.b.ctx, &self.p, self.cfg.hidden_size as i64);
        let ln = |name: &str, x| self.b.layer_norm(&format!("{p}.{name}"), x, EPS);
        let lin = |name: &str, x| self.b.linear(&format!("{p}.{name}"), x);
        let (kc, vc) = (cache.get(&format!("k.{}", self.n)), cache.get(&format!("v.{}", self.n)));
        g.expand(ctx.set_rows(kc, lin("self_attn.k_proj", h), row));
        let v_col = ctx.view_2d(vc, 1, d, vc.nb()[1], pos * 4);
        g.expand(ctx.cpy(ctx.reshape_2d(lin("self_attn.v_proj", h), 1, d), v_col));
        let sa = self.attend(lin("self_attn.q_proj", h), kc, vc, pos + 1);
        let h = ln("self_attn_layer_norm", ctx.add(h, lin("self_attn.out_proj", sa)));
        let (mk, mv) = (mem.kv.get(&format!("k.{}", self.n)), mem.kv.get(&format!("v.{}", self.n)));
        let ca = self.attend(lin("encoder_attn.q_proj", h), mk, mv, mem.frames);
        let h = ln("encoder_attn_layer_norm", ctx.add(h, lin("encoder_attn.out_proj", ca)));
        let y = lin("fc2", ctx.gelu_erf(lin("fc1", h)));
        ln("final_layer_norm", ctx.add(h, y))
    }

    /// One query over the first `len` rows of keys `k` (`[hidden, rows]`) and values `vt`
    /// (`[rows, hidden]`), per head, `1 / sqrt(head_dim)` scaled; both read in place.
    fn attend(&self, q: Tensor<'a>, k: Tensor<'a>, vt: Tensor<'a>, len: usize) -> Tensor<'a> {
        let ctx = self.b.ctx;
        let (d, heads) = (self.cfg.hidden_size, self.cfg.num_attention_heads);
        let hd = d / heads;
        let keys = ctx.view_3d(k, hd as i64, len as i64, heads as i64, k.nb()[1], 4 * hd, 0); // [hd, len, heads]
        let values = ctx.view_3d(vt, len as i64, hd as i64, heads as i64, vt.nb()[1], hd * vt.nb()[1], 0);
        let q = ctx.cont(ctx.permute(ctx.reshape_3d(q, hd as i64, heads as i64, 1), [0, 2, 1, 3])); // [hd, 1, heads]
        let scores = ctx.soft_max_ext(ctx.mul_mat(keys, q), None, 1.0 / (hd as f32).sqrt()); // [len, 1, heads]
        let out = ctx.mul_mat(values, scores); // [hd, 1, heads]
        ctx.reshape_2d(ctx.cont(ctx.permute(out, [0, 2, 1, 3])), d as i64, 1)
    }
}
