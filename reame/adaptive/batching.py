"""The running batch, tuned on the traffic: how many sequences decode together.

A bigger batch reads the weights once for more tokens, so while requests wait (the server is
saturated) it usually gives more tokens per second, at the price of a longer step (time per
output token). Where that trade turns depends on the CPU, the model and the traffic (prompt
lengths, how many tokens of each step are prompt chunks, the KV memory), so it is measured:

- the tuner watches every step: the generated tokens, its seconds, how many sequences ran and
  whether any waited; a step is *full* when the batch was at its limit with sequences waiting
  (then the limit is what bounds throughput);
- after `window` full steps at the current limit it *probes* the next larger level (one not
  refused lately: throughput is not monotonic in the batch, since step programs come in
  buckets, so a level past a refused one is still tried): the limit
  is raised, and once the batch has filled and settled, `window` full steps measure it; the
  throughput of each (generated tokens / seconds over its full steps, prompt chunks included:
  the real mix) decides. The level is kept when its time per token is at least `min_gain`
  below the current level's with `Z` standard errors of margin (noise does not promote), and its p95
  decode step stays under `tpot_limit` (the latency guard); otherwise the limit goes back and
  that level is not probed again for `retry_steps` steps (traffic changes);
- a probe that lasts more than `max_probe_s` seconds is abandoned: the traffic may have
  changed under it (a probe begun in short chats and measured in long documents compares
  decode steps at other contexts than the level's own);
- a probe whose batch does not fill within `patience` steps (load went down, or the KV pool,
  not the batch, is what limits admissions) is abandoned;
- the tuner never goes below the level it started from (the default, or what a saved strategy
  said), and when a level it chose breaks the latency guard later (longer contexts make steps
  slower), it steps back down.

Only `SchedulerParams.max_batch` moves, within [start, slots]; the planner reads it at every
admission, so a lower limit takes effect as sequences finish (none is preempted for it).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from .profile import percentile

log = logging.getLogger("reame.adaptive")
Z = 2.5                  # standard errors of margin when comparing two levels
BLOCKS = 8               # blocks of consecutive steps for the standard error
MIX_SLACK = 0.15         # a level judged on its decode steps: how much worse its mix may look
CONFIRM = 4              # a kept level's mix is checked again over this many generations
LEVELS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


class LevelStats:
    """One level's recent full steps (generated tokens, seconds) and decode step times."""

    def __init__(self, keep: int = 4096):
        self.full: deque[tuple[int, float]] = deque(maxlen=keep)   # at the limit, waiting
        self.mix: deque[tuple[int, float]] = deque(maxlen=keep)    # any step while waiting
        self.decode_steps: deque[float] = deque(maxlen=512)
        self.decode_tok: deque[float] = deque(maxlen=keep)   # seconds per token, decode-only

    @property
    def steps(self) -> int:
        return len(self.full)

    def per_token(self, last: int) -> tuple[float, float]:
        """Seconds per generated token over the last `last` full steps (all their seconds over
        all their tokens: a step heavy with prompt chunks counts for what it cost), and its
        standard error from BLOCKS consecutive blocks of them (block means absorb the
        correlation between neighbouring steps)."""
        xs = list(self.mix)[-last:]
        n = sum(t for t, _ in xs)
        mean = sum(s for _, s in xs) / n if n else math.inf
        k = len(xs) // BLOCKS
        if k < 1:
            return math.inf, math.inf
        blocks = []
        for b in range(BLOCKS):
            part = xs[b * k:(b + 1) * k]
            nb = sum(t for t, _ in part)
            blocks.append(sum(s for _, s in part) / nb if nb else math.inf)
        return mean, _block_se(blocks)

    def decode_per_token(self, last: int) -> tuple[float, float]:
        """Seconds per token of the last `last` decode-only steps with the batch exactly at
        this level, and its standard error from BLOCKS consecutive blocks."""
        return _mean_se(list(self.decode_tok)[-last:])

    @property
    def tpot_p95(self) -> float:
        return percentile(self.decode_steps, 0.95)


def _block_se(blocks: list[float]) -> float:
    """Standard error of the mean of BLOCKS block means (inf if one is not finite)."""
    if not all(math.isfinite(b) for b in blocks):
        return math.inf
    m = sum(blocks) / len(blocks)
    var = sum((b - m) ** 2 for b in blocks) / (len(blocks) - 1)
    return math.sqrt(var / len(blocks))


def _mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean of xs and its standard error from BLOCKS consecutive blocks."""
    k = len(xs) // BLOCKS
    if k < 1:
        return math.inf, math.inf
    return sum(xs) / len(xs), _block_se([sum(xs[b * k:(b + 1) * k]) / k
                                         for b in range(BLOCKS)])


class BatchTuner:
    def __init__(self, params, slots: int, *, tpot_limit: float = 0.25, window: int = 48,
                 settle: int = 8, patience: int = 400, min_gain: float = 0.02,
                 retry_steps: int = 3000, max_probe_s: float = 120.0):
        self.params, self.slots = params, slots
        self.tpot_limit, self.window, self.settle = tpot_limit, window, settle
        self.patience, self.min_gain, self.retry_steps = patience, min_gain, retry_steps
        self.max_probe_s = max_probe_s
        self._probe_seconds = 0.0                 # seconds of steps since the probe began
        self.start = params.max_batch              # never below this (the default's level)
        self.levels = sorted({lv for lv in LEVELS if self.start <= lv <= slots} | {self.start, slots})
        self.frozen = False
        self.steps = 0
        self.base: LevelStats = LevelStats()      # the current limit, measured
        self.probe: LevelStats | None = None      # the level being probed
        self._probe_from = 0                      # the limit before the probe
        self._probe_started = 0                   # step the probe began
        self._settled = 0                         # full steps seen at the probed level
        self.cycle = 0                            # typical tokens a sequence generates
        self.refused: dict[int, int] = {}         # level -> step it was refused at
        self._confirm: tuple[int, LevelStats] | None = None   # (level left, its stats)
        self.history: list[tuple[int, int, str]] = []   # (step, level, what happened)
        self.probes = self.kept = self.reverted = self.guarded = 0

    @property
    def span(self) -> tuple[int, int]:
        """(steps to settle after a change, full steps to measure a level): at least one
        generation's length to settle and two to measure, so that a measurement covers the
        steady mix of decoding and admitting (right after a bigger batch fills, every
        sequence is decoding and none finishing: faster than it will stay)."""
        return max(self.settle, self.cycle), max(self.window, 2 * self.cycle)

    def refused_recently(self) -> list[int]:
        """Levels refused within the last retry_steps (what a restarted server skips too)."""
        return sorted(lv for lv, when in self.refused.items()
                      if self.steps - when < self.retry_steps)

    def rebase(self, level: int) -> None:
        """A new starting level (a saved strategy): measured afresh from there."""
        self.params.max_batch = level
        self.base = LevelStats()
        self.probe = None

    # ---- every step (the engine thread) ----

    def observe(self, n_sampled: int, seconds: float, decode_only: bool, running: int,
                waiting: int, trial: bool = False) -> None:
        """One step: tokens sampled, its seconds, whether it was decode-only, the sequences
        running and waiting; `trial`: it ran a kernel candidate's trial arm (its time is not
        the level's: left out of what the levels are compared on)."""
        self.steps += 1
        if self.frozen:
            if self.probe is not None:
                self._end_probe(keep=False, why="frozen")
            return
        limit = self.params.max_batch
        full = running >= limit and waiting > 0
        at = running == limit                     # (after a lower limit: draining, not it)
        # every step while requests wait counts for the mix, refills after a wave included
        sat = waiting > 0 and running <= limit
        if self.probe is not None:
            self._probing(n_sampled, seconds, decode_only, full and at, sat, trial)
            return
        if trial:                                 # not the level's time: left out
            return
        if sat:
            self.base.mix.append((n_sampled, seconds))
            if (self._confirm is not None
                    and len(self.base.mix) >= CONFIRM * max(self.window, self.cycle)):
                self._confirm_kept()
                return
        if at and decode_only:                    # the level's decode steps: its cost per
            self.base.decode_steps.append(seconds)        # token, and the latency guard
            self.base.decode_tok.append(seconds / max(1, n_sampled))
        if full and at:
            self.base.full.append((n_sampled, seconds))
        settle, window = self.span
        if (limit > self.start and len(self.base.decode_steps) >= self.window
                and self.base.tpot_p95 > self.tpot_limit):
            self._step_down(f"p95 decode step {self.base.tpot_p95:.3f} s over the "
                            f"{self.tpot_limit:.3f} s limit")
            return
        if self.base.steps >= window:
            nxt = self._next(limit)
            if nxt is not None:
                self._start_probe(limit, nxt)

    def _next(self, limit: int) -> int | None:
        for lv in self.levels:                    # the next level not refused lately (a
            if lv > limit:                        # bigger one may win where one did not:
                when = self.refused.get(lv)       # step programs come in buckets)
                if when is not None and self.steps - when < self.retry_steps:
                    continue
                # the guard, predicted: step time grows at most in proportion to the batch
                if (self.base.decode_steps and self.base.tpot_p95 * lv / limit
                        > 2 * self.tpot_limit):
                    return None
                return lv
        return None

    def _start_probe(self, limit: int, level: int) -> None:
        self.probe = LevelStats()
        self._probe_from, self._probe_started, self._settled = limit, self.steps, 0
        self._probe_seconds = 0.0
        self.params.max_batch = level
        self.probes += 1
        self._event(level, "probe")

    def _probing(self, n_sampled: int, seconds: float, decode_only: bool, full: bool,
                 sat: bool, trial: bool = False) -> None:
        p = self.probe
        if self.steps - self._probe_started > self.patience + sum(self.span):
            self._end_probe(keep=False, why="the batch did not fill")
            return
        self._probe_seconds += seconds
        if self._probe_seconds > self.max_probe_s:
            self._end_probe(keep=False, why=f"no verdict within {self.max_probe_s:.0f} s")
            return
        if trial:
            return
        settle, window = self.span
        self._settled += full
        if self._settled <= settle:               # the bigger batch filling and mixing
            return
        if sat:
            p.mix.append((n_sampled, seconds))
        if not full:
            return
        p.full.append((n_sampled, seconds))
        if decode_only:
            p.decode_steps.append(seconds)
            p.decode_tok.append(seconds / max(1, n_sampled))
        if p.steps < window:
            return
        # confidently faster: the probe's time per token, plus Z standard errors of the
        # difference, is still min_gain below the current level's. Where both levels have
        # decode-only steps enough, their cost per token decides: a step's cost is set by its
        # batch, while the steady mix's tokens/s also moves with where each block falls in
        # the traffic's waves (equal-length generations admitted together decode together,
        # so a block of steps is all prompts or all decoding) and needs many generations to
        # settle. A prompt costs the same at any batch, so the level that decodes a token for
        # less gives more tokens/s on any mix. That premise is checked on the mix itself: its
        # time per token over the window (a point estimate: the waves make its error margin
        # useless) may not be more than MIX_SLACK worse.
        mixed = len(p.mix)
        mb, sb = self.base.per_token(mixed)
        mp, sp = p.per_token(mixed)
        worse_mix = mp > mb * (1 + MIX_SLACK)
        n_dec = min(len(self.base.decode_tok), len(p.decode_tok))
        on_decode = n_dec >= max(2 * BLOCKS, window // 2)
        if on_decode:
            mb, sb = self.base.decode_per_token(min(n_dec, window))
            mp, sp = p.decode_per_token(min(n_dec, window))
        basis = "per decode step" if on_decode else "on the steady mix"
        faster = mp + Z * math.hypot(sb, sp) <= mb * (1 - self.min_gain) and not worse_mix
        within = not p.decode_steps or p.tpot_p95 <= self.tpot_limit
        self._end_probe(keep=faster and within, confirm=on_decode,
                        why=(f"{mb / mp:.3f}x the tokens/s of {self._probe_from} {basis}"
                             + (", worse on the steady mix" if worse_mix else "")
                             if mp > 0 and math.isfinite(mb) else "")
                        + ("" if within else f", p95 decode step {p.tpot_p95:.3f} s over "
                                             f"the limit"))

    def _confirm_kept(self) -> None:
        """A level kept on its decode steps, checked on its mix over CONFIRM generations
        against the level it replaced (the short window at the probe's end sees less than a
        wave of prompts): clearly worse, the batch goes back."""
        prev_level, prev = self._confirm
        self._confirm = None
        mb = prev.per_token(len(prev.mix))[0]
        mp = self.base.per_token(len(self.base.mix))[0]
        if mp > mb * (1 + MIX_SLACK) and math.isfinite(mb):
            limit = self.params.max_batch
            self.params.max_batch = prev_level
            self.refused[limit] = self.steps
            self.reverted += 1
            self._event(prev_level, f"back from {limit}: its mix gave {mb / mp:.3f}x the "
                                    f"tokens/s of {prev_level}")
            self.base = LevelStats()

    def _end_probe(self, keep: bool, why: str, confirm: bool = False) -> None:
        """`confirm`: kept on its decode steps, so its mix is checked again (_confirm_kept)."""
        p, self.probe = self.probe, None
        level = self.params.max_batch
        if keep:
            self._confirm = (self._probe_from, self.base) if confirm else None
            self.base = p
            self.kept += 1
            self._event(level, f"kept: {why}")
        else:
            self.params.max_batch = self._probe_from
            self.refused[level] = self.steps
            self.reverted += 1
            self._event(level, f"reverted: {why}")
            self.base = LevelStats()              # measure the current level afresh

    def _step_down(self, why: str) -> None:
        self._confirm = None
        limit = self.params.max_batch
        lower = max([lv for lv in self.levels if lv < limit], default=self.start)
        self.params.max_batch = lower
        self.refused[limit] = self.steps
        self.guarded += 1
        self._event(lower, f"down from {limit}: {why}")
        self.base = LevelStats()

    def _event(self, level: int, what: str) -> None:
        log.info("adaptive: batch %d: %s", level, what)
        self.history = (self.history + [(self.steps, level, what)])[-50:]

    def report(self) -> dict:
        return {"max_batch": self.params.max_batch, "start": self.start, "slots": self.slots,
                "tpot_limit_s": self.tpot_limit,
                "probing": None if self.probe is None else self.params.max_batch,
                "tok_s_at_limit": (round(1 / self.base.per_token(self.span[1])[0], 2)
                                   if self.base.steps >= 2 * BLOCKS else None),
                "cycle_tokens": self.cycle,
                "probes": self.probes, "kept": self.kept, "reverted": self.reverted,
                "stepped_down": self.guarded,
                "history": [{"step": s, "max_batch": lv, "event": e}
                            for s, lv, e in self.history[-10:]]}
