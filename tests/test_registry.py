"""Several models in one server (reame/server/registry.py, reame/turns.py): which model is
unloaded when (LRU of idle models, keep-alive), on a fake clock with fake services; refusal of
a model that can never fit; the turns models' steps take on the CPU, on a simulated step
stream."""

from __future__ import annotations

import math
import threading

import pytest

from reame.errors import ReameError
from reame.server.config import ServerConfig
from reame.server.model_specs import parse_duration, parse_spec
from reame.server.registry import FAILED_RETRY, ModelEntry, ModelRegistry, choose_victims
from reame.server.schemas import APIError
from reame.turns import Turns

MB = 2**20


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeService:
    """What the registry reads of a service: busy, stop, close, names."""

    def __init__(self, name):
        self.id, self.names = name, [name]
        self.busy = False
        self.stopped = self.closed = False

    def stop(self):
        self.stopped = True

    def close(self):
        self.closed = True


def make(sizes: dict, budget: int, keep=math.inf, clock=None, fail=()):
    entries = [ModelEntry(ServerConfig(model=f"/m/{n}.gguf"), [n], need * MB, need * MB, keep)
               for n, need in sizes.items()]
    built = []

    def build(e):
        if e.id in fail:
            raise RuntimeError(f"{e.id}: bad file")
        s = FakeService(e.id)
        built.append(s)
        return s
    reg = ModelRegistry(entries, build, budget * MB, clock=clock or Clock())
    reg._pid = -1                     # no reaper thread, no start-up load: the test drives it
    reg.start = lambda: None
    return reg, built


def load(reg, name, keep=None, timeout=30):
    with reg.use(name, keep_alive=keep, timeout=timeout) as s:
        return s


def state(reg) -> dict:
    return {e.id: e.state for e in reg.entries}


# ---- the LRU rule ----

def test_a_model_that_does_not_fit_unloads_the_least_recently_used_idle_one():
    # catches: evicting the most recently used, or the first listed, or every model
    clock = Clock()
    reg, built = make({"a": 100, "b": 100, "c": 100}, budget=250, clock=clock)
    load(reg, "a")
    clock.advance(1)
    load(reg, "b")
    clock.advance(1)
    load(reg, "a")                    # a is used again: b is now the coldest
    clock.advance(1)
    load(reg, "c")
    assert state(reg) == {"a": "loaded", "b": "unloaded", "c": "loaded"}
    b = built[1]
    assert b.id == "b" and b.stopped and b.closed     # stopped (saves) and its memory let go


def test_a_busy_model_is_never_unloaded_the_request_waits_then_gets_its_model():
    # catches: unloading a model whose requests are running (their streams would die)
    clock = Clock()
    reg, built = make({"a": 100, "b": 100}, budget=150, clock=clock)
    a = load(reg, "a")
    a.busy = True                               # a request of a's is generating
    with pytest.raises(APIError) as e:
        load(reg, "b", timeout=0.05)
    assert e.value.status == 503 and e.value.code == "model_loading"
    assert state(reg) == {"a": "loaded", "b": "unloaded"}
    a.busy = False                              # it finished: a is idle now
    assert load(reg, "b").id == "b"
    assert state(reg) == {"a": "unloaded", "b": "loaded"}


def test_a_leased_model_is_not_unloaded_between_choosing_it_and_submitting():
    # catches: counting only the scheduler's requests (a request still tokenizing its prompt
    # would find its model gone)
    reg, _ = make({"a": 100, "b": 100}, budget=150)
    with reg.use("a"):
        assert choose_victims(reg.entries, 100 * MB, 150 * MB) is None
        with pytest.raises(APIError):
            load(reg, "b", timeout=0.05)
    assert load(reg, "b").id == "b"


def test_choose_victims_takes_as_few_as_fit_coldest_first():
    # catches: unloading more models than needed, or in the wrong order
    clock = Clock()
    reg, _ = make({"a": 100, "b": 100, "c": 100, "d": 200}, budget=300, clock=clock)
    for n in ("b", "a", "c"):
        load(reg, n)
        clock.advance(1)
    assert choose_victims(reg.entries, 100 * MB, 300 * MB) == [reg.find("b")]
    assert choose_victims(reg.entries, 200 * MB, 300 * MB) == [reg.find("b"), reg.find("a")]
    assert choose_victims(reg.entries, 0, 300 * MB) == []


def test_a_model_bigger_than_the_budget_is_refused_with_a_400_and_nothing_unloaded():
    # catches: unloading everything and then failing (or waiting forever) on a model that
    # can never fit
    reg, _ = make({"small": 50, "huge": 500}, budget=300)
    load(reg, "small")
    with pytest.raises(APIError) as e:
        load(reg, "huge")
    assert e.value.status == 400 and e.value.code == "model_too_large"
    assert "500 MiB" in e.value.message and "300 MiB" in e.value.message
    assert state(reg) == {"small": "loaded", "huge": "unloaded"}


def test_an_unknown_model_is_a_404_naming_the_served_ones():
    reg, _ = make({"a": 10, "b": 10}, budget=100)
    with pytest.raises(APIError) as e:
        reg.find("zzz")
    assert e.value.status == 404 and "`a`, `b`" in e.value.message
    assert reg.find(None) is reg.entries[0]


# ---- the keep-alive rule ----

def test_keep_alive_unloads_an_idle_model_after_its_time_never_a_busy_one():
    # catches: unloading on a timer from the load (not the last use), or a busy model
    clock = Clock()
    reg, _ = make({"a": 10, "b": 10}, budget=100, keep=300, clock=clock)
    a, b = load(reg, "a"), load(reg, "b")
    clock.advance(200)
    load(reg, "a")                            # used again: its 300 s start over
    clock.advance(150)
    b.busy = True                             # b generates: in use now
    assert reg.tick() == []
    b.busy = False
    clock.advance(160)                        # a: 310 s idle; b: 160 s since seen busy
    assert [e.id for e in reg.tick()] == ["a"]
    assert state(reg) == {"a": "unloaded", "b": "loaded"}
    clock.advance(140)
    assert [e.id for e in reg.tick()] == ["b"]


def test_a_requests_keep_alive_overrides_its_models():
    # catches: ignoring the request's keep_alive, or applying it to every model
    clock = Clock()
    reg, _ = make({"a": 10, "b": 10}, budget=100, keep=300, clock=clock)
    load(reg, "a", keep=0)                    # Ollama's keep_alive 0: unload once idle
    load(reg, "b", keep=parse_duration(-1))   # negative: forever
    assert [e.id for e in reg.tick()] == ["a"]
    clock.advance(10**7)
    assert reg.tick() == [] and state(reg)["b"] == "loaded"


def test_a_failed_load_is_a_503_then_tried_again_later():
    # catches: a failed model failing forever (a transient error needs a restart), or retried
    # by every request at once
    clock = Clock()
    reg, _ = make({"a": 10, "bad": 10}, budget=100, clock=clock, fail={"bad"})
    with pytest.raises(APIError) as e:
        load(reg, "bad")
    assert e.value.status == 503 and e.value.code == "model_load_failed"
    assert "bad file" in e.value.message
    with pytest.raises(APIError) as e:          # at once again: not reloaded
        load(reg, "bad", timeout=0)
    assert e.value.code == "model_load_failed"
    clock.advance(FAILED_RETRY)
    with pytest.raises(APIError) as e:          # tried again (and fails again)
        load(reg, "bad")
    assert e.value.code == "model_load_failed" and reg.find("bad").state == "failed"
    assert load(reg, "a").id == "a"             # the others are unaffected


def test_durations_and_specs():
    assert parse_duration("5m") == 300 and parse_duration("1h30m") == 5400
    assert parse_duration(30) == 30 and parse_duration("500ms") == 0.5
    assert parse_duration("-1") == math.inf and parse_duration(-5) == math.inf
    for bad in ("abc", "5x", True, "", "nan"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    s = parse_spec("embed=/m/x.gguf,pooling=mean,kv-cache-mb=64,keep-alive=10m")
    assert (s.name, s.path) == ("embed", "/m/x.gguf")
    assert s.options == {"pooling": "mean", "kv_cache_mb": 64, "keep_alive": 600}
    assert parse_spec("/m/a=b.gguf").name is None           # "=" inside a path
    with pytest.raises(ReameError, match="not one of"):
        parse_spec("/m/x.gguf,colour=red")


# ---- turns on the CPU ----

def run_stream(costs: dict, steps: dict, clock: Clock, turns: Turns) -> list:
    """Each model's engine thread takes `steps[k]` turns of `costs[k]` engine seconds (the fake
    clock moves only inside a turn); returns who held each turn, in order."""
    order, lock = [], threading.Lock()

    def engine(k):
        for _ in range(steps[k]):
            with turns.turn(k):
                with lock:
                    order.append(k)
                clock.advance(costs[k])
    threads = [threading.Thread(target=engine, args=(k,)) for k in costs]
    with turns.turn("start"):          # every model waits for its first turn before any runs
        for t in threads:
            t.start()
        while len(turns._waiting) < len(costs):
            threading.Event().wait(0.001)
    for t in threads:
        t.join(60)
    return order


def test_turns_share_engine_time_fairly_whatever_each_step_costs():
    # catches: round robin by step (the model with 25x longer steps would take 96% of the
    # time), or first come first served (one model's loop monopolises the CPU)
    clock = Clock()
    turns = Turns(clock=clock)
    order = run_stream({"chat": 0.02, "embed": 0.5}, {"chat": 600, "embed": 12}, clock, turns)
    # while both had work: the first 12 embedding steps and the chat steps among them
    last = max(i for i, k in enumerate(order) if k == "embed")
    both = order[:last + 1]
    chat_time = both.count("chat") * 0.02
    embed_time = both.count("embed") * 0.5
    assert 0.75 < chat_time / embed_time < 1.35, (chat_time, embed_time)
    # and the embedding batches ran between decode steps, never two in a row
    assert all(not (a == b == "embed") for a, b in zip(both, both[1:]))


def test_a_model_back_from_idle_gets_no_credit_for_the_time_it_was_idle():
    # catches: a virtual time left where it was: a model idle for an hour would then run
    # alone for an hour's worth of steps
    clock = Clock()
    turns = Turns(clock=clock)
    run_stream({"a": 0.1}, {"a": 100}, clock, turns)          # a alone: 10 engine seconds
    order = run_stream({"a": 0.1, "b": 0.1}, {"a": 20, "b": 20}, clock, turns)
    first = order[:20]
    assert 7 <= first.count("a") <= 13, order               # b did not run 20 steps alone


def test_background_work_waits_for_the_other_models_to_be_idle():
    # catches: a start-up benchmark or warm-up of one model stepping between another
    # model's decode steps
    clock = Clock()
    turns = Turns(clock=clock)
    with turns.turn("chat"):
        assert not turns.may_idle("embed")
    assert not turns.may_idle("embed")                       # chat stepped just now
    assert turns.may_idle("chat")                            # its own steps do not count
    clock.advance(Turns.IDLE_AFTER)
    assert turns.may_idle("embed")


def test_a_models_dir_serves_its_gguf_files_and_skips_a_broken_one(tmp_path, stories_path,
                                                                  caplog):
    # catches: one malformed file in the directory keeping the server from starting, or
    # served (every request to it a 500), or later parts of a split model listed as models
    from reame.server.model_specs import entries_of, specs_of
    (tmp_path / "tiny.gguf").symlink_to(stories_path)
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + b"\xff" * 60)
    (tmp_path / "big-00002-of-00002.gguf").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a model")
    cfg = ServerConfig(models_dir=str(tmp_path), kv_cache_mb=8)
    entries = entries_of(cfg, specs_of(cfg))
    assert [e.id for e in entries] == ["tiny"]
    assert "broken.gguf" in caplog.text and "not served" in caplog.text
    with pytest.raises(ReameError, match="broken.gguf"):       # named on the command line
        entries_of(cfg, [parse_spec(str(tmp_path / "broken.gguf"))])


# ---- a load beside serving models: paced ----

def test_a_paced_thread_runs_a_fifth_of_the_time_while_others_serve_and_freely_otherwise():
    # catches: a pacer that never sleeps (the serving models' steps wait on the loader's GIL:
    # 1.8-2.9x their time per token, bench/multimodel.py), or one that also sleeps when no
    # other model serves (a lone load made slow for nothing)
    from reame import pace
    clock = Clock(0.0)
    slept = []

    def sleep(s):
        slept.append(s)
        clock.advance(s)
    busy = [True]
    with pace.paced(lambda: busy[0], duty=0.2, clock=clock, sleep=sleep):
        for _ in range(100):                  # 100 chunks of 0.5 ms of work
            clock.advance(0.0005)
            pace.checkpoint()
        work = 100 * 0.0005
        assert sum(slept) == pytest.approx(work * 4, rel=0.05)   # ran 1/5 of the time
        busy[0] = False
        slept.clear()
        for _ in range(100):
            clock.advance(0.0005)
            pace.checkpoint()
        assert slept == []
    pace.checkpoint()                         # outside the block: nothing happens
    assert slept == []


def test_a_registry_load_is_paced_and_restores_the_switch_interval():
    # catches: a load that is not paced (its build's checkpoints do nothing), or a switch
    # interval left at 0.2 ms after the load (every thread switching 25x as often forever)
    import sys

    from reame import pace
    seen = {}
    reg, _ = make({"a": 10, "b": 10}, budget=100)
    inner = reg.build

    def build(e):
        seen["pacer"] = getattr(pace._local, "pacer", None)
        seen["interval"] = sys.getswitchinterval()
        return inner(e)
    reg.build = build
    before = sys.getswitchinterval()
    load(reg, "a")
    assert seen["pacer"] is not None and seen["interval"] < before
    assert sys.getswitchinterval() == before


def test_the_several_models_settings_come_from_the_environment_too(tmp_path):
    # catches: REAME_MODELS read as one spec (a path with ';'), REAME_KEEP_ALIVE not taking
    # durations, under gunicorn (reame.wsgi:app) where flags do not exist
    cfg = ServerConfig.from_env({"REAME_MODELS": "a=/m/x.gguf; b=/m/y.gguf,pooling=mean",
                                 "REAME_KEEP_ALIVE": "5m", "REAME_MEMORY_BUDGET_MB": "100",
                                 "REAME_MODELS_DIR": str(tmp_path)})
    assert cfg.models == ("a=/m/x.gguf", "b=/m/y.gguf,pooling=mean")
    assert cfg.keep_alive == 300 and cfg.memory_budget_mb == 100
    assert cfg.models_dir == str(tmp_path)
    with pytest.raises(ReameError, match="REAME_KEEP_ALIVE"):
        ServerConfig.from_env({"REAME_KEEP_ALIVE": "soon"})
    with pytest.raises(ReameError, match="no such directory"):
        ServerConfig.from_env({"REAME_MODELS_DIR": str(tmp_path / "none")})


def test_an_unknown_models_404_is_short_whatever_name_was_sent():
    # catches: the 404 quoting the whole `model` a client sent (a 100 KB name came back as a
    # 100 KB body), or listing every file of a large --models-dir
    reg, _ = make({f"m{i}": 1 for i in range(50)}, budget=100)
    with pytest.raises(APIError) as e:
        reg.find("x" * 100_000)
    assert e.value.status == 404 and len(e.value.message) < 1000
    assert "x" * 64 + "..." in e.value.message and "30 more" in e.value.message


def test_a_request_waiting_for_memory_stops_waiting_when_its_client_leaves():
    # catches: a request whose client went away holding its HTTP thread until the timeout
    # (600 s by default) while it waits for a model that cannot be loaded yet: clients that
    # connect, ask and leave would take every thread
    reg, _ = make({"a": 100, "b": 100}, budget=150)
    load(reg, "a").busy = True                      # a's request runs: b must wait for memory
    gone = iter([True, True, False])
    with pytest.raises(APIError) as e:
        reg.acquire("b", timeout=None, connected=lambda: next(gone))
    assert e.value.status == 499 and reg.find("b").leases == 0
    assert state(reg) == {"a": "loaded", "b": "unloaded"}


def test_a_first_model_bigger_than_the_budget_makes_health_say_why():
    # catches: a server whose first model can never fit saying "loading" on /health for ever
    reg, _ = make({"big": 500, "small": 10}, budget=100)
    reg._pid = None
    reg.start = ModelRegistry.start.__get__(reg)
    reg.start()
    state_, error = reg.health()
    assert state_ == "failed" and "500 MiB" in error and "100 MiB" in error
    reg.stop()
