"""The engine thread: many requests, one forward step at a time.

HTTP threads `submit()` a `Request` (one or more prompts, each with the `Generation`s sampling
from it) into a bounded FIFO queue and read `Event`s from the request's own output queue. One
engine thread per process owns the engine and its KV cache. Each step it:

1. drops cancelled and timed-out requests (their KV slots are free again at this boundary),
2. admits waiting prompt groups, oldest first, while the KV cache has a slot for each of their
   sequences (a group of n sequences is admitted whole: its prompt is prefilled once, into the
   first slot, then copied to the others),
3. builds ONE `Batch`: a decode token for every running sequence and prefill chunks of newly
   admitted prompts (at most `prefill_chunk` tokens per step in all),
4. calls `engine.forward` once and hands each logits row to its `Generation`(s),
5. pushes each `Step` to its request's output queue and frees the slot of every finished sequence.

Nothing here knows about HTTP; the server maps `QueueFull`, `RequestTimeout` and `EngineFailure`
to status codes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from .batch import Batch
from .generate import PREFILL_CHUNK, Generation, Step

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


DONE = None                     # sentinel: the request has no more events
_EMPTY = object()               # no event within a poll interval


class _Seq:
    __slots__ = ("index", "gen", "slot", "done")

    def __init__(self, index: int, gen: Generation):
        self.index, self.gen, self.slot, self.done = index, gen, -1, False


class _Group:
    """One prompt and the sequences sampling from it."""

    def __init__(self, request: "Request", prompt_ids: list[int], seqs: list[_Seq]):
        self.request, self.prompt_ids, self.seqs = request, list(prompt_ids), seqs
        self.n_prefilled = 0        # prompt tokens already in the first slot's KV cache

    @property
    def prefilling(self) -> bool:
        return self.n_prefilled < len(self.prompt_ids)

    def live(self) -> list[_Seq]:
        return [s for s in self.seqs if not s.done]


class Request:
    """What an HTTP thread holds: its output queue and a way to cancel."""

    def __init__(self, scheduler: "Scheduler", timeout: float | None):
        self._scheduler = scheduler
        self.t_submit = time.monotonic()
        self.deadline = self.t_submit + timeout if timeout else None
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.groups: list[_Group] = []
        self.cancelled = False
        self.finished = False       # set by the engine thread when DONE is queued

    def cancel(self) -> None:
        """Stop generating; the KV slots are freed at the next step boundary."""
        if not self.cancelled and not self.finished:
            self.cancelled = True
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


class Scheduler:
    def __init__(self, engine, queue_size: int = 32, prefill_chunk: int = PREFILL_CHUNK):
        self.engine = engine
        self.queue_size = queue_size
        self.prefill_chunk = prefill_chunk
        self.max_seqs = engine.kv.max_seqs
        self._can_copy_prefix = callable(getattr(engine.kv, "copy_prefix", None))
        self._cond = threading.Condition()
        self._pending: deque[_Group] = deque()      # waiting groups, FIFO (guarded by _cond)
        self._running: list[_Group] = []            # engine thread only
        self._n_free = self.max_seqs                # free KV slots (engine thread only)
        self._in_system = 0                         # sequences submitted, not yet ended (_cond)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.steps = 0                              # forward calls so far

    # ---- called from HTTP threads ----

    def submit(self, prompts: list[list[int]], generations: list[list[Generation]],
               timeout: float | None = None) -> Request:
        """Queue one request: prompt i is sampled by generations[i] (flat choice indices in order).

        Capacity is counted in sequences: `max_seqs` generating plus `queue_size` waiting. A
        request that would go beyond raises QueueFull (unless the scheduler is empty: a request
        larger than the capacity is still served, group by group). ValueError when one prompt
        group has more sequences than the KV cache has slots.
        """
        req = Request(self, timeout)
        index = 0
        for prompt, gens in zip(prompts, generations, strict=True):
            if not prompt:
                raise ValueError("empty prompt")
            if len(gens) > self.max_seqs:
                raise ValueError(f"{len(gens)} sequences for one prompt; the KV cache holds "
                                 f"{self.max_seqs}")
            seqs = [_Seq(index + i, g) for i, g in enumerate(gens)]
            index += len(gens)
            if len(seqs) > 1 and not self._can_copy_prefix:     # prefill each one separately
                req.groups += [_Group(req, prompt, [s]) for s in seqs]
            else:
                req.groups.append(_Group(req, prompt, seqs))
        with self._cond:
            if self._stop or not self.alive:
                raise SchedulerStopped("the engine is not running")
            n_new = index
            if self._in_system and self._in_system + n_new > self.max_seqs + self.queue_size:
                raise QueueFull(f"{self._in_system} sequences are running or waiting")
            self._in_system += n_new
            self._pending.extend(req.groups)
            self._cond.notify()
        return req

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a KV slot."""
        with self._cond:
            return len({id(g.request) for g in self._pending})

    @property
    def running(self) -> int:
        """Requests holding KV slots."""
        return len({id(g.request) for g in list(self._running)})

    @property
    def running_seqs(self) -> int:
        return self.max_seqs - self._n_free

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- lifecycle ----

    def start(self) -> "Scheduler":
        if not self.alive:
            self._stop = False
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
                    now = time.monotonic()
                    self._expire_pending(now)
                    self._admit()
                    if not self._running:
                        self._cond.wait(timeout=self._idle_wait(now))
                        continue
                try:
                    self._retire_cancelled(time.monotonic())
                    if self._running:
                        self._step()
                except Exception as e:              # a bug: fail this step's requests, go on
                    log.exception("scheduler step failed")
                    for r in {id(g.request): g.request for g in self._running}.values():
                        self._fail(r, EngineFailure(f"internal error: {type(e).__name__}: {e}"))
        except BaseException:                       # pragma: no cover - a bug; log it loudly
            log.exception("engine thread crashed")
            raise
        finally:
            self._shutdown()

    def _idle_wait(self, now: float) -> float:
        deadlines = [g.request.deadline for g in self._pending if g.request.deadline]
        return max(0.01, min([1.0] + [d - now for d in deadlines]))

    def _expire_pending(self, now: float) -> None:
        """Drop waiting groups of cancelled or timed-out requests (under the lock)."""
        if not self._pending:
            return
        keep = deque()
        for g in self._pending:
            r = g.request
            if r.finished:
                continue
            if r.cancelled:
                self._end_request(r)
            elif r.deadline and now >= r.deadline:
                self._fail(r, RequestTimeout("the request timed out waiting for a free slot"))
            else:
                keep.append(g)
        self._pending = keep

    def _admit(self) -> None:
        """Move waiting groups, oldest first, into the running set while slots last (under the lock)."""
        while self._pending and len(self._pending[0].seqs) <= self._n_free:
            g = self._pending.popleft()
            if g.request.cancelled:
                self._end_request(g.request)
            if g.request.finished:
                continue
            for s in g.seqs:
                s.slot = self.engine.kv.alloc()
            self._n_free -= len(g.seqs)
            self._running.append(g)

    def _retire_cancelled(self, now: float) -> None:
        for g in list(self._running):
            r = g.request
            if r.cancelled:
                self._end_request(r)
            elif r.deadline and now >= r.deadline:
                # out of time while generating: end every live sequence as "length" (as llama.cpp
                # does for t_max_predict_ms); a prompt still prefilling never produced anything
                if g.prefilling:
                    self._fail(r, RequestTimeout("the request timed out during prompt processing"))
                    continue
                for s in g.live():
                    text = s.gen.finish("length")
                    r.out.put(Event(s.index, None, now, finish_reason="length", text=text))
                    self._release(s)
                self._maybe_done(r)

    def _step(self) -> None:
        tokens, positions, slots, rows = [], [], [], []
        consumers: list[tuple[Request, list[_Seq]]] = []   # per logits row: who samples from it
        prefilled: list[_Group] = []                # groups whose prompt completes this step
        for g in self._running:
            if g.prefilling:
                continue
            for s in g.live():
                rows.append(len(tokens))
                tokens.append(s.gen.output_ids[-1])        # the token it sampled last step
                positions.append(s.gen.n_past - 1)
                slots.append(s.slot)
                consumers.append((g.request, [s]))
        # one step holds at most prefill_chunk tokens (decode tokens first): engines size their
        # step buffers for that (the JIT engine's limit is max(512, max_seqs))
        budget = self.prefill_chunk - len(tokens)
        for g in self._running:
            if not g.prefilling or budget <= 0:
                continue
            start = g.n_prefilled
            chunk = g.prompt_ids[start:start + budget]
            tokens += chunk
            positions += range(start, start + len(chunk))
            slots += [g.seqs[0].slot] * len(chunk)
            g.n_prefilled += len(chunk)
            budget -= len(chunk)
            if not g.prefilling:
                rows.append(len(tokens) - 1)
                consumers.append((g.request, g.live()))
                prefilled.append(g)
        batch = Batch.build(tokens, positions, slots, rows)
        try:
            logits = self.engine.forward(batch)
        except Exception as e:                      # fail only the requests in this batch
            log.exception("engine.forward failed on a batch of %d tokens", len(batch))
            for r in {id(g.request): g.request for g in self._running}.values():
                self._fail(r, EngineFailure(f"the engine failed: {type(e).__name__}: {e}"))
            return
        self.steps += 1
        now = time.monotonic()
        for g in prefilled:
            first = g.seqs[0].slot
            for s in g.seqs[1:]:
                self.engine.kv.copy_prefix(first, s.slot, len(g.prompt_ids))
        for row, (req, seqs) in zip(logits, consumers):
            for s in seqs:
                if req.finished:
                    break
                try:
                    step = s.gen.step(row)
                except Exception as e:
                    log.exception("sampling failed")
                    self._fail(req, EngineFailure(f"sampling failed: {type(e).__name__}: {e}"))
                    break
                req.out.put(Event(s.index, step, now, finish_reason=step.finish_reason))
                if step.finish_reason:
                    self._release(s)
                    self._maybe_done(req)

    # ---- bookkeeping (engine thread) ----

    def _release(self, s: _Seq) -> None:
        if not s.done:
            s.done = True
            with self._cond:
                self._in_system -= 1
            if s.slot >= 0:
                self.engine.kv.free(s.slot)
                self._n_free += 1
                s.slot = -1

    def _maybe_done(self, r: Request) -> None:
        if all(s.done for g in r.groups for s in g.seqs):
            self._end_request(r)

    def _end_request(self, r: Request) -> None:
        """Free everything the request holds and queue DONE (idempotent)."""
        if r.finished:
            return
        for g in r.groups:
            for s in g.seqs:
                self._release(s)
        self._running = [g for g in self._running if g.request is not r]
        r.finished = True
        r.out.put(DONE)

    def _fail(self, r: Request, error: BaseException) -> None:
        if not r.finished:
            r.out.put(Event(-1, None, time.monotonic(), error=error))
            self._end_request(r)

    def _shutdown(self) -> None:
        with self._cond:
            pending, self._pending = list(self._pending), deque()
        for g in pending + list(self._running):
            self._fail(g.request, SchedulerStopped("the server is shutting down"))
