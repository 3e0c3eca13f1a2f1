"""The models a server serves: loaded on demand, under one memory budget, unloaded when cold.

Each model `reame serve` is given (model_specs.py: `--model [NAME=]PATH[,key=value...]`,
`--models-dir`) is a `ModelEntry` (its settings: the server's, overridden by its keys). A
request's `model` picks its entry (none: the first model); `ModelRegistry.acquire` leases it
until the request is submitted and, when it is not loaded, loads it in a background thread
while the request waits (bounded by the request timeout); other models keep stepping meanwhile
(their steps take turns on the CPU: reame/turns.py; the load is paced: reame/pace.py).

Memory is one budget (`--memory-budget-mb`, default: what the host or container leaves at
start, split between the workers): each model counts its weights, KV pool and step buffers
(service.memory_need) and its speculator's index. A model that does not fit beside the loaded ones makes room by unloading
the least recently used idle ones (no request submitted or running, no lease); if the busy ones
leave no room it waits for them; a model bigger than the whole budget is a 400. An idle model is
also unloaded `keep_alive` seconds after its last request (`--keep-alive`, or a request's
`keep_alive` as Ollama's: seconds or "5m", negative: forever, 0: at once). `tick()` applies that
rule and `choose_victims` the other: both take the time as an argument, so tests run them on a
fake clock.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable

from ..errors import ReameError
from ..pace import background_priority, paced
from .config import ServerConfig
from .schemas import APIError

log = logging.getLogger("reame.server")

FAILED_RETRY = 30.0         # s before a model whose load failed is tried again


class ModelEntry:
    """One model the server may serve, and its state: unloaded, loading, loaded, unloading or
    failed. Fields are guarded by the registry's lock."""

    def __init__(self, config: ServerConfig, names: list[str], need: int, size: int,
                 keep_alive: float):
        self.config = config              # the server's settings with this model's keys
        self.names = names                # the id first, then the other names it answers to
        self.id = names[0]
        self.need, self.size = need, size  # bytes budgeted once loaded; bytes of the file
        self.keep_alive = keep_alive       # s after the last request (inf: forever)
        self.state = "unloaded"
        self.service = None
        self.error: str | None = None
        self.t_failed = 0.0
        self.leases = 0                    # requests between picking it and submitting
        self.last_used = 0.0
        self.loads = 0                     # times loaded (0: never yet)
        self.load_seconds: float | None = None

    def busy(self) -> bool:
        return self.leases > 0 or (self.service is not None and self.service.busy)

    def card(self) -> dict:
        return {"state": self.state, "size": self.size, "memory_bytes": self.need,
                "keep_alive": None if math.isinf(self.keep_alive) else self.keep_alive,
                **({"error": self.error} if self.state == "failed" and self.error else {}),
                **({"load_seconds": round(self.load_seconds, 3)}
                   if self.load_seconds is not None else {})}


def shown(name: str, limit: int = 64) -> str:
    """A client's model name as an error quotes it: at most `limit` characters (an error is
    short, never an echo of what was sent: issue 29)."""
    return name if len(name) <= limit else name[:limit] + "..."


def choose_victims(entries: list[ModelEntry], need: int, budget: int) -> list[ModelEntry] | None:
    """The models to unload so that one of `need` bytes fits the budget: none if it fits
    already; else the least recently used idle loaded models, as few as fit it; None when
    unloading every idle one would not be enough (busy models hold the rest: wait)."""
    held = [e for e in entries if e.state in ("loaded", "loading", "unloading")]
    used = sum(e.need for e in held)
    if used + need <= budget:
        return []
    victims = []
    for e in sorted((e for e in held if e.state == "loaded" and not e.busy()),
                    key=lambda e: e.last_used):
        victims.append(e)
        used -= e.need
        if used + need <= budget:
            return victims
    return None


class ModelRegistry:
    """The models of one worker process. `build(entry)` makes an entry's started service (in
    a background thread); `clock` is time.monotonic unless a test gives its own."""

    def __init__(self, entries: list[ModelEntry], build: Callable[[ModelEntry], object],
                 budget: int, clock=time.monotonic, turns=None):
        from ..turns import Turns
        if not entries:
            raise ReameError("no model to serve")
        self.entries = entries
        self.build = build
        self.budget = budget
        self.clock = clock
        self.turns = turns if turns is not None else Turns()
        self._cond = threading.Condition()
        self._by_name: dict[str, ModelEntry] = {}
        for e in entries:
            for n in e.names:
                self._by_name.setdefault(n, e)
        self._pid: int | None = None
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    def aliases(self, e: ModelEntry) -> list[str]:
        """The other names that pick `e` (a name two models share picks the first)."""
        return [n for n in e.names[1:] if self._by_name.get(n) is e]

    @property
    def default(self) -> ModelEntry:
        return self.entries[0]

    @property
    def several(self) -> bool:
        return len(self.entries) > 1

    # ---- finding and leasing ----

    def find(self, name: str | None) -> ModelEntry:
        """The entry a request's `model` names (None: the first model); 404 if none."""
        if name is None:
            return self.default
        e = self._by_name.get(name)
        if e is None:
            served = ", ".join(f"`{x.id}`" for x in self.entries[:20])
            more = f" and {len(self.entries) - 20} more" if len(self.entries) > 20 else ""
            raise APIError(404, f"The model `{shown(name)}` does not exist. This server serves "
                           f"{served}{more}.", "invalid_request_error", "model",
                           "model_not_found")
        return e

    def acquire(self, name: str | None = None, keep_alive: float | None = None,
                timeout: float | None = None, retry_after: int = 1, connected=None):
        """(the named model's service, `release(ok=True)`): the model is loaded first if it is
        not (waiting at most `timeout` seconds, else 503; 0: not waiting for a load already
        under way), and it is not unloaded until released (submit before that). `keep_alive`
        becomes the model's when the request is released ok (an invalid request changes
        nothing). `connected()`: False once the client has gone (it stops waiting for a load,
        freeing its thread)."""
        e = self.find(name)
        with self._cond:
            e.leases += 1
            e.last_used = self.clock()
        done = []

        def release(ok: bool = True):
            if not done:
                done.append(True)
                with self._cond:
                    e.leases -= 1
                    e.last_used = self.clock()
                    if ok and keep_alive is not None:
                        e.keep_alive = keep_alive
                    self._cond.notify_all()
        try:
            return self._ready(e, timeout, retry_after, connected), release
        except BaseException:
            release(False)
            raise

    @contextmanager
    def use(self, name: str | None = None, keep_alive: float | None = None,
            timeout: float | None = None, retry_after: int = 1):
        """`acquire` as a block: the service, released when the block ends."""
        service, release = self.acquire(name, keep_alive, timeout, retry_after)
        try:
            yield service
        finally:
            release()

    def peek(self, name: str | None = None, retry_after: int = 1):
        """The named model's service if it is loaded, else a 409 (never loads it: reports)."""
        e = self.find(name)
        s = e.service
        if e.state != "loaded" or s is None:
            raise APIError(409, f"The model `{e.id}` is not loaded ({e.state}).",
                           "invalid_request_error", "model", "model_not_loaded",
                           {"Retry-After": str(retry_after)})
        return s

    def _ready(self, e: ModelEntry, timeout: float | None, retry_after: int, connected=None):
        self.start()
        if e.loads == 0 and not self.several:
            timeout = 0     # one model's first load: 503 at once, as /health says (a proxy
                            # sends the request to another replica)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if e.state == "loaded":
                    return e.service
                if e.state == "failed" and self.clock() - e.t_failed < FAILED_RETRY:
                    raise APIError(503, f"The model `{e.id}` failed to load: {e.error}",
                                   "server_error", None, "model_load_failed",
                                   {"Retry-After": str(retry_after)})
                if e.state in ("unloaded", "failed"):
                    self._try_load(e)
                    if e.state == "loading":
                        continue
                left = None if deadline is None else deadline - time.monotonic()
                if connected is not None and not connected():
                    raise APIError(499, f"The client left while `{e.id}` was loading.",
                                   "invalid_request_error", None, "client_closed_request")
                if left is not None and left <= 0:
                    why = ("is loading" if e.state == "loading" else
                           "waits for memory: the models holding it are busy")
                    raise APIError(503, f"The model `{e.id}` {why}; retry shortly.",
                                   "server_error", None, "model_loading",
                                   {"Retry-After": str(retry_after)})
                self._cond.wait(0.5 if left is None else min(left, 0.5))

    def _try_load(self, e: ModelEntry) -> None:
        """Under the lock: start loading `e` if room can be made (unloading idle models)."""
        if e.need > self.budget:
            raise APIError(400, f"The model `{e.id}` needs {e.need / 2**20:.0f} MiB of memory "
                           f"(weights, KV cache and buffers) and the server's budget is "
                           f"{self.budget / 2**20:.0f} MiB: it can never be loaded here "
                           "(--memory-budget-mb, or a smaller --kv-cache-mb / ctx-size for "
                           "it).", "invalid_request_error", "model", "model_too_large")
        victims = choose_victims(self.entries, e.need, self.budget)
        if victims is None:
            return
        for v in victims:
            v.state = "unloading"
        e.state, e.error = "loading", None
        threading.Thread(target=self._load, args=(e, victims), name=f"reame-load-{e.id}",
                         daemon=True).start()

    # ---- loading and unloading (background threads) ----

    def _load(self, e: ModelEntry, victims: list[ModelEntry]) -> None:
        for v in victims:
            log.info("unloading model %s (least recently used; %s needs the memory)", v.id, e.id)
            self._unload(v)
        t0 = time.monotonic()
        background_priority()
        try:
            # while other models serve, the load runs at most a fifth of the time (its
            # Python holds the GIL their steps need: reame/pace.py)
            with _gil_handover(), paced(lambda: not self.turns.may_idle(None)):
                service = self.build(e)
        except BaseException as ex:            # reported to its requests; the worker stays up
            log.exception("loading model %s failed", e.id)
            with self._cond:
                e.state, e.error, e.t_failed = "failed", str(ex) or type(ex).__name__, \
                    self.clock()
                self._cond.notify_all()
            return
        self.loaded_with(e, service, time.monotonic() - t0)
        log.info("model %s ready in %.1f s", e.id, e.load_seconds)

    def loaded_with(self, e: ModelEntry, service, seconds: float | None = None) -> None:
        """`e` is loaded: its service, and the names the service answers to (an engine given
        without a file: the service's names are the entry's)."""
        with self._cond:
            e.service, e.state = service, "loaded"
            names = list(getattr(service, "names", ()))
            if not e.config.model and names:
                e.names, e.id = names + [n for n in e.names if n not in names], names[0]
            e.names += [n for n in names if n not in e.names]
            for n in e.names:
                self._by_name.setdefault(n, e)
            e.loads += 1
            e.load_seconds = seconds
            e.last_used = self.clock()
            self._cond.notify_all()

    def _unload(self, e: ModelEntry) -> None:
        """Stop its engine thread, save what it learned, drop its memory (state: unloaded)."""
        service = e.service
        try:
            if service is not None:
                service.stop()
                service.close()
        except Exception:
            log.exception("unloading model %s", e.id)
        with self._cond:
            e.service, e.state = None, "unloaded"
            self._cond.notify_all()
        del service
        gc.collect()

    def tick(self, now: float | None = None) -> list[ModelEntry]:
        """The keep-alive rule: unload each idle loaded model whose keep-alive has run out
        since its last use (a busy model's last use is now). Returns those unloaded."""
        now = self.clock() if now is None else now
        out = []
        with self._cond:
            for e in self.entries:
                if e.state != "loaded":
                    continue
                if e.busy():
                    e.last_used = now
                elif now - e.last_used >= e.keep_alive:
                    e.state = "unloading"
                    out.append(e)
        for e in out:
            log.info("unloading model %s: idle for its keep-alive (%s s)", e.id,
                     f"{e.keep_alive:g}")
            self._unload(e)
        return out

    # ---- the process ----

    def start(self) -> None:
        """In the serving process (again after a fork): the reaper thread, and the first
        model's load."""
        if self._pid == os.getpid():
            return
        with self._cond:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._stop.clear()
            for e in self.entries:                # a forked copy: no thread came with it
                if e.state in ("loading", "unloading"):
                    e.state = "unloaded"
            d = self.default
            if d.state == "unloaded" and d.need > self.budget:
                # /health says failed, with the reason, rather than loading for ever
                d.state, d.t_failed = "failed", self.clock()
                d.error = (f"it needs {d.need / 2**20:.0f} MiB of memory and the budget is "
                           f"{self.budget / 2**20:.0f} MiB (--memory-budget-mb)")
            elif d.state == "unloaded":
                self._try_load(d)
        self._reaper = threading.Thread(target=self._reap, name="reame-keepalive", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.tick()
            except Exception:
                log.exception("keep-alive check failed")

    def stop(self) -> None:
        """Stop every loaded model (the worker exits)."""
        self._stop.set()
        for e in self.entries:
            if e.service is not None:
                try:
                    e.service.stop()
                except Exception:
                    log.exception("stopping model %s", e.id)

    def health(self) -> tuple[str, str | None]:
        """The server's state for /health: loading (503) until the first model is loaded the
        first time, failed (503) if that failed or its engine thread died, else ready (models
        unloaded since, or loading on demand, leave it ready)."""
        e = self.default
        if e.state == "loaded":
            alive = e.service is not None and e.service.scheduler.alive
            return ("ready", None) if alive else ("failed", "the engine thread stopped")
        if e.loads == 0:
            if e.state == "failed":
                return "failed", e.error
            return ("loading" if self._pid == os.getpid() else "idle"), None
        return "ready", None

    def loaded(self) -> dict[str, object]:
        """Every model's id -> its service when loaded, else None (the metrics read this)."""
        return {e.id: (e.service if e.state == "loaded" else None) for e in self.entries}


_LOADS = [0, None]                  # loads under way, the switch interval before the first
_LOADS_LOCK = threading.Lock()
LOAD_SWITCH_INTERVAL = 0.0002       # s: how soon a thread waiting for the GIL gets it


@contextmanager
def _gil_handover():
    """While a model loads (tokenizer, template and step programs are built in Python, holding
    the GIL), the engine threads of the models serving ask for the GIL several times a step;
    each request waits up to the switch interval (5 ms) for the loading thread to let go, and
    that thread, at nice 19, runs only when a core is free. A 0.2 ms interval meanwhile keeps a
    serving model's steps from waiting on it (measured: bench/multimodel.py)."""
    import sys
    with _LOADS_LOCK:
        if _LOADS[0] == 0:
            _LOADS[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(_LOADS[1], LOAD_SWITCH_INTERVAL))
        _LOADS[0] += 1
    try:
        yield
    finally:
        with _LOADS_LOCK:
            _LOADS[0] -= 1
            if _LOADS[0] == 0:
                sys.setswitchinterval(_LOADS[1])
