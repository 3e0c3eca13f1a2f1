"""Online A/B of kernel variants on live traffic, through the engine's dispatch table.

Op sites that run the same kernel spec in the same program (the 24 `ffn_down` matmuls of a
Qwen2.5-0.5B decode step, say) form a *class*; a class is tuned as one: a candidate variant is
put live on all of its slots at once, and its time is the sum over them, so one step gives one
well-averaged sample. The tuner, called by the engine thread at every step boundary:

1. finds the hot classes from sampled per-slot timings (`DispatchTable.stats`),
2. builds the next candidate of the hottest unsettled class (another family or tile of the same
   op, type and shape, from the op's registry entry) on a background thread, and checks it
   numerically at every count its slots serve (`DispatchTable.verify`: a wrong variant never
   goes live),
3. explores: on a bounded share of steps, live variant and candidate alternate in pairs of
   steps of the same program and of like sizes (trial staging: no history), timed per token
   (a pair of a long prompt step and a short decode step is dropped: time per token depends
   on the step's size); a paired,
   sequential test (decide.Comparison) promotes the candidate when it is confidently faster
   or rejects it,
4. confirms a promotion later with a fresh comparison against the variant it replaced and
   rolls back if that one now measures faster (a variant that only looked good, or that
   degrades).

Exploration pauses while the steps it slows would break the latency budget (`jitter`: the
candidate's steps may not be more than that much slower than the live variant's), and stops
entirely when frozen. Everything runs on the engine thread except compiling and checking.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

import numpy as np

from ..codegen import registry
from ..codegen.kernels import Kernel
from ..codegen.runtime import cycle_hz
from ..dispatch import VariantRejected
from ..pace import background_priority
from .decide import Comparison

log = logging.getLogger("reame.adaptive")


@dataclass
class SlotClass:
    key: str                                  # "<spec label>@<program>"
    program: str                              # program label (bucket)
    slots: list[int]
    spec: object                              # the live kernel's spec
    candidates: list = field(default_factory=list)   # specs still to try
    tried: dict = field(default_factory=dict)        # spec label -> verdict / reason
    seconds: float = 0.0                      # sampled thread-seconds (hotness)
    origin: object = None                     # the spec it started with (for rollback)

    @property
    def op(self) -> str:
        return self.spec.op


@dataclass
class Trial:
    cls: SlotClass
    live: Kernel
    cand: Kernel
    comparison: Comparison
    confirming: bool = False                  # comparing a promoted variant with its previous
    pending_a: float | None = None            # the first half of a pair
    pending_n: int = 0                        # its token count
    unlike: int = 0                           # pairs dropped: steps of unlike sizes
    order_ab: bool = True                     # this pair runs A first
    slow_pairs: int = 0


class KernelTuner:
    def __init__(self, plan, explore_share: float = 0.25, jitter: float = 0.3,
                 min_share: float = 0.02, min_gain: float = 0.02, confirm_after: int = 400,
                 like_sizes: float = 1.15, max_unlike: int = 400, build_nice: int = 19,
                 exact: bool = True):
        """`plan`: the engine's reame.kernel_plan.KernelPlan (the JIT engine is its own).
        `build_nice`: the CPU priority of the thread that builds and checks candidates
        (background_priority). `exact`: only variants whose outputs are bit-identical to the
        live variant's may go live (DispatchTable.same_bits): tuning then changes speed, never
        a computed bit, so outputs do not depend on what an earlier run learned or on which
        trial arm a step ran (another tile size, prefetch distance, unroll or vector length of
        the same arithmetic stays a candidate; another family, summation order or precision
        does not); False: any variant within the op's tolerance of the generic kernel."""
        # the engine's reame.kernel_plan.KernelPlan: its table, ISA and kernels
        self.plan, self.table = plan, plan.table
        self.build_nice = build_nice
        self.exact = exact
        # a pair compares two steps only when their token counts are within like_sizes of
        # each other: a kernel's time per token depends on the step's size (its weights are
        # read once per step), so a 300-token prompt step against a 20-token decode step of the
        # same program says nothing about the variants; after max_unlike dropped pairs the
        # trial ends undecided
        self.like_sizes, self.max_unlike = like_sizes, max_unlike
        self.explore_share, self.jitter = explore_share, jitter
        self.min_share, self.min_gain, self.confirm_after = min_share, min_gain, confirm_after
        self.classes: dict[str, SlotClass] = {}
        self._by_slot: dict[int, SlotClass] = {}
        self._group()
        self.trial: Trial | None = None
        self.trial_step = False
        self.frozen = False
        self.steps = self.explored = 0
        self.tried = self.promoted = self.rolled_back = self.refused = 0
        self._ready: list[tuple[SlotClass, Kernel, Kernel, bool]] = []   # built and checked
        self._building = False
        self._lock = threading.Lock()
        self._confirm: list[tuple[int, SlotClass, Kernel]] = []  # (due step, class, previous)
        self._phase = 0                        # position in the explore/serve cycle
        self.events: list[str] = []            # what happened, for the report (bounded)

    # ---- classes ----

    def _group(self) -> None:
        for s in self.table.slots:
            program = s.name.rsplit("@", 1)[-1]
            key = f"{s.kernel.spec.label()}@{program}"
            c = self.classes.get(key)
            if c is None:
                c = self.classes[key] = SlotClass(key, program, [], s.kernel.spec,
                                                  origin=s.kernel.spec)
                op = registry.get_op(s.kernel.spec.op)
                dims = {d: s.kernel.spec.p[d] for d in op.dims if d in s.kernel.spec.p}
                c.candidates = [sp for sp in op.specs(s.kernel.spec.dtype, self.plan.isa,
                                                      **dims) if sp != s.kernel.spec]
                if self.exact:      # the live family's other tiles first: the likeliest to be
                    c.candidates.sort(key=lambda sp: sp.family != c.spec.family)  # bit-identical
            c.slots.append(s.index)
            self._by_slot[s.index] = c

    def hot(self) -> list[SlotClass]:
        """Classes by sampled time, hottest first (those above min_share of the total)."""
        hz = cycle_hz() or 1.0        # a counter of unknown rate still ranks classes by share
        for c in self.classes.values():
            c.seconds = float(self.table.stats[c.slots, 1].sum()) / hz
        total = sum(c.seconds for c in self.classes.values()) or 1.0
        return sorted((c for c in self.classes.values() if c.seconds / total >= self.min_share),
                      key=lambda c: -c.seconds)

    # ---- the engine thread, at every step boundary ----

    def before_step(self, program: str) -> bool:
        """Stage the arm for this step of `program`; True when this step must be timed.
        `trial_step` says whether this step runs a trial's arm (its time is not the live
        kernels': the batch tuner leaves it out)."""
        self.steps += 1
        self.trial_step = False
        if self.frozen:
            self._end_trial(None)
            return False
        if self.trial is None:
            self._start_next()
        t = self.trial
        if t is None or t.cls.program != program:
            return self.steps % 16 == 0           # sample hotness now and then
        self._phase = (self._phase + 1) % max(2, round(2 / self.explore_share))
        if self._phase >= 2:                     # a serving step between pairs
            self._stage(t.cls, t.live)
            return False
        first = self._phase == 0
        use_b = t.order_ab != first              # AB or BA
        self._stage(t.cls, t.cand if use_b else t.live)
        self._arm_b = use_b
        self.explored += 1
        self.trial_step = True
        return True

    def after_step(self, program: str, n_tokens: int, timed: bool, before: np.ndarray) -> None:
        """Record the step's time of the trial's class (cycles per token)."""
        t = self.trial
        if not timed or t is None or t.cls.program != program or self._phase >= 2:
            self._maybe_confirm()
            return
        cyc = float(self.table.stats[t.cls.slots, 1].sum() - before) / max(1, n_tokens)
        if self._phase == 0:
            t.pending_a, t.pending_n = cyc, n_tokens
            t.pending_is_b = self._arm_b
            return
        if t.pending_a is None:
            return
        if max(n_tokens, t.pending_n) > self.like_sizes * min(n_tokens, t.pending_n):
            t.pending_a = None                   # unlike steps: no pair (the order stays)
            t.unlike += 1
            if t.unlike >= self.max_unlike:
                if not t.confirming:
                    t.cls.tried[t.cand.spec.label()] = "undecided (steps of unlike sizes)"
                self._end_trial(None)
            return
        a, b = (cyc, t.pending_a) if t.pending_is_b else (t.pending_a, cyc)
        t.pending_a = None
        t.order_ab = not t.order_ab
        if b > a * (1 + self.jitter):            # the candidate costs users too much...
            t.slow_pairs += 1
            if t.slow_pairs >= 3 and not t.confirming:   # ...three pairs in a row
                self._end_trial("reject", "over the latency budget")
                return
        else:
            t.slow_pairs = 0
        verdict = t.comparison.add(a, b)
        if verdict:
            self._end_trial(verdict)

    def timed_slots(self) -> np.ndarray | None:
        """The slots whose cycles after_step reads (the stats must be read before the step)."""
        return None if self.trial is None else self.trial.cls.slots

    # ---- trials ----

    def _stage(self, cls: SlotClass, k: Kernel) -> None:
        for i in cls.slots:
            if self.table.slots[i].kernel is not k:
                self.table.stage(i, k, verify=False, record=False)

    def _start_next(self) -> None:
        with self._lock:
            ready = self._ready.pop(0) if self._ready else None
        if ready is not None:
            cls, live, cand, confirming = ready
            if cls.spec != live.spec:             # the class moved on meanwhile
                return
            self.trial = Trial(cls, live, cand, Comparison(min_gain=0.0 if confirming else
                                                           self.min_gain),
                               confirming=confirming)
            if not confirming:
                self.tried += 1
            return
        if not self._building:
            for cls in self.hot():
                if cls.candidates:
                    self._build_async(cls, cls.candidates.pop(0))
                    break

    def _build_async(self, cls: SlotClass, spec) -> None:
        self._building = True
        live = self.table.slots[cls.slots[0]].kernel

        def work():
            background_priority(self.build_nice)
            try:
                k = self.plan.kernel(spec)
                # every count each slot serves: slots of one class share a spec, not always
                # their counts (a head-count factor, a program's edges) or slicing
                shapes = set()
                for i in cls.slots:
                    sl = self.table.slots[i]
                    shape = (sl.lo, sl.hi, sl.step, sl.slices, sl.threads)
                    if shape not in shapes:
                        shapes.add(shape)
                        self.table.verify(i, k)
                        if self.exact:
                            self.table.same_bits(i, k, live)
                for i in cls.slots:
                    self.table.slots[i].verified.add(k.symbol)
                with self._lock:
                    self._ready.append((cls, live, k, False))
            except VariantRejected as e:
                self.refused += 1
                cls.tried[spec.label()] = f"refused: {e}"
                # another arithmetic under exact tuning is expected (most other families):
                # reported, not logged at info
                self._event(f"refused {spec.label()} for {cls.key}: {e}",
                            logging.DEBUG if "not bit-identical" in str(e) else logging.INFO)
            except Exception as e:                           # a build failure: skip it
                cls.tried[spec.label()] = f"failed: {type(e).__name__}: {e}"
                log.warning("could not build %s: %s", spec.label(), e)
            finally:
                self._building = False
        threading.Thread(target=work, name="reame-tune", daemon=True).start()

    def _end_trial(self, verdict: str | None, why: str = "") -> None:
        t, self.trial = self.trial, None
        self._phase = 0
        if t is None:
            return
        c = t.comparison
        if t.confirming:                       # t.live: the promoted one, t.cand: previous
            if verdict == "promote":           # the previous variant is faster: roll back
                self._stage_all(t.cls, t.cand, rollback=True)
                self.rolled_back += 1
                self._event(f"rolled back {t.cls.key}: {t.live.spec.label()} -> "
                            f"{t.cand.spec.label()} ({c.ratio:.3f}x)")
            else:
                self._stage(t.cls, t.live)
            return
        if verdict == "promote":
            self._stage_all(t.cls, t.cand)
            self.promoted += 1
            t.cls.tried[t.cand.spec.label()] = f"promoted ({c.ratio:.3f}x)"
            self._event(f"promoted {t.cand.spec.label()} for {t.cls.key} "
                        f"({c.ratio:.3f}x of {t.live.spec.label()})")
            self._confirm.append((self.steps + self.confirm_after, t.cls, t.live))
        else:
            self._stage(t.cls, t.live)
            if verdict is not None:
                t.cls.tried[t.cand.spec.label()] = (f"rejected ({c.ratio:.3f}x{', ' + why if why else ''})")

    def _stage_all(self, cls: SlotClass, k: Kernel, rollback: bool = False) -> None:
        """Make k the live variant of the class for good (recorded in each slot's history)."""
        for i in cls.slots:
            s = self.table.slots[i]
            if rollback and s.history and s.history[-1] is k:
                self.table.rollback(i)
            elif s.kernel is not k or s.staged is not None or s.base is not None:
                # (k may be live already as a trial: staging it recorded ends the trial and
                # puts the variant it replaced in the history)
                self.table.stage(i, k, verify=False)
        cls.spec = k.spec

    def _maybe_confirm(self) -> None:
        if self.trial is not None or not self._confirm or self._confirm[0][0] > self.steps:
            return
        _, cls, previous = self._confirm.pop(0)
        live = self.table.slots[cls.slots[0]].kernel
        with self._lock:
            self._ready.insert(0, (cls, live, previous, True))

    def _event(self, text: str, level: int = logging.INFO) -> None:
        log.log(level, "adaptive: %s", text)
        self.events = (self.events + [text])[-50:]

    # ---- state ----

    def choices(self) -> dict[str, str]:
        """Class -> live variant, for classes whose variant changed."""
        out = {}
        for c in self.classes.values():
            live = self.table.slots[c.slots[0]].kernel.spec
            if live != c.origin:
                out[c.key] = live.label()
        return out

    def rejected(self) -> dict[str, list[str]]:
        """class key -> labels of the candidates rejected there (measured slower)."""
        out = {}
        for c in self.classes.values():
            labels = sorted(k for k, v in c.tried.items() if str(v).startswith("rejected"))
            if labels:
                out[c.key] = labels
        return out

    def skip_rejected(self, saved: dict[str, list[str]]) -> int:
        """Drop the candidates a previous run rejected (saved by rejected()); returns how many."""
        n = 0
        for key, labels in saved.items():
            cls = self.classes.get(key)
            if cls is None:
                continue
            keep = [s for s in cls.candidates if s.label() not in labels]
            for s in cls.candidates:
                if s.label() in labels:
                    cls.tried[s.label()] = "rejected (in a previous run)"
            n += len(cls.candidates) - len(keep)
            cls.candidates = keep
        return n

    def apply_choices(self, chosen: dict[str, object], source=None) -> int:
        """Make saved choices live (class key -> spec); returns how many were applied. Each is
        checked like any candidate on every slot of its class before any slot takes it; one
        that fails to build or check is not applied (a warning naming `source`, the file)."""
        n = 0
        for key, spec in chosen.items():
            cls = self.classes.get(key)
            if cls is None:
                continue
            try:
                k = self.plan.kernel(spec)
                live = self.table.slots[cls.slots[0]].kernel
                for i in cls.slots:
                    if k.symbol not in self.table.slots[i].verified:
                        self.table.verify(i, k)
                    if self.exact:              # saved under --kernel-tuning any, say
                        self.table.same_bits(i, k, live)
                for i in cls.slots:
                    self.table.slots[i].verified.add(k.symbol)
                    self.table.stage(i, k)
                cls.spec = spec
                cls.candidates = [s for s in cls.candidates if s != spec]
                n += 1
            except Exception as e:              # a learned choice never stops the model
                log.warning("adaptive: %s: saved choice %s for %s not applied: %s",
                            source or "strategy", spec.label(), key, e)
        return n

    def report(self) -> dict:
        hot = self.hot()
        total = sum(c.seconds for c in self.classes.values()) or 1.0
        return {
            "frozen": self.frozen, "exact": self.exact, "steps": self.steps,
            "exploration_share": self.explored / self.steps if self.steps else 0.0,
            "candidates_tried": self.tried, "promoted": self.promoted,
            "rolled_back": self.rolled_back, "refused": self.refused,
            "trial": None if self.trial is None else {
                "class": self.trial.cls.key, "candidate": self.trial.cand.spec.label(),
                "pairs": len(self.trial.comparison.logs),
                "ratio": self.trial.comparison.ratio, "confirming": self.trial.confirming},
            "hot": [{"class": c.key, "share": round(c.seconds / total, 4),
                     "kernel": self.table.slots[c.slots[0]].kernel.spec.label(),
                     "tried": dict(c.tried)} for c in hot[:8]],
            "events": list(self.events[-10:]),
        }


def _isfinite(x: float) -> bool:
    return math.isfinite(x)
