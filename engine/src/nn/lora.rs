//! The LoRA merge engine: one weight tensor and the terms adapters add to it, merged the way
//! yue2.cpp's `adapter_apply` describes: the base dequantized on the host, every term of
//! every stacked adapter summed in one backend graph, the sum quantized back to the
//! tensor's GGUF type once, its rows split across threads. It knows nothing of where the
//! terms come from (request adapters, a head's own LoRA factors).
use crate::ggml::{decode_to_f32, Allocator, Backend, Context, GgmlError, GgmlType};

/// One change to a weight `W` (torch layout `[out, in]`, row-major), with its scale already
/// folded in (a LoRA's `strength * alpha / rank`, a diff's or a replacement's strength).
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    /// `W += scale * B @ A`: `a` is `[rank, in]`, `b` is `[out, rank]`.
    Lora { a: Vec<f32>, b: Vec<f32>, rank: usize, scale: f32 },
    /// `W += scale * D`, `D` shaped like `W`.
    Diff { d: Vec<f32>, scale: f32 },
    /// `W += scale * (F - W)`: at scale 1 the tensor becomes `F`.
    Replace { f: Vec<f32>, scale: f32 },
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("{0}")]
    Shape(String),
}

/// Merges `terms` into the tensor of type `ty`, GGUF `ne` (`[in, out]`, or `[n]` for a
/// vector) and bytes `base`; returns the merged tensor's bytes in the same type.
pub fn merge(
    backend: &Backend,
    ty: GgmlType,
    ne: &[i64],
    base: &[u8],
    terms: &[Term],
    threads: usize,
) -> Result<Vec<u8>, MergeError> {
    Merger::new(backend, threads).merge(ty, ne, base, terms)
}

/// The merge engine over one model load: its compute buffer is kept from tensor to tensor.
pub struct Merger<'b> {
    backend: &'b Backend,
    alloc: Allocator,
    threads: usize,
}

impl<'b> Merger<'b> {
    pub fn new(backend: &'b Backend, threads: usize) -> Self {
        Merger { backend, alloc: Allocator::new(backend), threads: threads.max(1) }
    }

    /// [`merge`] on this engine's buffer.
    pub fn merge(&mut self, ty: GgmlType, ne: &[i64], base: &[u8], terms: &[Term]) -> Result<Vec<u8>, MergeError> {
        let (cols, rows) = (ne[0] as usize, ne[1..].iter().product::<i64>().max(1) as usize);
        let n = cols * rows;
        if terms.is_empty() {
            return Ok(base.to_vec());
        }
        let w = dequantize(ty, base, cols, rows, self.threads)?;
        if w.len() != n {
            return Err(MergeError::Shape(format!("{} bytes of {} are not {n} values", base.len(), ty.name())));
        }
        for t in terms {
            let ok = match t {
                Term::Lora { a, b, rank, .. } => *rank > 0 && a.len() == rank * cols && b.len() == rows * rank,
                Term::Diff { d, .. } => d.len() == n,
                Term::Replace { f, .. } => f.len() == n,
            };
            if !ok {
                return Err(MergeError::Shape(format!("a term does not fit a [{rows}, {cols}] weight")));
            }
        }
        let nodes = 16 + 8 * terms.len();
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("adapter merge", nodes);
        let base_t = ctx.new_tensor(GgmlType::F32, &[cols as i64, rows as i64]).set_input();
        let mut inputs = Vec::new();
        let mut acc = base_t;
        for t in terms {
            acc = match t {
                Term::Lora { a, b, rank, scale } => {
                    // out_prod(x, y) = sum over ne1 of x[:, r] (x) y[:, r]: x = A as it is
                    // (ne [in, rank]), y = B^T (ne [out, rank]), giving ne [in, out], the
                    // weight's layout, as rank-many row updates.
                    let at = ctx.new_tensor(GgmlType::F32, &[cols as i64, *rank as i64]).set_input();
                    let bt = ctx.new_tensor(GgmlType::F32, &[rows as i64, *rank as i64]).set_input();
                    // The scale rides on B (transposed on the host anyway): one pass less.
                    let mut b_t = vec![0f32; b.len()];
                    for o in 0..rows {
                        for r in 0..*rank {
                            b_t[r * rows + o] = b[o * rank + r] * scale;
                        }
                    }
                    inputs.push((at, a.clone()));
                    inputs.push((bt, b_t));
                    ctx.add(acc, ctx.out_prod(at, bt))
                }
                Term::Diff { d, scale } => {
                    let dt = ctx.new_tensor(GgmlType::F32, &[cols as i64, rows as i64]).set_input();
                    inputs.push((dt, d.clone()));
                    ctx.add(acc, ctx.scale(dt, *scale))
                }
                Term::Replace { f, scale } => {
                    let ft = ctx.new_tensor(GgmlType::F32, &[cols as i64, rows as i64]).set_input();
                    inputs.push((ft, f.clone()));
                    ctx.add(acc, ctx.scale(ctx.sub(ft, base_t), *scale))
                }
            };
        }
        let out = acc.set_output();
        g.expand(out);
        self.alloc.alloc_graph(&g)?;
        base_t.write_f32(&w);
        for (t, v) in &inputs {
            t.write_f32(v);
        }
        self.backend.compute(&g)?;
        Ok(requantize(ty, &out.read_f32(), cols, self.threads))
    }
}

/// A tensor's values as f32, its rows split across `threads`.
fn dequantize(ty: GgmlType, raw: &[u8], cols: usize, rows: usize, threads: usize) -> Result<Vec<f32>, MergeError> {
    let row_bytes = raw.len() / rows.max(1);
    let per = rows.div_ceil(threads.max(1)).max(1);
    let parts: Vec<Option<Vec<f32>>> = std::thread::scope(|s| {
        let hs: Vec<_> = raw.chunks(per * row_bytes.max(1)).map(|c| s.spawn(move || decode_to_f32(ty, c))).collect();
        hs.into_iter().map(|h| h.join().expect("a dequantizing thread panicked")).collect()
    });
    let mut out = Vec::with_capacity(cols * rows);
    for p in parts {
        out.extend(p.ok_or_else(|| MergeError::Shape(format!("a {} tensor has no f32 form", ty.name())))?);
    }
    Ok(out)
}

/// `src` (rows of `n_per_row` values) in type `ty`, the rows split across `threads`.
pub fn requantize(ty: GgmlType, src: &[f32], n_per_row: usize, threads: usize) -> Vec<u8> {
    let rows = src.len() / n_per_row;
    let per = rows.div_ceil(threads.max(1)).max(1);
    if ty == GgmlType::F32 {
        return bytemuck::cast_slice(src).to_vec();
    }
    std::thread::scope(|s| {
        let parts: Vec<_> = src
            .chunks(per * n_per_row)
            .map(|chunk| s.spawn(move || crate::ggml::quantize(ty, chunk, n_per_row)))
            .collect();
        let parts: Vec<Vec<u8>> = parts.into_iter().map(|h| h.join().expect("a quantizing thread panicked")).collect();
        parts.concat()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    /// Each kind of term against its formula on the host, stacked in one graph.
    #[test]
    fn lora_diff_and_replacement_terms_sum_as_their_formulas() {
        let backend = Backend::for_tests(2);
        let (rows, cols, rank) = (5usize, 3usize, 2usize);
        let w: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.1 - 0.5).collect();
        let a: Vec<f32> = (0..rank * cols).map(|i| (i as f32 * 0.7).sin()).collect();
        let b: Vec<f32> = (0..rows * rank).map(|i| (i as f32 * 1.3).cos()).collect();
        let d: Vec<f32> = (0..rows * cols).map(|i| (i % 4) as f32 * 0.25).collect();
        let f: Vec<f32> = (0..rows * cols).map(|i| 1.0 - i as f32 * 0.05).collect();
        let terms = vec![
            Term::Lora { a: a.clone(), b: b.clone(), rank, scale: 0.5 },
            Term::Diff { d: d.clone(), scale: -1.0 },
            Term::Replace { f: f.clone(), scale: 0.25 },
        ];
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = f32s(&merge(&backend, GgmlType::F32, &[cols as i64, rows as i64], &bytes, &terms, 2).unwrap());
        for o in 0..rows {
            for i in 0..cols {
                let k = o * cols + i;
                let ba: f32 = (0..rank).map(|r| b[o * rank + r] * a[r * cols + i]).sum();
                let want = w[k] + 0.5 * ba - d[k] + 0.25 * (f[k] - w[k]);
                assert!((got[k] - want).abs() < 1e-6, "[{o}, {i}]: {} against {want}", got[k]);
            }
        }
        // No terms: the bytes are the base's; a misfit term is an error.
        assert_eq!(merge(&backend, GgmlType::F32, &[cols as i64, rows as i64], &bytes, &[], 1).unwrap(), bytes);
        assert!(merge(
            &backend,
            GgmlType::F32,
            &[cols as i64, rows as i64],
            &bytes,
            &[Term::Diff { d: vec![0.0; 3], scale: 1.0 }],
            1
        )
        .is_err());
    }

    /// Splitting rows across threads quantizes exactly as one pass does.
    #[test]
    fn threads_split_rows_without_changing_bytes() {
        let src: Vec<f32> = (0..7 * 256).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16, GgmlType::BF16] {
            assert_eq!(requantize(ty, &src, 256, 3), crate::ggml::quantize(ty, &src, 256), "{}", ty.name());
        }
    }
}
