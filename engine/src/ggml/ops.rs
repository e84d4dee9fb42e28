//! Graph ops. Each wraps one ggml builder function; the checks ggml would turn into an
//! `abort()` are made first so a wrong shape is a panic naming the shapes.
use super::{Context, GgmlType, Tensor};
use ggml_sys as sys;

fn can_repeat(small: &Tensor<'_>, big: &Tensor<'_>) -> bool {
    let (s, b) = (small.ne(), big.ne());
    (0..4).all(|i| s[i] != 0 && b[i] % s[i] == 0)
}

impl Context {
    /// Runs one ggml builder once the arena has room for the tensors it makes (at most
    /// four; ggml would abort on a full arena).
    fn op<'a>(&'a self, build: impl FnOnce() -> *mut sys::ggml_tensor) -> Tensor<'a> {
        self.ensure_room(4);
        Tensor::from_raw(build())
    }

    /// `a^T b` in ggml terms: a [K, M], b [K, N, ...] -> [M, N, ...].
    /// In a context with [`Context::set_q8_row_products`], a Q8_0 weight times two F32 rows
    /// or more takes [`Context::mul_mat_q8_rows`] (the same bits, each weight block loaded
    /// once for several rows).
    pub fn mul_mat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        let (na, nb) = (a.ne(), b.ne());
        assert!(
            na[0] == nb[0] && nb[2] % na[2] == 0 && nb[3] % na[3] == 0,
            "mul_mat shape mismatch {:?} x {:?} ({} x {})",
            na,
            nb,
            a.name(),
            b.name()
        );
        if self.takes_q8_rows(&a, &b) {
            return self.mul_mat_q8_rows(a, b);
        }
        // SAFETY: shapes checked; both tensors live at least as long as 'a.
        self.op(|| unsafe { sys::ggml_mul_mat(self.raw(), a.raw(), b.raw()) })
    }
    /// The sum over ne1 of outer products: a [M, K], b [P, K] -> [M, P], element (i, j) =
    /// `sum_k a[i, k] * b[j, k]` (a LoRA's `B @ A` with its rank as K: rows of length M are
    /// accumulated, where `mul_mat` would take K-long dot products).
    pub fn out_prod<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        let (na, nb) = (a.ne(), b.ne());
        assert!(na[1] == nb[1] && na[2] == nb[2] && na[3] == nb[3], "out_prod shape mismatch {:?} x {:?}", na, nb);
        // SAFETY: shapes checked; both tensors live at least as long as 'a.
        self.op(|| unsafe { sys::ggml_out_prod(self.raw(), a.raw(), b.raw()) })
    }
    pub fn add<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert!(can_repeat(&b, &a), "add cannot broadcast {:?} onto {:?}", b.ne(), a.ne());
        // SAFETY: shapes checked.
        self.op(|| unsafe { sys::ggml_add(self.raw(), a.raw(), b.raw()) })
    }
    pub fn sub<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert!(can_repeat(&b, &a), "sub cannot broadcast {:?} onto {:?}", b.ne(), a.ne());
        // SAFETY: shapes checked.
        self.op(|| unsafe { sys::ggml_sub(self.raw(), a.raw(), b.raw()) })
    }
    pub fn mul<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert!(can_repeat(&b, &a), "mul cannot broadcast {:?} onto {:?}", b.ne(), a.ne());
        // SAFETY: shapes checked.
        self.op(|| unsafe { sys::ggml_mul(self.raw(), a.raw(), b.raw()) })
    }
    pub fn div<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert!(can_repeat(&b, &a), "div cannot broadcast {:?} onto {:?}", b.ne(), a.ne());
        // SAFETY: shapes checked.
        self.op(|| unsafe { sys::ggml_div(self.raw(), a.raw(), b.raw()) })
    }
    pub fn scale<'a>(&'a self, a: Tensor<'a>, s: f32) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_scale(self.raw(), a.raw(), s) })
    }
    pub fn rms_norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Tensor<'a> {
        // SAFETY: row-wise op on any shape.
        self.op(|| unsafe { sys::ggml_rms_norm(self.raw(), a.raw(), eps) })
    }
    /// Normalisation to zero mean and unit variance over the innermost dimension (a
    /// LayerNorm without its affine part).
    pub fn norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Tensor<'a> {
        // SAFETY: row-wise op on any shape.
        self.op(|| unsafe { sys::ggml_norm(self.raw(), a.raw(), eps) })
    }
    pub fn tanh<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_tanh(self.raw(), a.raw()) })
    }
    pub fn silu<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_silu(self.raw(), a.raw()) })
    }
    /// `silu(gate) * up`, the SwiGLU of a gated MLP.
    pub fn swiglu<'a>(&'a self, gate: Tensor<'a>, up: Tensor<'a>) -> Tensor<'a> {
        assert_eq!(gate.ne(), up.ne(), "swiglu halves differ");
        // SAFETY: equal shapes.
        self.op(|| unsafe { sys::ggml_swiglu_split(self.raw(), gate.raw(), up.raw()) })
    }
    /// GELU with the exact erf (torch's default `nn.GELU()`), not the tanh approximation.
    pub fn gelu_erf<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_gelu_erf(self.raw(), a.raw()) })
    }
    pub fn sigmoid<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_sigmoid(self.raw(), a.raw()) })
    }
    pub fn sqrt<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_sqrt(self.raw(), a.raw()) })
    }
    /// `a * s + b` elementwise.
    pub fn scale_bias<'a>(&'a self, a: Tensor<'a>, s: f32, b: f32) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_scale_bias(self.raw(), a.raw(), s, b) })
    }
    /// Sums over the innermost dimension: [n0, n1, ...] -> [1, n1, ...].
    pub fn sum_rows<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: row-wise reduction on any shape.
        self.op(|| unsafe { sys::ggml_sum_rows(self.raw(), a.raw()) })
    }
    /// Means over the innermost dimension: [n0, n1, ...] -> [1, n1, ...].
    pub fn mean<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: row-wise reduction on any shape.
        self.op(|| unsafe { sys::ggml_mean(self.raw(), a.raw()) })
    }
    /// The index of each row's largest value: [n0, n1] (F32) -> [n1] (I32).
    pub fn argmax<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        assert!(a.ty() == GgmlType::F32 && a.ne()[2] == 1 && a.ne()[3] == 1, "argmax of {:?} {:?}", a.ty(), a.ne());
        // SAFETY: a 2-D F32 matrix, as ggml requires.
        self.op(|| unsafe { sys::ggml_argmax(self.raw(), a.raw()) })
    }
    pub fn sin<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_sin(self.raw(), a.raw()) })
    }
    pub fn cos<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_cos(self.raw(), a.raw()) })
    }
    pub fn sqr<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_sqr(self.raw(), a.raw()) })
    }
    pub fn exp<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: elementwise.
        self.op(|| unsafe { sys::ggml_exp(self.raw(), a.raw()) })
    }
    pub fn cont<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: copies into a fresh contiguous tensor.
        self.op(|| unsafe { sys::ggml_cont(self.raw(), a.raw()) })
    }
    /// Copies `a` into `b` (converting types); the result aliases `b`.
    pub fn cpy<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        assert_eq!(a.nelements(), b.nelements(), "cpy element counts differ: {:?} -> {:?}", a.ne(), b.ne());
        // SAFETY: equal element counts.
        self.op(|| unsafe { sys::ggml_cpy(self.raw(), a.raw(), b.raw()) })
    }
    /// Casts to another float type.
    pub fn cast<'a>(&'a self, a: Tensor<'a>, ty: GgmlType) -> Tensor<'a> {
        // SAFETY: creates a new tensor of the same shape.
        self.op(|| unsafe { sys::ggml_cast(self.raw(), a.raw(), ty.raw()) })
    }
    pub fn concat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>, dim: i32) -> Tensor<'a> {
        let (na, nb) = (a.ne(), b.ne());
        assert!((0..4).all(|i| i == dim as usize || na[i] == nb[i]), "concat on dim {dim} of {na:?} and {nb:?}");
        // SAFETY: shapes checked.
        self.op(|| unsafe { sys::ggml_concat(self.raw(), a.raw(), b.raw(), dim) })
    }
    pub fn get_rows<'a>(&'a self, a: Tensor<'a>, ids: Tensor<'a>) -> Tensor<'a> {
        assert_eq!(ids.ty(), GgmlType::I32, "get_rows ids must be I32");
        // SAFETY: ids are I32; out-of-range ids are the caller's contract (validated upstream).
        self.op(|| unsafe { sys::ggml_get_rows(self.raw(), a.raw(), ids.raw()) })
    }
    pub fn reshape_2d<'a>(&'a self, a: Tensor<'a>, n0: i64, n1: i64) -> Tensor<'a> {
        assert_eq!(a.nelements(), n0 * n1, "reshape {:?} -> [{n0}, {n1}]", a.ne());
        // SAFETY: element count checked; ggml also needs contiguity.
        assert!(a.is_contiguous(), "reshape of a non-contiguous tensor");
        self.op(|| unsafe { sys::ggml_reshape_2d(self.raw(), a.raw(), n0, n1) })
    }
    pub fn reshape_3d<'a>(&'a self, a: Tensor<'a>, n0: i64, n1: i64, n2: i64) -> Tensor<'a> {
        assert_eq!(a.nelements(), n0 * n1 * n2, "reshape {:?} -> [{n0}, {n1}, {n2}]", a.ne());
        assert!(a.is_contiguous(), "reshape of a non-contiguous tensor");
        // SAFETY: checked above.
        self.op(|| unsafe { sys::ggml_reshape_3d(self.raw(), a.raw(), n0, n1, n2) })
    }
    pub fn reshape_4d<'a>(&'a self, a: Tensor<'a>, n0: i64, n1: i64, n2: i64, n3: i64) -> Tensor<'a> {
        assert_eq!(a.nelements(), n0 * n1 * n2 * n3, "reshape {:?} -> [{n0}, {n1}, {n2}, {n3}]", a.ne());
        assert!(a.is_contiguous(), "reshape of a non-contiguous tensor");
        // SAFETY: checked above.
        self.op(|| unsafe { sys::ggml_reshape_4d(self.raw(), a.raw(), n0, n1, n2, n3) })
    }
    fn check_view(a: &Tensor<'_>, bytes_needed: usize) {
        assert!(bytes_needed <= a.nbytes(), "view of {bytes_needed} bytes overflows {:?} ({} bytes)", a, a.nbytes());
    }
    pub fn view_2d<'a>(&'a self, a: Tensor<'a>, n0: i64, n1: i64, nb1: usize, offset: usize) -> Tensor<'a> {
        if n1 > 0 {
            Self::check_view(&a, offset + (n1 as usize - 1) * nb1 + a.ty().row_size(n0 as usize));
        }
        // SAFETY: bounds checked.
        self.op(|| unsafe { sys::ggml_view_2d(self.raw(), a.raw(), n0, n1, nb1, offset) })
    }
    #[allow(clippy::too_many_arguments)]
    pub fn view_3d<'a>(
        &'a self,
        a: Tensor<'a>,
        n0: i64,
        n1: i64,
        n2: i64,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Tensor<'a> {
        if n1 > 0 && n2 > 0 {
            Self::check_view(
                &a,
                offset + (n2 as usize - 1) * nb2 + (n1 as usize - 1) * nb1 + a.ty().row_size(n0 as usize),
            );
        }
        // SAFETY: bounds checked.
        self.op(|| unsafe { sys::ggml_view_3d(self.raw(), a.raw(), n0, n1, n2, nb1, nb2, offset) })
    }
    #[allow(clippy::too_many_arguments)]
    pub fn view_4d<'a>(
        &'a self,
        a: Tensor<'a>,
        ne: [i64; 4],
        nb1: usize,
        nb2: usize,
        nb3: usize,
        offset: usize,
    ) -> Tensor<'a> {
        if ne.iter().all(|&n| n > 0) {
            let last = offset
                + (ne[3] as usize - 1) * nb3
                + (ne[2] as usize - 1) * nb2
                + (ne[1] as usize - 1) * nb1
                + a.ty().row_size(ne[0] as usize);
            Self::check_view(&a, last);
        }
        // SAFETY: bounds checked.
        self.op(|| unsafe { sys::ggml_view_4d(self.raw(), a.raw(), ne[0], ne[1], ne[2], ne[3], nb1, nb2, nb3, offset) })
    }
    /// Permutes axes: axis i of `a` becomes axis `p[i]` of the result.
    pub fn permute<'a>(&'a self, a: Tensor<'a>, p: [i32; 4]) -> Tensor<'a> {
        let mut seen = [false; 4];
        for &x in &p {
            assert!((0..4).contains(&x) && !seen[x as usize], "bad permutation {p:?}");
            seen[x as usize] = true;
        }
        // SAFETY: valid permutation.
        self.op(|| unsafe { sys::ggml_permute(self.raw(), a.raw(), p[0], p[1], p[2], p[3]) })
    }
    pub fn transpose<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: view op.
        self.op(|| unsafe { sys::ggml_transpose(self.raw(), a.raw()) })
    }
    /// NeoX-style rotary embedding of `a` [head_dim, heads, tokens] at positions `pos` (I32, one per token).
    pub fn rope_neox<'a>(&'a self, a: Tensor<'a>, pos: Tensor<'a>, n_dims: i32, freq_base: f32) -> Tensor<'a> {
        assert_eq!(pos.ty(), GgmlType::I32, "rope positions must be I32");
        assert_eq!(pos.ne()[0], a.ne()[2], "rope: {} positions for {} tokens", pos.ne()[0], a.ne()[2]);
        // SAFETY: checked above.
        self.op(|| unsafe {
            sys::ggml_rope_ext(
                self.raw(),
                a.raw(),
                pos.raw(),
                std::ptr::null_mut(),
                n_dims,
                sys::GGML_ROPE_TYPE_NEOX as i32,
                0,
                freq_base,
                1.0,
                0.0,
                1.0,
                0.0,
                0.0,
            )
        })
    }
    /// NeoX-style rotary embedding of the first `n_dims` dims of `a` [head_dim, heads,
    /// tokens, batch] at `pos` (I32, one per token, shared by the batch); the other dims
    /// pass through.
    pub fn rope_neox_4d<'a>(&'a self, a: Tensor<'a>, pos: Tensor<'a>, n_dims: i32, freq_base: f32) -> Tensor<'a> {
        assert_eq!(pos.ty(), GgmlType::I32, "rope positions must be I32");
        assert_eq!(pos.ne()[0], a.ne()[2], "rope: {} positions for {} tokens", pos.ne()[0], a.ne()[2]);
        assert!(n_dims as i64 <= a.ne()[0] && n_dims % 2 == 0, "rope of {n_dims} dims in heads of {}", a.ne()[0]);
        // SAFETY: checked above; ggml rotates each batch entry with the same positions.
        self.op(|| unsafe {
            sys::ggml_rope_ext(
                self.raw(),
                a.raw(),
                pos.raw(),
                std::ptr::null_mut(),
                n_dims,
                sys::GGML_ROPE_TYPE_NEOX as i32,
                0,
                freq_base,
                1.0,
                0.0,
                1.0,
                0.0,
                0.0,
            )
        })
    }
    /// softmax(a * scale + mask) over rows; `mask` broadcast over heads.
    pub fn soft_max_ext<'a>(&'a self, a: Tensor<'a>, mask: Option<Tensor<'a>>, scale: f32) -> Tensor<'a> {
        let m = mask.map(|m| m.raw()).unwrap_or(std::ptr::null_mut());
        // SAFETY: ggml checks mask shape compatibility internally on build (asserts); callers build masks of [n_kv,
        // n_q].
        self.op(|| unsafe { sys::ggml_soft_max_ext(self.raw(), a.raw(), m, scale, 0.0) })
    }
    /// Fused attention. q [D, n_q, H], k/v [D, n_kv, H_kv], mask F16 [n_kv, n_q_padded].
    pub fn flash_attn_ext<'a>(
        &'a self,
        q: Tensor<'a>,
        k: Tensor<'a>,
        v: Tensor<'a>,
        mask: Option<Tensor<'a>>,
        scale: f32,
    ) -> Tensor<'a> {
        assert_eq!(q.ne()[0], k.ne()[0], "flash_attn head dims differ");
        assert_eq!(q.ne()[2] % k.ne()[2], 0, "flash_attn: {} q heads over {} kv heads", q.ne()[2], k.ne()[2]);
        let m = mask.map(|m| m.raw()).unwrap_or(std::ptr::null_mut());
        // SAFETY: shapes checked.
        let t =
            self.op(|| unsafe { sys::ggml_flash_attn_ext(self.raw(), q.raw(), k.raw(), v.raw(), m, scale, 0.0, 0.0) });
        // F32 accumulators, as llama.cpp asks of every attention: a GPU's kernels otherwise may
        // accumulate the scores and the weighted values in F16 (ggml-vulkan and ggml-cuda do on
        // cards with fast F16). The CPU's kernel accumulates in F32 either way: its bits do not
        // change.
        // SAFETY: `t` is the flash-attention node just made in this context.
        let ok = unsafe { sys::ggml_prec_set_acc(t.raw(), sys::GGML_PREC_F32) };
        debug_assert!(ok, "flash attention takes an accumulator precision");
        t
    }
    /// Writes rows of `src` into `dst` at row indices `idx` (I64); the result aliases `dst`.
    pub fn set_rows<'a>(&'a self, dst: Tensor<'a>, src: Tensor<'a>, idx: Tensor<'a>) -> Tensor<'a> {
        assert_eq!(dst.ne()[0], src.ne()[0], "set_rows row widths differ");
        // SAFETY: widths checked; indices are the caller's contract.
        self.op(|| unsafe { sys::ggml_set_rows(self.raw(), dst.raw(), src.raw(), idx.raw()) })
    }
    /// 1D convolution as im2col + mul_mat. kernel [K, Cin, Cout], x [T, Cin] -> [T', Cout].
    pub fn conv_1d<'a>(
        &'a self,
        kernel: Tensor<'a>,
        x: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Tensor<'a> {
        assert_eq!(kernel.ne()[1], x.ne()[1], "conv_1d channel mismatch: kernel {:?} input {:?}", kernel.ne(), x.ne());
        // SAFETY: channel counts checked.
        self.op(|| unsafe { sys::ggml_conv_1d(self.raw(), kernel.raw(), x.raw(), stride, pad, dilation) })
    }
    /// 1D convolution in F32 throughout (im2col kept in F32, unlike `ggml_conv_1d` which
    /// rounds the columns to F16). kernel [K, Cin, Cout], x [T, Cin] -> [T', Cout].
    pub fn conv_1d_f32<'a>(
        &'a self,
        kernel: Tensor<'a>,
        x: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Tensor<'a> {
        assert_eq!(kernel.ne()[1], x.ne()[1], "conv_1d channel mismatch: kernel {:?} input {:?}", kernel.ne(), x.ne());
        let (k, cin, cout) = (kernel.ne()[0], kernel.ne()[1], kernel.ne()[2]);
        // SAFETY: channel counts checked; F32 im2col is supported by every backend we use.
        let im = self.op(|| unsafe {
            sys::ggml_im2col(
                self.raw(),
                kernel.raw(),
                x.raw(),
                stride,
                0,
                pad,
                0,
                dilation,
                0,
                false,
                sys::GGML_TYPE_F32,
            )
        });
        let (ol, n) = (im.ne()[1], im.ne()[2]);
        let cols = self.reshape_2d(im, k * cin, ol * n);
        let w = self.reshape_2d(kernel, k * cin, cout);
        let y = self.mul_mat(cols, w); // [ol * n, cout]
        self.reshape_3d(y, ol, cout, n)
    }
    /// Depthwise 1D convolution along time of channel-innermost activations, zero-padded by
    /// `pad` frames each side: `x` [C, T] and `kernel` [C, K] (one K-tap filter per channel,
    /// channel innermost) -> [C, T + 2 pad - K + 1]. Direct F32 arithmetic (ggml's
    /// depthwise kernel on the channels-contiguous layout), no im2col.
    pub fn conv_1d_depthwise<'a>(&'a self, kernel: Tensor<'a>, x: Tensor<'a>, pad: i32) -> Tensor<'a> {
        let ([c, k, ..], [cx, t, ..]) = (kernel.ne(), x.ne());
        assert!(
            c == cx && kernel.is_contiguous() && x.is_contiguous(),
            "depthwise {:?} over {:?}",
            kernel.ne(),
            x.ne()
        );
        // Both seen as [W, H = 1, C, N = 1] with the channel stride the smallest.
        let xv = self.permute(self.reshape_4d(x, c, t, 1, 1), [2, 0, 1, 3]);
        let kv = self.permute(self.reshape_4d(kernel, c, 1, k, 1), [3, 2, 0, 1]);
        // SAFETY: both views have contiguous channels (ggml's CWHN layout), checked above.
        let y = self.op(|| unsafe { sys::ggml_conv_2d_dw_direct(self.raw(), kv.raw(), xv.raw(), 1, 1, pad, 0, 1, 1) });
        let out_t = y.ne()[0];
        // The result is laid out as its input: channels innermost.
        self.reshape_2d(self.permute(y, [1, 2, 0, 3]), c, out_t)
    }
    /// Transposed 1D convolution with zero padding. kernel [K, Cout, Cin], x [T, Cin].
    pub fn conv_transpose_1d<'a>(&'a self, kernel: Tensor<'a>, x: Tensor<'a>, stride: i32) -> Tensor<'a> {
        assert_eq!(
            kernel.ne()[2],
            x.ne()[1],
            "conv_transpose_1d channel mismatch: kernel {:?} input {:?}",
            kernel.ne(),
            x.ne()
        );
        // SAFETY: ggml requires p0 = 0 and d0 = 1; checked shapes.
        self.op(|| unsafe { sys::ggml_conv_transpose_1d(self.raw(), kernel.raw(), x.raw(), stride, 0, 1) })
    }
    /// Zero padding at the end of each dimension.
    pub fn pad<'a>(&'a self, a: Tensor<'a>, p: [i32; 4]) -> Tensor<'a> {
        // SAFETY: creates a larger tensor.
        self.op(|| unsafe { sys::ggml_pad(self.raw(), a.raw(), p[0], p[1], p[2], p[3]) })
    }
}
