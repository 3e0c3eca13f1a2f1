"""Progress of slow steps (a model download, loading, weight repacking, kernel compilation): a bar
redrawn in place on a terminal, a log line now and then otherwise.

    from reame import progress
    with progress.task("compiling kernels", total=len(specs), unit="kernels") as t:
        for spec in specs:
            build(spec)
            t.update(1, note=spec.op)          # note: what it is doing now (optional)

Anything deeper in the call stack can label the innermost running task without holding it:
`progress.note("repacking blk.3.ffn_down.weight")` (a no-op when no task runs).

A task that ends within `DELAY` seconds prints nothing at all, so fast steps stay silent; a slow
one shows, on standard error:

- on a terminal, one line redrawn at most every 0.1 s:
  `loading model.gguf [##########..........]  50% 1.2/2.4 GiB 3.1 s` and, at the end, the same
  line with its final state;
- otherwise (a log, a pipe), lines `reame: loading model.gguf: 50% (1.2/2.4 GiB, 3.1 s)` each
  time another quarter is done or 5 s have passed, and `reame: loading model.gguf: done
  (2.4 GiB in 6.2 s)`.

$REAME_PROGRESS overrides the choice: `bar`, `log`, `off` (default `auto`: a bar when standard
error is a terminal). `configure("off")` does the same from code (`reame generate -q`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, TextIO

DELAY = 0.5             # seconds a task runs before anything is shown
BAR_INTERVAL = 0.1      # at most one redraw per this many seconds on a terminal
LOG_INTERVAL = 5.0      # a log line at least this often while a task runs...
LOG_STEP = 25           # ...and each time this many more percent are done
BAR_WIDTH = 20
MODES = ("auto", "bar", "log", "off")

_mode_override: str | None = None
_active: list["Task"] = []           # running tasks, innermost last (note() labels the last)
_lock = threading.Lock()


def configure(mode: str | None) -> None:
    """Set the mode for this process ("auto", "bar", "log", "off"; None: back to the default)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"progress mode must be one of {', '.join(MODES)} (got {mode!r})")
    global _mode_override
    _mode_override = mode


def _mode(stream: TextIO) -> str:
    mode = _mode_override or os.environ.get("REAME_PROGRESS", "auto").strip().lower() or "auto"
    if mode in ("0", "no", "false", "none"):
        mode = "off"
    if mode not in MODES:
        mode = "auto"
    if mode == "auto":
        isatty = getattr(stream, "isatty", None)
        mode = "bar" if isatty is not None and isatty() else "log"
    return mode


def format_amount(n: float, unit: str) -> str:
    """`n` in `unit`: bytes ("B") scaled to KiB..GiB, anything else as an integer + unit."""
    if unit == "B":
        for scale, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if n >= scale:
                return f"{n / scale:.1f} {name}"
        return f"{int(n)} B"
    return f"{int(n)} {unit}".rstrip()


class Task:
    """One step's progress. Use through `task(...)` (a context manager) or call `close()`."""

    def __init__(self, name: str, total: float | None = None, unit: str = "",
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.stream = stream if stream is not None else sys.stderr
        self.mode = _mode(self.stream)
        self._clock = clock
        self._start = clock()
        self._note = ""
        self._shown = False             # printed anything yet
        self._last_draw = None          # time of the last bar redraw / log line
        self._last_pct = -LOG_STEP      # percent at the last log line
        self._width = 0                 # length of the bar line on screen (to blank it out)
        self._closed = False
        self._lock = threading.Lock()
        with _lock:
            _active.append(self)

    # -- reporting ---------------------------------------------------------------------------

    def update(self, n: float = 1, note: str | None = None) -> None:
        """`n` more units done (and, optionally, what is being done now)."""
        with self._lock:
            self.done += n
            if note is not None:
                self._note = note
            self._maybe_show()

    def set(self, done: float, total: float | None = None) -> None:
        """Absolute progress: `done` units (of `total`, when it is known only now)."""
        with self._lock:
            self.done = done
            if total is not None:
                self.total = total
            self._maybe_show()

    def note(self, text: str) -> None:
        with self._lock:
            self._note = text
            self._maybe_show()

    def close(self, failed: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with _lock:
                if self in _active:
                    _active.remove(self)
            if self.mode == "off":
                return
            elapsed = self._clock() - self._start
            if not self._shown and elapsed < DELAY:
                return                   # a fast step: nothing to say
            if self.mode == "bar":
                self._draw(final=True, failed=failed)
            else:
                state = "failed" if failed else "done"
                amount = (format_amount(self.done, self.unit) + " in ") if self.unit else ""
                self._write(f"reame: {self.name}: {state} ({amount}{elapsed:.1f} s)\n")

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)

    # -- output ------------------------------------------------------------------------------

    def _pct(self) -> int | None:
        if not self.total:
            return None
        return max(0, min(100, int(100 * self.done / self.total)))

    def _maybe_show(self) -> None:
        if self.mode == "off" or self._closed:
            return
        now = self._clock()
        elapsed = now - self._start
        if elapsed < DELAY:
            return
        if self.mode == "bar":
            if self._last_draw is None or now - self._last_draw >= BAR_INTERVAL:
                self._last_draw = now
                self._draw()
            return
        pct = self._pct()
        due = self._last_draw is None or now - self._last_draw >= LOG_INTERVAL
        if pct is not None and pct >= self._last_pct + LOG_STEP:
            due = True
        if due:
            self._last_draw = now
            if pct is not None:
                self._last_pct = pct - pct % LOG_STEP
            self._write(f"reame: {self.name}: {self._status(elapsed)}\n")

    def _status(self, elapsed: float) -> str:
        pct = self._pct()
        if pct is None:
            status = f"{format_amount(self.done, self.unit)} ({elapsed:.1f} s)"
        else:
            status = f"{pct}% ({self._fraction()}, {elapsed:.1f} s)"
        return status + (f" {self._note}" if self._note else "")

    def _fraction(self) -> str:
        if self.unit == "B":
            return f"{format_amount(self.done, 'B')}/{format_amount(self.total, 'B')}"
        return f"{int(self.done)}/{format_amount(self.total, self.unit)}"

    def _draw(self, final: bool = False, failed: bool = False) -> None:
        elapsed = self._clock() - self._start
        pct = self._pct()
        if pct is not None:
            filled = BAR_WIDTH * pct // 100
            bar = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {pct:3d}% "
            amount = self._fraction()
        else:
            bar, amount = "", format_amount(self.done, self.unit)
        tail = " failed" if failed else ("" if final else (f" {self._note}" if self._note else ""))
        line = f"{self.name} {bar}{amount} {elapsed:.1f} s{tail}"
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        self._write("\r" + line + pad + ("\n" if final else ""))

    def _write(self, text: str) -> None:
        self._shown = True
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):    # a closed or broken stream: progress is not worth dying
            self.mode = "off"


def task(name: str, total: float | None = None, unit: str = "",
         stream: TextIO | None = None) -> Task:
    """A progress task (use it as a context manager): `total` units of `unit` ("B" for bytes,
    shown in KiB..GiB), None when unknown."""
    return Task(name, total, unit, stream)


def note(text: str) -> None:
    """Label the innermost running task with what is being done now (no task: nothing)."""
    with _lock:
        t = _active[-1] if _active else None
    if t is not None:
        t.note(text)


def tqdm_class(label: str | None = None, stream: TextIO | None = None):
    """A tqdm subclass that reports through a `Task` named `label` (default: tqdm's description)
    instead of drawing its own bar, for `huggingface_hub.hf_hub_download(tqdm_class=...)`. Needs
    tqdm, which huggingface_hub has. It has `update_transfer`, so a Xet download reports one bar
    (the bytes written) rather than two."""
    from tqdm import tqdm as _tqdm

    class _Bar(_tqdm):
        def __init__(self, *args, **kwargs):
            name = label or kwargs.get("desc") or "downloading"
            kwargs = {k: v for k, v in kwargs.items() if k != "name"}
            kwargs["file"] = _NullStream()
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            unit = "B" if kwargs.get("unit", "B") == "B" else kwargs.get("unit", "")
            self._reame = Task(name, self.total, unit, stream)
            self._reame.set(self.n)

        def update_transfer(self, n=1):          # network bytes of a Xet download: not shown
            pass

        def set_transfer_postfix_str(self, *args, **kwargs):
            pass

        def update(self, n=1):
            out = super().update(n)
            self._reame.set(self.n, self.total)
            return out

        def close(self):
            if hasattr(self, "_reame"):
                self._reame.set(self.n, self.total)
                self._reame.close()
            super().close()

    return _Bar


class _NullStream:
    def write(self, s):
        return len(s)

    def flush(self):
        pass
