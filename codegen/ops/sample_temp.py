"""sample_temp: one token per row of logits, drawn with probabilities softmax(x / T) (plain
temperature sampling: reame/sampling.py draws every full-vocabulary temperature row with it).

args ("xp", "inv_t", "u", "tok", "n"):
  xp     i64 [n]  the address of each row (f32 [K], contiguous; rows may lie anywhere)
  inv_t  f32 [n]  1 / T per row (as float32, as sampling._weights rounds it)
  u      f64 [n]  one uniform in [0, 1) per row (the request's own generator's draw)
  tok    i32 [n]  out: the token, or -1 for a row without a positive finite total (a NaN or
                  +inf logit, or every logit -inf)
dims: K (the vocabulary), B (the inverse CDF's block width: CDF_BLOCK).

The arithmetic of `weights` + `draw` below, which are the reference (and what
reame/sampling.py samples with): w = exp(max((x - max x) * inv_t, -80)) (0 for x = -inf), the
sums of B-wide blocks accumulated in f64, target = u * total, the first block whose running
sum passes it, then the first index inside it whose f64 running sum passes what is left (never
a token of zero weight). The block sums are added in
float32 lanes here and pairwise in numpy, and exp is _math.ll.j2's polynomial (~1 ulp) against
numpy's, so a token can differ from the reference only where u * total lies within rounding
(~1e-6 of the total) of a boundary between tokens: the cases put u in the middle of a token's
interval, away from every boundary, and the tokens must then be equal.
Threading: rows are split between threads (a row runs on one thread).
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    """n rows of K logits (a few hot tokens, a -inf one, exponents below the clamp), a
    temperature per row and a u in the middle of one token's interval (by the float64 CDF)."""
    K, B = spec.p["K"], spec.p["B"]
    x = (rng.standard_normal((n, K)) * 3).astype(np.float32)
    for r in range(n):
        hot = rng.integers(0, K, size=min(K, 6))
        x[r, hot] += np.float32(8.0)
        if K > 2 and r % 2:
            x[r, rng.integers(0, K)] = -np.inf               # a masked logit: never drawn
        if K > 8 and r % 3 == 2:
            x[r, : K // 2] -= np.float32(300.0)               # exponents below the clamp
    inv_t = (1.0 / rng.choice([0.3, 0.7, 1.0, 1.6], size=n)).astype(np.float32)
    u = np.empty(n, np.float64)
    for r in range(n):
        u[r] = _mid_uniform(x[r], inv_t[r], rng)
    xp = np.array([x[r].ctypes.data for r in range(n)], np.int64)
    bufs = {"x": x, "xp": xp, "inv_t": inv_t, "u": u, "tok": np.full(n, -7, np.int32)}
    return Case(bufs, OP.pack(bufs, n=n), ("tok",))


def _mid_uniform(x: np.ndarray, inv_t: np.float32, rng) -> float:
    """A u whose target u * total falls in the middle of a token's interval of the CDF (the
    token picked with probability ~ its weight, among those holding >= 1e-4 of the mass)."""
    w = _weights(x, inv_t).astype(np.float64)
    cdf = np.cumsum(w)
    p = w / cdf[-1]
    big = np.flatnonzero(p >= 1e-4)
    i = int(rng.choice(big, p=p[big] / p[big].sum()))
    lo = cdf[i - 1] if i else 0.0
    return float((lo + 0.5 * w[i]) / cdf[-1])


CDF_BLOCK = 1024


def draw(w: np.ndarray, u: float, block: int = CDF_BLOCK) -> int:
    """Index i with probability w[i] / sum(w), for a uniform u in [0, 1): the inverse CDF in
    two levels (block sums, then one block), since a cumulative sum over a whole 152k-token
    vocabulary costs more than a millisecond. The reference of the native kernel, which does
    the same arithmetic; reame/sampling.py draws with it."""
    starts = np.arange(0, len(w), block)
    blocks = np.cumsum(_block_sums(w, starts, block))
    target = u * blocks[-1]
    b = min(int(np.searchsorted(blocks, target, side="right")), len(blocks) - 1)
    while b > 0 and blocks[b] == blocks[b - 1]:   # rounding at the end: never a zero block
        b -= 1
    if b > 0:
        target -= blocks[b - 1]
    inner = np.cumsum(w[starts[b]:starts[b] + block], dtype=np.float64)
    j = min(int(np.searchsorted(inner, target, side="right")), len(inner) - 1)
    while w[starts[b] + j] == 0 and j > 0:        # rounding at a block edge: never a zero weight
        j -= 1
    return int(starts[b] + j)


def _block_sums(w: np.ndarray, starts: np.ndarray, block: int = CDF_BLOCK) -> np.ndarray:
    """The sum of each `block`-long block of w (the last one may be shorter), in float64:
    the whole blocks summed pairwise in float32 over a reshaped view (a few times faster than
    a float64 reduceat; the relative error of a 1024-term pairwise sum of weights <= 1 is
    ~1e-6, the probabilities' own float32 precision), the tail block alone."""
    n = len(w) // block
    head = np.add.reduce(w[:n * block].reshape(n, block), axis=1).astype(np.float64)
    if n == len(starts):
        return head
    return np.concatenate([head, [np.add.reduce(w[n * block:], dtype=np.float64)]])


def weights(x: np.ndarray, inv_t: np.float32, out: np.ndarray | None = None) -> np.ndarray:
    """exp((x - max x) * inv_t) in float32 (inv_t = 1 / T as float32), each exponent clamped
    at -80 (no subnormals: ~10x slower; the clamp only runs when the smallest exponent needs
    it), 0 where x is -inf (a masked logit is never drawn), in place in `out` (a float32
    buffer of x's length) when given. With `draw`, the reference of the native kernel."""
    hi, lo = x.max(), x.min()
    inv = np.float32(inv_t)
    z = np.subtract(x, hi, out=out)
    z *= inv
    if not (lo - hi) * inv >= np.float32(-80.0):         # NaN included: clamp
        np.maximum(z, np.float32(-80.0), out=z)
    z = np.exp(z, out=z)
    if lo == -np.inf:
        z[x == -np.inf] = 0.0
    return z


def _weights(x, inv_t):
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return weights(x, np.float32(inv_t))


def _reference(spec, case):
    b = case.buffers
    out = []
    for r in range(len(b["u"])):
        w = _weights(b["x"][r], b["inv_t"][r])
        out.append(draw(w, float(b["u"][r]), spec.p["B"]))
    return {"tok": np.array(out, np.int32)}


OP = Op(
    name="sample_temp",
    args=("xp", "inv_t", "u", "tok", "n"),
    dims=("K", "B"),
    variants=(
        Variant("generic", "generic", ("F32",),
                ({"vl": 4, "unroll": 1}, {"vl": 8, "unroll": 2}, {"vl": 16, "unroll": 2}),
                "portable vectors (the level's vector unit), a stack buffer for the chosen "
                "block"),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 2},),
                "as generic, exp's 2^k by vscalefps"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (0.0, 0.5),       # tokens: equal (a difference is >= 1)
    example_dims={"K": 151936, "B": 1024},
    fits=lambda tile, dims: dims.get("B", 1024) % (tile["vl"] * tile["unroll"]) == 0,
    doc="a token per row of logits by temperature sampling (the inverse CDF in blocks)",
)
