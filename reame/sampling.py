"""Choosing the next token from logits.

Order (as llama.cpp and vLLM apply them): logit bias -> repetition penalty (over the last
`penalty_last_n` tokens of prompt and output) -> presence/frequency penalties (over the output, as
OpenAI defines them) -> greedy when temperature is 0, else top-k -> top-p -> min-p -> temperature ->
sample. Every request owns a `numpy.random.Generator`: the same seed and inputs give the same
tokens. Reported log-probabilities are those of the model (log-softmax of the raw logits), as
OpenAI and vLLM report them.

Nothing here sorts the whole vocabulary: top-k uses `argpartition`, top-p grows a partial sort
until the kept mass reaches p, min-p is a threshold.

Every temperature draw over the whole vocabulary (nothing truncated, no candidate list: plain
samplers, and those with only biases, penalties, logprobs or a free-text grammar mask) is made by
one native kernel (op `sample_temp`, codegen/ops/sample_temp.py; built once per vocabulary size
through the kernel cache): `Sampler.sample` for one row, `sample_rows` for many sequences' rows of
one step at once (the common case of a busy server). One function draws a request's tokens in
every step, so seeded outputs do not depend on which path or batch drew them (speculation's
verification relies on it). `weights` + `draw` are its numpy reference (tests), and still draw
truncated rows (top-k/top-p/min-p, few allowed tokens), whose length varies.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

# the sampling kernel's numerics live in its op file (its reference); sampling draws with them
from .codegen.ops.sample_temp import CDF_BLOCK, draw, weights  # noqa: F401


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0                   # 0: off
    top_p: float = 1.0               # 1.0: off
    min_p: float = 0.0               # 0.0: off
    repetition_penalty: float = 1.0  # 1.0: off (llama.cpp's repeat_penalty)
    penalty_last_n: int = 64         # window of the repetition penalty
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0

    def validate(self, n_vocab: int) -> None:
        """Raise ValueError naming the first out-of-range parameter."""
        checks = [
            ("temperature", 0.0 <= self.temperature <= 100.0, "must be between 0 and 100"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("top_p", 0.0 < self.top_p <= 1.0, "must be in (0, 1]"),
            ("min_p", 0.0 <= self.min_p <= 1.0, "must be in [0, 1]"),
            ("repetition_penalty", 0.0 < self.repetition_penalty <= 10.0, "must be in (0, 10]"),
            ("penalty_last_n", self.penalty_last_n >= -1, "must be >= -1 (-1: whole history)"),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "must be in [-2, 2]"),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "must be in [-2, 2]"),
            ("top_logprobs", 0 <= self.top_logprobs <= 20, "must be in [0, 20]"),
            ("seed", self.seed is None or self.seed >= 0, "must be >= 0"),
        ]
        for name, ok, why in checks:
            if not ok:
                raise ValueError(f"{name} {why}")
        for tok, bias in self.logit_bias.items():
            if not 0 <= int(tok) < n_vocab:
                raise ValueError(f"logit_bias token {tok} is not in the vocabulary (0..{n_vocab - 1})")
            if not -100.0 <= float(bias) <= 100.0:
                raise ValueError("logit_bias values must be in [-100, 100]")


@dataclass
class Sampled:
    token: int
    logprob: float | None = None                     # log p(token) under the model
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def _weights(x: np.ndarray, temperature: float, out: np.ndarray | None = None) -> np.ndarray:
    """`weights` at a temperature."""
    return weights(x, np.float32(1.0 / temperature), out)


_KERNELS: dict = {}
_KERNELS_LOCK = threading.Lock()


def _kernel(n_vocab: int):
    """The sample_temp kernel for rows of n_vocab logits at this CPU's level, built (or loaded
    from the kernel cache) on first use: the tuned family where the level has one."""
    from .codegen.isa import detect
    isa = detect()
    key = (n_vocab, isa.level)
    k = _KERNELS.get(key)
    if k is None:
        with _KERNELS_LOCK:
            k = _KERNELS.get(key)
            if k is None:
                from .codegen.kernels import build
                from .codegen.registry import get_op
                spec = get_op("sample_temp").specs("F32", isa, K=n_vocab, B=CDF_BLOCK)[-1]
                k = _KERNELS[key] = build(spec, isa)
    return k


def prepare(n_vocab: int) -> None:
    """Build (or load) the sample_temp kernel for rows of n_vocab logits now, so that the first
    temperature request does not pay for it (~10 ms, ~0.2 s when LLVM is not started yet)."""
    _kernel(n_vocab)


def draw_rows(rows: list[np.ndarray], inv_t: list, u: list, threads: int = 1) -> np.ndarray:
    """Token per row (equal lengths), row i drawn with weights exp((x - max x) * inv_t[i]) by
    the uniform u[i] (what `weights` + `draw` give, within rounding at CDF boundaries): int32,
    -1 for a row without finite weights (a NaN or +inf logit, or every logit -inf).
    threads=2 splits the rows with the pool thread (see `sample_rows`)."""
    n = len(rows)
    xs = [np.ascontiguousarray(r, dtype=np.float32) for r in rows]   # kept alive for the call
    k = _kernel(len(xs[0]))
    if any(len(x) != len(xs[0]) for x in xs):
        raise ValueError("rows of different lengths")
    xp = np.fromiter((x.ctypes.data for x in xs), np.int64, n)
    it = np.asarray(inv_t, np.float32)
    uu = np.asarray(u, np.float64)
    tok = np.full(n, -1, np.int32)
    args = np.array([xp.ctypes.data, it.ctypes.data, uu.ctypes.data, tok.ctypes.data, n],
                    np.int64)
    if threads > 1 and n > 1:
        other = _pool().submit(k.cfunc, args.ctypes.data, 1, 2)
        k.cfunc(args.ctypes.data, 0, 2)
        other.result()
    else:
        k(args)
    return tok


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor
        _POOL = ThreadPoolExecutor(1, thread_name_prefix="reame-sample")
    return _POOL


class Sampler:
    """Per-request sampler: holds the RNG and the counts the penalties need."""

    def __init__(self, params: SamplingParams, prompt_ids=()):
        self.p = params
        self.rng = np.random.default_rng(params.seed)
        self.history: list[int] = list(prompt_ids)   # prompt + output, for the repetition penalty
        self.output_counts: Counter[int] = Counter()  # output only, for presence/frequency

    @property
    def plain(self) -> bool:
        """Nothing but the temperature shapes the choice (no bias, penalty, truncation or
        logprobs): `sample_rows` may sample it with others."""
        p = self.p
        return (not p.logit_bias and (p.repetition_penalty == 1.0 or p.penalty_last_n == 0)
                and not p.presence_penalty and not p.frequency_penalty and p.top_k == 0
                and p.top_p >= 1.0 and p.min_p <= 0.0 and not p.logprobs
                and (p.temperature == 0.0 or p.temperature >= 1e-30))

    def accept(self, token: int) -> None:
        self.history.append(token)
        self.output_counts[token] += 1

    def sample(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> Sampled:
        """The next token. `allowed` (bool [n_vocab], from a grammar: reame/structured.py)
        restricts the choice to those tokens, after biases and penalties, before truncation."""
        p = self.p
        raw = np.asarray(logits, dtype=np.float32)
        # x is written below only by biases, penalties or a grammar's mask (nothing after
        # writes it in place): a copy then, the caller's row itself otherwise
        edits = (p.logit_bias or (p.repetition_penalty != 1.0 and p.penalty_last_n != 0)
                 or p.presence_penalty or p.frequency_penalty or allowed is not None)
        x = raw.copy() if edits else raw
        if p.logit_bias:
            idx = np.fromiter(p.logit_bias.keys(), dtype=np.int64)
            x[idx] += np.fromiter(p.logit_bias.values(), dtype=np.float32)
        if p.repetition_penalty != 1.0 and p.penalty_last_n != 0:
            window = self.history if p.penalty_last_n < 0 else self.history[-p.penalty_last_n:]
            if window:
                ids = np.unique(np.asarray(window, dtype=np.int64))
                v = x[ids]
                x[ids] = np.where(v > 0, v / p.repetition_penalty, v * p.repetition_penalty)
        if (p.presence_penalty or p.frequency_penalty) and self.output_counts:
            ids = np.fromiter(self.output_counts.keys(), dtype=np.int64)
            counts = np.fromiter(self.output_counts.values(), dtype=np.float32)
            x[ids] -= p.frequency_penalty * counts + p.presence_penalty

        cand = blocked = None
        if allowed is not None:
            n_allowed = int(np.count_nonzero(allowed))
            if not n_allowed:
                raise ValueError("the grammar allows no token")
            if 4 * n_allowed < len(x):          # few allowed: draw among those only
                cand = np.flatnonzero(allowed)
            else:                               # most allowed (free text): mask in place
                blocked = np.flatnonzero(~allowed)
                x[blocked] = -np.inf
        if p.temperature == 0.0:
            token = int(np.argmax(x)) if cand is None else int(cand[np.argmax(x[cand])])
        else:
            token = self._sample_random(x, cand, blocked)
        out = Sampled(token)
        if p.logprobs:
            lp = log_softmax(raw)
            out.logprob = float(lp[token])
            n_top = min(p.top_logprobs, len(lp))
            if n_top:
                top = np.argpartition(-lp, n_top - 1)[:n_top]
                top = top[np.argsort(-lp[top], kind="stable")]
                out.top_logprobs = [(int(t), float(lp[t])) for t in top]
        self.accept(token)
        return out

    def _sample_random(self, x: np.ndarray, cand: np.ndarray | None = None,
                       blocked: np.ndarray | None = None) -> int:
        """Truncate (top-k, top-p, min-p), apply the temperature, draw by inverse CDF. Works on
        the whole vocabulary without index copies when nothing truncates, and draws by a
        two-level inverse CDF: a 152k-token vocabulary costs ~0.3 ms a token, where numpy's
        choice(p=...) took ~4 ms. `cand`: the only token ids allowed (None: all of x);
        `blocked` (indices into x): tokens that must get no probability at all (their x is
        -inf, and the exponent clamp below would otherwise give them a tiny weight)."""
        p = self.p
        logits = x if cand is None else x[cand]       # cand None: all of x, in order
        if 0 < p.top_k < len(logits):
            sel = np.argpartition(-logits, p.top_k - 1)[:p.top_k]
            cand = sel if cand is None else cand[sel]
            logits = logits[sel]
        if p.top_p < 1.0 or p.min_p > 0.0:
            if cand is None:
                cand = np.arange(len(x))
            lg = logits.astype(np.float64)
            probs = np.exp(lg - lg.max())
            probs /= probs.sum()
            if p.top_p < 1.0:
                cand, lg, probs = self._top_p(cand, lg, probs, p.top_p)
            if p.min_p > 0.0:
                keep = probs >= p.min_p * probs.max()
                cand, lg = cand[keep], lg[keep]
            logits = lg
        # temperature last, over what the truncations kept. Below 1e-30 it is greedy (1/T would
        # overflow float32); above, shifting by the max first keeps every exponent <= 0
        if p.temperature < 1e-30:
            i = int(np.argmax(logits))
            return i if cand is None else int(cand[i])
        if cand is None:        # the whole vocabulary (blocked tokens are -inf: weight 0)
            tok = int(draw_rows([logits], [1.0 / p.temperature], [self.rng.random()])[0])
            if tok < 0:
                raise ValueError("the logits have no finite weights (NaN or +inf logits, or "
                                 "every token masked)")
            return tok
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            w = _weights(logits, p.temperature)        # -inf logits (top-k kept some): 0
        i = draw(w, self.rng.random())
        return int(cand[i])

    @staticmethod
    def _top_p(cand, logits, probs, top_p):
        """Smallest set of most likely tokens whose mass reaches top_p (partial sorts only)."""
        k = min(64, len(probs))
        while True:
            part = np.argpartition(-probs, k - 1)[:k] if k < len(probs) else np.arange(len(probs))
            part = part[np.argsort(-probs[part], kind="stable")]
            cum = np.cumsum(probs[part])
            if cum[-1] >= top_p or k == len(probs):
                n = int(np.searchsorted(cum, top_p)) + 1
                keep = part[:min(n, k)]
                return cand[keep], logits[keep], probs[keep]
            k = min(k * 4, len(probs))


def _plain_token(sampler: Sampler, row: np.ndarray, buf: np.ndarray) -> int:
    """The numpy reference of what `Sampler.sample` and `sample_rows` draw from `row` for a
    plain sampler (`weights` + `draw`; the kernel agrees within rounding at CDF boundaries),
    with `buf` as scratch. For tests and benchmarks."""
    t = sampler.p.temperature
    x = np.asarray(row, dtype=np.float32)
    if t == 0.0:
        return int(np.argmax(x))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        w = _weights(x, t, out=buf)
    return draw(w, sampler.rng.random())


def sample_rows(samplers: list[Sampler], rows: list[np.ndarray],
                threads: int = 1) -> list[Sampled | None]:
    """Sample plain samplers (`Sampler.plain`) from their rows at once: the tokens
    `Sampler.sample` would draw one by one (the same kernel, one uniform from each sampler's own
    generator per temperature row, none for greedy rows). A row without finite weights (NaN
    logits) gives None and its sampler is left as it was: sampled alone, it fails its request.
    `threads`: 1 by default. On the 2-vCPU VM this was measured on (python -m bench.sampling,
    16 rows) a second thread saved ~13 us a row of 151,936 logits (54 -> 41) and nothing at
    49,152 (the two vCPUs share most of one core's throughput), while in the server it would
    compete with the engine's compute threads spinning down after the step (docs/engine.md)."""
    n = len(samplers)
    tokens: list[int | None] = [0] * n
    hot = [i for i, s in enumerate(samplers) if s.p.temperature > 0.0]
    for i, s in enumerate(samplers):
        if s.p.temperature == 0.0:
            tokens[i] = int(np.argmax(np.asarray(rows[i], dtype=np.float32)))
    by_len: dict[int, list[int]] = {}
    for i in hot:
        by_len.setdefault(len(rows[i]), []).append(i)
    for idx in by_len.values():
        _kernel(len(rows[idx[0]]))                  # built before any generator moves
        u = [samplers[i].rng.random() for i in idx]
        inv = [1.0 / samplers[i].p.temperature for i in idx]
        got = draw_rows([rows[i] for i in idx], inv, u, threads)
        for i, t in zip(idx, got):
            tokens[i] = int(t) if t >= 0 else None
    out: list[Sampled | None] = []
    for s, tok in zip(samplers, tokens):
        if tok is None:
            out.append(None)
            continue
        s.accept(tok)
        out.append(Sampled(tok))
    return out
