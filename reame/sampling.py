"""Choosing the next token from logits.

Order (as llama.cpp and vLLM apply them): logit bias -> repetition penalty (over the last
`penalty_last_n` tokens of prompt and output) -> presence/frequency penalties (over the output, as
OpenAI defines them) -> greedy when temperature is 0, else top-k -> top-p -> min-p -> temperature ->
sample. Every request owns a `numpy.random.Generator`: the same seed and inputs give the same
tokens. Reported log-probabilities are those of the model (log-softmax of the raw logits), as
OpenAI and vLLM report them.

Nothing here sorts the whole vocabulary: top-k uses `argpartition`, top-p grows a partial sort
until the kept mass reaches p, min-p is a threshold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np


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


class Sampler:
    """Per-request sampler: holds the RNG and the counts the penalties need."""

    def __init__(self, params: SamplingParams, prompt_ids=()):
        self.p = params
        self.rng = np.random.default_rng(params.seed)
        self.history: list[int] = list(prompt_ids)   # prompt + output, for the repetition penalty
        self.output_counts: Counter[int] = Counter()  # output only, for presence/frequency

    def accept(self, token: int) -> None:
        self.history.append(token)
        self.output_counts[token] += 1

    def sample(self, logits: np.ndarray) -> Sampled:
        p = self.p
        raw = np.asarray(logits, dtype=np.float32)
        x = raw.copy()
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

        if p.temperature == 0.0:
            token = int(np.argmax(x))
        else:
            token = self._sample_random(x)
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

    def _sample_random(self, x: np.ndarray) -> int:
        p = self.p
        cand = np.arange(len(x))
        if 0 < p.top_k < len(x):
            cand = np.argpartition(-x, p.top_k - 1)[:p.top_k]
        logits = x[cand].astype(np.float64)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            cand, logits, probs = self._top_p(cand, logits, probs, p.top_p)
        if p.min_p > 0.0:
            keep = probs >= p.min_p * probs.max()
            cand, logits = cand[keep], logits[keep]
        # temperature last, over what the truncations kept; shifting by the max before dividing
        # keeps a tiny temperature finite (differences <= 0 become -inf, never inf - inf)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            z = (logits - logits.max()) / p.temperature
        w = np.exp(z)
        w /= w.sum()
        return int(cand[self.rng.choice(len(cand), p=w)])

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
