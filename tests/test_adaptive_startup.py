"""The start-up benchmark runs in the background (issue 27 item 6): the server answers as soon as
its kernels are compiled, on the defaults, and the engine thread runs the benchmark's synthetic
steps one at a time while no request is there, until its budget of engine time is spent.

Driven without live threads: the scheduler's `step()`, the runtime's `idle_step()`, and the
engine loop `_loop()` run in the test's own thread with its sleep replaced."""

from __future__ import annotations

import time

import numpy as np

from reame.adaptive import AdaptiveRuntime
from reame.engines import create_engine
from reame.generate import Generation
from reame.planner import SchedulerParams
from reame.sampling import SamplingParams
from reame.scheduler import Scheduler
from reame.server import ServerConfig
from reame.server.service import ModelService
from reame.tokenizer import Tokenizer

N_CTX = 256


def jit(model, block_size=64):
    return create_engine(model, "jit", n_ctx=N_CTX, max_seqs=4, block_size=block_size)


def generation(model, prompt, max_tokens=8):
    return Generation(Tokenizer.from_metadata(model.metadata), prompt,
                      SamplingParams(temperature=0), max_tokens=max_tokens, ignore_eos=True,
                      n_ctx=N_CTX)


def serve(model, sched, prompt, max_tokens=8):
    """One greedy request, driven through scheduler.step() to its end; its tokens."""
    gen = generation(model, prompt, max_tokens)
    req = sched.submit([prompt], [[gen]])
    for _ in range(10 * max_tokens):
        if req.finished:
            break
        sched.step(time.monotonic())
    assert req.finished and len(gen.output_ids) == max_tokens
    return gen.output_ids


def prompt(model, n, seed=0):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(10, model.config.n_vocab, n)]


def test_the_server_answers_before_the_startup_benchmark(stories_model, tmp_path, monkeypatch):
    """ModelService.start() under --adaptive on, with no saved strategy, returns without having
    run a synthetic step: the benchmark is pending, the scheduler is started, and a request is
    served (through scheduler.step) before any benchmark step ran; then idle steps run it.
    Catches the old start(), which ran the whole benchmark (default 10 s of synthetic steps)
    before starting the scheduler, so a new model answered its first request 10 s late."""
    started = []
    monkeypatch.setattr(Scheduler, "start", lambda self: started.append(self) or self)
    eng = jit(stories_model)
    config = ServerConfig(model=str(stories_model.path), max_seqs=4, adaptive_boot=2.0,
                          adaptive_dir=str(tmp_path))
    svc = ModelService(eng, Tokenizer.from_metadata(stories_model.metadata), config).start()
    a, s = svc.adaptive, svc.scheduler
    assert started == [s]
    assert a.tuner.steps == 0 and eng.steps == 0        # no synthetic step ran in start()
    assert a.report()["startup_benchmark"]["state"] == "pending" and a.idle_pending
    serve(stories_model, s, prompt(stories_model, 12))
    assert a.boot_steps == 0 and s.steps > 0             # answered before the benchmark ran
    for _ in range(5):
        assert a.idle_step()
    rep = a.report()["startup_benchmark"]
    assert rep["state"] == "running" and rep["steps"] == 5 and 0 < rep["done_share"] < 1
    assert "start-up benchmark running" in a.line()


def test_a_saved_strategy_or_adaptive_off_plans_no_startup_benchmark(stories_model, tmp_path,
                                                                     monkeypatch):
    """--adaptive on with a strategy saved for this CPU, model and version, and --adaptive off,
    plan no start-up benchmark (the report says none; the idle path has nothing to run).
    Catches a background benchmark planned whatever the mode or the saved strategy."""
    monkeypatch.setattr(Scheduler, "start", lambda self: self)
    eng = jit(stories_model)
    rt = AdaptiveRuntime(eng, SchedulerParams(max_batch=4), state_dir=tmp_path)
    assert rt.save()                                     # a strategy (no choice changed)
    tok = Tokenizer.from_metadata(stories_model.metadata)
    for mode in ("on", "off"):
        config = ServerConfig(model=str(stories_model.path), max_seqs=4, adaptive_boot=2.0,
                              adaptive_dir=str(tmp_path), adaptive=mode)
        a = ModelService(eng, tok, config).start().adaptive
        assert a.report()["startup_benchmark"] == {"state": "none"}, mode
        assert not a.idle_pending and not a.idle_step() and a.tuner.steps == 0, mode


def test_idle_steps_run_only_without_requests(stories_model, tmp_path):
    """The engine loop (`_loop`, run here in the test's thread) runs a synthetic step only when
    no request is in the scheduler or its inbox, never sleeps while the benchmark has steps to
    run, and takes a request submitted during a synthetic step right after that one step; the
    steps of requests keep the online explore share. Catches: a loop that runs synthetic steps
    between the steps of a request in flight, one that sleeps (up to 1 s) before the next idle
    step or before taking a request that arrived, one that leaves the benchmark's explore share
    of 1.0 on real steps, and the old loop, which had no idle work at all."""
    eng = jit(stories_model)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    s = Scheduler(eng, params, adaptive=rt)
    assert rt.schedule_boot(600.0)
    online = rt.tuner.explore_share
    log, shares, reqs = [], [], []
    real_step, real_idle, real_wait = s.step, rt.idle_step, s._cond.wait

    def submit(seed):
        p = prompt(stories_model, 10, seed)
        gen = generation(stories_model, p)
        reqs.append((s.submit([p], [[gen]]), gen))

    def step(now):
        log.append(("real", len(s._requests)))
        shares.append(rt.tuner.explore_share)
        return real_step(now)

    def idle():
        log.append(("idle", len(s._requests) + len(s._inbox)))
        n = sum(1 for e in log if e[0] == "idle")
        if n == 3:
            submit(1)                     # arrives while this synthetic step runs
        if n == 8:
            s._stop = True
        return real_idle()

    waits = []

    def wait(timeout=None):
        waits.append(timeout)
        s._stop = True                    # the loop went to sleep: end the run here
        return real_wait(0)

    s.step, rt.idle_step, s._cond.wait = step, idle, wait
    submit(0)
    s._loop()
    assert waits == [], log
    assert log[0] == ("real", 1)                         # the first request: no benchmark first
    assert all(n == 0 for kind, n in log if kind == "idle"), log
    third = [i for i, e in enumerate(log) if e[0] == "idle"][2]
    assert log[third + 1] == ("real", 1), log            # taken after that one step
    assert [kind for kind, _ in log].count("idle") == 8 and rt.boot_steps == 8
    assert all(len(g.output_ids) == 8 for _, g in reqs) and len(reqs) == 2
    assert shares and all(x == online for x in shares)
    assert rt.tuner.explore_share == online


def test_the_startup_benchmark_stops_at_its_budget(stories_model, tmp_path):
    """Idle steps run until the benchmark's engine time reaches its budget, then none (the step
    that crosses it is the last), with no trial left half-way and the online explore share
    back; time outside its steps (here a 0.4 s pause, on a server: serving requests) does not
    count. Catches a benchmark that goes on while idle past its budget (burning the idle CPU),
    one that stops early, one whose budget runs in wall time from the start (a server busy from
    its start would lose its benchmark), and one that leaves a trial of a synthetic program
    running (it would stall the online tuner)."""
    eng = jit(stories_model)
    rt = AdaptiveRuntime(eng, SchedulerParams(max_batch=4), state_dir=tmp_path,
                         exact_kernels=False)   # any tile: candidates enough for a trial
    online = rt.tuner.explore_share
    budget = 0.3
    assert rt.schedule_boot(budget)
    spent = []
    while rt.idle_step():
        spent.append(rt.boot_spent)
        if len(spent) == 1:
            time.sleep(0.4)
        assert len(spent) < 10**5
    assert len(spent) >= 3 and spent[-2] < budget <= spent[-1]
    assert rt.boot_state == "done" and not rt.idle_pending
    steps = rt.tuner.steps
    assert not rt.idle_step() and rt.tuner.steps == steps and rt.boot_steps == len(spent)
    assert rt.tuner.trial is None and rt.tuner.explore_share == online
    rep = rt.report()["startup_benchmark"]
    assert rep["state"] == "done" and rep["done_share"] == 1.0 and rep["steps"] == len(spent)
    assert rep["wall_s"] >= 0.4 + rep["spent_s"] - 0.05
    assert "start-up benchmark" not in rt.line()
    # a budget that runs out during a trial (deterministically here: once a trial is under way
    # the budget is cut to what was spent): the trial ends with the benchmark. A candidate is
    # built on a thread at nice 19 (compiled, on a fresh cache): the loop yields the CPU while
    # one is building instead of stepping, which would starve the build on a loaded machine
    assert rt.schedule_boot(600.0)
    deadline = time.monotonic() + 300
    while rt.tuner.trial is None and time.monotonic() < deadline:
        if rt.tuner._building:
            time.sleep(0.01)
            continue
        assert any(c.candidates for c in rt.tuner.classes.values()) or rt.tuner._ready
        assert rt.idle_step()
    assert rt.tuner.trial is not None
    rt.boot_budget = rt.boot_spent
    assert rt.idle_step() and rt.boot_state == "done"
    assert rt.tuner.trial is None and rt.tuner.explore_share == online


def test_synthetic_steps_never_write_into_cached_prefix_blocks(stories_model, tmp_path):
    """After a request, its slot's block-table row still lists its blocks, which the prefix
    cache keeps; the benchmark's synthetic sequences use those slots. Their keys and values go
    to blocks of their own: every cached block is bit-identical after 200 idle steps, and the
    same prompt again (its prefix a cache hit) gives the same greedy output. Catches synthetic
    steps writing through the stale rows (a later cache hit would read their keys)."""
    eng = jit(stories_model, block_size=16)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    s = Scheduler(eng, params, adaptive=rt)
    p = prompt(stories_model, 70, seed=3)
    first = serve(stories_model, s, p, max_tokens=16)
    pool = s.planner.pool
    cached = sorted(pool.by_hash.values())
    assert len(cached) >= 4
    kv = eng.kv
    before = [(kv.k[i][cached].copy(), kv.v[i][cached].copy()) for i in range(kv.n_layer)]
    free = pool.available
    assert rt.schedule_boot(600.0)
    for _ in range(200):                        # every program size, positions 16..63
        assert rt.idle_step()
    for i in range(kv.n_layer):
        assert np.array_equal(kv.k[i][cached], before[i][0]), i
        assert np.array_equal(kv.v[i][cached], before[i][1]), i
    assert pool.available == free and sorted(pool.by_hash.values()) == cached
    pool.check()
    hits = pool.hits
    assert serve(stories_model, s, p, max_tokens=16) == first
    assert pool.hits > hits
