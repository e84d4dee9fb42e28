#!/usr/bin/env python3
"""Executable, torch-verified description of torch's CPU `torch.randn` (float32) stream.

Usage (from the repository root):

    python3 -m pip install -q torch numpy      # plain PyPI wheel; never from a project script
    python3 scripts/ref/randn_reference.py            # verify against torch, write fixtures/rng/randn.json
    python3 scripts/ref/randn_reference.py --check    # verify, compare with the committed fixture
    python3 scripts/ref/randn_reference.py --check --no-torch
                                                      # numpy-only: emulation vs committed fixture

Every fixture value is produced by torch itself (both CPU kernels, see below) AND by the
pure Python/numpy emulation in this file; the script refuses to write unless the two agree
bit for bit on every element of every case (full arrays, not only the stored head/tail).

=====================================================================================
THE ALGORITHM (read from PyTorch: aten/src/ATen/core/MT19937RNGEngine.h,
CPUGeneratorImpl.cpp, core/DistributionsHelper.h, core/TransformationHelper.h,
native/cpu/DistributionTemplates.h, native/cpu/avx_mathfun.h; verified against
torch 2.15.0+cu132 from PyPI on x86-64, glibc 2.36)
=====================================================================================
All arithmetic marked f32 is IEEE binary32 round-to-nearest-even, f64 is binary64;
fma32(a, b, c) = a*b + c rounded ONCE to f32 (Rust: f32::mul_add).

1. Seeding: torch.manual_seed(seed) -> CPUGeneratorImpl::set_current_seed(seed):
   clears the cached normal samples and builds at::mt19937(seed) = init_genrand with
   ONLY THE LOW 32 BITS of the u64 seed (so 2**40 + 3 draws the same stream as 3):
       st[0] = seed & 0xffffffff
       st[j] = 1812433253 * (st[j-1] ^ (st[j-1] >> 30)) + j   (mod 2^32), j = 1..623
       left = 1; next = 0
2. random() -> u32 (standard MT19937 genrand_int32; the first call regenerates):
       left -= 1; if left == 0 { twist all 624 words (reference mt19937ar); left = 624; next = 0 }
       y = st[next]; next += 1
       y ^= y >> 11; y ^= (y << 7) & 0x9d2c5680; y ^= (y << 15) & 0xefc60000; y ^= y >> 18
   random64() = (random() as u64) << 32 | random()       (FIRST draw is the HIGH word)
3. Uniforms (transformation::uniform_real, from=0, to=1):
       uniform_f32() = f32(random() & 0xffffff) * 2^-24                  (exact, in [0,1))
       uniform_f64() = f64(random64() & (2^53 - 1)) * 2^-53              (exact, in [0,1))
4. torch.randn(shape, dtype=float32) on CPU = normal_kernel(numel = product of shape;
   a fresh contiguous tensor, so any shape draws exactly the stream of its numel):

   (a) numel < 16  ->  per element, in order, at::normal_distribution<double>(0, 1):
           if cache is set: out = cache; cache = None            (generator-held cache)
           else:
               u1 = uniform_f64(); u2 = uniform_f64()              (u1 first!)
               r     = sqrt(-2.0 * log1p(-u2))                     (f64, libm)
               theta = (2.0 * pi) * u1                             (f64)
               cache = r * sin(theta)                              (f64)
               out   = r * cos(theta)                              (f64)
           element = f32(out)                                       (round to nearest)
       The cache survives the call (an odd numel leaves one f64 sample cached for the
       next normal draw from the generator); manual_seed clears it.

   (b) numel >= 16 -> normal_fill:
           for i in 0..n:  d[i] = uniform_f32()                   (all uniforms first)
           for b in 0, 16, 32, ... while b + 16 <= n:  fill16(d[b .. b+16])
           if n % 16 != 0:
               for k in 0..16: d[n-16+k] = uniform_f32()           (REDRAW the last 16,
               fill16(d[n-16 .. n])                                 overwriting converted values)
       fill16(d) pairs lane j with lane j + 8 (j = 0..7):
           u1 = 1.0f - d[j]            (f32, exact; (0, 1])
           u2 = d[j + 8]
           radius = sqrt_f32(-2.0f * LOG(u1))
           theta  = TWO_PI * u2        (f32 multiply)
           d[j]     = radius * COS(theta)      (f32)
           d[j + 8] = radius * SIN(theta)      (f32)
       (mean 0 / std 1: the trailing `* std + mean`, or fma(n, std, mean), is exact.)

       What LOG / COS / SIN / TWO_PI are depends on the ATen CPU kernel torch dispatches to
       (torch.backends.cpu.get_cpu_capability(), overridable with ATEN_CPU_CAPABILITY):

       * "AVX2" (x86-64 with AVX2+FMA but no AVX-512, e.g. this build machine): the
         normal_fill_16_AVX2 code; TWO_PI = f32(2*pi) = 6.2831855f; LOG = log256_ps and
         (SIN, COS) = sincos256_ps of avx_mathfun.h (Cephes polynomials), compiled by GCC
         with -mfma and default -ffp-contract=fast, which turns the mul+add pairs into FMAs
         exactly as follows (each lane independently; all f32):
           LOG(x):  (x in (0, 1] here; x <= 0 would give NaN)
               x  = max(x, 2^-126)
               e  = f32(((bits(x) >> 23) as i32) - 127) + 1.0
               m  = from_bits((bits(x) & 0x807fffff) | 0x3f000000)         (in [0.5, 1))
               if m < f32(0.707106781186547524) { e = e - 1.0; m = (m - 1.0) + m }
               else                              { m = m - 1.0 }
               z = m * m
               y = 7.0376836292e-2
               for p in [-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1,
                         -2.4999993993e-1, 3.3333331174e-1]:  y = fma32(y, m, p)
               y = y * m
               y = fma32(y, z, e * -2.12194440e-4)     <- the product y*z is the fused one
               y = y - z * 0.5
               m = m + y
               return fma32(e, 0.693359375, m)
           SINCOS(t):  (t = theta >= 0 here)
               s_sign = bits(t) & 0x80000000; x = |t|
               j = trunc_i32(x * f32(1.27323954473516)); j = (j + 1) & ~1; y = f32(j)
               sin_swap = (j & 4) << 29
               poly_sin = (j & 2) == 0          (true: sin from the sine poly)
               x = fma32(y, -0.78515625, x)
               x = fma32(y, -2.4187564849853515625e-4, x)
               x = fma32(y, -3.77489497744594108e-8, x)
               c_sign = (!(j - 2) & 4) << 29
               s_sign = s_sign ^ sin_swap
               z  = x * x
               yc = fma32(fma32(2.443315711809948e-5, z, -1.388731625493765e-3), z,
                          4.166664568298827e-2)
               yc = yc * z
               yc = fma32(yc, z, -(z * 0.5))          <- again the product yc*z is fused
               yc = yc + 1.0
               ys = fma32(fma32(-1.9515295891e-4, z, 8.3321608736e-3), z, -1.6666654611e-1)
               ys = ys * z
               ys = fma32(ys, x, x)
               (sin, cos) = poly_sin ? (ys, yc) : (yc, ys)
               sin = from_bits(bits(sin) ^ s_sign); cos = from_bits(bits(cos) ^ c_sign)
         The three decimal constants are f32(literal) (nearest f32 of the decimal).
         Fusing the other operand instead (fma(e, q1, y*z) in LOG) or not fusing the
         final cosine / sine steps gives wrong last bits on ~2-10% of the elements; the
         fused/unfused choice of the three x = x + y*DP steps never showed a difference
         here (three 2 x 10^6-sample runs). The variant written above reproduced torch
         on all ~6 x 10^6 elements tried while the script was written (0 mismatches).

       * "DEFAULT" (no AVX2) and, reading the source, "AVX512" (that build defines only
         CPU_CAPABILITY_AVX512, so the #ifdef CPU_CAPABILITY_AVX2 block is compiled out):
         the generic normal_fill_16<float>: TWO_PI * u2 is computed as
         f32(f64(2*pi) * f64(u2)) (2.0f * c10::pi<double> * u2 promotes to double), and
         LOG / COS / SIN are libm logf / cosf / sinf (glibc). Verified here with
         ATEN_CPU_CAPABILITY=default against glibc 2.36 logf/cosf/sinf called through
         ctypes; f32(log(double)) etc. (correct rounding) does NOT reproduce it (~1% of
         elements differ). The AVX512 kernel could not be run on this machine (no
         AVX-512); that it equals "DEFAULT" is read from the source, not observed.

   The two normal_fill variants differ in the last bits of ~40% of the elements; the
   fixture stores both (fields without a prefix: AVX2; `scalar_*`: DEFAULT/AVX512).

Fixture format, fixtures/rng/randn.json:
   cases[]: seed (u64), shape, numel, path ("normal_distribution_double" for numel < 16,
   both capabilities identical; "normal_fill" otherwise),
   numel <= 100: "values" (all elements); larger: "head" (first 64) and "tail" (last 64);
   "sum": math.fsum of all numel elements as f64 (exactly rounded);
   for path normal_fill also "scalar_values" / "scalar_head" / "scalar_tail" / "scalar_sum".
   Each value is the exact f32 printed as the shortest f64 repr (parse it as f64 and
   cast, or parse as f32 directly: both give the same f32 bits).
"""

import argparse
import ctypes
import ctypes.util
import json
import math
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "fixtures", "rng", "randn.json")

SEEDS = [0, 42, 123456789, 2**40 + 3]
SIZES = [1, 7, 15, 16, 17, 31, 100, 1000, 64 * 37]
SHAPE_CASE = (42, [2, 37, 64])  # 3-D shape: same stream as its numel (4736)
FULL_MAX = 100
HEAD = TAIL = 64

F32 = np.float32
U32 = np.uint32


# ----------------------------------------------------------------------------- MT19937
class MT19937:
    """at::mt19937 (MT19937RNGEngine.h), written out literally."""

    N, M = 624, 397

    def __init__(self, seed):
        st = [0] * self.N
        st[0] = seed & 0xFFFFFFFF  # torch keeps only the low 32 bits
        for j in range(1, self.N):
            st[j] = (1812433253 * (st[j - 1] ^ (st[j - 1] >> 30)) + j) & 0xFFFFFFFF
        self.st, self.left, self.next = st, 1, 0

    def _twist(self):
        st, N, M = self.st, self.N, self.M
        for k in range(N):
            y = (st[k] & 0x80000000) | (st[(k + 1) % N] & 0x7FFFFFFF)
            st[k] = st[(k + M) % N] ^ (y >> 1) ^ (0x9908B0DF if st[(k + 1) % N] & 1 else 0)
        self.left, self.next = N, 0

    def random(self):
        self.left -= 1
        if self.left == 0:
            self._twist()
        y = self.st[self.next]
        self.next += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y

    def random64(self):
        hi = self.random()
        lo = self.random()
        return (hi << 32) | lo

    def uniform_f32_many(self, n):
        raw = np.array([self.random() for _ in range(n)], dtype=U32)
        return (raw & U32(0xFFFFFF)).astype(F32) * F32(2.0**-24)

    def uniform_f64(self):
        return float(self.random64() & ((1 << 53) - 1)) * 2.0**-53


def self_check_mt():
    """Cross-check the MT against numpy's MT19937 (legacy init_genrand seeding)."""
    for seed in (0, 42, 5489, 123456789):
        ours = MT19937(seed)
        a = [ours.random() for _ in range(2000)]
        bg = np.random.MT19937()
        bg._legacy_seeding(seed)
        b = [int(v) for v in bg.random_raw(2000)]
        assert a == b, f"MT19937 disagrees with numpy for seed {seed}"
    # reference mt19937ar: the 10000th output for seed 5489 (std::mt19937 default) is 4123659995
    g = MT19937(5489)
    for _ in range(9999):
        g.random()
    assert g.random() == 4123659995


# ----------------------------------------------------------------------------- float helpers
def fma32(a, b, c):
    """Exactly rounded f32 fused multiply-add, vectorised: a*b is exact in f64, the f64 sum is
    rounded to odd (TwoSum + sticky bit), and round-to-odd at 53 >= 24 + 2 bits followed by a
    round-to-nearest to f32 equals a single rounding of the exact value."""
    a = np.asarray(a, F32).astype(np.float64)
    b = np.asarray(b, F32).astype(np.float64)
    c = np.asarray(c, F32).astype(np.float64)
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (err != 0) & even
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def f32c(x):
    return F32(x)  # nearest f32 of a decimal literal (as the C compiler does)


# ----------------------------------------------------------------------------- AVX2 kernel
LOG_P = [f32c(v) for v in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                           1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                           3.3333331174e-1)]
LOG_Q1, LOG_Q2 = f32c(-2.12194440e-4), f32c(0.693359375)
SQRTHF = f32c(0.707106781186547524)
FOPI = f32c(1.27323954473516)
DP = [f32c(-0.78515625), f32c(-2.4187564849853515625e-4), f32c(-3.77489497744594108e-8)]
COSCOF = [f32c(2.443315711809948e-5), f32c(-1.388731625493765e-3), f32c(4.166664568298827e-2)]
SINCOF = [f32c(-1.9515295891e-4), f32c(8.3321608736e-3), f32c(-1.6666654611e-1)]
TWO_PI_F32 = F32(2.0 * math.pi)


def log256_ps(x0):
    x0 = np.asarray(x0, F32)
    invalid = x0 <= 0
    x = np.maximum(x0, F32(2.0**-126))
    bits = x.view(U32)
    e = ((bits >> U32(23)).astype(np.int32) - 0x7F).astype(F32) + F32(1)
    x = ((bits & U32(0x807FFFFF)) | U32(0x3F000000)).view(F32)
    mask = x < SQRTHF
    tmp = np.where(mask, x, F32(0))
    x = x - F32(1)
    e = e - np.where(mask, F32(1), F32(0))
    x = x + tmp
    z = x * x
    y = np.full_like(x, LOG_P[0])
    for p in LOG_P[1:]:
        y = fma32(y, x, p)
    y = y * x
    y = fma32(y, z, e * LOG_Q1)
    y = y - z * F32(0.5)
    x = x + y
    x = fma32(e, LOG_Q2, x)
    return np.where(invalid, F32(np.nan), x).astype(F32)


def sincos256_ps(t):
    t = np.asarray(t, F32)
    b = t.view(U32)
    s_sign = b & U32(0x80000000)
    x = (b & U32(0x7FFFFFFF)).view(F32)
    j = (x * FOPI).astype(np.int32)  # cvttps: truncation toward zero
    j = (j + 1) & ~1
    y = j.astype(F32)
    sin_swap = ((j & 4) << 29).astype(U32)
    poly_sin = (j & 2) == 0
    for dp in DP:
        x = fma32(y, dp, x)
    c_sign = ((~(j - 2) & 4) << 29).astype(U32)
    s_sign = s_sign ^ sin_swap
    z = x * x
    yc = fma32(fma32(np.full_like(z, COSCOF[0]), z, COSCOF[1]), z, COSCOF[2])
    yc = yc * z
    yc = fma32(yc, z, -(z * F32(0.5)))
    yc = yc + F32(1)
    ys = fma32(fma32(np.full_like(z, SINCOF[0]), z, SINCOF[1]), z, SINCOF[2])
    ys = ys * z
    ys = fma32(ys, x, x)
    # the select, written as the kernel does it (and/andnot, subtract, add)
    zero = F32(0)
    ysin2 = np.where(poly_sin, ys, zero)
    ysin1 = np.where(poly_sin, zero, yc)
    ys2 = ys - ysin2
    yc2 = yc - ysin1
    sin = ((ysin1 + ysin2).view(U32) ^ s_sign).view(F32)
    cos = ((yc2 + ys2).view(U32) ^ c_sign).view(F32)
    return sin, cos


def fill16_avx2(blocks):
    """blocks: [nb, 16] f32 uniforms -> normals (normal_fill_16_AVX2, mean 0, std 1)."""
    u1 = F32(1) - blocks[:, :8]
    u2 = blocks[:, 8:]
    radius = np.sqrt(F32(-2) * log256_ps(u1)).astype(F32)
    theta = TWO_PI_F32 * u2
    s, c = sincos256_ps(theta)
    out = np.empty_like(blocks)
    out[:, :8] = radius * c
    out[:, 8:] = radius * s
    return out


# ----------------------------------------------------------------------------- DEFAULT kernel
_LIBM = None


def libm():
    global _LIBM
    if _LIBM is None:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for name in ("logf", "cosf", "sinf"):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
        _LIBM = lib
    return _LIBM


def fill16_scalar(blocks):
    """normal_fill_16<float> with libm logf/cosf/sinf (capability DEFAULT / AVX512)."""
    lm = libm()
    out = np.empty_like(blocks)
    for r in range(blocks.shape[0]):
        for j in range(8):
            u1 = F32(F32(1) - blocks[r, j])
            u2 = blocks[r, j + 8]
            radius = np.sqrt(F32(-2) * F32(lm.logf(float(u1))), dtype=F32)
            theta = F32(2.0 * math.pi * float(u2))
            out[r, j] = F32(radius * F32(lm.cosf(float(theta))))
            out[r, j + 8] = F32(radius * F32(lm.sinf(float(theta))))
    return out


# ----------------------------------------------------------------------------- randn
def randn(seed, numel, kernel):
    """The full torch.randn(numel) stream after torch.manual_seed(seed)."""
    g = MT19937(seed)
    if numel < 16:
        out, cache = [], None
        for _ in range(numel):
            if cache is not None:
                out.append(cache)
                cache = None
                continue
            u1 = g.uniform_f64()
            u2 = g.uniform_f64()
            r = math.sqrt(-2.0 * math.log1p(-u2))
            theta = 2.0 * math.pi * u1
            cache = r * math.sin(theta)
            out.append(r * math.cos(theta))
        return np.array(out, dtype=np.float64).astype(F32)
    fill = fill16_avx2 if kernel == "avx2" else fill16_scalar
    d = g.uniform_f32_many(numel)
    nb = numel // 16
    if nb:
        d[: nb * 16] = fill(d[: nb * 16].reshape(nb, 16)).reshape(-1)
    if numel % 16:
        tail = g.uniform_f32_many(16)
        d[numel - 16:] = fill(tail.reshape(1, 16)).reshape(-1)
    return d


# ----------------------------------------------------------------------------- torch
TORCH_CHILD = r"""
import json, sys, torch
req = json.loads(sys.argv[1])
out = {"capability": torch.backends.cpu.get_cpu_capability(), "version": torch.__version__, "cases": []}
for seed, shape in req:
    torch.manual_seed(seed)
    x = torch.randn(*shape, dtype=torch.float32)
    out["cases"].append(x.reshape(-1).numpy().view("uint32").tolist())
print(json.dumps(out))
"""


def torch_streams(requests, capability):
    """Run torch in a child process with ATEN_CPU_CAPABILITY set; returns (info, [u32 arrays])."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    raw = subprocess.check_output([sys.executable, "-c", TORCH_CHILD, json.dumps(requests)], env=env)
    res = json.loads(raw)
    want = {"avx2": "AVX2", "default": "DEFAULT"}[capability]
    if res["capability"] != want:
        sys.exit(f"torch ran with capability {res['capability']} when {want} was requested; "
                 "the AVX2 stream needs an x86-64 CPU with AVX2")
    return res, [np.array(c, dtype=U32) for c in res["cases"]]


def fmt(v):
    return [float(x) for x in np.asarray(v, F32)]


def case_record(seed, shape, avx2, scalar):
    numel = int(np.prod(shape))
    rec = {"seed": seed, "shape": list(shape), "numel": numel,
           "path": "normal_distribution_double" if numel < 16 else "normal_fill"}
    variants = [("", avx2)] + ([("scalar_", scalar)] if numel >= 16 else [])
    for pre, arr in variants:
        if numel <= FULL_MAX:
            rec[pre + "values"] = fmt(arr)
        else:
            rec[pre + "head"] = fmt(arr[:HEAD])
            rec[pre + "tail"] = fmt(arr[-TAIL:])
        rec[pre + "sum"] = math.fsum(float(x) for x in arr)
    return rec


def build(use_torch):
    self_check_mt()
    requests = [[s, [n]] for s in SEEDS for n in SIZES] + [[SHAPE_CASE[0], SHAPE_CASE[1]]]
    emu = {}
    for seed, shape in requests:
        n = int(np.prod(shape))
        emu[(seed, n)] = (randn(seed, n, "avx2"), randn(seed, n, "scalar"))
        if n < 16:
            assert np.array_equal(emu[(seed, n)][0].view(U32), emu[(seed, n)][1].view(U32))
    info = None
    if use_torch:
        info, t_avx2 = torch_streams(requests, "avx2")
        _, t_def = torch_streams(requests, "default")
        flat_req = [[SHAPE_CASE[0], [int(np.prod(SHAPE_CASE[1]))]]]
        _, flat = torch_streams(flat_req, "avx2")
        assert np.array_equal(flat[0], t_avx2[-1]), "3-D randn is not the stream of its numel"
        for (seed, shape), ta, td in zip(requests, t_avx2, t_def):
            n = int(np.prod(shape))
            ea, es = emu[(seed, n)]
            bad_a = int((ea.view(U32) != ta).sum())
            bad_s = int((es.view(U32) != td).sum())
            assert bad_a == 0, f"AVX2 emulation differs from torch: seed {seed} shape {shape}: {bad_a}"
            assert bad_s == 0, f"DEFAULT emulation differs from torch: seed {seed} shape {shape}: {bad_s}"
        print(f"torch {info['version']}: emulation == torch bit for bit on all "
              f"{len(requests)} cases, both AVX2 and DEFAULT kernels")
    cases = []
    for seed, shape in requests:
        n = int(np.prod(shape))
        cases.append(case_record(seed, shape, *emu[(seed, n)]))
    doc = ("torch.manual_seed(seed); torch.randn(*shape, dtype=torch.float32) on CPU. "
           "values/head/tail/sum: the AVX2 kernel (x86-64 AVX2, normal_fill_16_AVX2); scalar_*: the "
           "DEFAULT/AVX512 kernel (normal_fill_16 with libm logf/cosf/sinf); numel < 16 uses the "
           "double Box-Muller path, identical on both. head/tail = first/last 64 elements (numel > 100); "
           "sum = exactly rounded f64 sum of all elements. Values are exact f32 printed as f64. "
           "Generated and verified bit-exact against torch by scripts/ref/randn_reference.py "
           "(see its header for the algorithm).")
    meta = {"_doc": doc}
    if info:
        meta["torch_version"] = info["version"]
    return meta, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed fixture")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch comparison (numpy only)")
    args = ap.parse_args()
    meta, cases = build(not args.no_torch)
    if args.check:
        with open(OUT) as f:
            old = json.load(f)
        assert old["cases"] == cases, "fixtures/rng/randn.json is stale"
        print("fixtures/rng/randn.json is up to date")
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(dict(meta, cases=cases), f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
