"""The adaptive runtime: what the scheduler calls at every step boundary.

    runtime = AdaptiveRuntime(engine, params, enabled=True)
    ... each step:  runtime.before_step(plan);  engine.forward(...);  runtime.after_step(plan, t)
    ... while no request is in the scheduler:  runtime.idle_step()  (the start-up benchmark)

It owns the kernel tuner (tuner.py: online A/B of kernel variants through the dispatch table),
the batch tuner (batching.py: how many sequences run at once while requests wait), the request
profile (profile.py), the saved strategy (store.py) and the report. `enabled=False`
(`--adaptive off` and `frozen`) runs the starting kernels and parameters unchanged and only keeps
the profile: the built-in defaults under off (the server neither loads a strategy nor runs the
start-up benchmark), the loaded strategy under frozen; `freeze()` stops exploring and keeps what
was learned.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from pathlib import Path

from . import store
from .batching import BatchTuner
from .budget import BudgetController
from .profile import RequestProfile, percentile
from .tuner import KernelTuner

log = logging.getLogger("reame.adaptive")


class AdaptiveRuntime:
    def __init__(self, engine, params, *, enabled: bool = True, state_dir: Path | None = None,
                 report_every: float = 0.0, save_every: float = 60.0, tuner_options=None,
                 tpot_limit: float = 0.25, batch_options=None, budget_options=None,
                 exact_kernels: bool = True, served_as: str | None = None):
        """`served_as`: the name the model is served under, when one file is served under
        several names (each learns and saves its own strategy and speculation)."""
        self.engine, self.params = engine, params
        self.enabled = enabled
        self.profile = RequestProfile()
        # the engine's KernelPlan (reame/kernel_plan.py), None when its kernels cannot be tuned
        self.plan = engine.kernel_plan
        self.tuner = (KernelTuner(self.plan, **{"exact": exact_kernels, **(tuner_options or {})})
                      if self.plan is not None else None)
        self.ident = store.identity(engine) if self.tuner is not None else None
        if self.ident is not None and served_as:
            self.ident["served_as"] = served_as
        self.path = store.path_for(self.ident, state_dir) if self.ident else None
        self.report_every, self.save_every = report_every, save_every
        self.t_start = time.monotonic()
        self._last_report = self._last_save = self.t_start
        self._first_minute: dict | None = None
        self.pool = None                 # the planner's BlockPool (set by the scheduler)
        self._pool_hist: deque = deque(maxlen=240)   # (time, queries, hits, evictions) ~1/s
        self._before = None
        self._timed = False
        self._t_step = 0.0
        self.loaded = 0
        # hot prefixes: the cached prefix each admitted prompt found, by the hash of its last
        # block -> [times found, its token ids] (bounded); the most found are saved
        self.prefixes: dict[bytes, list] = {}
        self._counted = weakref.WeakSet()
        self.saved_prefixes: list[list[int]] = []     # loaded: to compute again at start
        self.speculator = None           # reame.speculate.Speculator: reported, saved, loaded
        self.model_name = None           # the served model's id: in the report and its lines
        self._lock = threading.Lock()
        # the start-up benchmark (schedule_boot): none (not planned), pending, running, done,
        # failed; its budget and the engine seconds and steps it has run
        self.boot_state = "none"
        self.boot_budget = self.boot_spent = 0.0
        self.boot_steps = 0
        self._boot_t0 = self._boot_t1 = None
        # the running batch: tuned between the starting limit and the engine's KV slots
        self.batch = BatchTuner(params, engine.kv.max_seqs, tpot_limit=tpot_limit,
                                **(batch_options or {}))
        # the step's prompt chunk and token budget, for the latency target (budget.py); moved
        # only when enabled: off keeps the built-in values, frozen the saved ones
        self.budget = BudgetController(params, tpot_limit=tpot_limit,
                                       engine_tokens=engine.max_tokens,
                                       **(budget_options or {}))
        if not enabled:
            self.batch.frozen = True
            if self.tuner is not None:
                self.tuner.frozen = True

    # ---- start ----

    def load(self, path: Path | str | None = None) -> int | None:
        """Apply a saved strategy for this CPU, model and version (the one in the state
        directory, or the file `path`) and the speculator's state beside it; returns the kernel
        choices applied (0: the saved strategy kept the start-up choices), None when there is
        none."""
        path = Path(path) if path else self.path
        if path is None:
            return None
        self._load_speculation(path)
        saved = store.load(path, self.ident)
        if not saved:
            return None
        try:
            return self._apply(saved, path)
        except Exception as e:       # a learned file never keeps the model from serving
            log.warning("adaptive: %s could not be applied (%s: %s): ignored from there on",
                        path, type(e).__name__, e)
            return None

    def _apply(self, saved: dict, path: Path) -> int:
        """Apply what store.load read from `path`: each part checked, a bad one (or a bad
        kernel choice) ignored with a warning naming the file."""
        self._load_params(saved["scheduler"], path)
        self.loaded = self.tuner.apply_choices(self._known_choices(saved["choices"], path),
                                               source=path)
        skipped = self.tuner.skip_rejected(saved.get("rejected") or {})
        n_vocab = self.engine.config.n_vocab
        self.saved_prefixes = [p for p in saved["prefixes"]
                               if len(p) < self.engine.n_ctx and max(p) < n_vocab]
        if len(self.saved_prefixes) < len(saved["prefixes"]):
            log.warning("adaptive: %s: %d hot prefixes longer than the context or with token "
                        "ids outside the vocabulary: ignored", path,
                        len(saved["prefixes"]) - len(self.saved_prefixes))
        log.info("adaptive: %d kernel choices loaded from %s (%d candidates it rejected not "
                 "tried again; batch levels it refused: %s)", self.loaded, path, skipped,
                 sorted(self.batch.refused) or "none")
        return self.loaded

    def _known_choices(self, choices: dict, path: Path) -> dict:
        """The saved choices of classes this engine has, each one of its class's variants on
        this machine (the start-up kernel or a candidate the registry lists for its op, type and
        shape): an unknown op, family, tile or level, or a number no registry makes, is ignored
        with a warning, never built."""
        out, other = {}, []
        for key, spec in choices.items():
            cls = self.tuner.classes.get(key)
            if cls is None:
                other.append(key)
            elif spec == cls.origin or spec in cls.candidates:
                out[key] = spec
            else:
                log.warning("adaptive: %s: saved choice %s for %s is not one of its variants "
                            "on this machine: ignored", path, spec.label(), key)
        if other:
            log.warning("adaptive: %s: %d saved choices for op sites this engine does not "
                        "have (e.g. %s; saved with other settings?): ignored", path, len(other),
                        other[0])
        return out

    def _load_speculation(self, strategy: Path) -> None:
        """The speculator's index of earlier requests, acceptance and step costs, as the run
        that saved `strategy` left them (the server loads nothing under --adaptive off)."""
        if self.speculator is None:
            return
        sp = store.speculation_path(strategy)
        state = store.load_speculation(sp, self.ident)
        if state is None:
            return
        try:
            n = self.speculator.load(state)
        except Exception as e:               # a learned file never keeps the model from serving
            log.warning("speculation: %s is not a valid state file (%s: %s): ignored", sp,
                        type(e).__name__, e)
            return
        log.info("speculation: %d documents of earlier traffic loaded from %s", n, sp)

    # ---- the start-up benchmark: on the engine thread, while it is idle ----

    def schedule_boot(self, seconds: float) -> bool:
        """Plan the start-up micro-benchmark: `seconds` of synthetic decode steps of the
        model's own shapes (one token per sequence at short contexts, in the programs of 1, 4
        and 8 tokens), each exploring a kernel candidate. Nothing runs here: the scheduler's
        idle path calls idle_step(), one step at a time, whenever no request is in the
        scheduler, so the server answers from its first second on the default kernels and the
        benchmark fills the idle time after. The budget counts the engine time of its own
        steps (a server busy from its start still gets all of it, later). False when there is
        nothing to run (no kernel tuner, 0 s, or a disabled runtime: --adaptive off and frozen
        run no benchmark)."""
        if self.tuner is None or seconds <= 0 or not self.enabled:
            return False
        eng = self.engine
        pool = self.pool.n_blocks if self.pool is not None else eng.kv.n_blocks
        self._boot_sizes = [b for b in (1, 4, 8) if b <= min(eng.kv.max_seqs, pool)
                            and b in self.plan.buckets] or [1]
        import numpy as np
        self._boot_rng = np.random.default_rng(0)
        t = self.tuner
        self._boot_counts = (t.tried, t.promoted, t.refused)
        self.boot_budget, self.boot_spent, self.boot_steps = float(seconds), 0.0, 0
        self.boot_state = "pending"
        self._boot_t0 = self._boot_t1 = None
        self._boot_logged = 0
        log.info("adaptive: start-up benchmark: %.1f s of synthetic decode steps, run in the "
                 "background while the engine is idle (serving on the default kernels "
                 "meanwhile)", self.boot_budget)
        return True

    @property
    def idle_pending(self) -> bool:
        """Whether idle_step() has a step to run (the scheduler does not sleep while so). A
        frozen runtime (POST /v1/adaptive/freeze) pauses the benchmark."""
        return (self.boot_state in ("pending", "running") and self.tuner is not None
                and not self.tuner.frozen)

    def idle_step(self) -> bool:
        """One step of the start-up benchmark, if one is due; True when it ran one. Only for
        the engine thread when no request is in the scheduler (its blocks and slots are free):
        a request that arrives meanwhile waits this one step, a few milliseconds, at most."""
        if not self.idle_pending:
            return False
        try:
            self._boot_step()
        except Exception:                    # a failing step must not stop the engine thread
            log.exception("adaptive: start-up benchmark step failed: benchmark abandoned")
            self._boot_finish("failed")
        return True

    def _boot_step(self) -> None:
        from ..batch import Batch
        t, eng = self.tuner, self.engine
        now = time.monotonic()
        if self.boot_state == "pending":
            self.boot_state, self._boot_t0 = "running", now
        step = self.boot_steps
        sizes = self._boot_sizes
        n = sizes[(step // 64) % len(sizes)]                 # stay a while in each program
        pos = min(16 + step % 48, eng.kv.n_ctx - 1)
        batch = Batch.decode(self._boot_rng.integers(0, eng.config.n_vocab, n), [pos] * n,
                             list(range(n)))
        label = str(self.plan.program_of(n))
        undo = self._scratch_blocks(n, pos)
        # every synthetic step explores (no request pays for it); the steps of requests keep
        # the online share, and every trial keeps the online rules (the jitter budget ends a
        # candidate three pairs in a row over it, confirmation, rollback)
        share, t.explore_share = t.explore_share, 1.0
        try:
            timed = t.before_step(label)
            before = None
            if timed:
                self.plan.time_next_step()
                slots = t.timed_slots()
                before = self.plan.slot_cycles(slots) if slots is not None else 0.0
            eng.forward(batch)
            t.after_step(label, n, timed, before)
        finally:
            t.explore_share = share
            if undo is not None:
                undo()
        self.boot_spent += time.monotonic() - now
        self.boot_steps += 1
        quarter = int(4 * self.boot_spent / self.boot_budget)
        if self.boot_spent >= self.boot_budget:
            self._boot_finish("done")
        elif quarter > self._boot_logged:
            self._boot_logged = quarter
            log.info("adaptive: start-up benchmark: %d%% (%.1f of %.1f s, %d steps)",
                     25 * quarter, self.boot_spent, self.boot_budget, self.boot_steps)

    def _scratch_blocks(self, n: int, pos: int):
        """Point the block-table rows of the synthetic sequences (slots 0..n-1, positions up to
        `pos`) at a block of their own each, taken from the scheduler's pool for this step:
        the rows still list the blocks of finished requests, which the prefix cache keeps, and
        a synthetic key written there would corrupt a later hit. Returns what undoes it (None
        before the scheduler exists: then nobody else uses the cache)."""
        pool, kv = self.pool, self.engine.kv
        if pool is None:
            return None
        k = pos // kv.block_size + 1
        rows = kv.tables[:n, :k].copy()
        blocks = []
        try:
            for _ in range(n):
                # a free block (no request holds one now), else the prefix cache's least
                # recently used (evicted): n at most over the whole benchmark, since the blocks
                # come back free
                blocks.append(pool.allocate())
        except IndexError:
            for b in blocks:
                pool.release(b)
            raise
        for s, b in enumerate(blocks):
            kv.tables[s, :k] = b

        def undo():
            kv.tables[:n, :k] = rows
            for b in blocks:
                pool.release(b)                  # uncached: back to the free list
        return undo

    def _boot_finish(self, state: str) -> None:
        t = self.tuner
        t._end_trial(None)                     # a trial left half-way: undone (a trial of a
        self.boot_state = state                # synthetic program would stall online tuning)
        self._boot_t1 = time.monotonic()
        out = self.boot_report()
        log.info("adaptive: start-up benchmark %s: %s", state, out)

    def boot_report(self) -> dict:
        """The start-up benchmark's state for the report: pending (planned, not started),
        running, done, failed, or none (not planned: a saved strategy was loaded, --adaptive
        off or frozen, or --adaptive-boot 0)."""
        out = {"state": self.boot_state}
        if self.boot_state == "none":
            return out
        t = self.tuner
        c0 = self._boot_counts
        end = self._boot_t1 or time.monotonic()
        out.update({"budget_s": round(self.boot_budget, 2),
                    "spent_s": round(self.boot_spent, 3),
                    "done_share": round(min(1.0, self.boot_spent / self.boot_budget), 4),
                    "steps": self.boot_steps,
                    "wall_s": round(end - self._boot_t0, 2) if self._boot_t0 else 0.0,
                    "tried": t.tried - c0[0], "promoted": t.promoted - c0[1],
                    "refused": t.refused - c0[2]})
        return out

    def boot(self, seconds: float, progress=None) -> dict:
        """The whole start-up benchmark now, blocking (tools and tests; the server runs it
        step by step while idle: schedule_boot). Returns its report; `progress(done_fraction)`
        is called as it goes."""
        if not self.schedule_boot(seconds):
            return {}
        while self.idle_step():
            if progress is not None and self.boot_steps % 32 == 0:
                progress(min(1.0, self.boot_spent / self.boot_budget))
        self.plan.table.commit()
        if progress is not None:
            progress(1.0)
        return self.boot_report()

    def _load_params(self, saved: dict, path: Path | None = None) -> None:
        """Saved scheduler parameters, within this server's limits: a batch between its
        starting limit and its KV slots, and only values the engine accepts (a value of another
        type, or out of range, is ignored with a warning)."""
        from dataclasses import replace
        cand = replace(self.params)
        slots = self.engine.kv.max_seqs
        tokens = self.engine.max_tokens or cand.token_budget
        bad = []
        for k in ("max_batch", "token_budget", "prefill_chunk"):
            v = saved.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= max(tokens, slots):
                setattr(cand, k, min(max(v, self.batch.start), slots) if k == "max_batch"
                        else v)
            elif k in saved:
                bad.append(k)
        try:
            cand.check(tokens, slots)
        except ValueError as e:
            log.warning("adaptive: %s: saved scheduler parameters not used: %s", path, e)
            return
        for k in ("token_budget", "prefill_chunk"):
            setattr(self.params, k, getattr(cand, k))
        self.batch.rebase(cand.max_batch)
        refused = saved.get("batch_refused")
        if isinstance(refused, list):             # not probed again before retry_steps
            ok = [lv for lv in refused if isinstance(lv, int) and lv in self.batch.levels]
            self.batch.refused = dict.fromkeys(ok, 0)
        if "batch_refused" in saved and (not isinstance(refused, list)
                                         or len(ok) < len(refused)):
            bad.append("batch_refused")           # (or a level this server does not have)
        # the step-cost fit: budgets from step one
        if "budget" in saved and not self.budget.load(saved["budget"]):
            bad.append("budget")
        if bad:
            log.warning("adaptive: %s: saved scheduler values %s not usable: ignored", path,
                        ", ".join(bad))

    # ---- every step (the engine thread) ----

    @property
    def trial_step(self) -> bool:
        """Whether the step since before_step runs a kernel trial's arm (its time is not the
        live kernels': the batch, budget and speculation's step-cost curve leave it out)."""
        return self.tuner is not None and self.tuner.trial_step

    def before_step(self, plan) -> None:
        self._t_step = time.monotonic()
        if self.tuner is None:
            return
        label = str(self.plan.program_for(plan.batch)[0])
        self._label = label
        self._timed = self.tuner.before_step(label)
        if self._timed:
            self.plan.time_next_step()
            slots = self.tuner.timed_slots()
            self._before = self.plan.slot_cycles(slots) if slots is not None else 0.0

    def after_step(self, plan, n_sampled: int, running: int = 0, waiting: int = 0) -> None:
        """After the step's forward pass and sampling; `running` sequences hold a batch place
        and `waiting` ones wait for one (the batch tuner's signal of saturation)."""
        now = time.monotonic()
        decode_only = all(w.decodes for w in plan.work)
        self.profile.step(len(plan.batch), n_sampled, now - self._t_step, decode_only, now,
                          running)
        if self.profile.outputs and self.batch.steps % 64 == 0:   # a generation's length
            self.batch.cycle = int(percentile(self.profile.outputs, 0.5))
        self.batch.observe(n_sampled, now - self._t_step, decode_only, running, waiting,
                           trial=self.trial_step)
        if self.enabled:                     # the next step's budget (after the batch's limit)
            self.budget.after_step(plan, now - self._t_step, running,
                                   trial=self.trial_step,
                                   sampled=n_sampled)
        self._track_prefixes(plan)
        if self.tuner is not None:
            self.tuner.after_step(self._label, len(plan.batch), self._timed, self._before)
        if self.pool is not None and (not self._pool_hist or now - self._pool_hist[-1][0] >= 1):
            p = self.pool
            self._pool_hist.append((now, p.queries, p.hits, p.evictions))
        with self._lock:
            self._baseline(now)
        if self.report_every and now - self._last_report >= self.report_every:
            self._last_report = now
            log.info("adaptive%s: %s", f" [{self.model_name}]" if self.model_name else "",
                     self.line())
        if self.save_every and now - self._last_save >= self.save_every:
            self._last_save = now
            self.save(background=True)

    HOT_KEEP, HOT_SAVE, HOT_MIN = 64, 4, 3      # tracked, saved, times found to be saved

    def _track_prefixes(self, plan) -> None:
        for seq in plan.admitted:
            n = seq.n_cached or 0
            bs = self.engine.kv.block_size
            if n < bs or seq in self._counted or len(seq.hashes) < n // bs:
                continue
            self._counted.add(seq)
            key = seq.hashes[n // bs - 1]
            e = self.prefixes.get(key)
            if e is None:
                if len(self.prefixes) >= self.HOT_KEEP:     # forget the least found
                    del self.prefixes[min(self.prefixes, key=lambda k: self.prefixes[k][0])]
                e = self.prefixes[key] = [0, list(seq.tokens[:n])]
            e[0] += 1

    def hot_prefixes(self) -> list[list[int]]:
        """The prefixes found most often (at least HOT_MIN times), longest first among equals;
        one that is a prefix of a saved one is left out (computing the longer computes it)."""
        ranked = sorted(self.prefixes.values(), key=lambda e: (-e[0], -len(e[1])))
        out: list[list[int]] = []
        for count, toks in ranked:
            if count < self.HOT_MIN or len(out) == self.HOT_SAVE:
                break
            if not any(o[:len(toks)] == toks for o in out):
                out.append(toks)
        return out

    # ---- controls ----

    def freeze(self) -> None:
        if self.speculator is not None:      # drafts go on from what it knows; it stops adding
            self.speculator.learn = False
        self.batch.frozen = True
        if self.tuner is not None:
            self.tuner.frozen = True

    def unfreeze(self) -> None:
        if self.enabled:
            if self.speculator is not None:
                self.speculator.learn = True
            self.batch.frozen = False
            if self.tuner is not None:
                self.tuner.frozen = False

    @property
    def frozen(self) -> bool:
        return self.batch.frozen and (self.tuner is None or self.tuner.frozen)

    def save(self, background: bool = False) -> bool:
        """Write the learned strategy (atomically); False when there is nothing to write.
        `background`: the speculator's state (megabytes of JSON) is written by a thread, off
        the engine thread."""
        if self.path is None or not self.enabled:
            return False
        choices = {}
        for c in self.tuner.classes.values():
            live = self.plan.table.slots[c.slots[0]].kernel.spec
            if live != c.origin:
                choices[c.key] = live
        sched = self._scheduler_state()
        try:
            store.save(self.path, self.ident, choices, sched,
                       self.hot_prefixes() or self.saved_prefixes, self.tuner.rejected())
            if self.speculator is not None:
                self._save_speculation(background)
        except OSError as e:
            log.warning("adaptive: cannot save %s: %s", self.path, e)
            return False
        return True

    def _scheduler_state(self) -> dict:
        """The scheduler parameters saved: the batch, the budget the controller chose lately
        (medians: what --adaptive frozen runs) and its step-cost fit."""
        sched = {k: getattr(self.params, k) for k in ("max_batch", "token_budget",
                                                      "prefill_chunk")}
        typical = self.budget.typical()
        if typical is not None:
            sched["token_budget"] = max(typical[0], sched["max_batch"])
            sched["prefill_chunk"] = typical[1]
        sched["batch_refused"] = self.batch.refused_recently()
        if (state := self.budget.state()) is not None:
            sched["budget"] = state
        return sched

    def _save_speculation(self, background: bool) -> None:
        snap = self.speculator.state()             # copies, on this thread
        path = store.speculation_path(self.path)
        if not background:
            store.save_speculation(path, self.ident, self.speculator.jsonable(snap))
            return

        def write():
            try:
                store.save_speculation(path, self.ident, self.speculator.jsonable(snap))
            except OSError as e:
                log.warning("speculation: cannot save %s: %s", path, e)
        threading.Thread(target=write, name="reame-save", daemon=True).start()

    # ---- report ----

    SATURATED = 0.9     # a window where the engine was busy this share of the time

    def _baseline(self, now: float) -> None:
        """The first minute of traffic, once it is over: the steps before it (the start-up
        benchmark, warming hot prefixes) are not traffic and do not count."""
        t0 = self.profile.t_traffic
        if self._first_minute is None and t0 is not None and now - t0 >= 60:
            self._first_minute = self._snapshot(t0 + 60)

    def _snapshot(self, now: float) -> dict:
        """The minute before `now` (or since traffic started, when that is shorter)."""
        t0 = self.profile.t_traffic
        start = t0 if t0 is not None and now - 60.0 < t0 < now else now - 60.0
        s = self.profile.speed(start, now)
        s["prefix_hit"] = self._prefix_rates(now)[0]
        return s

    def _prefix_rates(self, now: float) -> tuple[float | None, int]:
        """(prompt tokens found in the prefix cache / looked up, cached blocks evicted) over
        the last minute; None when nothing was looked up."""
        h = self._pool_hist
        if self.pool is None or not h:
            return None, 0
        p = self.pool
        old = next((e for e in h if e[0] >= now - 60.0), h[0])
        if old is h[0] and old[0] >= now - 60.0:    # up less than a minute: since start
            old = (0.0, 0, 0, 0)
        dq, dh = p.queries - old[1], p.hits - old[2]
        return (dh / dq if dq else None), p.evictions - old[3]

    def report(self, now: float | None = None) -> dict:
        """What the runtime measured (thread-safe). Speed is counted from every step over the
        last minute: tok/s, and since tok/s below saturation is only the offered load, the
        busy seconds per generated token (the cost of a token at the running batch) and the
        engine's busy share; the change against the first minute of traffic (after the
        start-up work) is given for the cost always and for tok/s when both minutes were
        saturated. The p95 time per output token is per request, mixed steps included."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._baseline(now)
        cur = self._snapshot(now)
        first = self._first_minute
        sat = lambda s: s["busy_share"] >= self.SATURATED          # noqa: E731
        r = lambda v, d=5: None if v is None else round(v, d)      # noqa: E731
        ratio = lambda k: (round(cur[k] / first[k] - 1, 4)         # noqa: E731
                           if first and first.get(k) and cur.get(k) is not None else None)
        out = {"model": self.model_name, "enabled": self.enabled, "frozen": self.frozen,
               "uptime_s": round(now - self.t_start, 1),
               "tok_s_last_minute": round(cur["tok_s"], 2),
               "busy_share_last_minute": round(cur["busy_share"], 4),
               "saturated": sat(cur),
               "cost_per_token_ms": r(cur["cost_per_token_s"] and cur["cost_per_token_s"] * 1e3,
                                      4),
               "running_batch": r(cur["batch"], 2),
               "tpot_p95_s": r(cur["tpot_p95_s"]) or 0.0,
               "first_minute": first and {k: r(v) for k, v in first.items()},
               "tok_s_change": (ratio("tok_s") if first and sat(cur) and sat(first)
                                else None),
               "cost_per_token_change": ratio("cost_per_token_s"),
               "tpot_p95_change": ratio("tpot_p95_s"),
               "profile": self.profile.summary(),
               "prefix_cache": self._prefix_report(now, first),
               "strategy_file": str(self.path) if self.path else None,
               "loaded_choices": self.loaded,
               "startup_benchmark": self.boot_report(),
               "hot_prefixes": [{"tokens": len(t), "found": c} for c, t in
                                sorted(self.prefixes.values(), key=lambda e: -e[0])[:4]],
               "batch": self.batch.report(),
               "budget": {"moving": self.enabled, **self.budget.report()}}
        if self.speculator is not None:
            out["speculation"] = self.speculator.report()
        if self.tuner is not None:
            out["kernels"] = self.tuner.report()
        return out

    def _prefix_report(self, now: float, first: dict | None) -> dict | None:
        if self.pool is None:
            return None
        last, evicted = self._prefix_rates(now)
        p = self.pool
        f = first.get("prefix_hit") if first else None
        return {"hit_rate_last_minute": None if last is None else round(last, 4),
                "hit_rate_since_start": round(p.hits / p.queries, 4) if p.queries else None,
                "hit_rate_first_minute": None if f is None else round(f, 4),
                "hit_rate_change": (round(last - f, 4) if last is not None and f is not None
                                    else None),
                "evictions_last_minute": evicted}

    @staticmethod
    def _prefix_words(pc: dict | None) -> str:
        if not pc or pc["hit_rate_last_minute"] is None:
            return ""
        change = pc["hit_rate_change"]
        return (f"prefix hits {pc['hit_rate_last_minute']:.0%} over the last minute"
                + (f" ({change * 100:+.0f} points vs the first)" if change is not None else "")
                + "; ")

    @staticmethod
    def _speculation_words(sp: dict | None) -> str:
        if not sp or not sp["draft_tokens"]:
            return "; speculation: no drafts yet" if sp else ""
        return (f"; speculation: {sp['accepted_tokens']} of {sp['draft_tokens']} draft tokens "
                f"accepted ({sp['acceptance_rate']:.0%}), {sp['tokens_per_verify']:.2f} tokens "
                f"per verify step, {sp['index']['tokens']} tokens of earlier traffic indexed")

    def line(self) -> str:
        r = self.report()
        k = r.get("kernels") or {}
        cost = r["cost_per_token_ms"]
        return (f"{r['tok_s_last_minute']:.1f} tok/s over the last minute (engine busy "
                f"{r['busy_share_last_minute']:.0%}"
                + ("" if r["saturated"] else ": below saturation, tok/s is the offered load")
                + (f"; {r['tok_s_change']:+.0%} vs the first minute of traffic"
                   if r["tok_s_change"] is not None else "") + ")"
                + (f", {cost:.2f} ms of engine time per generated token" if cost else "")
                + (f" ({r['cost_per_token_change']:+.0%} vs the first minute)"
                   if r["cost_per_token_change"] is not None else "")
                + f", p95 time per output token {r['tpot_p95_s'] * 1e3:.1f} ms; kernels: "
                f"{k.get('candidates_tried', 0)} tried, {k.get('promoted', 0)} promoted, "
                f"{k.get('rolled_back', 0)} rolled back, {k.get('refused', 0)} refused; "
                + self._prefix_words(r.get("prefix_cache")) +
                f"exploring {k.get('exploration_share', 0):.0%} of steps; "
                f"batch {r['batch']['max_batch']} (started at {r['batch']['start']})"
                + self._speculation_words(r.get("speculation"))
                + self._boot_words(r["startup_benchmark"])
                + (" (frozen)" if r["frozen"] else ""))

    @staticmethod
    def _boot_words(b: dict) -> str:
        if b["state"] not in ("pending", "running"):
            return ""
        return (f"; start-up benchmark {b['state']} in idle time ({b['done_share']:.0%} of "
                f"{b['budget_s']:g} s)")
