"""Each model keeps its own metrics (issue 32 item 5): every series but reame_requests_total
carries model_name, the model's id; scrape-time gauges and counters are read per loaded model
(`Metrics.models`, `model_gauges`, `model_counters`); an unloaded model's counters keep their
values and a reload continues from them; workers' snapshots of one model add up; the vllm:*
series follow the source's model. `Metrics` driven directly, with fake services."""

from __future__ import annotations

import json
import os
import time

import pytest

from reame.server.metrics import Metrics
from reame.server.model_metrics import register_model_series
from test_metrics_requests import parse, value


class Pool:
    def __init__(self, used=0, cached=0, n_blocks=64, queries=0, hits=0, evictions=0):
        self.used, self.cached, self.n_blocks = used, cached, n_blocks
        self.queries, self.hits, self.evictions = queries, hits, evictions


class Namespace:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeService:
    """What the model series read of a ModelService (weak references work, as on the real
    one)."""

    def __init__(self, id, alive=True, queue_depth=0, running=0, preemptions=0, **pool):
        self.id = id
        self.speculator = self.adaptive = None
        kv = Pool(**pool)
        self.scheduler = Namespace(alive=alive, queue_depth=queue_depth, running=running,
                                   running_seqs=running, params=Namespace(max_batch=4), pool=kv,
                                   planner=Namespace(pool=kv, preemptions=preemptions))


def models_of(parsed, name) -> dict:
    """{model_name: value} of the samples of `name`."""
    return {dict(lab)["model_name"]: v for (n, lab), v in parsed.items() if n == name}


def metrics_over(models: dict, metrics_dir=None) -> Metrics:
    m = register_model_series(Metrics(metrics_dir))
    m.models = lambda: models
    return m


def test_two_models_get_separate_samples():
    """Catches: both models summed into one sample (or one unlabelled sample); one model's
    service read for every label; a per-request value recorded without its model."""
    a = FakeService("alpha", queue_depth=2, running=1, used=8, n_blocks=32, queries=40, hits=16)
    b = FakeService("beta", queue_depth=5, running=3, used=30, n_blocks=60, queries=7, hits=0)
    m = metrics_over({"alpha": a, "beta": b})
    m.inc("reame_prompt_tokens_total", 11, ("alpha",))
    m.inc("reame_prompt_tokens_total", 4, ("beta",))
    m.observe("reame_request_duration_seconds", 0.5, ("beta", "/v1/completions"))
    p = parse(m.render())
    assert models_of(p, "reame_queue_depth") == {"alpha": 2, "beta": 5}
    assert models_of(p, "reame_running_requests") == {"alpha": 1, "beta": 3}
    assert models_of(p, "reame_kv_cache_usage_ratio") == {"alpha": 0.25, "beta": 0.5}
    assert models_of(p, "reame_prefix_cache_queries_total") == {"alpha": 40, "beta": 7}
    assert models_of(p, "reame_prompt_tokens_total") == {"alpha": 11, "beta": 4}
    assert value(p, "reame_request_duration_seconds_count", model_name="beta",
                 endpoint="/v1/completions") == 1
    assert models_of(p, "reame_model_loaded") == {"alpha": 1, "beta": 1}
    # a model that has served nothing yet still shows its counters at 0
    assert models_of(p, "reame_generation_tokens_total") == {"alpha": 0, "beta": 0}


def test_requests_total_has_no_model_and_other_series_need_one():
    """reame_requests_total stays (endpoint, status); a record call without the model is an
    error, not a sample in the wrong shape. Catches a call site left unlabelled."""
    m = Metrics()
    m.inc("reame_requests_total", 1, ("/v1/completions", "200"))
    with pytest.raises(ValueError):
        m.inc("reame_prompt_tokens_total", 3)
    with pytest.raises(ValueError):
        m.observe("reame_request_duration_seconds", 0.1, ("/v1/completions",))
    p = parse(m.render())
    assert value(p, "reame_requests_total", endpoint="/v1/completions", status="200") == 1


def test_unloaded_model_keeps_its_counters_and_a_reload_continues_from_them():
    """Catches: counters reset when a model unloads (they vanish or read 0); a reloaded
    model's counters starting again from its fresh values (the series goes back); a reload
    between two scrapes (never seen unloaded) not noticed; a counter that went down under the
    same service not taken as a reset; gauges of an unloaded model
    reported (stale, or as 0)."""
    models = {"alpha": FakeService("alpha", queries=10, preemptions=2, queue_depth=1)}
    m = metrics_over(models)
    p = parse(m.render())
    assert value(p, "reame_prefix_cache_queries_total", model_name="alpha") == 10
    models["alpha"].scheduler.planner.pool.queries = 25
    assert value(parse(m.render()), "reame_prefix_cache_queries_total", model_name="alpha") == 25

    models["alpha"] = None                              # unloaded
    p = parse(m.render())
    assert value(p, "reame_prefix_cache_queries_total", model_name="alpha") == 25
    assert value(p, "reame_preemptions_total", model_name="alpha") == 2
    assert value(p, "reame_model_loaded", model_name="alpha") == 0
    assert "alpha" not in models_of(p, "reame_queue_depth")
    assert "alpha" not in models_of(p, "reame_kv_blocks_capacity")
    assert value(parse(m.render()), "reame_prefix_cache_queries_total", model_name="alpha") == 25

    models["alpha"] = FakeService("alpha", queries=3)   # loaded again: fresh counters
    p = parse(m.render())
    assert value(p, "reame_prefix_cache_queries_total", model_name="alpha") == 28
    assert value(p, "reame_preemptions_total", model_name="alpha") == 2
    assert value(p, "reame_model_loaded", model_name="alpha") == 1

    models["alpha"] = FakeService("alpha", queries=5)   # reloaded between two scrapes
    assert value(parse(m.render()), "reame_prefix_cache_queries_total", model_name="alpha") == 33
    models["alpha"].scheduler.planner.pool.queries = 2  # a counter reset under the same service
    assert value(parse(m.render()), "reame_prefix_cache_queries_total", model_name="alpha") == 35

    models.pop("alpha")                                 # not even configured any more
    assert value(parse(m.render()), "reame_prefix_cache_queries_total", model_name="alpha") == 35


def test_model_loaded_for_every_configured_model():
    """1 for a loaded model whose engine thread runs, 0 for one whose thread stopped and for
    a configured model not loaded; the unloaded one has no other gauge. Catches: a configured
    model missing until it loads; loaded reported without looking at the engine thread."""
    m = metrics_over({"alpha": FakeService("alpha"), "beta": FakeService("beta", alive=False),
                      "gamma": None})
    p = parse(m.render())
    assert models_of(p, "reame_model_loaded") == {"alpha": 1, "beta": 0, "gamma": 0}
    assert set(models_of(p, "reame_running_requests")) == {"alpha", "beta"}
    assert models_of(p, "reame_prompt_tokens_total")["gamma"] == 0     # counters start at 0


def test_workers_snapshots_of_a_model_sum(tmp_path):
    """Two workers serving alpha, one also beta: alpha's counters and gauges add up, beta
    stays its own, and alpha's KV usage is its summed used / capacity (not a sum or an
    average of ratios). A dead worker's gauges go, its counters stay. Catches: a worker's
    samples replacing another's; models merged across labels; the ratio of the whole server
    given to every model."""
    other = metrics_over({"alpha": FakeService("alpha", running=2, used=30, n_blocks=100,
                                               queries=5),
                          "beta": FakeService("beta", running=1, used=10, n_blocks=10)},
                         str(tmp_path))
    other.inc("reame_prompt_tokens_total", 7, ("alpha",))
    other.inc("reame_prompt_tokens_total", 1, ("beta",))
    snap = other.snapshot()
    (tmp_path / f"worker-{os.getppid()}.json").write_text(json.dumps(snap))   # a live pid
    me = metrics_over({"alpha": FakeService("alpha", running=1, used=90, n_blocks=100,
                                            queries=6)}, str(tmp_path))
    me.inc("reame_prompt_tokens_total", 5, ("alpha",))
    p = parse(me.render())
    assert models_of(p, "reame_prompt_tokens_total") == {"alpha": 12, "beta": 1}
    assert models_of(p, "reame_running_requests") == {"alpha": 3, "beta": 1}
    assert models_of(p, "reame_model_loaded") == {"alpha": 2, "beta": 1}
    assert models_of(p, "reame_prefix_cache_queries_total")["alpha"] == 11
    usage = models_of(p, "reame_kv_cache_usage_ratio")
    assert usage["alpha"] == pytest.approx(0.6) and usage["beta"] == pytest.approx(1.0)
    assert value(p, "vllm:kv_cache_usage_perc", model_name="alpha", engine="0") == \
        pytest.approx(0.6)

    (tmp_path / f"worker-{os.getppid()}.json").rename(tmp_path / "worker-999999999.json")
    p = parse(me.render())                              # that worker has exited
    assert models_of(p, "reame_prompt_tokens_total") == {"alpha": 12, "beta": 1}
    assert models_of(p, "reame_running_requests") == {"alpha": 1}
    assert models_of(p, "reame_kv_cache_usage_ratio") == {"alpha": 0.9}


def test_vllm_series_per_model():
    """One vllm:* sample per model, labelled by the source's model_name (engine "0",
    finished_reason kept); before anything is recorded, zeros under every configured id.
    Catches: the vllm label taken from one name for the whole server (models summed under
    it); a model without traffic absent from the vllm:* series."""
    m = metrics_over({"alpha": FakeService("alpha", running=2), "beta": None})
    p = parse(m.render())
    assert models_of(p, "vllm:prompt_tokens_total") == {"alpha": 0, "beta": 0}
    assert models_of(p, "vllm:num_requests_running") == {"alpha": 2}
    m.inc("reame_prompt_tokens_total", 9, ("alpha",))
    m.inc("reame_prompt_tokens_total", 4, ("beta",))
    m.finished("beta", ["stop", "length"], [3, 5], [4, 4], [(0.0, 0.1, 0.2, 0.3)] * 2)
    p = parse(m.render())
    assert models_of(p, "vllm:prompt_tokens_total") == {"alpha": 9, "beta": 4}
    assert value(p, "vllm:request_success_total", model_name="beta", engine="0",
                 finished_reason="length") == 1
    assert value(p, "vllm:request_success_total", model_name="alpha", engine="0",
                 finished_reason="length") == 0
    assert models_of(p, "vllm:request_generation_tokens_sum") == {"alpha": 0, "beta": 8}
    assert value(p, "vllm:prompt_tokens_total", model_name="beta", engine="0") == 4


def test_vllm_gauges_show_zeros_before_any_model_loads():
    """No model loaded yet: the reame_* gauges have no sample, the vllm:* ones a zero under
    each configured id (dashboards see the series). Catches the vllm:* gauges left empty
    until a model loads."""
    p = parse(metrics_over({"alpha": None, "beta": None}).render())
    assert not models_of(p, "reame_running_requests")
    assert models_of(p, "vllm:num_requests_running") == {"alpha": 0, "beta": 0}
    assert models_of(p, "vllm:kv_cache_usage_perc") == {"alpha": 0, "beta": 0}
    assert models_of(p, "vllm:time_to_first_token_seconds_count") == {"alpha": 0, "beta": 0}


def test_no_model_configured_is_a_valid_exposition():
    """A bare Metrics (no models) still renders text Prometheus parses."""
    p = parse(Metrics().render())
    assert not models_of(p, "reame_prompt_tokens_total")


def test_the_app_labels_its_model_from_loading_to_serving(stories_model):
    """create_app's wiring (metrics.models over the loader): while the model loads it is
    configured, not loaded (reame_model_loaded 0, the vllm:* gauges at 0 under its id, no
    reame_* gauge); once loaded its series carry its id, completions and embeddings alike, and
    reame_requests_total none. Catches the configured model missing before it loads, and a
    request recorded under another name (or none) than the model's id."""
    import threading

    from falcon import testing

    from conftest import TIME_SCALE
    from reame.engines import create_engine
    from reame.server import ServerConfig, create_app

    release = threading.Event()

    def factory():
        release.wait(10 * TIME_SCALE)
        return create_engine(stories_model, "reference", n_ctx=256, max_seqs=2)

    app = create_app(factory, ServerConfig(model=stories_model.path, max_seqs=2,
                                           adaptive_boot=0))
    c = testing.TestClient(app)
    try:
        assert c.simulate_get("/health").status_code == 503
        p = parse(c.simulate_get("/metrics").text)
        assert models_of(p, "reame_model_loaded") == {"stories260K": 0}
        assert not models_of(p, "reame_running_requests")
        assert models_of(p, "vllm:num_requests_running") == {"stories260K": 0}
        release.set()
        deadline = time.monotonic() + 30 * TIME_SCALE
        while c.simulate_get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = c.simulate_post("/v1/completions", json={"prompt": "Once", "max_tokens": 2,
                                                     "ignore_eos": True})
        assert r.status_code == 200, r.text
        r = c.simulate_post("/v1/embeddings", json={"input": "Once upon a time"})
        assert r.status_code == 200, r.text
        p = parse(c.simulate_get("/metrics").text)
        assert models_of(p, "reame_model_loaded") == {"stories260K": 1}
        assert models_of(p, "reame_running_requests") == {"stories260K": 0}
        assert models_of(p, "reame_generation_tokens_total") == {"stories260K": 2}
        assert models_of(p, "reame_prompt_tokens_total")["stories260K"] == \
            r.json["usage"]["prompt_tokens"] + 2       # BOS + "Once" for the completion
        for endpoint in ("/v1/completions", "/v1/embeddings"):
            assert value(p, "reame_request_duration_seconds_count", model_name="stories260K",
                         endpoint=endpoint) == 1
        assert value(p, "vllm:generation_tokens_total", model_name="stories260K",
                     engine="0") == 2
        assert value(p, "reame_requests_total", endpoint="/v1/completions", status="200") == 1
    finally:
        release.set()
        if app.reame.service is not None:
            app.reame.service.stop()


def test_a_snapshot_without_model_labels_is_skipped(tmp_path):
    """A worker of the previous version (unlabelled series, during a rolling restart) does not
    break the scrape: its samples are left out. Catches a render that fails on them."""
    old = {"reame_prompt_tokens_total": [[[], 5.0]], "reame_kv_blocks_used": [[[], 3.0]],
           "reame_requests_total": [[["/v1/completions", "200"], 2.0]]}
    (tmp_path / f"worker-{os.getppid()}.json").write_text(json.dumps(old))   # a live pid
    m = metrics_over({"alpha": FakeService("alpha")}, str(tmp_path))
    m.inc("reame_prompt_tokens_total", 1, ("alpha",))
    p = parse(m.render())
    assert models_of(p, "reame_prompt_tokens_total") == {"alpha": 1}
    assert value(p, "reame_requests_total", endpoint="/v1/completions", status="200") == 2
