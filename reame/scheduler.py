"""The engine thread: many requests, one forward step at a time.

HTTP threads `submit()` a `Request` (one or more prompts, each with the `Generation`s sampling
from it) and read `Event`s from the request's own output queue. One engine thread per process
owns the engine, its KV pool and the `Planner` (reame/planner.py). Each step it:

1. takes in newly submitted prompts and drops cancelled and timed-out requests (their blocks are
   released at this boundary),
2. asks the planner for a `StepPlan`: a decode token for every running sequence, prompt chunks
   within the step's token budget, preemption when the KV pool runs out, admission of waiting
   prompts (with their cached prefix) that fit,
3. calls `engine.forward` once on the plan's batch,
4. lets the planner apply the logits (sample, fork the `n` choices, free finished sequences),
5. pushes each sampled `Step` to its request's output queue.

Nothing here knows about HTTP; the server maps `QueueFull`, `RequestTimeout` and `EngineFailure`
to status codes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from dataclasses import dataclass

import numpy as np

from .generate import Generation, Step
from .planner import DONE as SEQ_DONE
from .planner import Planner, SchedulerParams, Seq
from .structured import GrammarError
from .turns import Turns

log = logging.getLogger("reame.scheduler")


class QueueFull(Exception):
    """The waiting queue is full: try again later."""


class RequestTimeout(Exception):
    """The request waited in the queue past its deadline without being admitted."""


class EngineFailure(Exception):
    """The engine (or sampling) failed on this request's batch; the message says why."""


class SchedulerStopped(Exception):
    """The engine thread is shutting down."""


@dataclass
class Event:
    """One sampled token of one sequence (`index` is the flat choice index), or a terminal error.

    A sequence ends with an event whose `finish_reason` is set. After the last event of a request
    the scheduler puts `DONE` on its queue.
    """
    index: int
    step: Step | None           # None for an early finish (timeout) or an error
    t: float                    # time.monotonic() when the step was produced
    finish_reason: str | None = None
    text: str = ""              # text released with an early finish
    error: BaseException | None = None
    embedding: "np.ndarray | None" = None   # an embedding request's unit-length vector


class _Pooled:
    """What an embedding sequence has in place of a Generation: it samples nothing."""
    constraint = None
    output_ids = ()

    def __init__(self):
        self.finished = False

    def finish(self, reason: str) -> str:
        self.finished = True
        return ""


IDLE_POLL = 0.05                # s between looks for the CPU to be idle (background work)
DONE = None                     # sentinel: the request has no more events
_EMPTY = object()               # no event within a poll interval


class Request:
    """What an HTTP thread holds: its output queue and a way to cancel."""

    def __init__(self, scheduler: "Scheduler", timeout: float | None, client=None):
        self._scheduler = scheduler
        self.client = client            # who sent it (the planner shares the batch by client)
        self.t_submit = time.monotonic()
        self.deadline = self.t_submit + timeout if timeout else None
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.seqs: list[Seq] = []       # every choice, by flat index
        self.leads: list[Seq] = []      # one per prompt: it computes the prompt, then forks
        self.admitted = False           # its first prompt got KV blocks
        self.t_admit: dict[int, float] = {}     # a prompt's lead (choice index) -> 1st admission
        self.cancelled = False
        self.finished = False           # set by the engine thread when DONE is queued
        self.closed: set[int] = set()   # choices the reader has whole (its thread's)
        self._closing: list[tuple[int, int]] = []   # (choice, tokens kept) the engine must end

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens whose K/V came from the prefix cache (once per prompt)."""
        return sum(s.n_cached or 0 for s in self.leads)

    def cancel(self) -> None:
        """Stop generating; the KV blocks are released at the next step boundary. Nothing to
        cancel once the reader has closed every choice."""
        if not self.cancelled and not self.finished and len(self.closed) < len(self.seqs):
            self.cancelled = True
            self._scheduler._wake()

    def close(self, index: int, n_tokens: int, end: bool) -> None:
        """The reader has all of choice `index`: its first `n_tokens` tokens. `end`: the
        reader ended it (a stop string in its text, found on the request's thread) and the
        engine must end it too, as "stop", at the next step boundary; tokens it sampled
        meanwhile are dropped. (The engine may sample a token or two more than the text
        needed: what vLLM's output processor costs as well.)"""
        if index in self.closed:
            return
        self.closed.add(index)
        if end and not self.finished:
            self._closing.append((index, n_tokens))
            self._scheduler._wake()

    def events(self, poll: float = 0.5, idle=None) -> Iterator[Event]:
        """Events until DONE. Every `poll` seconds it checks that the engine thread lives and
        calls `idle()`; when that returns False the request is cancelled (the caller is gone)
        and the iteration ends."""
        next_check = time.monotonic() + poll
        while True:
            try:
                ev = self.out.get(timeout=poll)
            except queue.Empty:
                ev = _EMPTY
            if ev is _EMPTY or time.monotonic() >= next_check:
                next_check = time.monotonic() + poll
                if idle is not None and idle() is False:
                    self.cancel()
                    return
                if ev is _EMPTY and not self._scheduler.alive:
                    yield Event(-1, None, time.monotonic(),
                                error=SchedulerStopped("engine stopped"))
                    return
            if ev is _EMPTY:
                continue
            if ev is DONE:
                return
            yield ev


def default_params(engine, **overrides) -> SchedulerParams:
    """Parameters that fit the engine: a batch of all its KV slots, its step size."""
    steps = engine.max_tokens or 512
    p = SchedulerParams(max_batch=engine.kv.max_seqs, token_budget=min(512, steps),
                        prefill_chunk=min(512, steps))
    for k, v in overrides.items():
        if v is not None:
            setattr(p, k, v)
    return p


class Scheduler:
    def __init__(self, engine, params: SchedulerParams | None = None, *,
                 queue_size: int | None = None, prefill_chunk: int | None = None,
                 salt: bytes = b"", adaptive=None, speculator=None, turns=None):
        """`adaptive`: a reame.adaptive.AdaptiveRuntime told about every step (or None);
        `speculator`: a reame.speculate.Speculator (None: no speculative decoding); `turns`: a
        reame.turns.Turns shared with the schedulers of the other models of this process (each
        forward pass is one turn on the CPU; None: this scheduler's own)."""
        self.engine = engine
        self.turns = turns if turns is not None else Turns()
        self.params = params or default_params(engine, max_waiting=queue_size,
                                               prefill_chunk=prefill_chunk)
        self.params.check(engine.max_tokens or self.params.token_budget, engine.kv.max_seqs)
        self.speculator = speculator
        self.planner = Planner(engine.kv, self.params, salt, speculator=speculator,
                               max_logits=engine.max_logits)
        self.adaptive = adaptive
        if adaptive is not None:
            adaptive.pool = self.pool               # the prefix cache's counters, for the report
        self._cond = threading.Condition()
        self._inbox: list[Request] = []             # submitted, not yet seen (guarded by _cond)
        self._n_waiting = 0                         # sequences never admitted yet (_cond)
        self._queued: dict[int, int] = {}           # id(lead) -> sequences it counts there
        self._requests: dict[int, Request] = {}     # engine thread: requests in the planner
        self._stop = False
        self._started = False
        self._thread: threading.Thread | None = None
        self.steps = 0                              # forward calls so far
        self._masks: ThreadPoolExecutor | None = None   # grammar masks beside the forward pass

    @property
    def max_seqs(self) -> int:
        return self.params.max_batch

    # ---- called from HTTP threads ----

    def submit(self, prompts: list[list[int]], generations: list[list[Generation]],
               timeout: float | None = None, client=None) -> Request:
        """Queue one request: prompt i is sampled by generations[i] (flat choice indices in order).

        QueueFull when the sequences waiting for admission would exceed `max_waiting` beyond the
        free places in the batch (those are admitted at the next step; an idle scheduler takes
        any request). ValueError when one prompt has more choices than the batch holds.
        `client` (any hashable, e.g. an address): the requests of one client share one place in
        the planner's round robin.
        """
        req = Request(self, timeout, client)
        index = 0
        for prompt, gens in zip(prompts, generations, strict=True):
            if not prompt:
                raise ValueError("empty prompt")
            if len(gens) > self.params.max_batch:
                raise ValueError(f"{len(gens)} sequences for one prompt; at most "
                                 f"{self.params.max_batch} run at once")
            seqs = [Seq(prompt, g, req, index + i) for i, g in enumerate(gens)]
            index += len(gens)
            seqs[0].siblings = seqs[1:]
            req.seqs += seqs
            req.leads.append(seqs[0])
        self._enqueue(req, index)
        if self.adaptive is not None:
            for prompt in prompts:
                self.adaptive.profile.arrival(len(prompt))
        return req

    def _enqueue(self, req: Request, n_seqs: int) -> None:
        with self._cond:
            if self._stop or (self._started and not self.alive):
                raise SchedulerStopped("the engine is not running")
            busy = self._n_waiting or self._requests or self._inbox
            free = max(0, self.params.max_batch - self.planner.n_running)
            if busy and self._n_waiting + n_seqs > self.params.max_waiting + free:
                raise QueueFull(f"{self._n_waiting} sequences are waiting")
            self._n_waiting += n_seqs
            for lead in req.leads:
                self._queued[id(lead)] = 1 + len(lead.siblings)
            self._inbox.append(req)
            self._cond.notify()

    def submit_embeddings(self, prompts: list[list[int]], pooling: str = "mean",
                          timeout: float | None = None, client=None) -> Request:
        """Queue an embedding request: one sequence per prompt, computed like any prompt
        (batched with the running sequences, chunked, preemptible) and pooled from the final
        hidden states ("mean" or "last" token); each ends with an Event carrying `embedding`."""
        if pooling not in ("mean", "last"):
            raise ValueError(f"pooling {pooling!r}: mean or last")
        req = Request(self, timeout, client)
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError("empty prompt")
            seq = Seq(prompt, _Pooled(), req, i, pooling=pooling)
            req.seqs.append(seq)
            req.leads.append(seq)
        self._enqueue(req, len(prompts))
        return req

    @property
    def queue_depth(self) -> int:
        """Requests waiting for their first admission."""
        with self._cond:
            return len(self._inbox) + sum(1 for r in list(self._requests.values())
                                          if not r.admitted)

    @property
    def running(self) -> int:
        """Requests with a sequence holding KV blocks."""
        return len({id(s.owner) for s in list(self.planner.running)})

    @property
    def pool(self):
        """The KV blocks' reame.kv_blocks.BlockPool (its counters: the metrics, the report)."""
        return self.planner.pool

    @property
    def busy(self) -> bool:
        """A request is submitted and not finished (in the inbox or the planner)."""
        return bool(self._inbox or self._requests)

    @property
    def running_seqs(self) -> int:
        return self.planner.n_running

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- lifecycle ----

    def start(self) -> "Scheduler":
        if not self.alive:
            self._stop = False
            self._started = True
            self._thread = threading.Thread(target=self._loop, name="reame-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the engine thread; every unfinished request gets a SchedulerStopped error."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # ---- the engine thread ----

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stop:
                        break
                    self._take_inbox()
                    idle = not self._requests
                    pending = idle and getattr(self.adaptive, "idle_pending", False)
                    if idle and not (pending and self.turns.may_idle(self)):
                        # nothing to run; or background work, but another model is stepping
                        self._cond.wait(timeout=IDLE_POLL if pending else 1.0)
                        continue
                if idle:        # one step of the adaptive runtime's start-up benchmark, off the
                    with self.turns.turn(self):  # lock; then the inbox again, before any wait
                        self.adaptive.idle_step()
                    continue
                try:
                    self.step(time.monotonic())
                except Exception as e:              # a bug: fail the requests in flight, go on
                    log.exception("scheduler step failed")
                    for r in list(self._requests.values()):
                        self._fail(r, EngineFailure(f"internal error: {type(e).__name__}: {e}"))
        except BaseException:                       # pragma: no cover - a bug; log it loudly
            log.exception("engine thread crashed")
            raise
        finally:
            self._shutdown()

    def _take_inbox(self) -> None:
        """New requests into the planner (under the lock)."""
        for r in self._inbox:
            self._requests[id(r)] = r
            for lead in r.leads:
                self.planner.add(lead)
        self._inbox = []

    def step(self, now: float) -> bool:
        """One scheduling step (the engine thread; tests call it directly): retire, plan,
        forward, apply, emit. False when there was nothing to run."""
        t0 = time.perf_counter()
        with self._cond:
            self._take_inbox()
        self._retire(now)
        plan = self.planner.plan()
        if plan is None:
            with self._cond:                         # nothing fits yet: wait for a change
                if not self._inbox and not self._stop:
                    self._cond.wait(timeout=self._idle_wait(now))
            return False
        if plan.admitted:
            with self._cond:
                for seq in plan.admitted:
                    seq.owner.admitted = True
                    seq.owner.t_admit.setdefault(seq.index, now)
                    self._n_waiting -= self._queued.pop(id(seq), 0)
        masks = self._prepare_masks(plan)
        try:
            with self.turns.turn(self) as waited:   # the CPU, between this process's models
                if self.adaptive is not None:
                    self.adaptive.before_step(plan)
                logits = self.engine.forward(plan.batch)
            t0 += waited
            if masks is not None:
                masks.result()
        except Exception as e:                      # fail only the requests in this batch
            log.exception("engine.forward failed on a batch of %d tokens", len(plan.batch))
            for r in {id(w.seq.owner): w.seq.owner for w in plan.work}.values():
                self._fail(r, EngineFailure(f"the engine failed: {type(e).__name__}: {e}"))
            return True
        self.steps += 1
        t = time.monotonic()
        ended = {}
        if self.speculator is not None and not getattr(self.adaptive, "trial_step", False):
            # the step's cost for the draft-length choice: planning and the forward pass. What
            # follows (sampling, detokenising, events) costs per emitted token, as much for a
            # token of a draft as for one of a step of its own: not a cost of drafting. A step
            # running a kernel trial's arm is left out, as the batch and budget tuners leave it
            # out: its kernels are not the live ones, and a slow arm's times would price its
            # step size above what the live kernels cost
            self.speculator.step_done(len(plan.batch), time.perf_counter() - t0)
        outcomes = self.planner.apply(plan, logits, self.engine.final_hidden)
        for o in outcomes:
            r = o.seq.owner
            if r.finished:
                continue
            if o.seq.pooling is not None and o.error is None:
                o.seq.gen.finished = True
                r.out.put(Event(o.seq.index, None, t, finish_reason="stop", embedding=o.step))
                ended[id(r)] = r
                continue
            if o.error is not None:
                if isinstance(o.error, GrammarError):   # the request's grammar hit a limit
                    log.warning("output constraint failed: %s", o.error)
                    self._fail(r, o.error)              # a 400 (responses.error_for)
                    continue
                log.error("sampling failed", exc_info=o.error)
                self._fail(r, EngineFailure(f"sampling failed: {type(o.error).__name__}: "
                                            f"{o.error}"))
                continue
            r.out.put(Event(o.seq.index, o.step, t, finish_reason=o.step.finish_reason))
            if o.seq.t_first is None:
                o.seq.t_first = t
            o.seq.t_last = t
            if o.step.finish_reason:
                ended[id(r)] = r
        for r in ended.values():               # after every event of the step is out
            self._maybe_done(r)
        if self.adaptive is not None:
            self.adaptive.after_step(plan, sum(1 for o in outcomes if o.step is not None
                                               and o.seq.pooling is None),
                                     self.planner.n_running, self.planner.n_waiting)
        return True

    def _prepare_masks(self, plan):
        """Start computing the grammar masks of the constrained sequences that sample in this
        step, on a worker thread, so that they overlap the forward pass (llguidance and the
        engine's native code both run without the GIL)."""
        from .structured import prepare_all
        cons = [s.gen.constraint for w in plan.work if w.row >= 0
                for s in [w.seq, *w.seq.siblings] if s.gen.constraint is not None]
        if not cons:
            return None
        if self._masks is None:
            self._masks = ThreadPoolExecutor(1, thread_name_prefix="reame-masks")
        return self._masks.submit(prepare_all, cons)

    def _idle_wait(self, now: float) -> float:
        deadlines = [r.deadline for r in self._requests.values() if r.deadline]
        return max(0.01, min([0.05] + [d - now for d in deadlines]))

    def _retire(self, now: float) -> None:
        """End the choices their readers ended (stop strings); end cancelled requests; time out
        waiting ones (503) and generating ones ("length")."""
        for r in list(self._requests.values()):
            if r._closing:
                self._close(r)
                if r.finished:
                    continue
            if r.cancelled:
                self._end_request(r)
            elif r.deadline and now >= r.deadline:
                if not any(s.gen.output_ids or s.gen.finished for s in r.seqs):
                    started = any(s.n_computed for s in r.leads)
                    self._fail(r, RequestTimeout(
                        "the request timed out during prompt processing" if started else
                        "the request timed out waiting for a free slot"))
                    continue
                # out of time while generating: end every live sequence as "length" (as
                # llama.cpp does for t_max_predict_ms)
                for s in r.seqs:
                    if s.state != SEQ_DONE and not s.gen.finished:
                        text = s.gen.finish("length")
                        r.out.put(Event(s.index, None, now, finish_reason="length", text=text))
                self._end_request(r)

    def _close(self, r: Request) -> None:
        """End the sequences whose reader found a stop string in their text."""
        while r._closing:
            index, n_tokens = r._closing.pop()
            s = r.seqs[index]
            if s.gen.finished or s.state == SEQ_DONE:
                continue
            s.gen.finish("stop")
            s.n_kept = n_tokens
            self.planner.finish(s)
        self._maybe_done(r)

    # ---- bookkeeping (engine thread) ----

    def _maybe_done(self, r: Request) -> None:
        if all(s.gen.finished for s in r.seqs):
            if self.adaptive is not None:
                for s in r.seqs:
                    n = min(len(s.gen.output_ids), s.n_kept)
                    tpot = ((s.t_last - s.t_first) / (n - 1)
                            if n > 1 and s.t_first is not None else None)
                    self.adaptive.profile.finished(n, tpot, s.t_last)
            self._end_request(r)

    def _end_request(self, r: Request) -> None:
        """Free everything the request holds and queue DONE (idempotent)."""
        if r.finished:
            return
        for s in r.seqs:
            self.planner.finish(s)
        with self._cond:
            for lead in r.leads:
                self._n_waiting -= self._queued.pop(id(lead), 0)
        self._requests.pop(id(r), None)
        r.finished = True
        r.out.put(DONE)

    def _fail(self, r: Request, error: BaseException) -> None:
        if not r.finished:
            r.out.put(Event(-1, None, time.monotonic(), error=error))
            self._end_request(r)

    def _shutdown(self) -> None:
        with self._cond:
            self._take_inbox()
        for r in list(self._requests.values()):
            self._fail(r, SchedulerStopped("the server is shutting down"))
