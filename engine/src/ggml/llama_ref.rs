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
    /// A context as yued runs: F16 KV, flash attention, `threads` for every batch size.
    /// The caller frees it with `llama_free`.
    unsafe fn context(&self, n_ctx: usize, n_batch: usize, n_seq: usize, threads: usize) -> Result<*mut sys::llama_context, String> {
        // SAFETY: default params filled in, the model is loaded; a null context is an error.
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
            let ctx = sys::llama_init_from_model(self.model, cp);
            if ctx.is_null() {
                return Err("llama.cpp could not create a context".into());
            }
            Ok(ctx)
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
            Ok(LlamaRef { model })
        }
    }

    /// Seconds of each of `reps` decode steps (after one warm-up) of `batch` sequences that
    /// each hold `cache` tokens: one new token per sequence, logits for every new token.
    pub fn decode_steps(&self, batch: usize, cache: usize, reps: usize, threads: usize) -> Result<Vec<f64>, String> {
        let per_seq = (cache + reps + 8).next_multiple_of(256);
        let chunk = 512usize;
        // SAFETY: the context and batches are created, used and freed here; every index
        // written into a batch is below the size it was created with.
        unsafe {
            let ctx = self.context(per_seq * batch, chunk.max(batch), batch, threads)?;
            let vocab = sys::llama_vocab_n_tokens(sys::llama_model_get_vocab(self.model)).max(2);
            let token = |i: usize| (i % (vocab as usize - 1)) as i32;
            let run = |n: usize, fill: &dyn Fn(&mut sys::llama_batch, usize)| -> Result<(), String> {
                let mut b = sys::llama_batch_init(n as i32, 0, 1);
                b.n_tokens = n as i32;
                for i in 0..n {
                    fill(&mut b, i);
                }
                let rc = sys::llama_decode(ctx, b);
                sys::llama_batch_free(b);
                if rc != 0 {
                    return Err(format!("llama_decode returned {rc}"));
                }
                Ok(())
            };
            let set = |b: &mut sys::llama_batch, i: usize, tok: i32, pos: usize, seq: usize, logits: bool| {
                *b.token.add(i) = tok;
                *b.pos.add(i) = pos as i32;
                *b.n_seq_id.add(i) = 1;
                *(*b.seq_id.add(i)) = seq as i32;
                *b.logits.add(i) = logits as i8;
            };
            let mut result = Ok(Vec::with_capacity(reps));
            // Fill every sequence to `cache` tokens, in chunks.
            'outer: for s in 0..batch {
                let mut at = 0;
                while at < cache {
                    let n = chunk.min(cache - at);
                    if let Err(e) = run(n, &|b, i| set(b, i, token(at + i), at + i, s, at + i + 1 == cache)) {
                        result = Err(e);
                        break 'outer;
                    }
                    at += n;
                }
            }
            if let Ok(times) = result.as_mut() {
                let mem = sys::llama_get_memory(ctx);
                for r in 0..=reps {
                    let t = Instant::now();
                    if let Err(e) = run(batch, &|b, i| set(b, i, token(cache + i + 7), cache, i, true)) {
                        result = Err(e);
                        break;
                    }
                    if r > 0 {
                        times.push(t.elapsed().as_secs_f64());
                    }
                    for s in 0..batch {
                        sys::llama_memory_seq_rm(mem, s as i32, cache as i32, -1);
                    }
                }
            }
            sys::llama_free(ctx);
            result
        }
    }
}

impl LlamaRef {
    /// The logits of the last token after one prefill of `tokens` (full vocabulary).
    pub fn last_logits(&self, tokens: &[i32], threads: usize) -> Result<Vec<f32>, String> {
        assert!(!tokens.is_empty());
        // SAFETY: as in `decode_steps`; the logits pointer is read before the context goes.
        unsafe {
            let n_ctx = (tokens.len() + 8).next_multiple_of(256);
            let ctx = self.context(n_ctx, n_ctx, 1, threads)?;
            let n = tokens.len();
            let b = sys::llama_batch_init(n as i32, 0, 1);
            let mut b = b;
            b.n_tokens = n as i32;
            for (i, &t) in tokens.iter().enumerate() {
                *b.token.add(i) = t;
                *b.pos.add(i) = i as i32;
                *b.n_seq_id.add(i) = 1;
                *(*b.seq_id.add(i)) = 0;
                *b.logits.add(i) = (i + 1 == n) as i8;
            }
            let rc = sys::llama_decode(ctx, b);
            sys::llama_batch_free(b);
            let out = if rc != 0 {
                Err(format!("llama_decode returned {rc}"))
            } else {
                let vocab = sys::llama_vocab_n_tokens(sys::llama_model_get_vocab(self.model)) as usize;
                let p = sys::llama_get_logits_ith(ctx, -1);
                if p.is_null() {
                    Err("no logits".into())
                } else {
                    Ok(std::slice::from_raw_parts(p, vocab).to_vec())
                }
            };
            sys::llama_free(ctx);
            out
        }
    }
}

impl Drop for LlamaRef {
    fn drop(&mut self) {
        // SAFETY: the model was loaded by us and every context on it is already freed.
        unsafe { sys::llama_model_free(self.model) }
    }
}
