"""Issue 29, item 5: a restart's hot prefixes are computed in idle time, a piece at a time, so
/health's 200 means requests are served (they waited ~85 s behind the warm-up before)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TIME_SCALE

from reame.scheduler import DONE, Scheduler, SchedulerParams
from reame.server.warmup import PrefixWarmer

from test_adaptive import engine, model, run_prompts  # noqa: F401  (a fixture)


class FakeRequest:
    def __init__(self, prompt):
        self.prompt, self.finished, self.cancelled = prompt, False, False

    def cancel(self):
        self.cancelled = True


class FakeScheduler:
    def __init__(self):
        self.running, self.queue_depth, self.submitted = 0, 0, []

    def submit_embeddings(self, prompts, pooling="mean"):
        assert pooling == "last" and len(prompts) == 1
        self.submitted.append(FakeRequest(prompts[0]))
        return self.submitted[-1]


def test_pieces_start_only_while_no_request_runs_or_waits():
    """Catches the old warm-up (every prefix queued at once, ahead of clients), a warmer that
    starts a piece while a client's request runs or waits, one that starts the next piece
    before the last one ended, and pieces not cut at whole KV blocks (a later piece would not
    find the earlier one in the prefix cache)."""
    a, b = list(range(1000, 1600)), list(range(2000, 2100))
    s = FakeScheduler()
    w = PrefixWarmer(s, [a, b], block_size=64, piece=200)       # 200 -> 256, whole blocks
    s.running = 1
    assert w.tick() and s.submitted == []                       # a client runs: nothing
    s.running, s.queue_depth = 0, 2
    assert w.tick() and s.submitted == []                       # clients wait: nothing
    s.queue_depth = 0
    assert w.tick() and [r.prompt for r in s.submitted] == [a[:256]]
    s.running = 1                                               # the piece itself runs
    assert w.tick() and len(s.submitted) == 1                   # one piece at a time
    s.submitted[-1].finished, s.running = True, 0
    assert w.tick() and s.submitted[-1].prompt == a[:512]       # the next piece, whole blocks
    s.submitted[-1].finished = True
    s.queue_depth = 1                                           # a client arrives
    assert w.tick() and len(s.submitted) == 2
    s.queue_depth = 0
    assert w.tick() and s.submitted[-1].prompt == a             # the rest of a
    s.submitted[-1].finished = True
    assert w.tick() and s.submitted[-1].prompt == b
    assert w.status() == {"prefixes": 2, "tokens": 700, "computed": 700}
    s.submitted[-1].finished = True
    assert not w.tick() and w.finished and len(s.submitted) == 4


def test_stop_cancels_the_running_piece_and_starts_no_other():
    s = FakeScheduler()
    w = PrefixWarmer(s, [list(range(1000))], block_size=16, piece=64)
    assert w.tick() and len(s.submitted) == 1
    w.stop()
    assert s.submitted[0].cancelled
    s.submitted[0].finished = True
    assert not w.tick() and len(s.submitted) == 1


def test_a_warmed_prefix_is_found_by_the_first_request(model):
    """On the real scheduler and engine: a 100-token prefix warmed in pieces of 32 tokens (2
    blocks of 16) is in the prefix cache for the first request (96 tokens: whole blocks).
    Catches pieces that do not reach the prefix cache, or a last piece that is dropped."""
    rng = np.random.default_rng(11)
    prefix = [int(t) for t in rng.integers(10, model.config.n_vocab, 100)]
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    s = Scheduler(eng, params).start()
    try:
        w = PrefixWarmer(s, [prefix], block_size=16, piece=32)
        n = 0
        while w.tick():
            if w.current is not None and not w.current.finished:
                while w.current.out.get(timeout=120 * TIME_SCALE) is not DONE:
                    pass
            n += 1
            assert n < 100
        assert w.finished and w.status()["computed"] == 100
        assert run_prompts(model, s, [prefix + [11, 12, 13]]) == [96]
    finally:
        s.stop()
