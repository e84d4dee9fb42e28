//! The CPU's Q8_0 matrix product of several rows, sharing each weight load between them.
//!
//! On the reference kernels (see [`super::Kernels::RowExact`]) ggml multiplies a Q8_0 weight
//! by each activation row on its own (`ggml_vec_dot_q8_0_q8_0` per output), reloading and
//! re-signing the weight's blocks for every row of the batch; its fast kernels (llamafile's
//! tiles) share the loads and keep that function's order per output, on AVX2 only, whatever
//! the CPU has besides. This product computes every output in exactly that function's order
//! on x86 (AVX2): per 32-value block, the eight 32-bit lane sums of four byte products (exact
//! integers) turned to floats and added into one 8-lane accumulator by a fused multiply-add
//! with the block's scale product; the eight lanes summed pairwise at the end. It only shares
//! the loads: one weight row at a time against up to four activation rows (a guidance pair's
//! two, a few songs' rows), the weight read ahead in software as one stream; from eight rows,
//! on AVX-512 VNNI, one or four weight rows against eight activation rows, two a register (without
//! it, from sixteen rows, four weight rows against two). The bits
//! are ggml's reference bits on either set of kernels (a test checks them), so a token still
//! gives the same bits alone, beside other rows, or in a prefill, and a graph on the fast
//! kernels the bits it had.
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

/// The fewest activation rows the product takes. One row is ggml's own (the same bits, and
/// bound by reading the weight either way). From two rows the product is the faster: on an
/// AMD EPYC (Zen 4) vCPU pair, 2 threads, a 784 MB weight: 2 rows 32 ms against ggml's 49,
/// 4 rows 38 against 76, 8 rows 77 against 130 (ggml's one row: 22-27 ms).
const MIN_ROWS: i64 = 2;

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
            // One row is ggml's own product (as fast, the same bits).
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
        let (wide, vnni) = (avx512::available(), vnni::available());
        let xs: Vec<*const Block> = (0..m).map(xrow).collect();
        // The activations' scales as floats, once: the row kernels read them for every weight row.
        let scales: Vec<f32> = xs.iter().flat_map(|&r| (0..blocks).map(move |l| avx2::half((*r.add(l)).d))).collect();
        let xd = |j: usize| scales.as_ptr().add(j * blocks);
        // The wide tiles' rows, made ready once for every weight row of this thread.
        let prepared = (wide && m >= 8).then(|| avx512::prepare(&xs[..m / 8 * 8], blocks));
        for g in g0..g1 {
            let (i0, i1) = (g * 4, (g * 4 + 4).min(n));
            let mut j = 0;
            if let (Some(p), true) = (&prepared, i1 - i0 == 4) {
                let ws = [wrow(i0), wrow(i0 + 1), wrow(i0 + 2), wrow(i0 + 3)];
                while j + 8 <= m {
                    if m < WIDE_STREAM_ROWS {
                        for (r, &w) in ws.iter().enumerate() {
                            avx512::tile::<1>([w], p, j / 8, &out, i0 + r, j);
                        }
                    } else {
                        avx512::tile::<4>(ws, p, j / 8, &out, i0, j);
                    }
                    j += 8;
                }
            }
            if !vnni && m >= AVX2_TILE_ROWS && i1 - i0 == 4 {
                let ws = [wrow(i0), wrow(i0 + 1), wrow(i0 + 2), wrow(i0 + 3)];
                while j + 2 <= m {
                    avx2::tile::<4, 2>(ws, [xs[j], xs[j + 1]], blocks, &out, i0, j);
                    j += 2;
                }
            }
            // What the tiles leave (fewer than eight activation rows: all of a guidance pair's or
            // a few songs' product): one weight row at a time against up to four activation rows.
            for i in i0..i1 {
                let mut c = j;
                while c < m {
                    let take = (m - c).min(4);
                    macro_rules! row {
                        ($rn:literal) => {{
                            let x: [*const Block; $rn] = std::array::from_fn(|k| xs[c + k]);
                            let d: [*const f32; $rn] = std::array::from_fn(|k| xd(c + k));
                            if vnni {
                                vnni::row::<$rn>(wrow(i), x, d, blocks, &out, i, c)
                            } else {
                                avx2::row::<$rn>(wrow(i), x, d, blocks, &out, i, c)
                            }
                        }};
                    }
                    match take {
                        1 => row!(1),
                        2 => row!(2),
                        3 => row!(3),
                        _ => row!(4),
                    }
                    c += take;
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

/// How many blocks ahead of its reads a row kernel asks for the weight's bytes (544 bytes):
/// the hardware's prefetch alone left a guidance pair's product waiting on memory (2 rows on
/// the 784 MB weight above: 41 ms without, 32 with; 4, 8 and 64 blocks ahead measured too).
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = 16;

/// Below how many activation rows the wide tile takes one weight row at a time, read ahead
/// (the product reads the weight from memory more than it computes): on Zen 4, 8 rows of a
/// 784 MB weight 57 ms against 65 by four weight rows, 16 rows 118 against 130; at 512 rows
/// four weight rows are faster (71 against 80).
#[cfg(target_arch = "x86_64")]
const WIDE_STREAM_ROWS: usize = 32;

/// From how many activation rows a CPU without AVX-512 VNNI takes `avx2::tile` instead of
/// the row kernels (at 64 rows the two were even).
#[cfg(target_arch = "x86_64")]
const AVX2_TILE_ROWS: usize = 16;

/// Defines `row`, one weight row's outputs against `RN` activation rows, whose lane sums
/// `$lanes` takes, on the CPU features `$features`.
macro_rules! row_kernel {
    ($features:literal, $lanes:ident) => {
        /// Outputs (i, j0 + c) for the weight row `w` and the `RN` activation rows `x` (their
        /// scales as floats in `xd`), each of `blocks` blocks: per block, `acc = fma(dw * dx,
        /// lanes, acc)` with `lanes` the eight sums of four byte products (ggml's
        /// `mul_sum_i8_pairs_float`), the weight's block loaded and made unsigned once for
        /// the `RN` rows. The weight is read ahead by [`super::AHEAD`] blocks.
        ///
        /// # Safety
        /// The CPU has the features; every row holds `blocks` blocks and every `xd` `blocks`
        /// floats; the outputs are inside `out`'s tensor.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn row<const RN: usize>(
            w: *const Block,
            x: [*const Block; RN],
            xd: [*const f32; RN],
            blocks: usize,
            out: &Out,
            i: usize,
            j0: usize,
        ) {
            let mut acc = [_mm256_setzero_ps(); RN];
            for l in 0..blocks {
                // A hint only: an address past the weight is never read.
                _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(l + super::AHEAD) as *const i8);
                // SAFETY: l < blocks, inside each row (the caller's promise); 32-byte reads.
                let (wq, dw) = unsafe {
                    let b = &*w.add(l);
                    (_mm256_loadu_si256(b.qs.as_ptr() as *const __m256i), half(b.d))
                };
                let ax = _mm256_sign_epi8(wq, wq);
                let wd = _mm256_set1_ps(dw);
                for c in 0..RN {
                    // SAFETY: as above.
                    let (xq, dx) =
                        unsafe { (_mm256_loadu_si256((*x[c].add(l)).qs.as_ptr() as *const __m256i), *xd[c].add(l)) };
                    // The scale product rounds as ggml's scalar `dw * dx` does (one multiply).
                    let d = _mm256_mul_ps(wd, _mm256_set1_ps(dx));
                    let q = _mm256_cvtepi32_ps($lanes(ax, _mm256_sign_epi8(xq, wq)));
                    acc[c] = _mm256_fmadd_ps(d, q, acc[c]);
                }
            }
            for (c, a) in acc.iter().enumerate() {
                let at = out.ptr.wrapping_add((j0 + c) * out.row + 4 * i) as *mut f32;
                // SAFETY: inside the output tensor (the caller's promise).
                unsafe { at.write_unaligned(hsum(*a)) };
            }
        }
    };
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

    /// ggml's `mul_sum_i8_pairs` on AVX2: the eight 32-bit sums of four products of the
    /// unsigned `ax` (|w|) and the signed `sy` (x signed by w), through 16-bit pairs (none
    /// saturates: Q8_0's bytes are within +-127).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn lanes(ax: __m256i, sy: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy))
    }

    row_kernel!("avx2,fma,f16c", lanes);

    /// Outputs (i0 + r, j0 + c) for the `RM` weight rows `w` and the `RN` activation rows
    /// `x`, in the order of [`row`], each weight block loaded once for the tile: on a CPU
    /// without AVX-512 VNNI, for many activation rows (measured on Zen 4 kept to AVX2, 512 rows:
    /// 124 ms against 135 by rows; at 8 rows or fewer the rows' single stream is far faster).
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

/// The row kernel on 256-bit AVX-512 VNNI: the lane sums in one `vpdpbusd` instead of two
/// instructions, the same exact integers.
#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::avx2::{half, hsum};
    use super::{Block, Out};
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        super::avx512::available() && std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// The AVX2 kernels' lane sums in one `vpdpbusd`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn lanes(ax: __m256i, sy: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy)
    }

    row_kernel!("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", lanes);
}

/// The same product on AVX-512 VNNI, two activation rows a register: each 512-bit register
/// holds the 8 lanes of two outputs, and each output's accumulator sees the same fused
/// multiply-adds in the same order as on AVX2. The lane sums are the same exact integers,
/// taken another way: `vpdpbusd` multiplies unsigned by signed bytes, so the activation
/// bytes are offset by 128 (once for the whole product, by [`avx512::prepare`]) and each lane
/// starts from -128 times its four weight bytes' sum (once a block, shared by every
/// activation row). Used whatever ggml was built for: the bits are the reference's either way.
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

    /// Activations made ready for [`tile`] once for the whole product: per chunk of eight
    /// rows and block, each pair's two blocks offset by 128 in one register, and the eight
    /// rows' scales as floats (a pair's two scales are spread over its register by one
    /// permutation in the tile).
    pub(super) struct Prepared {
        bytes: Vec<__m512i>,
        scales: Vec<__m256>,
        blocks: usize,
    }

    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI; every row holds `blocks` blocks; `x.len()` is a
    /// multiple of 8.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn prepare(x: &[*const Block], blocks: usize) -> Prepared {
        let bias = _mm512_set1_epi8(-128);
        let chunks = x.len() / 8;
        let mut bytes = Vec::with_capacity(chunks * blocks * 4);
        let mut scales = Vec::with_capacity(chunks * blocks);
        for c in 0..chunks {
            for l in 0..blocks {
                // SAFETY: l < blocks, inside each row (the caller's promise).
                let xb = |k: usize| unsafe { &*x[8 * c + k].add(l) };
                for p in 0..4 {
                    bytes.push(_mm512_xor_si512(unsafe { pair(xb(2 * p), xb(2 * p + 1)) }, bias));
                }
                let d: [f32; 8] = std::array::from_fn(|k| half(xb(k).d));
                scales.push(unsafe { _mm256_loadu_ps(d.as_ptr()) });
            }
        }
        Prepared { bytes, scales, blocks }
    }

    /// Outputs (i0 + r, j0 + c) for r in 0..RM and c in 0..8 (in the order of `avx2::row`):
    /// `RM` weight rows by the eight prepared rows of chunk `chunk` (one row is read ahead).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI; every weight row holds `x`'s blocks; `chunk` is
    /// one of `x`'s; the outputs are inside `out`'s tensor.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn tile<const RM: usize>(
        w: [*const Block; RM],
        x: &Prepared,
        chunk: usize,
        out: &Out,
        i0: usize,
        j0: usize,
    ) {
        let blocks = x.blocks;
        let bias = _mm512_set1_epi8(-128);
        let idx: [__m512i; 4] = std::array::from_fn(|p| {
            let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
            _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        let mut acc = [[_mm512_setzero_ps(); 4]; RM];
        for l in 0..blocks {
            let at = chunk * blocks + l;
            if RM == 1 {
                // A hint only (see `super::AHEAD`): one weight row is one stream.
                _mm_prefetch::<_MM_HINT_T0>(w[0].wrapping_add(l + super::AHEAD) as *const i8);
            }
            // SAFETY: inside the prepared vectors (chunk < chunks, l < blocks).
            let (u, s8) = unsafe {
                let u: [__m512i; 4] = std::array::from_fn(|p| *x.bytes.as_ptr().add(4 * at + p));
                (u, _mm512_castps256_ps512(*x.scales.as_ptr().add(at)))
            };
            let xd: [__m512; 4] = std::array::from_fn(|p| _mm512_permutexvar_ps(idx[p], s8));
            for r in 0..RM {
                // SAFETY: l < blocks, inside the row (the caller's promise); a 32-byte read.
                let wb = unsafe { &*w[r].add(l) };
                let wq = unsafe { _mm256_loadu_si256(wb.qs.as_ptr() as *const __m256i) };
                let wz = _mm512_broadcast_i64x4(wq);
                let start =
                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wz));
                let wd = _mm512_set1_ps(half(wb.d));
                for p in 0..4 {
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{Block, Out};

    /// Every kernel, at every width, gives each output the bits of the one-row AVX2 kernel
    /// (ggml's `ggml_vec_dot_q8_0_q8_0`, which the graph-level test holds the dispatch to):
    /// the kernels this CPU does not pick in a graph are checked here too.
    #[test]
    fn every_kernel_and_width_gives_the_one_row_kernels_bits() {
        if !super::available() {
            return;
        }
        let (blocks, n, m) = (13usize, 4usize, 8usize);
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut block = || {
            let r = next();
            // Positive f16 scales between 2^-7 and 2, bytes within +-127 as Q8_0 writes them.
            let d = 0x2000 + (r % 0x1c00) as u16;
            Block { d, qs: std::array::from_fn(|k| (((next() >> (k % 8)) % 255) as i16 - 127) as i8) }
        };
        let w: Vec<Block> = (0..n * blocks).map(|_| block()).collect();
        let x: Vec<Block> = (0..m * blocks).map(|_| block()).collect();
        let wr = |i: usize| w[i * blocks..].as_ptr();
        let xr = |j: usize| x[j * blocks..].as_ptr();
        // SAFETY: `available()` holds; the scales are read from live blocks.
        let scales: Vec<f32> = x.iter().map(|b| unsafe { super::avx2::half(b.d) }).collect();
        let xd = |j: usize| scales[j * blocks..].as_ptr();
        let run = |f: &dyn Fn(&Out)| {
            let mut y = vec![0f32; n * m];
            f(&Out { ptr: y.as_mut_ptr() as *mut u8, row: 4 * n });
            y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        // SAFETY (each call below): the CPU has the kernel's features (checked), the rows hold
        // `blocks` blocks, and the outputs (i, j) are inside the n x m buffer.
        let one = run(&|out| {
            for i in 0..n {
                for j in 0..m {
                    unsafe { super::avx2::row::<1>(wr(i), [xr(j)], [xd(j)], blocks, out, i, j) }
                }
            }
        });
        assert!(one.iter().any(|&b| b != 0));
        macro_rules! widths {
            ($module:ident) => {
                for (width, bits) in [
                    (
                        2,
                        run(&|out| {
                            for i in 0..n {
                                for j in (0..m).step_by(2) {
                                    let x2 = [xr(j), xr(j + 1)];
                                    unsafe {
                                        super::$module::row::<2>(wr(i), x2, [xd(j), xd(j + 1)], blocks, out, i, j)
                                    }
                                }
                            }
                        }),
                    ),
                    (
                        4,
                        run(&|out| {
                            for i in 0..n {
                                for j in (0..m).step_by(4) {
                                    let x4 = std::array::from_fn(|k| xr(j + k));
                                    let d4 = std::array::from_fn(|k| xd(j + k));
                                    unsafe { super::$module::row::<4>(wr(i), x4, d4, blocks, out, i, j) }
                                }
                            }
                        }),
                    ),
                    (
                        3,
                        run(&|out| {
                            for i in 0..n {
                                let x3 = std::array::from_fn(|k| xr(5 + k));
                                let d3 = std::array::from_fn(|k| xd(5 + k));
                                unsafe { super::$module::row::<3>(wr(i), x3, d3, blocks, out, i, 5) }
                                for j in 0..5 {
                                    unsafe { super::$module::row::<1>(wr(i), [xr(j)], [xd(j)], blocks, out, i, j) }
                                }
                            }
                        }),
                    ),
                ] {
                    assert_eq!(bits, one, "{} rows at a time, {}", width, stringify!($module));
                }
            };
        }
        widths!(avx2);
        let ws = [wr(0), wr(1), wr(2), wr(3)];
        let tile = run(&|out| {
            for j in (0..m).step_by(2) {
                unsafe { super::avx2::tile::<4, 2>(ws, [xr(j), xr(j + 1)], blocks, out, 0, j) }
            }
        });
        assert_eq!(tile, one, "the 4 x 2 AVX2 tile");
        if super::vnni::available() {
            widths!(vnni);
        }
        if super::avx512::available() {
            let xs: Vec<*const Block> = (0..m).map(xr).collect();
            let tile =
                run(&|out| unsafe { super::avx512::tile::<4>(ws, &super::avx512::prepare(&xs, blocks), 0, out, 0, 0) });
            assert_eq!(tile, one, "the 4 x 8 AVX-512 tile");
            // SAFETY: as the tile above.
            let prepared = unsafe { super::avx512::prepare(&xs, blocks) };
            let rows = run(&|out| {
                for (r, &w) in ws.iter().enumerate() {
                    unsafe { super::avx512::tile::<1>([w], &prepared, 0, out, r, 0) }
                }
            });
            assert_eq!(rows, one, "the 1 x 8 AVX-512 tile");
        }
    }
}
