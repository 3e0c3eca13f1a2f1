"""Pacing a background thread's Python work so that the engine threads serving meanwhile keep
their speed.

Loading a model beside others that serve is Python for the most part (the GGUF header, the
tokenizer, the step programs) and holds the GIL while it runs; an engine thread between two
forward passes needs the GIL for its planning and sampling, and waits for it. Measured on 2
vCPUs (bench/multimodel.py): a chat model's time per token 1.8-2.9x its time alone while
another model loaded at full speed. The loops of a load call `checkpoint()`; in a thread that
runs `paced(...)`, a checkpoint lets the thread run SLICE seconds, then sleeps (the GIL free)
long enough that it runs at most `duty` of the time while `busy()` says another model is
serving. Other threads' checkpoints cost one attribute lookup.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable

SLICE = 0.001                   # s a paced thread runs between two sleeps

_local = threading.local()


def background_priority(nice: int = 19) -> None:
    """Run the calling thread at CPU priority `nice` (19: the lowest; Linux: per thread): a
    kernel candidate's build and check (the adaptive tuner) or a model's load run while the
    engine serves; at equal priority they would take a core from the step's threads (py-spy
    on a 2-vCPU server at 16 clients: ~6% of the CPU time went to candidate builds)."""
    import os
    import sys
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:
            pass


def checkpoint() -> None:
    """Called from the long loops of a model's load (and nothing else)."""
    pacer = getattr(_local, "pacer", None)
    if pacer is not None:
        pacer()


@contextmanager
def paced(busy: Callable[[], bool], duty: float = 0.2, clock=time.perf_counter,
          sleep=time.sleep):
    """Within the block, this thread's checkpoints keep it to `duty` of the wall time while
    `busy()` (checked once a slice) is true."""
    state = {"t0": clock()}

    def pacer():
        now = clock()
        ran = now - state["t0"]
        if ran >= SLICE:
            if busy():
                sleep(ran * (1 - duty) / duty)
            state["t0"] = clock()
    old = getattr(_local, "pacer", None)
    _local.pacer = pacer
    try:
        yield
    finally:
        _local.pacer = old
