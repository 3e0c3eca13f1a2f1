"""The models a server is configured to serve: `--model [NAME=]PATH[,key=value...]`,
`--models-dir`, their settings, names and memory needs, and the registry `reame serve` runs
(registry.py holds and loads them)."""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field, replace

from ..errors import ReameError
from .config import ServerConfig
from .registry import ModelEntry, ModelRegistry

log = logging.getLogger("reame.server")

KEEP_ALIVE = 300.0          # s an idle model stays loaded when several are served
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


def plan_models(config: ServerConfig) -> tuple[list[ModelEntry], int]:
    """(an entry per configured model, the memory budget): every file's header read once,
    ReameError when a model cannot be served at all. `reame serve` does it before forking
    (the workers inherit it: no header is read again until a model loads); reame.wsgi in the
    worker."""
    specs = specs_of(config)
    if not specs:
        raise ReameError("no model: pass MODEL.gguf to `reame serve` (or --model, "
                         "--models-dir) or set REAME_MODEL")
    entries = entries_of(config, specs)
    if not entries:
        raise ReameError(f"no model to serve: {config.models_dir} has no readable .gguf file")
    budget = default_budget(config)
    for e in entries:
        if e.need > budget:
            log.warning("model %s needs %.0f MiB and the memory budget is %.0f MiB: it will be "
                        "refused (--memory-budget-mb, or a smaller kv-cache-mb / ctx-size for "
                        "it)", e.id, e.need / 2**20, budget / 2**20)
    return entries, budget


def server_registry(config: ServerConfig, planned=None) -> ModelRegistry:
    """The registry `reame serve` and reame.wsgi run: every configured model (`planned`:
    plan_models' result, else planned here), built after the fork by the engine factory on
    the process's shared compute threads."""
    from ..turns import Turns
    from .service import build_service, engine_factory
    entries, budget = planned or plan_models(config)
    turns = Turns()
    several = len(entries) > 1
    paths = [e.config.model for e in entries]

    def build(e: ModelEntry):
        engine = engine_factory(e.config, shared_pools=several)()
        served_as = e.id if paths.count(e.config.model) > 1 else None
        return build_service(engine, e.config, turns=turns, served_as=served_as)

    return ModelRegistry(entries, build, budget, turns=turns)
