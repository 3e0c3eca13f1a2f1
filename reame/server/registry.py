"""The models a server serves: loaded on demand, under one memory budget, unloaded when cold.

`reame serve` takes models as `--model [NAME=]PATH[,key=value...]` (repeatable) and
`--models-dir DIR`; each becomes a `ModelEntry` (its settings: the server's, overridden by its
keys). A request's `model` picks its entry (none: the first model); `ModelRegistry.use` leases
it for as long as the request is being submitted and, when it is not loaded, loads it in a
background thread while the request waits (bounded by the request timeout); other models keep
stepping meanwhile (their steps take turns on the CPU: reame/turns.py).

Memory is one budget (`--memory-budget-mb`, default: what the host or container leaves at
start, split between the workers): each model counts its weights, KV pool and step buffers
(service.memory_need). A model that does not fit beside the loaded ones makes room by unloading
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
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable

from ..errors import ReameError
from ..pace import paced
from .config import ServerConfig
from .schemas import APIError

log = logging.getLogger("reame.server")

KEEP_ALIVE = 300.0          # s an idle model stays loaded when several are served
FAILED_RETRY = 30.0         # s before a model whose load failed is tried again
MEMORY_SHARE = 0.9          # of the memory available at start: the default budget
# per-model keys of a --model spec -> the ServerConfig field they set
SPEC_KEYS = {"pooling": "pooling", "ctx-size": "ctx_size",
             "kv-cache-mb": "kv_cache_mb", "kv-type": "kv_type", "max-seqs": "max_seqs",
             "chat-template-file": "chat_template_file", "keep-alive": "keep_alive",
             "threads": "threads"}


def parse_duration(value) -> float:
    """Seconds of a keep-alive, as Ollama reads one: a number of seconds, or a duration string
    ("30s", "5m", "1h", "1h30m", "500ms"); negative: forever (math.inf). ValueError if not."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        x = float(value)
    else:
        text = str(value).strip()
        try:
            x = float(text)
        except ValueError:
            parts = re.fullmatch(r"(-)?((?:\d+(?:\.\d+)?(?:ms|s|m|h))+)", text)
            if not parts:
                raise ValueError(f"{value!r} is not a duration (seconds, or like 30s, 5m, "
                                 "1h)") from None
            unit = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}
            x = sum(float(n) * unit[u] for n, u in
                    re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", parts.group(2)))
            x = -x if parts.group(1) else x
    if math.isnan(x):
        raise ValueError("a keep-alive of NaN")
    return math.inf if x < 0 else x


@dataclass
class ModelSpec:
    path: str
    name: str | None = None             # NAME= of the spec; None: the file's name
    options: dict = field(default_factory=dict)     # ServerConfig fields set for this model
    found: bool = False                 # found in --models-dir (an unreadable one is skipped)


def parse_spec(text: str) -> ModelSpec:
    """`[NAME=]PATH[,key=value...]` (keys: SPEC_KEYS) -> ModelSpec; ReameError if malformed."""
    head, *pairs = text.split(",")
    name, sep, path = head.partition("=")
    if not sep:
        name, path = None, head
    elif not name or "/" in name:       # a path with "=" in it, not NAME=PATH
        name, path = None, head
    if not path:
        raise ReameError(f"--model {text!r}: no path")
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("_", "-")
        if not sep or key not in SPEC_KEYS:
            raise ReameError(f"--model {text!r}: {pair!r} is not one of "
                             f"{', '.join(k + '=...' for k in SPEC_KEYS)}")
        fname = SPEC_KEYS[key]
        try:
            if fname == "keep_alive":
                options[fname] = parse_duration(value)
            elif fname in ("ctx_size", "kv_cache_mb", "max_seqs", "threads"):
                options[fname] = int(value)
            else:
                options[fname] = value
        except ValueError as e:
            raise ReameError(f"--model {text!r}: {key}: {e}") from None
    return ModelSpec(os.path.abspath(os.path.expanduser(path)), name, options)


def scan_dir(directory: str) -> list[ModelSpec]:
    """The .gguf files of a directory (not its subdirectories), sorted, as specs named by
    their files. Of a split model (NAME-00001-of-00003.gguf) only the first part."""
    out = []
    for f in sorted(os.listdir(directory)):
        if not f.endswith(".gguf") or f.startswith("."):
            continue
        m = re.search(r"-(\d{5})-of-\d{5}\.gguf$", f)
        if m and m.group(1) != "00001":
            continue
        out.append(ModelSpec(os.path.join(os.path.abspath(directory), f), found=True))
    return out


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
            served = ", ".join(f"`{x.id}`" for x in self.entries)
            raise APIError(404, f"The model `{name}` does not exist. This server serves "
                           f"{served}.", "invalid_request_error", "model", "model_not_found")
        return e

    def acquire(self, name: str | None = None, keep_alive: float | None = None,
                timeout: float | None = None, retry_after: int = 1):
        """(the named model's service, `release(ok=True)`): the model is loaded first if it is
        not (waiting at most `timeout` seconds, else 503; 0: not waiting for a load already
        under way), and it is not unloaded until released (submit before that). `keep_alive`
        becomes the model's when the request is released ok (an invalid request changes
        nothing)."""
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
            return self._ready(e, timeout, retry_after), release
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

    def _ready(self, e: ModelEntry, timeout: float | None, retry_after: int):
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
        _background_priority()
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
        with self._cond:
            e.service, e.state = service, "loaded"
            names = list(getattr(service, "names", ()))
            if not e.config.model and names:    # an engine given, no file named: its names
                e.names, e.id = names + [n for n in e.names if n not in names], names[0]
            e.names += [n for n in names if n not in e.names]
            for n in e.names:
                self._by_name.setdefault(n, e)
            e.loads += 1
            e.load_seconds = time.monotonic() - t0
            e.last_used = self.clock()
            self._cond.notify_all()
        log.info("model %s ready in %.1f s", e.id, e.load_seconds)

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
            if self.default.state == "unloaded" and self.default.need <= self.budget:
                self._try_load(self.default)
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


def _background_priority() -> None:
    """This thread (a model's load: reading, repacking, compiling) at the lowest CPU priority,
    so that the models serving meanwhile keep their speed (Linux: a thread's nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass


# ---- building the registry of a server ----

def specs_of(config: ServerConfig) -> list[ModelSpec]:
    """The models a configuration serves: `model` first, then `models`, then `models_dir`."""
    specs = []
    if config.model:
        specs.append(ModelSpec(config.model))
    specs += [parse_spec(s) for s in config.models]
    if config.models_dir:
        specs += scan_dir(config.models_dir)
    return specs


def entries_of(config: ServerConfig, specs: list[ModelSpec]) -> list[ModelEntry]:
    """An entry per spec, its memory need read from the file's header; ReameError naming the
    file when one cannot be read, or when two models answer to one id."""
    from .service import memory_need, model_names
    several = len(specs) > 1
    default_keep = (config.keep_alive if config.keep_alive is not None
                    else KEEP_ALIVE if several else math.inf)
    out, ids = [], {}
    for spec in specs:
        opts = dict(spec.options)
        keep = opts.pop("keep_alive", default_keep)
        if spec.name:                      # NAME= is the model's id (as --alias is for one)
            opts["model_alias"] = spec.name
        elif spec is not specs[0]:         # --alias names the first model only
            opts["model_alias"] = None
        cfg = replace(config, model=spec.path, models=(), models_dir=None, **opts)
        cfg.check()
        try:
            if not os.path.isfile(spec.path):
                raise ReameError("no such file")
            need, size, general_name = memory_need(cfg)
        except (ReameError, OSError, ValueError) as e:
            msg = str(e) if str(e).startswith(spec.path) else f"{spec.path}: {e}"
            if spec.found:          # a file of --models-dir: the others are served
                log.warning("--models-dir: %s: not served", msg)
                continue
            raise ReameError(msg) from None
        names = model_names(None, cfg) + [general_name]
        names = [n for i, n in enumerate(names) if n and n not in names[:i]]
        if names[0] in ids:
            raise ReameError(f"two models are named {names[0]!r} ({ids[names[0]]} and "
                             f"{spec.path}): name one with --model NAME=PATH")
        ids[names[0]] = spec.path
        out.append(ModelEntry(cfg, names, need, size, keep))
    return out


def default_budget(config: ServerConfig) -> int:
    """--memory-budget-mb, else MEMORY_SHARE of what the host or container leaves now, split
    between the workers."""
    if config.memory_budget_mb is not None:
        return config.memory_budget_mb * 2**20
    from ..engines import available_memory
    return int(available_memory() * MEMORY_SHARE) // max(1, config.workers)


def server_registry(config: ServerConfig) -> ModelRegistry:
    """The registry `reame serve` and reame.wsgi run: every configured model, built after the
    fork by the engine factory on the process's shared compute threads."""
    from ..turns import Turns
    from .service import build_service, engine_factory
    specs = specs_of(config)
    if not specs:
        raise ReameError("no model: pass MODEL.gguf to `reame serve` (or --model, "
                         "--models-dir) or set REAME_MODEL")
    entries = entries_of(config, specs)
    if not entries:
        raise ReameError(f"no model to serve: {config.models_dir} has no readable .gguf file")
    turns = Turns()
    several = len(entries) > 1
    paths = [e.config.model for e in entries]

    def build(e: ModelEntry):
        engine = engine_factory(e.config, shared_pools=several)()
        served_as = e.id if paths.count(e.config.model) > 1 else None
        return build_service(engine, e.config, turns=turns, served_as=served_as)

    return ModelRegistry(entries, build, default_budget(config), turns=turns)
