"""The request profile: what the traffic looks like, measured where the scheduler sees it.

Histograms (log2 buckets) of prompt and generation lengths and of tokens per step; arrival rate
and burstiness (the coefficient of variation of inter-arrival times: 1 for Poisson, above for
bursts); prefix-cache hit and eviction rates (from the block pool's counters); step times, with
decode-only steps giving the time per output token (TPOT). The histograms are windowed over the
last `window` events so that they follow a change of traffic, plus totals since start.

Speed is counted from every step, whatever their rate: per second of wall time, the tokens
generated, the seconds the engine was busy, the steps and the sequences they ran
(`speed(t0, t1)`), for the last `HORIZON` seconds. Each finished request's time per output token
(first to last token, mixed steps included) is kept with its end time. Recording runs on the
engine thread and reading on HTTP threads: both hold the profile's lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

HORIZON = 900           # seconds of per-second speed counts kept


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
        self.t0 = time.monotonic()
        self.requests = self.tokens_out = 0
        self.lock = threading.RLock()
        # per second of wall time: [second, tokens out, busy seconds, steps, sequences running]
        self.seconds: deque[list] = deque(maxlen=HORIZON)
        self.request_tpot: deque[tuple[float, float]] = deque(maxlen=4 * window)  # (end, s/token)
        self.t_traffic: float | None = None     # the first step that generated a token

    # ---- recording (the engine thread and submit) ----

    def arrival(self, prompt_tokens: int, t: float | None = None) -> None:
        with self.lock:
            self.arrivals.append(time.monotonic() if t is None else t)
            self.prompts.append(prompt_tokens)
            self.requests += 1

    def finished(self, output_tokens: int, tpot: float | None = None,
                 t: float | None = None) -> None:
        """A sequence ended with `output_tokens`; `tpot`: its seconds per output token after
        the first (None for fewer than two)."""
        with self.lock:
            self.outputs.append(output_tokens)
            if tpot is not None:
                self.request_tpot.append((time.monotonic() if t is None else t, tpot))

    def step(self, n_tokens: int, n_sampled: int, seconds: float, decode_only: bool,
             t: float | None = None, running: int = 0) -> None:
        t = time.monotonic() if t is None else t
        with self.lock:
            self.step_tokens.append(n_tokens)
            self.tokens_out += n_sampled
            if decode_only:
                self.tpot.append(seconds)
            if n_sampled and self.t_traffic is None:
                self.t_traffic = t - seconds
            # a step's counts go to the seconds it spans, in proportion
            start = t - seconds
            while True:
                sec = math.floor(start)
                end = min(t, sec + 1.0)
                share = (end - start) / seconds if seconds > 0 else 1.0
                if not self.seconds or self.seconds[-1][0] < sec:
                    self.seconds.append([sec, 0.0, 0.0, 0.0, 0.0])
                b = self.seconds[-1]
                if b[0] == sec:
                    b[1] += n_sampled * share
                    b[2] += end - start
                    b[3] += share
                    b[4] += running * share
                if end >= t:
                    break
                start = end

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

    def speed(self, t0: float, t1: float) -> dict:
        """Counted over the wall time [t0, t1): tokens generated, tok/s, the engine's busy share
        (1: it never waited for work: saturated), the busy seconds per generated token (what a
        token costs at the running batch: a faster kernel shows here whatever the load), the
        mean sequences running per step, and the p95 time per output token of the requests that
        ended in the window."""
        with self.lock:
            tokens = busy = steps = running = 0.0
            for sec, k, b, n, r in self.seconds:
                lo, hi = max(t0, sec), min(t1, sec + 1.0)
                if hi <= lo:
                    continue
                f = hi - lo                       # the part of that second in the window
                tokens += k * f
                busy += b * f
                steps += n * f
                running += r * f
            tpots = [x for t, x in self.request_tpot if t0 <= t < t1]
        wall = max(t1 - t0, 1e-9)
        return {"seconds": wall, "tokens": tokens, "tok_s": tokens / wall,
                "busy_share": min(1.0, busy / wall),
                "cost_per_token_s": busy / tokens if tokens else None,
                "batch": running / steps if steps else None,
                "tpot_p95_s": percentile(tpots, 0.95) if tpots else None}

    def tpot_p95(self) -> float:
        with self.lock:
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
        with self.lock:
            return self._summary()

    def _summary(self) -> dict:
        return {
            "requests": self.requests, "tokens_out": self.tokens_out,
            "arrival_rate": round(self.arrival_rate(), 3),
            "burstiness": round(self.burstiness(), 3),
            "prompt_tokens": self.histogram(self.prompts),
            "output_tokens": self.histogram(self.outputs),
            "step_tokens": self.histogram(self.step_tokens),
            "decode_step_p95_s": round(self.tpot_p95(), 5),   # decode-only steps
        }
