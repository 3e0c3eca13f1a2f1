"""reame.sampling: every SamplingParams field, checked against brute-force definitions.

Black-box where it can be: a parameter's effect is observed through the tokens `Sampler.sample`
returns (greedy picks with chosen margins, or the empirical distribution of many seeded draws);
top-p's kept set is also compared exactly with a full-sort implementation. No timing asserts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from reame.sampling import Sampler, SamplingParams

N_VOCAB = 512


def sampler(prompt_ids=(), **kw) -> Sampler:
    return Sampler(SamplingParams(**kw), prompt_ids)


def draws(params: SamplingParams, logits, n: int, prompt_ids=()) -> np.ndarray:
    """n tokens sampled from the same logits by one sampler (history grows, so no penalties)."""
    s = Sampler(params, prompt_ids)
    return np.array([s.sample(logits).token for _ in range(n)])


def softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def ref_log_softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - (m + math.log(np.exp(x - m).sum()))


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def merge_small_cells(counts, probs, n, least=20.0):
    """Merge the least likely cells into one until it expects `least` draws (chi-square needs
    no tiny expected counts)."""
    order = np.argsort(probs)
    k = int(np.searchsorted(np.cumsum(probs[order]) * n, least)) + 1
    tail, rest = order[:k], order[k:]
    return (np.append(counts[rest], counts[tail].sum()), np.append(probs[rest], probs[tail].sum()))


def greedy(logits, prompt_ids=(), outputs=(), **kw) -> int:
    """The greedy pick after the penalties of `prompt_ids` and `outputs` (accepted tokens)."""
    s = sampler(prompt_ids, temperature=0.0, **kw)
    for t in outputs:
        s.accept(t)
    return s.sample(np.asarray(logits, dtype=np.float32)).token


# ---- greedy and seeds ---------------------------------------------------------------------

def test_greedy_is_argmax():
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = (rng.standard_normal(N_VOCAB) * rng.uniform(0.1, 10)).astype(np.float32)
        # truncations and seeds do not matter at temperature 0
        s = sampler(temperature=0.0, top_k=5, top_p=0.5, min_p=0.3, seed=int(rng.integers(99)))
        assert s.sample(x).token == int(np.argmax(x))


def test_greedy_tie_takes_the_lowest_id():
    x = np.zeros(16, dtype=np.float32)
    x[[3, 9]] = 2.0
    assert greedy(x) == 3


def test_same_seed_same_tokens_different_seed_different_tokens():
    rng = np.random.default_rng(1)
    steps = [(rng.standard_normal(N_VOCAB) * 2).astype(np.float32) for _ in range(300)]
    kw = dict(temperature=0.9, top_k=50, top_p=0.95, min_p=0.01, repetition_penalty=1.1,
              presence_penalty=0.2, frequency_penalty=0.1)

    def run(seed):
        s = sampler(prompt_ids=[1, 2, 3], seed=seed, **kw)
        return [s.sample(x).token for x in steps]

    a = run(1234)
    assert run(1234) == a
    b = run(1235)
    assert b != a
    assert sum(i != j for i, j in zip(a, b)) > 50          # not one early difference: a new stream


# ---- temperature ---------------------------------------------------------------------------

# chi-square with 7 degrees of freedom: P(X > 35) ~ 1e-5 for the right distribution
CHI2_BOUND = 35.0


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_matches_softmax_distribution(temperature):
    x = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0], dtype=np.float32)
    counts = np.bincount(draws(SamplingParams(temperature=temperature, seed=7), x, 20000),
                         minlength=len(x))
    want = softmax(x / temperature)
    c, p = merge_small_cells(counts, want, 20000)
    assert chi_square(c, p) < CHI2_BOUND, (counts, want * 20000)
    # and the test can tell temperatures apart
    if temperature != 1.0:
        assert chi_square(counts, softmax(x)) > 10 * CHI2_BOUND


def test_temperature_over_many_cdf_blocks_matches_softmax():
    """A vocabulary of several inverse-CDF blocks and a ragged tail (qwen2's 151,936 tokens are
    148 blocks + 384): 8 likely tokens placed in different blocks, at block edges and in the
    tail, the rest unlikely; a mass of ~3% spread over the others. Catches a draw that picks
    the wrong block or offset (off by one at an edge), or block sums that lose the tail."""
    from reame.sampling import CDF_BLOCK
    n = 5 * CDF_BLOCK + 300
    x = np.full(n, -4.0, dtype=np.float32)
    hot = [0, CDF_BLOCK - 1, CDF_BLOCK, 2 * CDF_BLOCK + 17, 4 * CDF_BLOCK - 1,
           5 * CDF_BLOCK, n - 2, n - 1]
    x[hot] = np.array([3.0, 2.5, 2.2, 2.0, 1.8, 1.5, 1.2, 1.0], dtype=np.float32)
    t = 0.8
    toks = draws(SamplingParams(temperature=t, seed=11), x, 20000)
    p_all = softmax(x / t)
    cells = np.array([np.sum(toks == h) for h in hot] + [np.sum(~np.isin(toks, hot))])
    probs = np.append(p_all[hot], 1.0 - p_all[hot].sum())
    assert chi_square(cells, probs) < 30.0, (cells, probs * 20000)     # 8 dof: P ~ 2e-4


def test_sample_rows_draws_what_each_sampler_would():
    """sample_rows (many sequences' rows at once, in one sample_temp kernel call) draws for
    each sampler the token its own Sampler.sample would, round after round, and records it in
    the sampler's history. Catches a shared or reordered random stream, rows swapped in the
    batch, a missing accept, a greedy row sampled."""
    from reame.sampling import sample_rows
    rng = np.random.default_rng(3)
    v = 151936
    params = [dict(temperature=0.7, seed=1), dict(temperature=0.0), dict(temperature=1.3, seed=2),
              dict(temperature=0.7, seed=3), dict(temperature=0.05, seed=4),
              dict(temperature=1.0, seed=5), dict(temperature=2.0, seed=6)]
    a = [Sampler(SamplingParams(**p)) for p in params]
    b = [Sampler(SamplingParams(**p)) for p in params]
    assert all(s.plain for s in a)
    for rnd in range(4):
        rows = (rng.standard_normal((len(params), v)) * 3).astype(np.float32)
        rows[1, 1000 * rnd + 5] = 40.0                  # the greedy row's pick
        rows[4, :50000] -= 200.0                        # exponents far below the clamp
        want = [s.sample(r).token for s, r in zip(a, rows)]
        got = [d.token for d in sample_rows(b, list(rows))]
        assert got == want
        assert got[1] == 1000 * rnd + 5
    assert [s.history for s in a] == [s.history for s in b]
    assert len(set(want)) > 1


def test_plain_is_only_the_temperature():
    """Samplers sample_rows may take: temperature only. Catches a batched path that would skip a
    penalty, a truncation, a bias or the logprobs."""
    assert Sampler(SamplingParams(temperature=0.7)).plain
    assert Sampler(SamplingParams(temperature=0.0)).plain
    for kw in (dict(top_k=5), dict(top_p=0.9), dict(min_p=0.1), dict(repetition_penalty=1.1),
               dict(presence_penalty=0.5), dict(frequency_penalty=0.5), dict(logprobs=True),
               dict(logit_bias={3: 1.0}), dict(temperature=1e-31)):
        assert not Sampler(SamplingParams(**kw)).plain, kw


def test_temperature_applies_to_the_kept_tokens():
    """Temperature comes last: among the top-k tokens the draw follows softmax(x_kept / T)."""
    x = np.array([1.0, 3.0, 0.0, 2.5, -1.0, 2.0, 0.5, -3.0], dtype=np.float32)
    counts = np.bincount(draws(SamplingParams(temperature=2.0, top_k=3, seed=3), x, 12000),
                         minlength=len(x))
    kept = [1, 3, 5]
    assert counts.sum() == counts[kept].sum()
    assert chi_square(counts[kept], softmax(x[kept] / 2.0)) < 20.0    # 2 dof


# ---- top-k ---------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 5, 17])
def test_top_k_returns_only_the_k_best(k):
    rng = np.random.default_rng(k)
    for trial in range(20):
        x = rng.permutation(np.linspace(-3, 3, 200)).astype(np.float32)   # no ties
        best = set(np.argsort(-x)[:k].tolist())
        got = draws(SamplingParams(temperature=50.0, top_k=k, seed=trial), x, 60 * k)
        assert set(got.tolist()) == best                # only the k best, and all of them


def test_top_k_at_least_the_vocabulary_is_off():
    x = np.linspace(0, 0.5, 10).astype(np.float32)
    for k in (10, 11, 1000):
        got = draws(SamplingParams(temperature=1.0, top_k=k, seed=0), x, 500)
        assert set(got.tolist()) == set(range(10))


def test_top_k_one_is_greedy_at_any_temperature():
    rng = np.random.default_rng(5)
    for _ in range(50):
        x = rng.standard_normal(64).astype(np.float32)
        assert set(draws(SamplingParams(temperature=100.0, top_k=1), x, 10).tolist()) == \
            {int(np.argmax(x))}


# ---- top-p ---------------------------------------------------------------------------------

def brute_top_p(logits, p: float) -> np.ndarray:
    """The smallest set of most likely tokens whose probability mass reaches p (full sort)."""
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")
    cum = np.cumsum(probs[order])
    n = next((i + 1 for i, c in enumerate(cum) if c >= p), len(probs))
    return order[:n]


def _check_same_set(logits, p, got_ids):
    probs = softmax(logits)
    want = brute_top_p(logits, p)
    got = np.asarray(got_ids)
    assert len(got) == len(set(got.tolist())) == len(want), (p, len(got), len(want))
    if len(want) == len(probs):
        return
    # ties at the boundary make the set ambiguous, not its size or its probabilities
    assert np.array_equal(np.sort(probs[got]), np.sort(probs[want])), p
    boundary = probs[want].min()
    assert set(np.flatnonzero(probs > boundary)) <= set(got.tolist())


def _top_p_cases():
    rng = np.random.default_rng(42)
    ps = [1e-6, 0.01, 0.1, 0.3, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0 - 1e-9, 1.0]
    for trial in range(150):
        n = int(rng.choice([2, 7, 63, 64, 65, 300, 2000]))
        kind = trial % 5
        if kind == 0:
            x = rng.standard_normal(n) * rng.uniform(0.05, 8)
        elif kind == 1:
            x = np.round(rng.standard_normal(n) * 2)              # many ties
        elif kind == 2:
            x = np.zeros(n)                                       # all tied
        elif kind == 3:
            x = np.repeat(rng.standard_normal(max(1, n // 4)), 4)[:n]   # tied groups of 4
        else:
            x = np.where(rng.random(n) < 0.1, 5.0, -5.0) + rng.standard_normal(n) * 0.01
        yield x.astype(np.float32), float(rng.choice(ps))


def test_top_p_kept_set_is_the_smallest_set_reaching_p():
    """Sampler._top_p (partial sorts, growing) against a full sort, ties and p=1.0 included."""
    for x, p in _top_p_cases():
        logits = x.astype(np.float64)
        probs = softmax(logits)
        cand = np.arange(len(x))
        kept, kept_logits, kept_probs = Sampler._top_p(cand, logits, probs, p)
        _check_same_set(logits, p, kept)
        assert np.array_equal(kept_logits, logits[kept]) and np.array_equal(kept_probs, probs[kept])


def test_top_p_draws_come_from_the_brute_force_set():
    """End to end: at a high temperature every token of the set shows up, and nothing else."""
    rng = np.random.default_rng(11)
    for trial in range(30):
        x = rng.permutation(np.linspace(-2, 2, 30) + rng.uniform(0, 0.01, 30)).astype(np.float32)
        p = float(rng.choice([0.05, 0.3, 0.5, 0.7, 0.9]))
        want = set(brute_top_p(x, p).tolist())
        got = draws(SamplingParams(temperature=100.0, top_p=p, seed=trial), x, 80 * len(want))
        assert set(got.tolist()) == want, (trial, p)


def test_top_p_one_keeps_everything():
    x = np.array([10.0, 0.0, 0.0, 0.0, 0.0], dtype=np.float32)   # p(1..4) ~ 4.5e-5 at T=1
    got = draws(SamplingParams(temperature=10.0, top_p=1.0, seed=0), x, 2000)
    assert set(got.tolist()) == set(range(5))


def test_top_p_after_top_k_renormalises_over_the_k():
    # top-k keeps 4 equal tokens (25% each): top_p 0.5 must keep exactly 2 of them
    x = np.array([5, 5, 5, 5, 4.9, 4.9, 4.9, 4.9], dtype=np.float32)
    got = set(draws(SamplingParams(temperature=1.0, top_k=4, top_p=0.5, seed=0), x, 500).tolist())
    assert len(got) == 2 and got <= {0, 1, 2, 3}


# ---- min-p ---------------------------------------------------------------------------------

@pytest.mark.parametrize("min_p", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_min_p_threshold(min_p):
    """Tokens with p >= min_p * p_max survive, judged on the untempered probabilities."""
    rng = np.random.default_rng(int(min_p * 100))
    for trial in range(10):
        x = rng.permutation(np.linspace(-4, 0, 40)).astype(np.float32)
        probs = softmax(x)
        want = set(np.flatnonzero(probs >= min_p * probs.max()).tolist())
        got = draws(SamplingParams(temperature=100.0, min_p=min_p, seed=trial), x, 80 * len(want))
        assert set(got.tolist()) == want


def test_min_p_boundary_and_extremes():
    x = np.array([1.0, 1.0, 0.5, -3.0], dtype=np.float32)
    # min_p 1: exactly the tokens at the maximum (a token at the threshold is kept)
    got = set(draws(SamplingParams(temperature=100.0, min_p=1.0, seed=0), x, 200).tolist())
    assert got == {0, 1}
    got = set(draws(SamplingParams(temperature=100.0, min_p=0.0, seed=0), x, 400).tolist())
    assert got == {0, 1, 2, 3}


# ---- repetition penalty ----------------------------------------------------------------------

def test_repetition_penalty_divides_positive_logits():
    # token 0: 3.0 / 2 = 1.5 -> loses to 1.6, beats 1.4
    assert greedy([3.0, 1.6], prompt_ids=[0], repetition_penalty=2.0) == 1
    assert greedy([3.0, 1.4], prompt_ids=[0], repetition_penalty=2.0) == 0
    # a penalty below 1 boosts: 1.0 / 0.5 = 2.0
    assert greedy([1.0, 1.9], prompt_ids=[0], repetition_penalty=0.5) == 0
    assert greedy([1.0, 2.1], prompt_ids=[0], repetition_penalty=0.5) == 1


def test_repetition_penalty_multiplies_negative_logits():
    # token 0: -1.0 * 2 = -2.0 -> loses to -1.9, beats -2.1 (dividing would give -0.5)
    assert greedy([-1.0, -1.9], prompt_ids=[0], repetition_penalty=2.0) == 1
    assert greedy([-1.0, -2.1], prompt_ids=[0], repetition_penalty=2.0) == 0


def test_repetition_penalty_counts_a_token_once():
    # seen five times, still divided once (not 2**5)
    assert greedy([3.0, 1.4], prompt_ids=[0] * 5, repetition_penalty=2.0) == 0


def test_repetition_penalty_window():
    x = [3.0, 2.0, -5.0, -5.0, -5.0]
    hist = [0, 2, 3, 4]                           # token 0 is 4 tokens back
    assert greedy(x, hist, repetition_penalty=2.0, penalty_last_n=3) == 0    # outside the window
    assert greedy(x, hist, repetition_penalty=2.0, penalty_last_n=4) == 1    # inside
    assert greedy(x, hist, repetition_penalty=2.0, penalty_last_n=-1) == 1   # whole history
    assert greedy(x, hist, repetition_penalty=2.0, penalty_last_n=0) == 0    # disabled
    # output tokens join the window: 0 generated after a prompt that lacked it
    assert greedy(x, [2, 3], outputs=[0, 4], repetition_penalty=2.0, penalty_last_n=3) == 1
    long = [0] + [4] * 100                         # -1 reaches back past the default window of 64
    assert greedy(x, long, repetition_penalty=2.0) == 0
    assert greedy(x, long, repetition_penalty=2.0, penalty_last_n=-1) == 1


# ---- presence / frequency -------------------------------------------------------------------

def test_presence_and_frequency_penalties_count_output_tokens():
    # token 1 generated 3 times: 2.0 - (3 * 0.5 + 0.4) = 0.1
    assert greedy([0.15, 2.0], outputs=[1, 1, 1], frequency_penalty=0.5,
                  presence_penalty=0.4) == 0
    assert greedy([0.05, 2.0], outputs=[1, 1, 1], frequency_penalty=0.5,
                  presence_penalty=0.4) == 1
    # presence alone: once, whatever the count
    assert greedy([1.45, 2.0], outputs=[1] * 7, presence_penalty=0.5) == 1
    assert greedy([1.55, 2.0], outputs=[1] * 7, presence_penalty=0.5) == 0
    # negative values encourage repetition
    assert greedy([1.0, 0.5], outputs=[1, 1], frequency_penalty=-0.3) == 1


def test_presence_and_frequency_penalties_ignore_the_prompt():
    assert greedy([0.0, 2.0], prompt_ids=[1] * 10, frequency_penalty=2.0,
                  presence_penalty=2.0) == 1


def test_sampled_tokens_are_counted():
    """sample() accepts its own token: a frequency penalty makes greedy rotate."""
    s = sampler(temperature=0.0, frequency_penalty=0.15)
    x = np.array([1.0, 0.9, 0.8], dtype=np.float32)
    # 0:1.0 -> 0:0.85 1:0.9 -> 1 -> 0:0.85 1:0.75 2:0.8 -> 0 -> 0:0.7 1:0.75 2:0.8 -> 2
    assert [s.sample(x).token for _ in range(4)] == [0, 1, 0, 2]
    assert s.history == [0, 1, 0, 2] and s.output_counts == {0: 2, 1: 1, 2: 1}


# ---- logit bias -----------------------------------------------------------------------------

def test_logit_bias_plus_100_forces_a_token():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(N_VOCAB) * 3).astype(np.float32)
    x[77] = x.min()
    assert greedy(x, logit_bias={77: 100.0}) == 77
    got = draws(SamplingParams(temperature=1.5, logit_bias={77: 100}, seed=1), x, 300)
    assert set(got.tolist()) == {77}


def test_logit_bias_minus_100_bans_a_token():
    x = np.array([8.0, 0.0, 0.0, 0.0], dtype=np.float32)
    assert greedy(x, logit_bias={0: -100.0}) == 1
    got = draws(SamplingParams(temperature=2.0, logit_bias={0: -100.0}, seed=1), x, 2000)
    assert 0 not in got and set(got.tolist()) == {1, 2, 3}


def test_logit_bias_small_values_shift_the_logit():
    assert greedy([1.0, 1.2], logit_bias={0: 0.3}) == 0
    assert greedy([1.0, 1.2], logit_bias={0: 0.1}) == 1
    assert greedy([1.0, 1.2], logit_bias={1: -0.3, 0: 0.0}) == 0


def test_logit_bias_comes_before_the_repetition_penalty():
    # bias first: (-2 + 3) / 2 = 0.5 > 0; penalty first would give -2 * 2 + 3 = -1 < 0
    assert greedy([-2.0, 0.0], [0], logit_bias={0: 3.0}, repetition_penalty=2.0) == 0


# ---- logprobs -------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_are_the_models(temperature):
    rng = np.random.default_rng(9)
    for trial in range(30):
        x = (rng.standard_normal(N_VOCAB) * 3).astype(np.float32)
        # penalties, bias and temperature change the choice, not the reported log-probabilities
        s = sampler(prompt_ids=[5, 6, 7], temperature=temperature, seed=trial, top_k=20,
                    repetition_penalty=1.3, logit_bias={int(rng.integers(N_VOCAB)): 5.0},
                    logprobs=True, top_logprobs=5)
        out = s.sample(x)
        lp = ref_log_softmax(x)
        assert out.logprob == pytest.approx(lp[out.token], abs=1e-4)
        ids = [t for t, _ in out.top_logprobs]
        vals = [v for _, v in out.top_logprobs]
        assert ids == np.argsort(-lp, kind="stable")[:5].tolist()
        assert vals == sorted(vals, reverse=True)
        np.testing.assert_allclose(vals, lp[ids], atol=1e-4)
        assert all(isinstance(t, int) and isinstance(v, float) for t, v in out.top_logprobs)


def test_logprob_of_a_forced_unlikely_token():
    x = np.array([5.0, 0.0, -3.0], dtype=np.float32)
    out = sampler(temperature=0.0, logit_bias={2: 100.0}, logprobs=True, top_logprobs=2).sample(x)
    assert out.token == 2
    assert out.logprob == pytest.approx(ref_log_softmax(x)[2], abs=1e-5)       # about -8.0
    assert [t for t, _ in out.top_logprobs] == [0, 1]             # the chosen one is not among them


def test_logprobs_off_and_top_logprobs_zero():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    out = sampler(temperature=0.0).sample(x)
    assert out.logprob is None and out.top_logprobs == []
    out = sampler(temperature=0.0, logprobs=True, top_logprobs=0).sample(x)
    assert out.logprob == pytest.approx(ref_log_softmax(x)[2]) and out.top_logprobs == []


def test_logprobs_of_extreme_logits_are_finite():
    x = np.array([1e4, -1e4, 0.0, 30.0], dtype=np.float32)
    out = sampler(temperature=0.0, logprobs=True, top_logprobs=4).sample(x)
    assert out.logprob == pytest.approx(0.0, abs=1e-6)
    assert all(math.isfinite(v) for _, v in out.top_logprobs)
    assert [t for t, _ in out.top_logprobs] == [0, 3, 2, 1]


def test_top_logprobs_larger_than_a_tiny_vocabulary():
    x = np.array([0.5, 2.0, 1.0], dtype=np.float32)
    out = sampler(temperature=0.0, logprobs=True, top_logprobs=20).sample(x)
    assert [t for t, _ in out.top_logprobs] == [1, 2, 0]


# ---- validate --------------------------------------------------------------------------------

BAD = [
    ("temperature", -0.1), ("temperature", 100.5), ("temperature", math.nan),
    ("temperature", math.inf),
    ("top_k", -1),
    ("top_p", 0.0), ("top_p", -0.5), ("top_p", 1.01), ("top_p", math.nan),
    ("min_p", -0.01), ("min_p", 1.5), ("min_p", math.nan),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", 10.5),
    ("repetition_penalty", math.nan),
    ("penalty_last_n", -2),
    ("presence_penalty", -2.1), ("presence_penalty", 2.1), ("presence_penalty", math.nan),
    ("frequency_penalty", -2.1), ("frequency_penalty", 2.1), ("frequency_penalty", math.inf),
    ("top_logprobs", -1), ("top_logprobs", 21),
    ("seed", -1),
]


@pytest.mark.parametrize("name,value", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_validate_rejects_out_of_range(name, value):
    with pytest.raises(ValueError) as ei:
        SamplingParams(**{name: value}).validate(N_VOCAB)
    msg = str(ei.value)
    assert msg.split()[0] == name and "\n" not in msg      # the server reports the first word


@pytest.mark.parametrize("bias", [{-1: 1.0}, {N_VOCAB: 1.0}, {0: 100.5}, {0: -101.0},
                                  {0: math.nan}, {3: 1.0, 5: math.inf}])
def test_validate_rejects_bad_logit_bias(bias):
    with pytest.raises(ValueError, match=r"^logit_bias"):
        SamplingParams(logit_bias=bias).validate(N_VOCAB)


GOOD = [
    {}, {"temperature": 0.0}, {"temperature": 100.0}, {"top_k": 0}, {"top_k": 10 ** 6},
    {"top_p": 1.0}, {"top_p": 1e-9}, {"min_p": 0.0}, {"min_p": 1.0},
    {"repetition_penalty": 10.0}, {"repetition_penalty": 1e-3},
    {"penalty_last_n": -1}, {"penalty_last_n": 0}, {"penalty_last_n": 100000},
    {"presence_penalty": -2.0}, {"presence_penalty": 2.0},
    {"frequency_penalty": -2.0}, {"frequency_penalty": 2.0},
    {"top_logprobs": 0}, {"top_logprobs": 20, "logprobs": True},
    {"logit_bias": {0: -100.0, N_VOCAB - 1: 100}}, {"seed": 0}, {"seed": 2 ** 64 - 1},
]


@pytest.mark.parametrize("kw", GOOD, ids=[str(k) for k in GOOD])
def test_validate_accepts_the_boundaries(kw):
    params = SamplingParams(**kw)
    params.validate(N_VOCAB)
    Sampler(params).sample(np.zeros(N_VOCAB, dtype=np.float32))     # and they sample


@pytest.mark.parametrize("temperature", [1e-308, 5e-324, 1e-30])
def test_tiny_temperature_is_greedy_not_nan(temperature):
    """Found by the server fuzz test: 1e-308 overflowed logits / T to inf (inf - inf = NaN)."""
    logits = np.array([3.0, -1.0, 7.5, 7.25, 0.0], np.float32)
    s = Sampler(SamplingParams(temperature=temperature, seed=0))
    assert [s.sample(logits).token for _ in range(20)] == [2] * 20
