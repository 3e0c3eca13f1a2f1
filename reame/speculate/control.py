"""How many drafted tokens each sequence verifies in a step: the expected accepted tokens per
second, from measured step costs and observed acceptance.

- `StepCost`: the live cost curve, seconds of a scheduler step (forward pass and sampling) by
  the tokens it computes, measured on this server: the median of the last `SAMPLES` steps per
  token count up to 64, per power-of-two range above (a range's point sits at the median token
  count of its steps). A step never costs less than a smaller one, so the curve read is the
  lower envelope from above (cost(n) = the least measured cost of n or more tokens: one slow
  outlier does not bar a size); a count between two points is interpolated between them, also
  inside a range above 64 (read flat at its point, drafts beside a long prompt chunk would look
  free up to the range's end), and beyond the largest measured one costs `PRIOR_SLOPE` of the
  one-token step per token more, an optimistic guess that one step then measures. Estimates not
  refreshed for `STALE_STEPS` steps count as unmeasured again. Draft tokens are priced with
  `priced`: the curve, but at least its top's slope per token (the envelope can read a stretch
  of sizes flat).
- `Acceptance`: per request class (reame/speculate/__init__.py) and match-length range, how often
  the draft token at each depth was accepted once the ones before it were (Beta-smoothed toward
  the depth before it, decayed so that it follows a change of traffic).
- `allocate`: the allocation. A sequence offering draft tokens with acceptance a_1, a_2, ... is
  expected to emit 1 + a_1 + a_1 a_2 + ... tokens; taking draft tokens in order of their
  expected gain over every sequence gives the best value for each added total K, and the step
  takes the K of the highest value / cost(base + K). K = 0 whenever drafting loses: at
  saturation (cost grows as fast as tokens) or at low acceptance.
- The time-per-token guard: a draft lengthens the step for every sequence in it, and one that
  drafts nothing (or whose draft is rejected) only waits longer. So a K is taken only if, for
  every decoding sequence i, cost(base + K) <= (1 + TPOT_MARGIN) e_i cost(base) + slack_i, with
  e_i the tokens i is expected to emit (1 without a draft) and slack_i the time i is ahead of
  that bound so far (Speculator keeps it from the tokens each sequence actually emitted):
  others' drafts never take a sequence past (1 + TPOT_MARGIN) times the time per token it
  would have without them (on the measured curve), a sequence that gained from its own drafts
  may spend its gain on others', and one whose own drafts were rejected holds every draft in
  its steps until it has caught up. Tokens per second alone would let drafts of a few
  sequences slow many (unique chats at saturation: +20% p95 time per token, 2026-12-03); the
  margin trades that bound against what neighbours' drafts may take (TPOT_MARGIN).
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque

PRIOR_SLOPE = 0.08      # unmeasured step sizes: +8% of a one-token step per token (optimistic)
STALE_STEPS = 2000      # a cost estimate older than this many steps may be measured again
SAMPLES = 16            # step times kept per token count (their median is the estimate)
MAX_DRAFT = 15          # draft tokens per sequence and step (1 + 15 fits the 16-token program)
PRIOR_ACCEPT = (1.2, 0.8)   # Beta prior of a depth's acceptance (a mean of 0.6: worth a try)
DECAY = 0.995           # per observation of a class: old evidence fades (~200 verify steps)
# the guard's default (`reame serve --speculate-guard`): a sequence's time per token may grow by
# this share at most through its neighbours' drafts. A larger margin lets echoing streams beside
# unique ones gain more (four streams 1.10-1.38x speculation off at 0.03, 1.24-1.58x at 0.25,
# SmolLM2 on a 2-vCPU Zen 4, 2026-12-06); the control's p95 line did not tell the two apart in
# five runs (docs/speculation.md, "The guard's margin"), so the default keeps the tighter bound
TPOT_MARGIN = 0.03


def _bin(n: int) -> int:
    """Token counts up to 64 exactly, then one bin per power of two."""
    return n if n <= 64 else 64 + int(math.log2(n - 1)) - 5


class StepCost:
    def __init__(self):
        self.samples: dict[int, deque] = {}  # bin -> the last SAMPLES step times
        self.seen: dict[int, int] = {}       # bin -> step number of the last measurement
        self.ns: dict[int, deque] = {}       # bin -> the token counts of those steps
        self.steps = 0
        self._memo: tuple[int, list, float] | None = None     # (steps, points, slope)
        self._med: dict[int, tuple[int, float]] = {}          # bin -> its (tokens, seconds) medians

    def observe(self, n_tokens: int, seconds: float) -> None:
        if n_tokens < 1 or not seconds > 0:
            return
        self.steps += 1
        b = _bin(n_tokens)
        d = self.samples.get(b)
        if d is None:
            d = self.samples[b] = deque(maxlen=SAMPLES)
            self.ns[b] = deque(maxlen=SAMPLES)
        d.append(seconds)
        self.ns[b].append(n_tokens)
        self.seen[b] = self.steps
        self._memo = None
        self._med.pop(b, None)

    def known(self) -> bool:
        return bool(self.samples)

    def _points(self) -> list[tuple[int, float]]:
        """(tokens, seconds) of the fresh bins, made non-decreasing from above (with the
        slope of their top, for slope())."""
        if self._memo is not None and self._memo[0] == self.steps:
            return self._memo[1]
        pts = []
        for b, d in self.samples.items():
            if self.steps - self.seen[b] < STALE_STEPS:
                m = self._med.get(b)
                if m is None:                    # only the bin the last step changed
                    m = self._med[b] = (round(statistics.median(self.ns[b])),
                                        statistics.median(d))
                pts.append(m)
        pts.sort()
        for i in range(len(pts) - 2, -1, -1):
            if pts[i][1] > pts[i + 1][1]:
                pts[i] = (pts[i][0], pts[i + 1][1])
        top = [p for p in pts if p[0] >= 32]
        slope = 0.0
        if len(top) >= 2:
            x1, v1 = top[-1]
            x0, v0 = min(top[:-1], key=lambda p: abs(p[0] - x1 / 2))
            slope = max(0.0, (v1 - v0) / (x1 - x0))
        self._memo = (self.steps, pts, slope)
        return pts

    def __call__(self, n: int) -> float:
        """Estimated seconds of a step of n tokens (0 when nothing was measured yet)."""
        pts = self._points()
        if not pts:
            return 0.0
        lo = hi = None
        for x, v in pts:
            if x <= n:
                lo = (x, v)
            elif hi is None:
                hi = (x, v)
        if lo and lo[0] == n:
            return lo[1]
        if lo and hi:
            (x0, v0), (x1, v1) = lo, hi
            return v0 + (v1 - v0) * (n - x0) / (x1 - x0)
        if lo:
            x0, v0 = lo
            one = pts[0][1] / (1 + PRIOR_SLOPE * (pts[0][0] - 1))
            return v0 + PRIOR_SLOPE * one * (n - x0)
        x1, v1 = hi
        return v1 * n / x1

    def slope(self) -> float:
        """Seconds per token at the top of the measured curve: the secant from the point
        nearest half the largest measured size to the largest (0 with no two points of 32 tokens
        or more). There a step is bound by its arithmetic, the least a token can add anywhere."""
        self._points()
        return self._memo[2]

    def priced(self, base: int, k: int, c0: float | None = None) -> float:
        """Estimated seconds of a step of `base` tokens with k draft tokens added: the curve at
        base + k, but at least cost(base) + k slope(). The curve is by token count alone, while a
        step's cost also depends on what its tokens are (decode rows, prompt rows, their
        contexts); the envelope from above then reads sizes below a cheaply measured one flat,
        and drafts that fill a step up to it looked free (2-vCPU EPYC without AMX, 16 unique
        chats: 15 sequences beside a 43-token prompt chunk took ~40 draft tokens a step at no
        cost on the curve, actual steps +15-20%, 2026-12-05). c0: cost(base), when the caller
        has it."""
        c = self(base + k)
        if not k:
            return c
        return max(c, (self(base) if c0 is None else c0) + k * self.slope())

    def curve(self) -> dict[int, float]:
        return {x: round(v, 6) for x, v in self._points()}


class Acceptance:
    """Conditional acceptance by depth, per (class, match range)."""

    def __init__(self, max_keys: int = 4096):
        self.max_keys = max_keys
        self.stats: dict[tuple, list[list[float]]] = {}   # key -> [[accepted, proposed]] by depth
        # per match range: the sum of its classes' stats and their number, kept as stats change
        # (an unseen class reads their mean; summing over every class on each call took 3.5% of
        # the engine thread with 16 unique chats, each its own class, 2026-12-06)
        self._sums: dict[int, list[list[float]]] = {}
        self._counts: dict[int, int] = {}

    @staticmethod
    def key(cls: str, match: int) -> tuple:
        return (cls, min(4, int(math.log2(max(1, match)))))

    def rates(self, cls: str, match: int, n: int) -> list[float]:
        """Estimated conditional acceptance of draft depths 1..n. Depth 1's prior is
        PRIOR_ACCEPT; each deeper depth's prior is the estimate of the depth before it, with
        the same weight: a depth rarely verified reads as what the draft did just before it
        (a copy that went on for 7 tokens goes on for an 8th about as well), not as the first
        depth's prior. With the flat prior (0.6) at every depth, the depths a sequence was
        never allocated stayed at 0.6 and were never allocated: drafts of an echoed reply
        accepted at 0.97 for 7 deep stopped at 7, and prompt copies at 0.86 at depth 2 stopped
        at 2 (SmolLM2, the repetitive workload, 2026-12-06)."""
        st = self.stats.get(self.key(cls, match))
        if st is None:                       # an unseen class: what its match range does elsewhere
            st = self._pooled(match)
        a0, b0 = PRIOR_ACCEPT
        w, prior = a0 + b0, a0 / (a0 + b0)
        out = []
        for j in range(n):
            acc, prop = st[j] if j < len(st) else (0.0, 0.0)
            prior = (acc + w * prior) / (prop + w)
            out.append(prior)
        return out

    def _pooled(self, match: int) -> list[list[float]]:
        """The mean of the stats of the classes in match's range (as much weight as one
        class; zeros when there is none)."""
        r = self.key("", match)[1]
        n = self._counts.get(r, 0)
        if not n:
            return [[0.0, 0.0] for _ in range(MAX_DRAFT)]
        return [[max(0.0, a) / n, max(0.0, p) / n] for a, p in self._sums[r]]

    def _track(self, r: int, st: list[list[float]], sign: float) -> None:
        """Add (sign 1) or take out (-1) one class's stats from its range's sum."""
        sums = self._sums.get(r)
        if sums is None:
            sums = self._sums[r] = [[0.0, 0.0] for _ in range(MAX_DRAFT)]
        for row, (a, p) in zip(sums, st):
            row[0] += sign * a
            row[1] += sign * p
        self._counts[r] = self._counts.get(r, 0) + (1 if sign > 0 else -1)

    def observe(self, cls: str, match: int, proposed: int, accepted: int) -> None:
        k = self.key(cls, match)
        st = self.stats.get(k)
        if st is None:
            if len(self.stats) >= self.max_keys:
                old = next(iter(self.stats))             # the oldest class
                self._track(old[1], self.stats.pop(old), -1.0)
            st = self.stats[k] = [[0.0, 0.0] for _ in range(MAX_DRAFT)]
        else:                                    # most recently used last
            self.stats[k] = self.stats.pop(k)
            self._track(k[1], st, -1.0)
        for row in st:
            row[0] *= DECAY
            row[1] *= DECAY
        for j in range(min(proposed, accepted + 1)):   # depths reached: accepted, then one miss
            st[j][1] += 1.0
            if j < accepted:
                st[j][0] += 1.0
        self._track(k[1], st, 1.0)

    def state(self) -> list:
        return [[c, m, [[round(a, 3), round(p, 3)] for a, p in st]]
                for (c, m), st in self.stats.items()]

    def load(self, state) -> None:
        if not isinstance(state, list):
            raise ValueError("acceptance: a list expected")
        for item in state:
            c, m, st = item
            if not (isinstance(c, str) and isinstance(m, int) and isinstance(st, list)
                    and len(st) == MAX_DRAFT and all(len(r) == 2 for r in st)):
                raise ValueError("acceptance: [class, match range, [[accepted, proposed]]]")
            if (c, m) in self.stats:
                self._track(m, self.stats[(c, m)], -1.0)
            self.stats[(c, m)] = [[float(a), float(p)] for a, p in st]
            self._track(m, self.stats[(c, m)], 1.0)


def allocate(offers: list[list[float]], base_tokens: int, cost: StepCost,
             max_total: int, slack: list[float] | None = None,
             margin: float = TPOT_MARGIN) -> tuple[list[int], int | None]:
    """Draft tokens per offer. offers[i]: the conditional acceptance of sequence i's draft
    tokens in order ([] : a decoding sequence with nothing to draft); base_tokens: the tokens
    the step computes without drafts, each worth one (prompt tokens are work the server must do
    as much as decode tokens: valued at 0, drafts beside a long prompt chunk would look free
    while they delay it); at most max_total draft tokens in all; slack[i]: seconds sequence i is
    ahead of the time-per-token guard (None: none is); margin: the guard's share (TPOT_MARGIN).
    Returns (k_i <= len(offers[i]), the sequence whose bound cut the total below the best
    rate's, or None)."""
    ks = [0] * len(offers)
    if not offers or max_total <= 0 or not cost.known():
        return ks, None
    # the expected gain of each sequence's next token is its survival probability: decreasing
    # along a sequence, so a heap of each sequence's next gain yields the best order overall
    heap = [(-o[0], i, 0, o[0]) for i, o in enumerate(offers) if o]
    heapq.heapify(heap)
    order = []
    while heap and len(order) < max_total:
        _, i, j, surv = heapq.heappop(heap)
        order.append((i, surv))
        if j + 1 < len(offers[i]):
            nxt = surv * offers[i][j + 1]
            heapq.heappush(heap, (-nxt, i, j + 1, nxt))
    c0 = cost(base_tokens)
    unit = (1 + margin) * c0
    slack = slack or [0.0] * len(offers)
    emit = [1.0] * len(offers)                     # expected tokens out of the step, per sequence
    # each sequence's bound on the step's cost, lowest first (lazy: stale entries skipped)
    bounds = [(unit + s, i) for i, s in enumerate(slack)]
    heapq.heapify(bounds)
    best_k, best_rate = 0, base_tokens / c0
    free_rate, binder = best_rate, None            # the best rate without the guard
    value = float(base_tokens)
    for k, (i, gain) in enumerate(order, 1):
        value += gain
        emit[i] += gain
        heapq.heappush(bounds, (unit * emit[i] + slack[i], i))
        while unit * emit[bounds[0][1]] + slack[bounds[0][1]] != bounds[0][0]:
            heapq.heappop(bounds)
        c = cost.priced(base_tokens, k, c0)
        rate = value / c
        if rate > best_rate * 1.0001 and c <= bounds[0][0]:
            best_k, best_rate = k, rate
        if rate > free_rate:
            free_rate, binder = rate, (bounds[0][1] if c > bounds[0][0] else None)
    for i, _ in order[:best_k]:
        ks[i] += 1
    return ks, binder if free_rate > best_rate * 1.0001 else None
