"""The sample_temp kernel (codegen/ops/sample_temp.py): plain temperature sampling of many rows,
against its numpy reference (weights + draw, codegen/ops/sample_temp.py) and against softmax(x / T) by
chi-square; its edge cases (block edges, masked logits, NaN rows); and its use by
reame.sampling (Sampler.sample and sample_rows draw with it, one uniform per token from each
request's own generator, in order)."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen.kernels import build, pack_args
from reame.codegen.registry import get_op
from reame import sampling
from reame.sampling import Sampler, SamplingParams, draw, weights
from conftest import host_levels, isa_at as _isa

OP = get_op("sample_temp")
LEVELS = host_levels()
GRID = [{"K": 151936, "B": 1024}, {"K": 37, "B": 16}, {"K": 1, "B": 16}, {"K": 48, "B": 16},
        {"K": 5000, "B": 64}, {"K": 15, "B": 32}]


def _params():
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for dims in GRID:
            for spec in OP.specs("F32", isa, **dims):
                out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}"
                                        f"[vl={spec.p['vl']}]-K={dims['K']},B={dims['B']}"))
    return out


def run(k, rows, inv_t, u, nth=1) -> np.ndarray:
    """The kernel's tokens for rows (a list of float32 arrays: the same one may repeat)."""
    n = len(rows)
    xp = np.array([r.ctypes.data for r in rows], np.int64)
    tok = np.full(n, -7, np.int32)
    it, uu = np.asarray(inv_t, np.float32), np.asarray(u, np.float64)   # alive for the call
    args = pack_args([xp, it, uu, tok, n])
    k.run_threads(args, nth)
    return tok


def _kernel(K, B, level="native"):
    isa = _isa(level)
    return build(OP.specs("F32", isa, K=K, B=B)[-1], isa)


@pytest.mark.parametrize("spec,isa", _params())
def test_sample_temp_equals_the_reference(spec, isa):
    """Every variant x level, ragged sizes (K below, at and across block and vector widths;
    a vocabulary-sized row of 148 blocks + 384), 1-3 threads (uneven splits), rows with hot
    tokens, a -inf logit, exponents below the clamp, four temperatures, u in the middle of a
    token's interval: the token equals the reference's exactly. Catches a kernel that ignores
    the temperature or the clamp, an off-by-one in the block or the index, a lost tail block,
    rows exchanged between threads or a row done twice."""
    k = build(spec, isa)
    for n in (1, 5):
        for nth in (1, 2, 3):
            rng = np.random.default_rng(100 * n + nth)
            case = OP.make_case(spec, rng, n)
            want = OP.reference(spec, case)["tok"]
            k.run_threads(case.args, nth)
            assert case.buffers["tok"].tolist() == want.tolist(), (spec.label(), n, nth)


def _mid(w: np.ndarray, i: int) -> float:
    """The u whose target is the middle of token i's interval."""
    cdf = np.cumsum(w.astype(np.float64))
    return float(((cdf[i - 1] if i else 0.0) + 0.5 * w[i]) / cdf[-1])


@pytest.mark.parametrize("level", LEVELS)
def test_tokens_at_block_edges(level):
    """Tokens on both sides of each block edge and the last of a short tail block (K = 3 B +
    5), each hit by a u in its interval, and u = 0 (the first token): catches an index off by
    one at an edge (b * B + j - 1, a block found with >= instead of >), a tail block lost or
    read past its end."""
    B = 16
    K = 3 * B + 5
    k = _kernel(K, B, level)
    x = np.linspace(-1.0, 1.0, K).astype(np.float32)
    inv = np.float32(1.0 / 0.9)
    w = weights(x, inv)
    picks = [0, B - 1, B, 2 * B - 1, 2 * B, 3 * B - 1, 3 * B, K - 2, K - 1]
    u = [_mid(w, i) for i in picks] + [0.0]
    got = run(k, [x] * len(u), [inv] * len(u), u)
    assert got.tolist() == picks + [0]
    assert [draw(w, v, B) for v in u] == picks + [0]            # and the reference agrees


@pytest.mark.parametrize("level", LEVELS)
def test_masked_tokens_are_never_drawn(level):
    """-inf logits weigh exactly 0: with the last block (and the tail) all -inf, u just below 1
    draws the last finite token, and so does u = 1 (a target equal to the total, as rounding of
    u * total could give: it must land in the last block with weight, on its last token with
    weight); leading -inf and u = 0 draw the first finite one; a temperature
    of 1e-30 (1 / T = 1e30) still draws the max. Catches -inf clamped to -80 like the other
    exponents (a tiny weight), a fallback to the last block or index whatever its weight, and
    a block search with >= (u = 0 then stops in the first, all-masked block)."""
    B = 16
    K = 4 * B + 3
    k = _kernel(K, B, level)
    x = np.zeros(K, np.float32)
    x[3 * B - 2:] = -np.inf                                      # last finite token: 3B - 3
    y = np.zeros(K, np.float32)
    y[:B + 5] = -np.inf                                          # first finite token: B + 5
    z = np.linspace(0, 1, K).astype(np.float32)
    one = np.float32(1.0)
    got = run(k, [x, x, y, y, z], [one, one, one, one, np.float32(1e30)],
              [1.0, 0.999999, 0.0, 1e-12, 0.999])
    assert got.tolist() == [3 * B - 3, 3 * B - 3, B + 5, B + 5, K - 1]
    for v in (1.0, 0.0):
        assert np.isfinite(x[draw(weights(x, one), v, B)])       # the reference too
    assert draw(weights(y, one), 0.0, B) == B + 5


@pytest.mark.parametrize("level", LEVELS)
def test_rows_without_finite_weights_give_minus_one(level):
    """A NaN anywhere in a row, a +inf logit, or a row all -inf: token -1 for that row (the
    caller fails that request), the other rows of the same call drawn as usual. Catches a NaN
    that slips through as a garbage token (the max ignores NaN; the total must not), and one
    bad row spoiling the others."""
    B, K = 16, 40
    k = _kernel(K, B, level)
    rng = np.random.default_rng(0)
    good = rng.standard_normal(K).astype(np.float32)
    nan1, nan2, pinf = good.copy(), good.copy(), good.copy()
    nan1[7] = np.nan
    nan2[K - 1] = np.nan                                         # in the tail
    pinf[20] = np.inf
    ninf = np.full(K, -np.inf, np.float32)
    inv = np.float32(1.0)
    w = weights(good, inv)
    u = _mid(w, int(np.argmax(w)))
    for nth in (1, 2):
        got = run(k, [good, nan1, nan2, pinf, ninf, good], [inv] * 6, [u] * 6, nth)
        assert got.tolist() == [int(np.argmax(w)), -1, -1, -1, -1, int(np.argmax(w))]


# chi-square, 7 or 8 degrees of freedom: P(X > 35) ~ 1e-5 for the right distribution
CHI2_BOUND = 35.0


@pytest.mark.parametrize("temperature", [0.5, 1.7])
def test_distribution_is_softmax_over_t(temperature):
    """60,000 draws from one row of 9 tokens in blocks of 4 (two edges and a one-token tail),
    uniforms from a seeded generator: the counts follow softmax(x / T) (chi-square), and not
    softmax(x). Catches a kernel that ignores the temperature or applies T instead of 1/T,
    mass shifted across a block edge, and a biased inverse CDF."""
    B, K, N = 4, 9, 60000
    k = _kernel(K, B)
    x = np.array([1.0, -0.5, 0.3, 0.9, -1.2, 0.0, 0.6, -0.3, 0.45], np.float32)
    u = np.random.default_rng(int(temperature * 10)).random(N)
    inv = np.float32(1.0 / temperature)
    got = run(k, [x] * N, [inv] * N, u)
    counts = np.bincount(got, minlength=K)
    assert counts.sum() == N

    def chi2(p):
        e = N * p
        return float(((counts - e) ** 2 / e).sum())

    p = np.exp(x.astype(np.float64) / temperature)
    assert chi2(p / p.sum()) < CHI2_BOUND, counts
    q = np.exp(x.astype(np.float64))
    assert chi2(q / q.sum()) > 10 * CHI2_BOUND                  # the test tells T apart


# ---- reame.sampling's use of it ----

def _margin_ok(row, t, u, rel=2e-6) -> bool:
    """Whether u * total lies farther than rel * total from every token boundary of the
    reference CDF (there the kernel and the reference must agree)."""
    w = weights(np.asarray(row, np.float32), np.float32(1.0 / t)).astype(np.float64)
    cdf = np.cumsum(w)
    target = u * cdf[-1]
    i = int(np.searchsorted(cdf, target, side="right"))
    lo = cdf[i - 1] if i else 0.0
    hi = cdf[min(i, len(cdf) - 1)]
    return min(target - lo, hi - target) > rel * cdf[-1]


def test_sample_rows_uses_each_samplers_uniforms_in_order():
    """sample_rows against the numpy reference (_plain_token) with twin samplers: each
    temperature row consumes exactly one uniform of its own sampler per token, in order, greedy
    rows none; over rounds, 1 and 2 threads. Compared where u * total is clear of a CDF boundary
    (elsewhere rounding may decide). Catches uniforms drawn in another order or for greedy rows,
    two samplers' uniforms exchanged, a row's temperature applied to another row."""
    rng = np.random.default_rng(5)
    v = 49152
    temps = [0.7, 0.0, 1.3, 0.7, 0.05, 1.0, 2.0, 0.9]
    for threads in (1, 2):
        mk = lambda: [Sampler(SamplingParams(temperature=t, seed=10 + i))
                      for i, t in enumerate(temps)]
        a, b, u_twins = mk(), mk(), mk()
        compared = 0
        for rnd in range(5):
            rows = (rng.standard_normal((len(temps), v)) * 3).astype(np.float32)
            rows[:, rng.integers(0, v, 8)] += 9.0                   # a few likely tokens
            buf = np.empty(v, np.float32)
            want = [sampling._plain_token(s, r, buf) for s, r in zip(a, rows)]
            got = sampling.sample_rows(b, list(rows), threads=threads)
            for i, (s, t) in enumerate(zip(u_twins, temps)):
                if t == 0.0:
                    assert got[i].token == want[i] == int(np.argmax(rows[i]))
                    continue
                u = s.rng.random()                                  # that sampler's next u
                if _margin_ok(rows[i], t, u):
                    compared += 1
                    assert got[i].token == want[i], (threads, rnd, i)
        assert compared >= 24
        assert all(len(s.history) == 5 for s in b)


class _Uniforms:
    """A stand-in for a sampler's generator that hands out the given uniforms in order."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_sample_and_sample_rows_draw_the_same_tokens():
    """Sampler.sample (one row) and sample_rows (many, 1 or 2 threads) give a plain sampler the
    same token at every step (both run the one kernel), also where u * total sits exactly on a
    block boundary of the reference's CDF, where the kernel's float32-lane block sums and
    numpy's pairwise ones can round to different sides (the test first checks that some such u
    does make the kernel and the numpy reference disagree): speculation's verification and a
    request moving between batched and lone steps rely on it. Catches either path drawing with
    the numpy reference while the other uses the kernel."""
    rng = np.random.default_rng(8)
    v = 151936
    temps = [0.8, 1.1, 0.0, 0.6, 1.5]
    for threads in (1, 2):
        a = [Sampler(SamplingParams(temperature=t, seed=i)) for i, t in enumerate(temps)]
        b = [Sampler(SamplingParams(temperature=t, seed=i)) for i, t in enumerate(temps)]
        for _ in range(4):
            rows = (rng.standard_normal((len(temps), v)) * 2).astype(np.float32)
            want = [s.sample(r).token for s, r in zip(a, rows)]
            got = [d.token for d in sampling.sample_rows(b, list(rows), threads=threads)]
            assert got == want
    # uniforms on the reference's block boundaries
    x = (rng.standard_normal(v) * 2).astype(np.float32)
    t = 0.9
    w = weights(x, np.float32(1 / t))
    from reame.codegen.ops.sample_temp import _block_sums
    blocks = np.cumsum(_block_sums(w, np.arange(0, v, sampling.CDF_BLOCK)))
    us = [float(c / blocks[-1]) for c in blocks[:-1]]
    ref = [draw(w, u) for u in us]
    fresh = lambda: Sampler(SamplingParams(temperature=t))
    lone = []
    for u in us:
        s = fresh()
        s.rng = _Uniforms([u])
        lone.append(s.sample(x).token)
    assert lone != ref, "no boundary where the kernel and the reference differ: test too weak"
    for threads in (1, 2):
        ss = [fresh() for _ in us]
        for s, u in zip(ss, us):
            s.rng = _Uniforms([u])
        assert [d.token for d in sampling.sample_rows(ss, [x] * len(us), threads)] == lone
    # whole-vocabulary draws with a bias or logprobs use the kernel too: the same token as plain
    x = (rng.standard_normal(v) * 2).astype(np.float32)
    plain = Sampler(SamplingParams(temperature=0.9, seed=3)).sample(x).token
    lp = Sampler(SamplingParams(temperature=0.9, seed=3, logprobs=True)).sample(x).token
    zero_bias = Sampler(SamplingParams(temperature=0.9, seed=3, logit_bias={5: 0.0})).sample(x)
    assert plain == lp == zero_bias.token


def test_a_nan_row_fails_alone():
    """A NaN row: Sampler.sample raises ValueError (its request fails); sample_rows gives None
    for it, leaves its sampler untouched, and draws the other rows. Catches a NaN row that is
    given a token, and one that fails the whole step's rows."""
    v = 1000
    rng = np.random.default_rng(2)
    rows = (rng.standard_normal((3, v))).astype(np.float32)
    rows[1, 17] = np.nan
    with pytest.raises(ValueError, match="no finite weights"):
        Sampler(SamplingParams(temperature=0.8, seed=0)).sample(rows[1])
    ss = [Sampler(SamplingParams(temperature=0.8, seed=i)) for i in range(3)]
    got = sampling.sample_rows(ss, list(rows))
    assert got[1] is None and ss[1].history == []
    assert got[0] is not None and got[2] is not None and len(ss[0].history) == 1


def test_the_server_builds_the_sampling_kernel_before_serving(stories_model, tmp_path,
                                                              monkeypatch):
    """ModelService.start builds the kernel for the engine's logits rows, so the first
    temperature request does not wait ~0.2 s for it. Catches a start that leaves it to the
    first draw (the kernel table still empty after start) or builds it for another row length."""
    from reame import sampling
    from reame.codegen.isa import detect
    from reame.engines import create_engine
    from reame.server import ServerConfig, create_app
    monkeypatch.setattr(sampling, "_KERNELS", {})
    eng = create_engine(stories_model, "jit", n_ctx=256, max_seqs=2)
    a = create_app(eng, ServerConfig(model=stories_model.path, max_seqs=2, adaptive="off",
                                     adaptive_dir=str(tmp_path)))
    try:
        assert list(sampling._KERNELS) == [(eng.config.n_vocab, detect().level)]
    finally:
        a.reame.service.stop()
