//! llama.cpp's own decode, from the very build our ggml comes from (llama-cpp-sys-2 links
//! libllama too): the reference of `yued bench --llama-cpp`. Same weights (exported by
//! `export_qwen3`), same KV type (F16), same threads, same machine, same run.
use super::sys;
use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

/// A llama.cpp model loaded for timing.
pub struct LlamaRef {
    model: *mut sys::llama_model,
    /// Whether the layers went to a GPU; when not, nothing does (see `open`).
    gpu: bool,
}

// The model is only used from the thread that measures; llama.cpp models are immutable
// after load and may be shared by contexts.
unsafe impl Send for LlamaRef {}

unsafe extern "C" fn quiet(level: sys::ggml_log_level, text: *const std::os::raw::c_char, _: *mut std::ffi::c_void) {
    if level == sys::GGML_LOG_LEVEL_ERROR && !text.is_null() {
        eprint!("llama.cpp: {}", unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy());
    }
}

impl LlamaRef {
    /// A context as yued runs (F16 KV, flash attention, `threads` for every batch size),
    /// owned by the returned session, which frees it.
    fn open(&self, n_ctx: usize, n_batch: usize, n_seq: usize, threads: usize) -> Result<DecodeSession<'_>, String> {
        // SAFETY: default params filled in, the model is loaded; a null context is an error;
        // a non-null one goes straight into the session.
        unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = n_ctx as u32;
            cp.n_batch = n_batch as u32;
            cp.n_ubatch = n_batch as u32;
            cp.n_seq_max = n_seq as u32;
            cp.n_threads = threads as i32;
            cp.n_threads_batch = threads as i32;
            cp.type_k = sys::GGML_TYPE_F16;
            cp.type_v = sys::GGML_TYPE_F16;
            cp.flash_attn_type = sys::LLAMA_FLASH_ATTN_TYPE_ENABLED;
            cp.no_perf = true;
            // With the layers on the CPU, llama.cpp would still send batches of 32 tokens and
            // more to a GPU of the build ("op offload"): keep a CPU comparison on the CPU.
            cp.op_offload = self.gpu;
            let ctx = sys::llama_init_from_model(self.model, cp);
            if ctx.is_null() {
                return Err("llama.cpp could not create a context".into());
            }
            let vocab = sys::llama_vocab_n_tokens(sys::llama_model_get_vocab(self.model)).max(1) as usize;
            Ok(DecodeSession { ctx, vocab, cache: 0, max_batch: n_seq, _model: self })
        }
    }

    /// Loads a llama.cpp GGUF (all layers on the GPU when `gpu` and the build has one).
    pub fn load(path: &Path, gpu: bool) -> Result<Self, String> {
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: plain C calls; the path outlives the call; a null model is an error.
        unsafe {
            sys::llama_log_set(Some(quiet), std::ptr::null_mut());
            sys::llama_backend_init();
            let mut p = sys::llama_model_default_params();
            p.n_gpu_layers = if gpu { -1 } else { 0 };
            let model = sys::llama_model_load_from_file(c.as_ptr(), p);
            if model.is_null() {
                return Err(format!("llama.cpp could not load {}", path.display()));
            }
            Ok(LlamaRef { model, gpu })
        }
    }

    /// A context whose `max_batch` sequences each hold `cache` tokens, ready to time decode
    /// steps of its first 1..=max_batch sequences ([`DecodeSession::steps`]).
    ///
    /// Sequence 0 is prefilled in chunks and copied into the others' cache streams (each
    /// sequence has its own stream, so the copy is a real one): a step then reads `batch`
    /// caches of `cache` entries, as after `batch` prefills, at a fraction of the time
    /// (a full-size prefill of 8192 tokens takes minutes on a CPU).
    pub fn session(&self, max_batch: usize, cache: usize, threads: usize) -> Result<DecodeSession<'_>, String> {
        let per_seq = (cache + 16).next_multiple_of(256);
        let chunk = 512usize;
        let mut session = self.open(per_seq * max_batch, chunk.max(max_batch), max_batch, threads)?;
        let mut at = 0;
        while at < cache {
            let n = chunk.min(cache - at);
            session.decode(n, &|i| (session.token(at + i), at + i, 0, at + i + 1 == cache))?;
            at += n;
        }
        session.cache = cache;
        if cache > 0 {
            // SAFETY: the context is live; sequence ids are below n_seq_max.
            unsafe {
                let mem = sys::llama_get_memory(session.ctx);
                for s in 1..max_batch {
                    sys::llama_memory_seq_cp(mem, 0, s as i32, -1, -1);
                }
            }
        }
        Ok(session)
    }

    /// Seconds per decode step of `batch` sequences that each hold `cache` tokens (one new
    /// token per sequence, logits for every new token), `reps` figures as [`mean_steps`]
    /// measures them.
    pub fn decode_steps(&self, batch: usize, cache: usize, reps: usize, threads: usize) -> Result<Vec<f64>, String> {
        self.session(batch, cache, threads)?.steps(batch, reps)
    }
}

/// A llama.cpp context (for timing decode steps: with its sequences filled).
pub struct DecodeSession<'m> {
    ctx: *mut sys::llama_context,
    vocab: usize,
    /// Tokens every sequence holds.
    cache: usize,
    max_batch: usize,
    _model: &'m LlamaRef,
}

impl DecodeSession<'_> {
    fn token(&self, i: usize) -> i32 {
        (i % self.vocab.saturating_sub(1).max(1)) as i32
    }

    /// One `llama_decode` of `n` tokens; `at(i)` gives token i's (id, position, sequence,
    /// wants logits).
    fn decode(&self, n: usize, at: &dyn Fn(usize) -> (i32, usize, usize, bool)) -> Result<(), String> {
        // SAFETY: the batch holds `n` tokens with one sequence id each; every index written
        // is below `n`; the batch is freed before returning.
        unsafe {
            let mut b = sys::llama_batch_init(n as i32, 0, 1);
            b.n_tokens = n as i32;
            for i in 0..n {
                let (tok, pos, seq, logits) = at(i);
                *b.token.add(i) = tok;
                *b.pos.add(i) = pos as i32;
                *b.n_seq_id.add(i) = 1;
                *(*b.seq_id.add(i)) = seq as i32;
                *b.logits.add(i) = logits as i8;
            }
            let rc = sys::llama_decode(self.ctx, b);
            sys::llama_batch_free(b);
            if rc != 0 {
                return Err(format!("llama_decode returned {rc}"));
            }
        }
        Ok(())
    }

    /// Seconds per decode step of the first `batch` sequences, `reps` figures as
    /// [`mean_steps`] measures them; each step's token is removed again after it.
    pub fn steps(&self, batch: usize, reps: usize) -> Result<Vec<f64>, String> {
        assert!(batch >= 1 && batch <= self.max_batch, "batch {batch} of a session of {}", self.max_batch);
        let cache = self.cache;
        // SAFETY: the context is live for the session.
        let mem = unsafe { sys::llama_get_memory(self.ctx) };
        let mut step = || -> Result<f64, String> {
            let t = Instant::now();
            self.decode(batch, &|i| (self.token(cache + i + 7), cache, i, true))?;
            let s = t.elapsed().as_secs_f64();
            for q in 0..batch {
                // SAFETY: as above; removes the step's token from sequence q.
                unsafe { sys::llama_memory_seq_rm(mem, q as i32, cache as i32, -1) };
            }
            Ok(s)
        };
        mean_steps(reps, &mut step)
    }
}

impl Drop for DecodeSession<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `llama_init_from_model` and freed once.
        unsafe { sys::llama_free(self.ctx) };
    }
}

/// A repetition of a decode step lasts at least this long: sub-millisecond steps (the tiny
/// model) are averaged over enough steps that one scheduler hiccup is not a figure.
pub const MIN_REP_SECONDS: f64 = 0.05;

/// `reps` figures of a step's seconds, each the mean over as many steps as fill
/// [`MIN_REP_SECONDS`] (at least one), after two warm-up steps (the second one sizes the
/// repetitions). `step` returns the seconds of the part it times. yued's and llama.cpp's
/// decode are both measured this way.
pub fn mean_steps<E>(reps: usize, step: &mut dyn FnMut() -> Result<f64, E>) -> Result<Vec<f64>, E> {
    step()?;
    let one = step()?;
    let k = ((MIN_REP_SECONDS / one.max(1e-7)).ceil() as usize).clamp(1, 10_000);
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let mut sum = 0.0;
        for _ in 0..k {
            sum += step()?;
        }
        out.push(sum / k as f64);
    }
    Ok(out)
}

impl LlamaRef {
    /// The logits of the last token after one prefill of `tokens` (full vocabulary).
    pub fn last_logits(&self, tokens: &[i32], threads: usize) -> Result<Vec<f32>, String> {
        assert!(!tokens.is_empty());
        let n = tokens.len();
        let n_ctx = (n + 8).next_multiple_of(256);
        let session = self.open(n_ctx, n_ctx, 1, threads)?;
        session.decode(n, &|i| (tokens[i], i, 0, i + 1 == n))?;
        // SAFETY: the logits of the last decode live in the session's context, which is
        // alive until the copy below is made.
        unsafe {
            let p = sys::llama_get_logits_ith(session.ctx, -1);
            if p.is_null() {
                return Err("no logits".into());
            }
            Ok(std::slice::from_raw_parts(p, session.vocab).to_vec())
        }
    }
}

impl Drop for LlamaRef {
    fn drop(&mut self) {
        // SAFETY: the model was loaded by us and every context on it is already freed.
        unsafe { sys::llama_model_free(self.model) }
    }
}
