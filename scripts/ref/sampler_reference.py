#!/usr/bin/env python3
"""Independent reference for the yued token sampler chain and its torch-conformant draw.

Usage: python3 scripts/ref/sampler_reference.py [--check]

Writes fixtures/sampler/philox.json, fixtures/sampler/cases.json and
fixtures/sampler/draws.json (with --check the freshly computed fixtures are compared
with the committed ones instead of written). draws.json holds explicit known-answer
draws (candidate ids / probabilities / seed / step -> winning id, and for one of them
every candidate's word, uniform and exponential), computed with the explicit counter
formula and cross-checked against the curand_init model.
Needs numpy only. If `randomgen` happens to be importable, the Philox block function is
additionally cross-checked against randomgen.Philox(number=4, width=32); that check is
optional and skipped (with a note) when randomgen is missing.

=====================================================================================
WHAT WAS VERIFIED AND WHAT IS ASSUMED
=====================================================================================
Verified (against public source text / independent implementations, not a GPU):

 * Philox4x32-10 block function: one round is
       (hi0, lo0) = mulhilo(0xD2511F53, c0); (hi1, lo1) = mulhilo(0xCD9E8D57, c2)
       c' = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
   10 rounds, the key bumped by (0x9E3779B9, 0xBB67AE85) between rounds (9 bumps).
   Checked here against the three Random123 kat_vectors for philox4x32-10 (the values
   are quoted identically by many independent test suites), and, when randomgen is
   installed, against randomgen.Philox(number=4, width=32) given the same key/counter
   (randomgen increments its counter *before* producing a block, so it is seeded with
   counter-1). randomgen 2.5.1 agreed on all three KATs and on random blocks.
 * curand's Philox state (curand_kernel.h / curand_philox4x32_x.h, as quoted by a
   line-numbered excerpt of curand_kernel.h and by Intel's IPEX port of it):
       curand_init(seed, subsequence, offset, s):
           ctr = (0,0,0,0); key = (seed & 0xffffffff, seed >> 32); STATE = 0
           skipahead_sequence(subsequence): ctr.z += lo(sub) (carry into hi), ctr.w += hi(sub)
           skipahead(offset): STATE += offset & 3; n = offset / 4; if STATE > 3 {n++; STATE -= 4}
                              Philox_State_Incr(n) on (ctr.x, ctr.y[, ctr.z, ctr.w]);
                              output = Philox4x32_10(ctr, key)
       curand(s) returns output[STATE], then STATE++ (new block when it reaches 4).
   So the first 32-bit word after curand_init(seed, i, o) is
       word (o % 4) of Philox4x32_10(ctr = (lo(o/4), hi(o/4), lo(i), hi(i)), key).
   The curand_init here reproduces Philox_State_Incr / _hi literally (including the
   odd early-return carry test), not the simplified formula.
 * curand_uniform(x) = x * CURAND_2POW32_INV + CURAND_2POW32_INV/2.0f with
   CURAND_2POW32_INV = 2.3283064e-10f. That float literal is EXACTLY 2^-32 (checked),
   so x*2^-32 is exact and the result is round_f32(round_f32(x) * 2^-32 + 2^-33);
   a fused multiply-add (nvcc's default contraction) and a separate mul+add give
   identical results for every x (it follows from the exactness of the power-of-two
   product; also checked on 2^28 random x while writing this script, not re-run here).
   0xffffffff maps to 1.0f: range (0, 1].
 * torch's CUDA exponential transformation (ATen TransformationHelper.h, the branch
   under __CUDACC__, accscalar_t = float for float tensors):
       log = u >= 1 - eps/2 ? -eps/2 : at::log(u)   (eps = FLT_EPSILON, all in float)
       E   = (-1 / lambda) * log                    (lambda = 1 here, so E = -log)
   torch.multinomial(p, 1) (and any call without replacement) computes
       q = empty_like(p).exponential_(1); argmax(p / q)    (ATen Distributions.cpp)
   and torch's argmax returns the first maximal index. In torch's elementwise random
   kernel each thread idx does curand_init(seed, idx, philox_offset) and element idx
   takes the first (.x) component of curand_uniform4, i.e. exactly the first word
   modelled above; element index == subsequence. (That identity holds while the row
   has no more elements than the launched threads, blocks*256, which torch caps by the
   SM count; larger tensors wrap into later words of the grid-stride loop.)

Assumed (could not be checked without a GPU / the exact torch build):

 * The project's own mapping, taken from the reference implementation: for a
   surviving candidate with ABSOLUTE vocabulary id `id` (not its index inside the
   stage's row range) at stage step `step`, the 32-bit word is
       word 0 of Philox4x32_10(ctr = (lo(step), hi(step), id, 0), key = (lo(seed), hi(seed)))
   i.e. curand_init(seed, subsequence = id, offset = 4 * step) followed by curand():
   block `step` of subsequence `id`, first word (check_keying verifies this identity
   against the curand_init model above). Real torch uses the generator's philox offset
   (a multiple of 4 that grows per call) and the flat index over the full vocab; the
   reference pins the mapping above. (Before: subsequence = index relative to
   vocab_rows[0], offset = step.)
 * CUDA's logf (max 1 ulp error, not necessarily correctly rounded) returns the same
   float as round_f32(log(double(u))) used here. Old torch builds (<= 1.5) used the
   fast __logf and `rand == 1` squashing instead; the modern formula is modelled.
   The float32 division p/E is IEEE round-to-nearest (torch is built without
   fast-math), as numpy float32 division is.
 * The probabilities torch would hold are float32; here the whole logit chain runs in
   float64 and only the final softmax is rounded to float32 before p/E (so the fixture
   probs may differ from a float32 torch pipeline in the last ulp or so). Each case
   records `draw_margin` = best/second-best score - 1; a Rust test comparing draws is
   only sensitive to ulp-level differences when that margin is ~1e-6 or below.
 * Chain semantics as written in the brief: mask; end token -inf while step <
   min_tokens; windowed *frequency* penalty (alpha = penalty^count over the last
   penalty_window generated ids, negative logits * alpha, positive / alpha, zero kept);
   temperature (T == 0: greedy argmax after the penalty, lowest index on ties, and the
   fixture's probs are then one-hot); HF TopKLogitsWarper (k = min(k, n); remove
   logits < k-th largest, so ties at the k-th value all survive); HF TopPLogitsWarper
   (ascending stable sort, cumulative softmax, remove cum <= 1 - top_p, keep the
   largest; not applied at all when top_p >= 1, as HF does). Where a top-p cut would
   split a group of exactly tied logits (sort-order dependent in torch) this script
   raises, so no fixture depends on tie order there.
 * Logits are drawn from N(0, 2) read as mean 0, standard deviation 2, then rounded
   to float32; JSON holds the exact float32 value printed as a double.
=====================================================================================
"""
import argparse
import json
import math
import os
import sys
import zlib
from collections import Counter

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO, "fixtures", "sampler")
PHILOX_JSON = os.path.join(OUT_DIR, "philox.json")
CASES_JSON = os.path.join(OUT_DIR, "cases.json")
DRAWS_JSON = os.path.join(OUT_DIR, "draws.json")

M32 = 0xFFFFFFFF
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85

# Random123 tests/kat_vectors, philox4x32 10 rounds.
KAT = [
    ([0x00000000, 0x00000000, 0x00000000, 0x00000000], [0x00000000, 0x00000000],
     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], [0xFFFFFFFF, 0xFFFFFFFF],
     [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


# ----------------------------------------------------------------------------- Philox
def _mulhilo(a, b):
    p = (a & M32) * (b & M32)
    return (p >> 32) & M32, p & M32


def _round(c, k):
    hi0, lo0 = _mulhilo(PHILOX_M0, c[0])
    hi1, lo1 = _mulhilo(PHILOX_M1, c[2])
    return [(hi1 ^ c[1] ^ k[0]) & M32, lo1, (hi0 ^ c[3] ^ k[1]) & M32, lo0]


def philox4x32_10(ctr, key):
    c = [x & M32 for x in ctr]
    k = [x & M32 for x in key]
    for r in range(10):
        if r:
            k = [(k[0] + PHILOX_W0) & M32, (k[1] + PHILOX_W1) & M32]
        c = _round(c, k)
    return c


class CurandPhilox:
    """curandStatePhilox4_32_10_t, transcribed from curand_kernel.h semantics."""

    def __init__(self, seed, subsequence=0, offset=0):
        seed &= (1 << 64) - 1
        self.ctr = [0, 0, 0, 0]
        self.key = [seed & M32, (seed >> 32) & M32]
        self.state = 0
        self._skipahead_sequence(subsequence)
        self._skipahead(offset)

    def _incr_n(self, n):  # Philox_State_Incr(s, n)
        nlo, nhi = n & M32, (n >> 32) & M32
        c = self.ctr
        c[0] = (c[0] + nlo) & M32
        if c[0] < nlo:
            nhi = (nhi + 1) & M32
        c[1] = (c[1] + nhi) & M32
        if nhi <= c[1]:
            return
        c[2] = (c[2] + 1) & M32
        if c[2]:
            return
        c[3] = (c[3] + 1) & M32

    def _incr1(self):  # Philox_State_Incr(s)
        c = self.ctr
        for i in range(4):
            c[i] = (c[i] + 1) & M32
            if c[i]:
                return

    def _incr_hi(self, n):  # Philox_State_Incr_hi(s, n)
        nlo, nhi = n & M32, (n >> 32) & M32
        c = self.ctr
        c[2] = (c[2] + nlo) & M32
        if c[2] < nlo:
            nhi = (nhi + 1) & M32
        c[3] = (c[3] + nhi) & M32

    def _skipahead_sequence(self, n):
        self._incr_hi(n)
        self.output = philox4x32_10(self.ctr, self.key)

    def _skipahead(self, n):
        self.state += n & 3
        n //= 4
        if self.state > 3:
            n += 1
            self.state -= 4
        self._incr_n(n)
        self.output = philox4x32_10(self.ctr, self.key)

    def next_u32(self):  # curand(s)
        ret = self.output[self.state]
        self.state += 1
        if self.state == 4:
            self._incr1()
            self.output = philox4x32_10(self.ctr, self.key)
            self.state = 0
        return ret


F32_2POW32_INV = np.float32(2.3283064e-10)
F32_HALF_INV = np.float32(F32_2POW32_INV / np.float32(2.0))
F32_EPS = np.float32(np.finfo(np.float32).eps)
F32_ONE_MINUS_HALF_EPS = np.float32(np.float32(1.0) - F32_EPS / np.float32(2.0))
F32_NEG_HALF_EPS = np.float32(-(F32_EPS / np.float32(2.0)))


def curand_uniform_from_u32(x):
    """x * 2.3283064e-10f + 2.3283064e-10f/2 in float32 (exact power-of-two product)."""
    fx = np.float32(np.uint32(x))  # __uint2float_rn
    return np.float32(fx * F32_2POW32_INV + F32_HALF_INV)


def torch_cuda_exponential(u):
    """ATen transformation::exponential<float> under __CUDACC__, lambda = 1."""
    u = np.float32(u)
    if u >= F32_ONE_MINUS_HALF_EPS:
        log = F32_NEG_HALF_EPS
    else:
        log = np.float32(math.log(float(u)))  # assumed == CUDA logf
    return np.float32(np.float32(-1.0) * log)


def first_draw(seed, subsequence, offset):
    st = CurandPhilox(seed, subsequence, offset)
    x = st.next_u32()
    return x, curand_uniform_from_u32(x)


def draw_counter(seed, step, token_id):
    """The draw's Philox input for candidate `token_id` (absolute vocabulary id) at `step`."""
    assert 0 <= token_id <= M32 and 0 <= step < (1 << 64) and 0 <= seed < (1 << 64)
    return [step & M32, (step >> 32) & M32, token_id, 0], [seed & M32, (seed >> 32) & M32]


def draw_word(seed, step, token_id):
    """Explicit counter formula: word 0 of Philox4x32_10((lo step, hi step, id, 0), (lo seed, hi seed))."""
    ctr, key = draw_counter(seed, step, token_id)
    return philox4x32_10(ctr, key)[0]


def draw_word_curand(seed, step, token_id):
    """The same word through the curand_init model: subsequence = id, offset = 4 * step."""
    return first_draw(seed, token_id, 4 * step)[0]


def draw_winner(ids, probs, seed, step, word=draw_word):
    """argmax over the candidates (p > 0) of p / E (float32), first (lowest id) on ties.
    ids ascending absolute ids, probs float32. Returns (winner id, margin, per-candidate rows)."""
    rows = []
    for tid, p in zip(ids, probs):
        p = np.float32(p)
        if not p > 0:
            continue
        x = word(seed, step, int(tid))
        u = curand_uniform_from_u32(x)
        e = torch_cuda_exponential(u)
        rows.append((int(tid), x, u, e, np.float32(p / e)))
    assert rows, "no candidate"
    assert all(a[0] < b[0] for a, b in zip(rows, rows[1:])), "ids must ascend"
    best = rows[0]
    for r in rows[1:]:
        if r[4] > best[4]:  # strict: ties keep the lowest id, as torch.argmax
            best = r
    rest = [r[4] for r in rows if r[0] != best[0]]
    second = max(rest) if rest else None
    margin = None if second is None or second == 0 else float(best[4]) / float(second) - 1.0
    return best[0], margin, rows


# ----------------------------------------------------------------------------- sampler
def _softmax64(x):
    finite = np.isfinite(x)
    out = np.zeros_like(x, dtype=np.float64)
    if not finite.any():
        return out
    m = np.max(x[finite])
    e = np.where(finite, np.exp(x - m), 0.0)
    return e / e.sum()


def process_logits(logits_f32, start, allowed, end_id, step, history, params):
    """Steps 1..6 in float64. Returns (scores after step 3, final scores or None if greedy)."""
    n = len(logits_f32)
    x = np.asarray(logits_f32, dtype=np.float32).astype(np.float64)
    ids = np.arange(start, start + n)
    # 1. mask to the allowed ids
    x = np.where((ids >= allowed[0]) & (ids < allowed[1]), x, -np.inf)
    # 2. end-token floor
    if step < params["min_tokens"] and start <= end_id < start + n:
        x[end_id - start] = -np.inf
    # 3. windowed frequency repetition penalty over generated tokens only
    w = params["penalty_window"]
    window = history[-w:] if w > 0 else []
    pen = params["repetition_penalty"]
    for tok, f in Counter(window).items():
        if start <= tok < start + n:
            i = tok - start
            alpha = pen ** f
            if x[i] < 0:
                x[i] = x[i] * alpha
            elif x[i] > 0:
                x[i] = x[i] / alpha
    penalized = x.copy()
    t = params["temperature"]
    if t == 0:
        return penalized, None
    # 4. temperature
    x = x / t
    # 5. top-k (HF TopKLogitsWarper)
    k = min(int(params["top_k"]), n)
    kth = np.sort(x)[::-1][k - 1]
    x = np.where(x < kth, -np.inf, x)
    # 6. top-p (HF TopPLogitsWarper), skipped when top_p >= 1 as HF does
    top_p = params["top_p"]
    if top_p < 1.0:
        order = np.argsort(x, kind="stable")  # ascending
        sx = x[order]
        cum = np.cumsum(_softmax64(sx))
        remove_sorted = cum <= (1.0 - top_p)
        remove_sorted[-1] = False
        # refuse fixtures whose cut falls inside a group of exactly tied finite logits
        kept_vals = set(sx[~remove_sorted & np.isfinite(sx)].tolist())
        removed_vals = set(sx[remove_sorted & np.isfinite(sx)].tolist())
        if kept_vals & removed_vals:
            raise ValueError("top-p cut splits tied logits; choose other data")
        remove = np.zeros(n, dtype=bool)
        remove[order] = remove_sorted
        x = np.where(remove, -np.inf, x)
    return penalized, x


def sample(logits_f32, start, allowed, end_id, step, history, params, seed):
    """Returns (probs float32 array, draw id, diagnostics dict)."""
    n = len(logits_f32)
    penalized, final = process_logits(logits_f32, start, allowed, end_id, step, history, params)
    if final is None:  # greedy: argmax (first max), one-hot probs, no RNG
        i = int(np.argmax(penalized))
        probs = np.zeros(n, dtype=np.float32)
        probs[i] = 1.0
        return probs, start + i, {"nucleus": 1, "draw_margin": None}
    probs = _softmax64(final).astype(np.float32)
    ids = np.arange(start, start + n)
    best_id, margin, rows = draw_winner(ids, probs, seed, step, word=draw_word_curand)
    # the explicit counter formula draws the same id
    assert draw_winner(ids, probs, seed, step)[0] == best_id
    nucleus = int((probs > 0).sum())
    assert nucleus == len(rows)
    return probs, best_id, {"nucleus": nucleus, "draw_margin": margin}


# ----------------------------------------------------------------------------- checks
def check_kat():
    for ctr, key, out in KAT:
        got = philox4x32_10(ctr, key)
        if got != out:
            raise SystemExit("Philox KAT mismatch: ctr=%s key=%s got=%s want=%s" % (
                [hex(c) for c in ctr], [hex(k) for k in key], [hex(g) for g in got], [hex(o) for o in out]))
    # the uniform constant really is 2^-32, so the map is exact either fused or not
    assert float(F32_2POW32_INV) == 2.0 ** -32
    assert curand_uniform_from_u32(0xFFFFFFFF) == np.float32(1.0)
    assert curand_uniform_from_u32(0) == np.float32(2.0 ** -33)
    # curand_init(seed, sub, off) first word == word off%4 of the block at (off/4, sub)
    for seed, sub, off in [(0, 0, 0), (42, 5, 9), ((1 << 40) + 7, 32767, 100), ((1 << 64) - 1, (1 << 33) + 3, (1 << 34) + 6)]:
        q = off // 4
        blk = philox4x32_10([q & M32, q >> 32, sub & M32, sub >> 32], [seed & M32, seed >> 32])
        assert first_draw(seed, sub, off)[0] == blk[off % 4], (seed, sub, off)
    # a curand stream continues across block boundaries
    st = CurandPhilox(7, 3, 2)
    seq = [st.next_u32() for _ in range(6)]
    want = [first_draw(7, 3, 2 + j)[0] for j in range(6)]
    assert seq == want, (seq, want)
    return "KAT ok (3 Random123 vectors); curand_init/skipahead layout self-consistent"


def check_keying():
    """The draw's explicit counter formula equals curand_init(seed, id, 4 * step) + curand()."""
    rng = np.random.default_rng(2718)
    combos = [(0, 0, 0), (42, 0, 1), (42, 3, 151852), ((1 << 40) + 7, 4294967296 + 3, 151900),
              ((1 << 64) - 1, (1 << 62) - 1, M32), (1 << 32, 1 << 32, 300), ((1 << 63) - 1, 7, 184703)]
    for _ in range(200):
        combos.append((int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2)),
                       int(rng.integers(0, 1 << 40)) if rng.random() < 0.5 else int(rng.integers(0, 10000)),
                       int(rng.integers(0, 1 << 32))))
    for seed, step, tid in combos:
        a, b = draw_word(seed, step, tid), draw_word_curand(seed, step, tid)
        assert a == b, (seed, step, tid, a, b)
        # and it is a real stream position: the curand stream of subsequence id from offset 0
        # yields it as word 4 * step (checked for small steps only)
        if step < 3:
            st = CurandPhilox(seed, tid, 0)
            assert [st.next_u32() for _ in range(4 * step + 1)][-1] == a
    # the hi words of seed and step and the id word all matter
    assert draw_word(1 << 32, 0, 5) != draw_word(0, 0, 5)
    assert draw_word(9, 1 << 32, 5) != draw_word(9, 0, 5)
    assert draw_word(9, 3, 151852) != draw_word(9, 3, 0)
    return "draw keying: explicit (step lo, step hi, id, 0) word 0 == curand_init(seed, id, 4*step) on %d combos" % len(combos)


def check_randomgen():
    try:
        from randomgen import Philox  # optional
    except Exception:  # pragma: no cover
        return "randomgen not installed: cross-check skipped"
    rng = np.random.default_rng(1234)
    cases = [(c, k) for c, k, _ in KAT]
    for _ in range(20):
        cases.append(([int(v) for v in rng.integers(0, 1 << 32, 4)], [int(v) for v in rng.integers(0, 1 << 32, 2)]))
    for ctr, key in cases:
        cint = sum(c << (32 * i) for i, c in enumerate(ctr))
        kint = key[0] | (key[1] << 32)
        g = Philox(number=4, width=32, key=kint, counter=(cint - 1) % (1 << 128))
        raw = [int(v) & M32 for v in g.random_raw(4)]
        if raw != philox4x32_10(ctr, key):
            raise SystemExit("randomgen disagrees at ctr=%s key=%s: %s vs %s" % (ctr, key, raw, philox4x32_10(ctr, key)))
    import randomgen
    return "randomgen %s agrees on %d blocks (3 KAT + 20 random)" % (randomgen.__version__, len(cases))


# ----------------------------------------------------------------------------- fixtures
ABC = {"temperature": 0.7, "top_p": 0.9, "top_k": 30, "repetition_penalty": 1.005,
       "penalty_window": 100, "min_tokens": 32}
SEM = {"temperature": 1.0, "top_p": 0.95, "top_k": 100, "repetition_penalty": 1.2,
       "penalty_window": 50, "min_tokens": 200}


def f32list(a):
    return [float(np.float32(v)) for v in a]


def make_logits(tag, n):
    rng = np.random.default_rng(zlib.crc32(tag.encode()))
    return rng.normal(0.0, 2.0, n).astype(np.float32)


def build_philox_fixture():
    kat = [{"ctr": c, "key": k, "out": o} for c, k, o in KAT]
    seeds = [0, 42, (1 << 40) + 7]
    subs = [0, 1, 5, 32767]
    offsets = [0, 1, 2, 3, 4, 5, 9, 100]
    combos = []
    for si, seed in enumerate(seeds):
        for bi, sub in enumerate(subs):
            p = si * 4 + bi
            for j in (p % 8, (p + 3) % 8):
                combos.append((seed, sub, offsets[j]))
    combos += [(42, 1, o) for o in offsets]  # one full sweep across the block boundary
    seen, uni = set(), []
    for seed, sub, off in combos:
        if (seed, sub, off) in seen:
            continue
        seen.add((seed, sub, off))
        x, u = first_draw(seed, sub, off)
        q = off // 4
        uni.append({"seed": seed, "subsequence": sub, "offset": off, "u32": x, "uniform": float(u),
                    "ctr": [q & M32, q >> 32, sub & M32, sub >> 32], "word": off % 4,
                    "exponential": float(torch_cuda_exponential(u))})
    return {"_doc": "Philox4x32-10 KATs (Random123) and curand_init(seed, subsequence, offset) + "
                    "curand_uniform first draws; ctr/word: the block counter and word used; "
                    "exponential: torch CUDA transformation of the uniform (float32). "
                    "Generated by scripts/ref/sampler_reference.py",
            "kat": kat, "uniform": uni}


def case_specs():
    S = []

    def add(name, start, n, params, step, history, seed, allowed=None, end_off=None, logits=None, tag=None):
        logits = make_logits(tag or name, n) if logits is None else logits
        end_id = start + (end_off if end_off is not None else n - 1)
        S.append(dict(name=name, start=start, n=n, params=dict(params), step=step, history=list(history),
                      seed=seed, allowed=allowed or [start, start + n], end_id=end_id, logits=logits))

    TEXT0 = 0          # abc stage covers low (text) ids in these fixtures
    SEM0 = 151669      # semantic stage: rows start high
    # abc preset, floor
    add("abc_below_floor", TEXT0, 120, ABC, 5, [3, 17, 17, 40], 42, end_off=7)
    lg = make_logits("abc_above_floor", 120)
    lg[7] = np.float32(6.5)  # strong end token, allowed now
    add("abc_above_floor", TEXT0, 120, ABC, 40, [3, 17, 17, 40], 42, end_off=7, logits=lg)
    lg2 = lg.copy()
    add("abc_floor_edge_step31", TEXT0, 120, ABC, 31, [3, 17, 17, 40], 42, end_off=7, logits=lg2)
    add("abc_floor_edge_step32", TEXT0, 120, ABC, 32, [3, 17, 17, 40], 42, end_off=7, logits=lg2)
    # abc history: repeats inside and outside the 100 window
    hl = make_logits("abc_history_window", 80)
    top = [int(i) for i in np.argsort(-hl)[:4]]
    hist = [top[0]] * 6 + [5] * 20 + [11, 12] * 37 + [top[1]] * 3 + [top[2]] * 9 + [top[3]]
    add("abc_history_window", TEXT0, 80, ABC, 150, hist, 7, logits=hl)
    # semantic preset
    add("sem_below_floor", SEM0, 256, SEM, 150, [SEM0 + 1, SEM0 + 9, SEM0 + 9], 1234, end_off=255)
    sl = make_logits("sem_above_floor", 256)
    sl[255] = np.float32(3.0)
    add("sem_above_floor", SEM0, 256, SEM, 250, [SEM0 + 1, SEM0 + 9, SEM0 + 9], 1234, end_off=255, logits=sl)
    wl = make_logits("sem_history_window", 200)
    wtop = [int(i) for i in np.argsort(-wl)[:6]]
    wneg = [int(i) for i in np.argsort(wl)[:2]]
    # 80 generated ids, window 50: wtop[0] x5 only outside the window, wtop[1] x4 inside, wtop[2] both
    hist = ([SEM0 + wtop[0]] * 5 + [SEM0 + wtop[2]] * 3 + [SEM0 + 3] * 22
            + [SEM0 + wtop[1], SEM0 + wtop[2], SEM0 + wneg[0]] * 4 + [SEM0 + wtop[3]] * 2
            + [SEM0 + 100 + (j % 30) for j in range(36)])
    add("sem_history_window", SEM0, 200, SEM, 300, hist, 99, logits=wl)
    # greedy
    g = dict(ABC, temperature=0.0)
    add("greedy_abc", TEXT0, 64, g, 50, [], 5)
    gl = make_logits("greedy_penalized", 64)
    gtop = [int(i) for i in np.argsort(-gl)[:2]]
    gl[gtop[0]] = np.float32(gl[gtop[1]] + 0.1)  # the penalty (1.2^3) flips the argmax
    gs = dict(SEM, temperature=0.0)
    add("greedy_penalty_flips_argmax", SEM0, 64, gs, 300, [SEM0 + gtop[0]] * 3, 5, logits=gl, end_off=0)
    # top_k 1, top_p 1.0
    add("top_k_1", TEXT0, 90, dict(ABC, top_k=1), 100, [1, 2, 3], 2024)
    add("top_p_1_top_k_all", TEXT0, 60, dict(SEM, top_p=1.0, top_k=1000, min_tokens=0), 3, [4, 4, 9], 77)
    # tied logits at the k-th value
    tl = make_logits("tie_at_kth", 50)
    order = np.argsort(-tl)
    tl[order[0]], tl[order[1]], tl[order[2]] = np.float32(5.0), np.float32(4.5), np.float32(4.25)
    for j in order[3:7]:
        tl[j] = np.float32(4.0)  # 4-way tie straddling k = 5
    for j in order[7:]:
        tl[j] = np.float32(min(float(tl[j]), 3.0))
    add("tie_at_kth", TEXT0, 50, dict(ABC, top_k=5, top_p=1.0, min_tokens=0), 10, [], 31337, logits=tl, end_off=49)
    # large seeds
    add("large_seed_2p40_plus_7", SEM0, 180, SEM, 400, [SEM0 + 17] * 3, (1 << 40) + 7)
    add("large_seed_2p32", SEM0, 180, SEM, 401, [], 1 << 32, tag="large_seed_2p40_plus_7")
    add("large_seed_i64_max", TEXT0, 150, ABC, 64, [10, 20, 30], (1 << 63) - 1)
    # same seed and logits, steps 0..5: the offset moves the draw
    sp = dict(SEM, top_p=0.99, top_k=200, min_tokens=0)
    steps_logits = make_logits("steps_same_seed", 100) * np.float32(0.5)
    for s in range(6):
        add("steps_same_seed_step%d" % s, TEXT0, 100, sp, s, [], 42, logits=steps_logits.copy(), end_off=0)
    # mask to a sub-range, rows starting high, history ids outside the rows
    add("mask_subrange", SEM0, 300, SEM, 210, [5, 6, SEM0 + 20, SEM0 + 20, SEM0 + 299], 555,
        allowed=[SEM0 + 16, SEM0 + 200], end_off=199)
    # negative logits under the penalty (multiplied, pushed further down)
    nl = make_logits("negative_penalty", 40) - np.float32(3.0)
    neg_ids = [int(i) for i in np.argsort(-nl)[:3]]
    add("negative_logits_penalty", TEXT0, 40, dict(SEM, min_tokens=0), 12,
        [neg_ids[0]] * 4 + [neg_ids[1]] * 2, 8, logits=nl.astype(np.float32))
    # hot temperature, narrow nucleus
    add("hot_temp_low_top_p", TEXT0, 128, dict(ABC, temperature=1.5, top_p=0.5), 200, [9, 9, 9], 2 ** 31 + 11)
    add("tiny_top_p_keeps_top1", TEXT0, 70, dict(SEM, top_p=0.01, min_tokens=0), 1, [], 17)
    return S


def build_cases_fixture():
    cases, diag = [], []
    for spec in case_specs():
        start, n = spec["start"], spec["n"]
        logits = spec["logits"].astype(np.float32)
        assert 40 <= n <= 300 and len(logits) == n
        probs, draw, d = sample(logits, start, spec["allowed"], spec["end_id"], spec["step"],
                                spec["history"], spec["params"], spec["seed"])
        assert spec["allowed"][0] <= spec["end_id"] < spec["allowed"][1]
        cases.append({
            "name": spec["name"],
            "vocab_rows": [start, start + n],
            "allowed": spec["allowed"],
            "logits": f32list(logits),
            "end_id": spec["end_id"],
            "step": spec["step"],
            "history": spec["history"],
            "params": spec["params"],
            "seed": spec["seed"],
            "probs": f32list(probs),
            "draw": draw,
            "nucleus": d["nucleus"],
            "draw_margin": d["draw_margin"],
        })
        diag.append((spec["name"], d["nucleus"], draw, d["draw_margin"]))
    doc = ("Sampler chain cases: logits index 0 = id vocab_rows[0]; allowed = [lo, hi) id range kept by "
           "the mask; probs = float32 softmax after mask/floor/penalty/temperature/top-k/top-p (one-hot "
           "for temperature 0); draw = argmax over the nucleus of p_i / E_i (float32, first index on ties) "
           "with E_i from word 0 of Philox4x32_10(ctr = (lo step, hi step, id_i, 0), key = (lo seed, hi seed)) "
           "for the ABSOLUTE id id_i (= curand_init(seed, id_i, 4 * step) + curand) -> curand_uniform -> "
           "torch CUDA exponential; "
           "draw_margin = best/second-best score - 1 (null: single candidate). "
           "Generated by scripts/ref/sampler_reference.py")
    return {"_doc": doc, "cases": cases}, diag


def _candidates(rng, lo, hi, keep):
    """Ascending ids in [lo, hi) surviving with probability `keep`, and normalised float32 probs."""
    ids = [i for i in range(lo, hi) if rng.random() < keep]
    logits = rng.normal(0.0, 1.0, len(ids))
    p = np.exp(logits - logits.max())
    return ids, (p / p.sum()).astype(np.float32)


DRAW_STEPS = list(range(8)) + [4294967296, 4294967296 + 3]


def build_draws_fixture():
    rng = np.random.default_rng(20240917)
    sem_ids, sem_p = _candidates(rng, 151852, 151901, 0.7)
    low_ids, low_p = _candidates(rng, 300, 341, 0.8)
    sets = [("semantic_151852", sem_ids, sem_p, (1 << 40) + 7, [151852, 151901]),
            ("semantic_151852", sem_ids, sem_p, 1 << 32, [151852, 151901]),
            ("semantic_151852", sem_ids, sem_p, 1234, [151852, 151901]),
            ("low_300", low_ids, low_p, 42, [300, 341]),
            ("low_300", low_ids, low_p, (1 << 63) - 1, [300, 341])]
    draws, diag, moved = [], [], 0
    for name, ids, probs, seed, rows_range in sets:
        assert ids[0] > 0 and all(probs > 0) and rows_range[0] <= ids[0] and ids[-1] < rows_range[1]
        winners, margins = [], []
        for step in DRAW_STEPS:
            w, m, _ = draw_winner(ids, probs, seed, step)
            w2, m2, _ = draw_winner(ids, probs, seed, step, word=draw_word_curand)
            assert (w, m) == (w2, m2), (name, seed, step)
            # the old keying (relative index, offset = step) would draw something else somewhere
            wo, _, _ = draw_winner(ids, probs, seed, step, word=lambda sd, st, t: first_draw(sd, t - ids[0], st)[0])
            moved += wo != w
            winners.append(w)
            margins.append(m)
        draws.append({"name": name, "rows": rows_range, "seed": seed, "ids": ids, "probs": f32list(probs),
                      "steps": DRAW_STEPS, "winners": winners, "margins": margins})
        diag.append((name, seed, winners, min(m for m in margins if m is not None)))
    assert moved > 0, "the old keying draws the same ids everywhere"
    # one fully spelled-out draw
    name, ids, probs, seed, _ = sets[0]
    step = 4294967296 + 3
    w, m, rows = draw_winner(ids, probs, seed, step)
    key = draw_counter(seed, step, 0)[1]
    detail = {"name": name, "seed": seed, "step": step, "key": key, "winner": w, "margin": m,
              "candidates": [{"id": tid, "ctr": draw_counter(seed, step, tid)[0], "p": float(np.float32(p)),
                              "u32": x, "uniform": float(u), "exponential": float(e), "score": float(sc)}
                             for (tid, x, u, e, sc), p in zip(rows, probs)]}
    doc = ("Explicit draw known answers. Each entry of `draws`: candidates `ids` (ascending ABSOLUTE "
           "vocabulary ids, every one with p > 0; the other ids of the [lo, hi) range `rows` have p = 0) with "
           "float32 `probs`, a stage "
           "`seed` (u64); for each `steps[k]` the drawn id is `winners[k]` (margins[k] = best/second "
           "score - 1). Draw: for each candidate, x = word 0 of Philox4x32_10(ctr = (lo32 step, hi32 step, "
           "id, 0), key = (lo32 seed, hi32 seed)); u = float32(x * 2^-32 + 2^-33); E = torch CUDA "
           "exponential (-log u, float32, -FLT_EPSILON/2 for u >= 1 - FLT_EPSILON/2); winner = argmax "
           "float32(p / E), lowest id on ties. `detail` spells out every candidate of one draw (ctr, "
           "u32 word, uniform, exponential, score). Generated by scripts/ref/sampler_reference.py")
    return {"_doc": doc, "draws": draws, "detail": detail}, diag, moved


def dump(obj):
    return json.dumps(obj, separators=(",", ":")) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed fixtures")
    args = ap.parse_args()

    print(check_kat())
    print(check_keying())
    print(check_randomgen())
    philox = build_philox_fixture()
    cases, diag = build_cases_fixture()
    draws, ddiag, moved = build_draws_fixture()
    outputs = [(PHILOX_JSON, dump(philox)), (CASES_JSON, dump(cases)), (DRAWS_JSON, dump(draws))]

    print("%-30s %8s %12s %12s" % ("case", "nucleus", "draw", "margin"))
    for name, nuc, draw, margin in diag:
        print("%-30s %8d %12d %12s" % (name, nuc, draw, "-" if margin is None else "%.3g" % margin))
    steps = [d for d in diag if d[0].startswith("steps_same_seed")]
    print("steps 0..5 draws:", [d[2] for d in steps], "(distinct: %d)" % len({d[2] for d in steps}))
    for name, seed, winners, mmin in ddiag:
        print("draws %-16s seed %-20d winners %s (min margin %.3g)" % (name, seed, winners, mmin))
    print("draws: the old keying (relative index, offset = step) changes %d of %d winners"
          % (moved, len(ddiag) * len(DRAW_STEPS)))
    small = [d[0] for d in diag if d[3] is not None and d[3] < 1e-5]
    small += ["draws %s seed %d" % (d[0], d[1]) for d in ddiag if d[3] < 1e-5]
    if small:
        print("WARNING: draws with margin < 1e-5 (ulp-sensitive):", small)

    bad = 0
    for path, text in outputs:
        if args.check:
            try:
                with open(path) as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
            print("%s: %s" % (os.path.relpath(path, REPO), "up to date" if same else "DIFFERS"))
            bad += not same
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print("wrote %s (%d bytes)" % (os.path.relpath(path, REPO), len(text)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
