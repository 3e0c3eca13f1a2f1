"""What the adaptive runtime learned, kept across restarts.

One JSON file per (CPU model and features, model file, Reame version) under the state directory
(`--adaptive-dir`, default ~/.cache/reame/adaptive): the chosen kernel variant of every class
that changed, the scheduler parameters, and the hot prefixes (token ids of the prompt prefixes
most often found in the prefix cache, computed again at start). Written atomically (a temporary file renamed over
the old one). At start the file is read back and its choices re-checked like any candidate; a
file that does not parse, or that was written for another CPU, model or version, is ignored
with a warning, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path

from .. import __version__
from ..codegen.spec import KernelSpec

log = logging.getLogger("reame.adaptive")
FORMAT = 1


def default_dir() -> Path:
    return Path(os.environ.get("REAME_ADAPTIVE_DIR") or Path.home() / ".cache" / "reame" /
                "adaptive")


def identity(engine) -> dict:
    """What the learned strategy is valid for."""
    isa = engine.isa
    path = engine.model.path
    try:
        st = os.stat(path)
        model = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"
    except (OSError, TypeError):
        model = str(path)
    return {"cpu": isa.host_cpu, "features": isa.features, "level": isa.level,
            "model": model, "reame": __version__}


def path_for(ident: dict, directory: Path | None = None) -> Path:
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return Path(directory or default_dir()) / f"strategy-{key}.json"


def spec_to_json(spec: KernelSpec) -> dict:
    return {"op": spec.op, "dtype": spec.dtype, "family": spec.family, "level": spec.level,
            "params": [[k, v] for k, v in spec.params]}


def spec_from_json(d) -> KernelSpec:
    """A spec as spec_to_json wrote it; ValueError for anything else (a strategy file is never
    trusted: a dict or list among the params would make an unhashable spec, NaN or a huge number
    a spec no registry makes)."""
    if not isinstance(d, dict):
        raise ValueError(f"a kernel spec object expected, not {type(d).__name__}")
    names = [d.get(k) for k in ("op", "dtype", "family", "level")]
    if not all(isinstance(v, str) and v for v in names):
        raise ValueError("op, dtype, family and level must be non-empty strings")
    params = d.get("params")
    if not isinstance(params, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _scalar(p[1])
            for p in params):
        raise ValueError("params must be [name, number or string] pairs")
    return KernelSpec(*names, tuple((k, v) for k, v in params))


def _scalar(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return isinstance(v, (int, str))


def save(path: Path, ident: dict, choices: dict[str, KernelSpec], scheduler: dict,
         prefixes: list[list[int]] | None = None,
         rejected: dict[str, list[str]] | None = None) -> None:
    """`rejected`: class key -> labels of the candidates measured slower there (a restarted
    server does not try them again)."""
    body = {"format": FORMAT, "identity": ident, "saved_at": time.time(),
            "choices": {k: spec_to_json(s) for k, s in choices.items()},
            "scheduler": scheduler, "prefixes": prefixes or [], "rejected": rejected or {}}
    _write(path, body, indent=1)


def _read(path: Path, warning: str) -> str | None:
    """The file's text; None when there is none, or (logged with `warning` % (path, error))
    when it cannot be read."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning(warning, path, e)
        return None


def _write(path: Path, body: dict, indent=None) -> None:
    """Write JSON atomically: a temporary file renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".strategy-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=indent, separators=None if indent else (",", ":"))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load(path: Path, ident: dict) -> dict | None:
    """The saved strategy ({"choices": {key: KernelSpec}, "scheduler": {...}, "prefixes":
    [[token id, ...], ...], "rejected": {key: [label, ...]}}), or None (no file, or one that is corrupt or foreign: logged)."""
    raw = _read(path, "adaptive: cannot read %s (%s): starting from the defaults")
    if raw is None:
        return None
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format') if isinstance(body, dict) else None!r}")
        if body.get("identity") != ident:
            theirs = body.get("identity")
            theirs = theirs if isinstance(theirs, dict) else {}
            diff = [k for k in ident if theirs.get(k) != ident[k]]
            log.warning("adaptive: %s was learned on another %s: ignored", path,
                        ", ".join(diff) or "setup")
            return None
        saved = _part(body, "choices", {})
        if not isinstance(saved, dict):
            raise ValueError("choices: an object of kernel specs expected")
        choices = {}
        for k, v in saved.items():
            try:
                choices[k] = spec_from_json(v)
            except ValueError as e:          # this choice only: the defaults keep its class
                log.warning("adaptive: %s: the choice for %s is not a kernel spec (%s): "
                            "ignored", path, k, e)
        scheduler = _part(body, "scheduler", {})
        if not isinstance(scheduler, dict):
            raise ValueError("scheduler: an object expected")
        prefixes = _part(body, "prefixes", [])
        if not (isinstance(prefixes, list) and all(
                isinstance(p, list) and p and all(_token(t) for t in p)
                for p in prefixes)):
            raise ValueError("prefixes: lists of token ids expected")
        rejected = _part(body, "rejected", {})
        if not (isinstance(rejected, dict) and all(
                isinstance(v, list) and all(isinstance(x, str) for x in v)
                for v in rejected.values())):
            raise ValueError("rejected: lists of kernel labels expected")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        log.warning("adaptive: %s is not a valid strategy file (%s): ignored", path,
                    e if not isinstance(e, RecursionError) else "nested too deep")
        return None
    return {"choices": choices, "scheduler": dict(scheduler), "prefixes": prefixes,
            "rejected": rejected}


def _part(body: dict, name: str, default):
    """A section of the file, `default` when absent (null or another type: the caller's
    error)."""
    return body.get(name, default)


def _token(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


# ---- the speculator's state (reame/speculate): its own file beside the strategy ----

SPEC_FORMAT = 1


def speculation_path(strategy: Path) -> Path:
    return strategy.with_name(strategy.name.replace("strategy-", "speculation-", 1))


def save_speculation(path: Path, ident: dict, state: dict) -> None:
    _write(path, {"format": SPEC_FORMAT, "identity": ident, "saved_at": time.time(),
                  "state": state})


def load_speculation(path: Path, ident: dict) -> dict | None:
    """The saved speculator state, or None (no file; one that is corrupt, of another format or
    learned for another CPU, model or version is ignored with a warning)."""
    raw = _read(path, "speculation: cannot read %s (%s): starting empty")
    if raw is None:
        return None
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("format") != SPEC_FORMAT:
            raise ValueError(f"format {body.get('format') if isinstance(body, dict) else None!r}")
        if body.get("identity") != ident:
            log.warning("speculation: %s was learned for another CPU, model or version: "
                        "ignored", path)
            return None
        if not isinstance(body.get("state"), dict):
            raise ValueError("no state")
    except (ValueError, TypeError, RecursionError) as e:
        log.warning("speculation: %s is not a valid state file (%s): ignored", path, e)
        return None
    return body["state"]
