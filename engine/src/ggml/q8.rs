//! The CPU's Q8_0 matrix product of several rows, sharing each weight load between them.
//!
//! On the reference kernels (see [`super::Kernels::RowExact`]) ggml multiplies a Q8_0 weight
//! by each activation row on its own (`ggml_vec_dot_q8_0_q8_0` per output), reloading and
//! re-signing the weight's blocks for every row of the batch; its fast kernels (llamafile's
//! tiles) share the loads and keep that function's order per output, on AVX2 only, whatever
//! the CPU has besides. This product computes every
//! output in exactly that function's order on x86 (AVX2): per 32-value block, the eight
//! 32-bit lane sums of four byte products (exact integers) turned to floats and added into
//! one 8-lane accumulator by a fused multiply-add with the block's scale product; the eight
//! lanes summed pairwise at the end. It only tiles the work: four weight rows against two
//! (AVX2) or eight (AVX-512 VNNI, two rows a register) activation rows at a time, each weight
//! block loaded once for the tile. The bits are ggml's reference bits on either set of kernels
//! (a test checks them), so a token still gives the same bits alone, beside other rows, or in
//! a prefill, and a graph on the fast kernels the bits it had.
//!
//! The activations are quantized by a ggml copy node (`quantize_row_q8_0`, the function the
//! reference product uses) in front of the product.
use super::{Context, GgmlType, Tensor};
use ggml_sys as sys;
use std::os::raw::{c_int, c_void};

/// ggml's `block_q8_0`: an f16 scale and 32 signed bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct Block {
    d: u16,
    qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<Block>() == 34);

/// The fewest activation rows the product takes (measured on a Sapphire Rapids vCPU pair:
/// at 2 and 3 rows it is no faster than ggml's reference product, from 4 rows 1.4-1.8x).
const MIN_ROWS: i64 = 4;

/// Whether this CPU runs the product (x86-64 with AVX2, FMA and F16C).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Context {
    /// Whether this graph's products of a Q8_0 weight and F32 activations take
    /// [`Context::mul_mat_q8_rows`] (a graph for the CPU backend only: it is a custom op).
    pub fn set_q8_row_products(&self, on: bool) {
        self.q8_row_products.set(on && available());
    }

    /// Whether [`Context::mul_mat`] of `a` and `b` goes through [`Context::mul_mat_q8_rows`].
    pub(crate) fn takes_q8_rows(&self, a: &Tensor<'_>, b: &Tensor<'_>) -> bool {
        let (na, nb) = (a.ne(), b.ne());
        self.q8_row_products.get()
            && a.ty() == GgmlType::Q8_0
            && b.ty() == GgmlType::F32
            && na[2] == 1
            && na[3] == 1
            && a.nb()[0] == std::mem::size_of::<Block>()
            && nb[0] % 32 == 0
            // Below four rows ggml's own product is as fast (the same bits either way).
            && nb[1] * nb[2] * nb[3] >= MIN_ROWS
            // SAFETY: reads the tensor struct only.
            && unsafe { sys::ggml_is_contiguous(b.raw()) }
    }

    /// `a^T b` for a Q8_0 `a` [K, N] and a contiguous F32 `b` [K, M, ...]: `b` quantized by a
    /// copy node, then the tiled product above. Same shape and bits as `mul_mat` on the
    /// reference kernels.
    pub fn mul_mat_q8_rows<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert!(self.takes_q8_rows(&a, &b), "mul_mat_q8_rows of {:?} {:?} x {:?}", a.ty(), a.ne(), b.ne());
        let nb = b.ne();
        let q = self.new_tensor(GgmlType::Q8_0, &nb);
        let q = self.cpy(b, q);
        let mut args = [a.raw(), q.raw()];
        self.ensure_room(1);
        // SAFETY: two live source tensors; the op reads them as `product` documents, and
        // `product` is a plain function with no user data.
        let t = unsafe {
            sys::ggml_custom_4d(
                self.raw(),
                sys::GGML_TYPE_F32,
                a.ne()[1],
                nb[1],
                nb[2],
                nb[3],
                args.as_mut_ptr(),
                2,
                Some(product),
                -1,
                std::ptr::null_mut(),
            )
        };
        Tensor::from_raw(t)
    }
}

/// The custom op: `dst` [N, M...] F32 from `src[0]` (Q8_0 [K, N], rows `nb[1]` apart) and
/// `src[1]` (Q8_0 [K, M...], contiguous). Thread `ith` of `nth` takes a contiguous range of
/// four-row groups of the weight.
unsafe extern "C" fn product(dst: *mut sys::ggml_tensor, ith: c_int, nth: c_int, _user: *mut c_void) {
    // SAFETY: ggml passes the node it built in `mul_mat_q8_rows`, sources alive and placed.
    let (dst, w, x) = unsafe {
        let d = &*dst;
        (d, &*d.src[0], &*d.src[1])
    };
    let blocks = (w.ne[0] / 32) as usize;
    let n = w.ne[1] as usize;
    let m = (x.ne[1] * x.ne[2] * x.ne[3]) as usize;
    let groups = n.div_ceil(4);
    let per = groups.div_ceil(nth.max(1) as usize);
    let g0 = (ith as usize * per).min(groups);
    let g1 = (g0 + per).min(groups);
    let out = Out { ptr: dst.data as *mut u8, row: dst.nb[1] };
    let wrow = |i: usize| (w.data as *const u8).wrapping_add(i * w.nb[1]) as *const Block;
    let xrow = |j: usize| (x.data as *const u8).wrapping_add(j * x.nb[1]) as *const Block;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `available()` held when the node was built (AVX2, FMA, F16C); every row
    // pointer is inside its tensor and has `blocks` blocks.
    unsafe {
        let wide = avx512::available();
        let xs: Vec<*const Block> = (0..m).map(xrow).collect();
        for g in g0..g1 {
            let i0 = g * 4;
            if i0 + 4 <= n {
                let ws = [wrow(i0), wrow(i0 + 1), wrow(i0 + 2), wrow(i0 + 3)];
                let mut j = 0;
                if wide {
                    while j + 8 <= m {
                        avx512::tile::<4>(ws, &xs[j..j + 8], blocks, &out, i0, j);
                        j += 8;
                    }
                    if j + 4 <= m {
                        avx512::tile::<2>(ws, &xs[j..j + 4], blocks, &out, i0, j);
                        j += 4;
                    }
                }
                while j + 2 <= m {
                    avx2::tile::<4, 2>(ws, [xrow(j), xrow(j + 1)], blocks, &out, i0, j);
                    j += 2;
                }
                if j < m {
                    avx2::tile::<4, 1>(ws, [xrow(j)], blocks, &out, i0, j);
                }
            } else {
                for i in i0..n {
                    for j in 0..m {
                        avx2::tile::<1, 1>([wrow(i)], [xrow(j)], blocks, &out, i, j);
                    }
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (g0, g1, out, wrow, xrow, blocks, m);
        unreachable!("the Q8_0 row product is only built on x86-64");
    }
}

/// Where outputs go: element (i, j) at `ptr + j * row + 4 * i`.
struct Out {
    ptr: *mut u8,
    row: usize,
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Block, Out};
    use std::arch::x86_64::*;

    /// An f16 scale as f32 (exact).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn half(h: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// ggml's `hsum_float_8`: high half plus low half, then pairwise.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn hsum(x: __m256) -> f32 {
        let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        _mm_cvtss_f32(r)
    }

    /// Outputs (i0 + r, j0 + c) for the `RM` weight rows `w` and the `RN` activation rows
    /// `x`, each of `blocks` blocks: per block and pair, `acc = fma(dw * dx, lanes, acc)`
    /// with `lanes` the eight sums of four byte products (ggml's `mul_sum_i8_pairs_float`).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; every row holds `blocks` blocks; the outputs are
    /// inside `out`'s tensor.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile<const RM: usize, const RN: usize>(
        w: [*const Block; RM],
        x: [*const Block; RN],
        blocks: usize,
        out: &Out,
        i0: usize,
        j0: usize,
    ) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); RN]; RM];
        for l in 0..blocks {
            // SAFETY: l < blocks, inside each row (the caller's promise).
            let (wb, xb) = unsafe { (w.map(|r| &*r.add(l)), x.map(|r| &*r.add(l))) };
            let wq = wb.map(|b| unsafe { _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i) });
            let ax = wq.map(|q| _mm256_sign_epi8(q, q));
            let wd = wb.map(|b| _mm256_set1_ps(half(b.d)));
            for c in 0..RN {
                // SAFETY: a 32-byte read of the block's bytes.
                let xq = unsafe { _mm256_loadu_si256(xb[c].qs.as_ptr() as *const __m256i) };
                let xd = _mm256_set1_ps(half(xb[c].d));
                for r in 0..RM {
                    // The scale product rounds as ggml's scalar `dw * dx` does (one multiply).
                    let d = _mm256_mul_ps(wd[r], xd);
                    let sy = _mm256_sign_epi8(xq, wq[r]);
                    let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, _mm256_maddubs_epi16(ax[r], sy)));
                    acc[r][c] = _mm256_fmadd_ps(d, q, acc[r][c]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, a) in row.iter().enumerate() {
                let at = out.ptr.wrapping_add((j0 + c) * out.row + 4 * (i0 + r)) as *mut f32;
                // SAFETY: inside the output tensor (the caller's promise).
                unsafe { at.write_unaligned(hsum(*a)) };
            }
        }
    }
}

/// The same product on AVX-512 VNNI, two activation rows a register: each 512-bit register
/// holds the 8 lanes of two outputs, and each output's accumulator sees the same fused
/// multiply-adds in the same order as on AVX2. The lane sums are the same exact integers,
/// taken another way: `vpdpbusd` multiplies unsigned by signed bytes, so the activation
/// bytes are offset by 128 (once a block, shared by every weight row) and each lane starts
/// from -128 times its four weight bytes' sum (once a block, shared by every activation
/// row). Used whatever ggml was built for: the bits are the reference's either way.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::avx2::{half, hsum};
    use super::{Block, Out};
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }

    /// Two 32-byte blocks in one register: `a` low, `b` high.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn pair(a: &Block, b: &Block) -> __m512i {
        // SAFETY: two 32-byte reads of the blocks' bytes.
        let (lo, hi) = unsafe {
            (_mm256_loadu_si256(a.qs.as_ptr() as *const __m256i), _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i))
        };
        _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
    }

    /// Two scales in one register: `a`'s in the low eight lanes, `b`'s in the high.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    fn scales(a: &Block, b: &Block) -> __m512 {
        let (lo, hi) = (_mm256_set1_ps(half(a.d)), _mm256_set1_ps(half(b.d)));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi)))
    }

    /// Outputs (i0 + r, j0 + c) for r in 0..4 and c in 0..2P (see `avx2::tile` for the order).
    ///
    /// # Safety
    /// As `avx2::tile`, on a CPU with AVX-512 F, BW and VNNI; `x` holds 2P rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn tile<const P: usize>(
        w: [*const Block; 4],
        x: &[*const Block],
        blocks: usize,
        out: &Out,
        i0: usize,
        j0: usize,
    ) {
        debug_assert_eq!(x.len(), 2 * P);
        let bias = _mm512_set1_epi8(-128);
        // acc[r][p]: output (r, 2p) in the low half, (r, 2p + 1) in the high half.
        let mut acc = [[_mm512_setzero_ps(); P]; 4];
        for l in 0..blocks {
            // SAFETY: l < blocks, inside each row (the caller's promise); 32-byte reads.
            let (u, xd) = unsafe {
                let xb = |c: usize| &*x[c].add(l);
                let u: [__m512i; P] = std::array::from_fn(|p| _mm512_xor_si512(pair(xb(2 * p), xb(2 * p + 1)), bias));
                let xd: [__m512; P] = std::array::from_fn(|p| scales(xb(2 * p), xb(2 * p + 1)));
                (u, xd)
            };
            for r in 0..4 {
                // SAFETY: as above.
                let wb = unsafe { &*w[r].add(l) };
                // SAFETY: a 32-byte read of the block's bytes.
                let wq = unsafe { _mm256_loadu_si256(wb.qs.as_ptr() as *const __m256i) };
                let wz = _mm512_broadcast_i64x4(wq);
                // -128 times each lane's four weight bytes: (x + 128) . w + this = x . w.
                let start =
                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wz));
                let wd = _mm512_set1_ps(half(wb.d));
                for p in 0..P {
                    let q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[p], wz));
                    acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xd[p]), q, acc[r][p]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (p, a) in row.iter().enumerate() {
                let lo = _mm512_castps512_ps256(*a);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a)));
                for (c, half_sum) in [(2 * p, lo), (2 * p + 1, hi)] {
                    let at = out.ptr.wrapping_add((j0 + c) * out.row + 4 * (i0 + r)) as *mut f32;
                    // SAFETY: inside the output tensor (the caller's promise).
                    unsafe { at.write_unaligned(hsum(half_sum)) };
                }
            }
        }
    }
}
