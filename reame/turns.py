"""Turns on the CPU: the engine threads of several models take one step at a time, fairly.

One process serving several models has one engine thread per model and one pool of compute
threads per thread count (`shared_pool`): two forward passes at once would split the cores and
each would run at half speed or worse (spinning workers of one pool steal cycles from the
other). So a scheduler takes a turn around each forward pass (`Turns.turn`): one model's step
at a time, the CPU whole.

Which model goes next is start-time fair queuing on engine seconds: each model has a virtual
time, the engine seconds its steps took; of the models waiting, the one with the least goes
first. A model that comes back after being idle (no step for IDLE_AFTER seconds) starts from
the least virtual time of the models running (it does not bank the time it was idle), so with
k models busy each gets at least 1/k of the engine time, give or take one step, whatever its
steps cost: no model starves another, and a model whose steps are short (decode) runs many of
them between two long steps (a prompt chunk, an embedding batch) of another.

Background work (the start-up benchmark, computing saved prefixes) asks `may_idle` first: only
when no other model has run a step for IDLE_AFTER seconds.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class Turns:
    IDLE_AFTER = 0.25           # s without another model's step before background work runs

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self._cond = threading.Condition()
        self._holder = None                 # the key running a step
        self._t0 = 0.0
        self._waiting: dict = {}            # key -> arrival number (FIFO among equals)
        self._arrivals = 0
        self.vtime: dict = {}               # key -> engine seconds its turns took
        self._last_step: dict = {}          # key -> clock() at the end of its last turn

    # ---- a step's turn ----

    @contextmanager
    def turn(self, key):
        """Hold the CPU for one step of `key`'s model; yields the seconds it waited."""
        waited = self.acquire(key)
        try:
            yield waited
        finally:
            self.release(key)

    def acquire(self, key) -> float:
        t = self.clock()
        with self._cond:
            last = self._last_step.get(key)
            if last is None or t - last >= self.IDLE_AFTER:
                # back from idle (or new): no credit for the time it did not use
                active = [self.vtime[k] for k in (*self._waiting, self._holder)
                          if k is not None and k in self.vtime]
                floor = min(active) if active else max(self.vtime.values(), default=0.0)
                self.vtime[key] = max(self.vtime.get(key, floor), floor)
            self._arrivals += 1
            self._waiting[key] = self._arrivals
            while self._holder is not None or self._next() != key:
                self._cond.wait()
            del self._waiting[key]
            self._holder = key
            self._t0 = self.clock()
            return self._t0 - t

    def release(self, key) -> None:
        with self._cond:
            if self._holder != key:
                raise RuntimeError(f"{key!r} releases a turn it does not hold")
            now = self.clock()
            spent = max(0.0, now - self._t0)
            self.vtime[key] = self.vtime.get(key, 0.0) + spent
            self._last_step[key] = now
            self._holder = None
            self._cond.notify_all()

    def _next(self):
        """The waiting key with the least virtual time (the earliest arrival among equals)."""
        return min(self._waiting, key=lambda k: (self.vtime.get(k, 0.0), self._waiting[k]))

    # ---- background work ----

    def may_idle(self, key) -> bool:
        """True when background work of `key`'s model may take a step now: nobody waits or
        runs, and no other model stepped within IDLE_AFTER seconds."""
        with self._cond:
            if self._holder is not None or self._waiting:
                return False
            now = self.clock()
            return all(now - t >= self.IDLE_AFTER for k, t in self._last_step.items()
                       if k != key)

    def forget(self, key) -> None:
        """`key`'s model is gone (unloaded): drop what is kept of it."""
        with self._cond:
            for d in (self.vtime, self._last_step):
                d.pop(key, None)

