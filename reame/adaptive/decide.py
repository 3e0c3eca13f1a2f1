"""Deciding between two kernel variants from noisy timings: a paired, sequential comparison.

The runtime alternates the live variant (A) and a candidate (B) on consecutive steps and
records, per pair, the log of B's time over A's time for the same op class (per token, so steps
of slightly different sizes compare). Pairs cancel slow drift (the machine's load moves both
halves of a pair alike); the log makes a 2x slowdown and a 2x speedup symmetric. Occasional
wild pairs (a descheduled thread) are tamed by a trimmed mean. After every pair:

    promote  when the upper confidence bound of the mean log-ratio is below log(1 - min_gain)
             (B is faster by at least min_gain, with confidence 1 - alpha),
    reject   when the lower bound is above log(1 - min_gain) (B cannot be min_gain faster),
             or after max_pairs without a decision (not worth more exploration).

The bound is a t-interval on the trimmed sample, evaluated at every pair; to keep the error
rate over repeated looks near alpha it uses alpha / 2 per look after a warm-up of min_pairs
(a conservative, Bonferroni-like spending), and it never decides before min_pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# two-sided t quantiles for 1 - 0.001 (alpha = 0.002 split over both sides) by degrees of freedom
_T = {1: 318.3, 2: 22.33, 3: 10.21, 4: 7.17, 5: 5.89, 6: 5.21, 7: 4.79, 8: 4.50, 9: 4.30,
      10: 4.14, 12: 3.93, 15: 3.73, 20: 3.55, 25: 3.45, 30: 3.39, 40: 3.31, 60: 3.23,
      120: 3.16}


def t_quantile(df: int) -> float:
    """t quantile at 0.999 (conservative: the next smaller tabulated df)."""
    best = 318.3
    for d in sorted(_T):
        if d <= df:
            best = _T[d]
    return best if df < 1000 else 3.09


def trimmed(xs: list[float], share: float = 0.1) -> list[float]:
    k = int(len(xs) * share)
    s = sorted(xs)
    return s[k:len(s) - k] if k else s


@dataclass
class Comparison:
    min_gain: float = 0.02          # promote only if B is at least 2% faster
    min_pairs: int = 8
    max_pairs: int = 200
    logs: list[float] = field(default_factory=list)
    verdict: str | None = None      # None (undecided) | "promote" | "reject"

    def add(self, t_a: float, t_b: float) -> str | None:
        """One pair of times (A live, then B live); returns the verdict once reached."""
        if self.verdict is not None:
            return self.verdict
        if t_a > 0 and t_b > 0 and math.isfinite(t_a) and math.isfinite(t_b):
            self.logs.append(math.log(t_b / t_a))
        n = len(self.logs)
        if n >= self.min_pairs:
            lo, hi = self.interval()
            target = math.log(1 - self.min_gain)
            if hi < target:
                self.verdict = "promote"
            elif lo > target or n >= self.max_pairs:
                self.verdict = "reject"
        return self.verdict

    def interval(self) -> tuple[float, float]:
        """Confidence interval of the mean log-ratio (trimmed)."""
        xs = trimmed(self.logs)
        n = len(xs)
        if n < 2:
            return -math.inf, math.inf
        mean = sum(xs) / n
        var = sum((x - mean) ** 2 for x in xs) / (n - 1)
        half = t_quantile(n - 1) * math.sqrt(var / n)
        return mean - half, mean + half

    @property
    def ratio(self) -> float:
        """Estimated time of B over A (geometric mean of the trimmed pairs)."""
        xs = trimmed(self.logs)
        return math.exp(sum(xs) / len(xs)) if xs else 1.0
