"""The request profile: what the traffic looks like, measured where the scheduler sees it.

Histograms (log2 buckets) of prompt and generation lengths and of tokens per step; arrival rate
and burstiness (the coefficient of variation of inter-arrival times: 1 for Poisson, above for
bursts); prefix-cache hit and eviction rates (from the block pool's counters); step times, with
decode-only steps giving the time per output token (TPOT). Everything is windowed over the last
`window` events so that it follows a change of traffic, plus totals since start.
"""

from __future__ import annotations

import math
import time
from collections import deque


def log2_bucket(n: int) -> int:
    return 0 if n <= 1 else int(math.ceil(math.log2(n)))


def percentile(xs, q: float) -> float:
    s = sorted(xs)
    if not s:
        return 0.0
    return s[min(len(s) - 1, max(0, int(math.ceil(q * len(s))) - 1))]


class RequestProfile:
    def __init__(self, window: int = 512):
        self.window = window
        self.arrivals: deque[float] = deque(maxlen=window)
        self.prompts: deque[int] = deque(maxlen=window)
        self.outputs: deque[int] = deque(maxlen=window)
        self.step_tokens: deque[int] = deque(maxlen=window)
        self.tpot: deque[float] = deque(maxlen=window)       # decode-only step seconds
        self.steps: deque[tuple[float, int]] = deque(maxlen=window)   # (end time, out tokens)
        self.t0 = time.monotonic()
        self.requests = self.tokens_out = 0

    # ---- recording (the engine thread and submit) ----

    def arrival(self, prompt_tokens: int, t: float | None = None) -> None:
        self.arrivals.append(time.monotonic() if t is None else t)
        self.prompts.append(prompt_tokens)
        self.requests += 1

    def finished(self, output_tokens: int) -> None:
        self.outputs.append(output_tokens)

    def step(self, n_tokens: int, n_sampled: int, seconds: float, decode_only: bool,
             t: float | None = None) -> None:
        self.step_tokens.append(n_tokens)
        self.steps.append((time.monotonic() if t is None else t, n_sampled))
        self.tokens_out += n_sampled
        if decode_only:
            self.tpot.append(seconds)

    # ---- reading ----

    def arrival_rate(self) -> float:
        a = list(self.arrivals)
        if len(a) < 2 or a[-1] <= a[0]:
            return 0.0
        return (len(a) - 1) / (a[-1] - a[0])

    def burstiness(self) -> float:
        """Coefficient of variation of the inter-arrival gaps (Poisson: ~1)."""
        a = list(self.arrivals)
        gaps = [y - x for x, y in zip(a, a[1:])]
        if len(gaps) < 2:
            return 0.0
        m = sum(gaps) / len(gaps)
        if m <= 0:
            return 0.0
        sd = math.sqrt(sum((g - m) ** 2 for g in gaps) / (len(gaps) - 1))
        return sd / m

    def throughput(self, seconds: float = 60.0, now: float | None = None) -> float:
        """Sampled tokens per second over the last `seconds`."""
        now = time.monotonic() if now is None else now
        n = sum(k for t, k in self.steps if t >= now - seconds)
        return n / seconds

    def tpot_p95(self) -> float:
        return percentile(self.tpot, 0.95)

    @staticmethod
    def histogram(xs) -> dict[str, int]:
        out: dict[str, int] = {}
        for x in xs:
            b = log2_bucket(x)
            key = f"<={2 ** b}"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: int(kv[0][2:])))

    def summary(self) -> dict:
        return {
            "requests": self.requests, "tokens_out": self.tokens_out,
            "arrival_rate": round(self.arrival_rate(), 3),
            "burstiness": round(self.burstiness(), 3),
            "prompt_tokens": self.histogram(self.prompts),
            "output_tokens": self.histogram(self.outputs),
            "step_tokens": self.histogram(self.step_tokens),
            "tpot_p95_s": round(self.tpot_p95(), 5),
        }
