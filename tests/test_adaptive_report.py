"""The adaptive report against counted truth (issue 27 item 2): simulated step streams fed to
the profile with their own clock, the report read at a known time."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from reame.adaptive import AdaptiveRuntime
from reame.planner import SchedulerParams
from tests.test_planner import FakeEngine


def runtime():
    eng = FakeEngine(slots=64, blocks=64, bs=64, n_ctx=4096)
    eng.config = SimpleNamespace(n_vocab=100)
    return AdaptiveRuntime(eng, SchedulerParams(max_batch=64, token_budget=512,
                                                prefill_chunk=512), enabled=False)


def stream(rt, t, seconds, step_s, batch, busy=1.0):
    """Steps of step_s seconds emitting `batch` tokens each, for `seconds` from t; the engine
    busy `busy` of the time (idle gaps between steps). Returns the end time."""
    end = t + seconds
    while t + step_s <= end:
        t += step_s
        rt.profile.step(batch, batch, step_s, True, t, running=batch)
        t += step_s * (1 / busy - 1)
    return end


@pytest.mark.parametrize("step_s", [0.02, 0.062, 0.3])
@pytest.mark.parametrize("batch", [1, 16, 64])
def test_throughput_and_cost_per_token_within_3_percent(step_s, batch):
    """Saturated streams of 20-300 ms steps at batches 1-64: tok/s over the last minute and the
    engine time per generated token within 3% of the counted truth. Catches a report that
    counts only the last N steps (62 ms steps at batch 16 read as 137 tok/s for 258)."""
    rt = runtime()
    now = stream(rt, 1000.0, 150.0, step_s, batch)
    r = rt.report(now=now)
    assert r["tok_s_last_minute"] == pytest.approx(batch / step_s, rel=0.03)
    assert r["cost_per_token_ms"] == pytest.approx(step_s / batch * 1e3, rel=0.03)
    assert r["saturated"] and r["running_batch"] == pytest.approx(batch)


def test_the_baseline_is_the_first_minute_of_traffic_and_tok_s_only_compares_saturated():
    """Boot work (steps that generate nothing) then a minute at batch 16 of 62 ms steps, then
    batch 32 of 80 ms steps: the change is +55% (400 vs 258 tok/s), and the cost per token
    -38%. Below saturation (the engine idle half the time) tok/s is the offered load: no tok/s
    change is claimed, the cost per token still compares. Catches a baseline taken from the
    server's start (the boot minute) or a tok/s change printed below saturation."""
    rt = runtime()
    t = 500.0
    for _ in range(300):                                 # 30 s of start-up steps, no tokens
        t += 0.1
        rt.profile.step(8, 0, 0.1, True, t)
    t = stream(rt, t, 60.0, 0.062, 16)
    t = stream(rt, t, 120.0, 0.080, 32)
    r = rt.report(now=t)
    assert r["first_minute"]["tok_s"] == pytest.approx(16 / 0.062, rel=0.03)
    assert r["tok_s_change"] == pytest.approx((32 / 0.08) / (16 / 0.062) - 1, abs=0.03)
    assert r["cost_per_token_change"] == pytest.approx((0.08 / 32) / (0.062 / 16) - 1,
                                                       abs=0.03)
    t = stream(rt, t, 90.0, 0.062, 4, busy=0.5)          # half busy: not saturated
    r = rt.report(now=t)
    assert not r["saturated"] and r["tok_s_change"] is None
    assert r["tok_s_last_minute"] == pytest.approx(4 / 0.124, rel=0.03)
    assert r["cost_per_token_ms"] == pytest.approx(62 / 4, rel=0.03)
    assert "below saturation" in rt.line()


def test_p95_time_per_output_token_is_per_request_with_mixed_steps():
    """The p95 is over finished requests' own first-to-last token times (a request slowed by
    prompt chunks in its steps counts), not over decode-only steps."""
    rt = runtime()
    t = stream(rt, 10.0, 61.0, 0.05, 4)
    for i in range(100):
        rt.profile.finished(50, 0.05 if i < 90 else 0.4, t - 30 + i * 0.1)
    assert rt.report(now=t)["tpot_p95_s"] == pytest.approx(0.4)


def test_report_is_thread_safe():
    """Reports read from another thread while the engine thread records steps."""
    rt = runtime()
    errors = []
    done = threading.Event()

    def read():
        while not done.is_set():
            try:
                rt.report(now=2000.0)
            except Exception as e:          # noqa: BLE001
                errors.append(e)
                return
    th = threading.Thread(target=read)
    th.start()
    t = 1000.0
    for i in range(3000):
        t += 0.03
        rt.profile.step(4, 4, 0.03, True, t, running=4)
        rt.profile.arrival(10, t)
        rt.profile.finished(20, 0.03, t)
    done.set()
    th.join()
    assert not errors, errors
