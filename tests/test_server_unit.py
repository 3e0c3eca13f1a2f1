"""The server through falcon.testing with injected engines (the reference engine on stories260K,
wrapped where a test needs it slow, gated or failing), and the scheduler on its own."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from conftest import TIME_SCALE
from falcon import testing

from reame.engines import ENGINES, create_engine
from reame.generate import Generation
from reame.model import load_model
from reame.sampling import SamplingParams
from reame.planner import SchedulerParams
from reame.scheduler import (DONE, EngineFailure, QueueFull, RequestTimeout, Scheduler,
                             SchedulerStopped)
from reame.server import ServerConfig, create_app
from reame.server.schemas import MAX_STOP
from reame.tokenizer import Tokenizer

N_CTX = 256


# ---- engines and apps ----

class WrappedEngine:
    """An engine in front of another: optional delay per step, a gate, failures, a call count."""

    def __init__(self, inner, delay: float = 0.0, fail_times: int = 0):
        self.inner = inner
        self.model, self.config, self.n_ctx, self.kv = inner.model, inner.config, inner.n_ctx, inner.kv
        self.delay, self.fail_times = delay, fail_times
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0
        self.batch_sizes = []

    kernel_plan = None      # no adaptive runtime: the tests set the scheduler's parameters

    def __getattr__(self, name):               # the rest of reame.engine_api.Engine: inner's
        return getattr(self.inner, name)

    def forward(self, batch):
        self.gate.wait(30 * TIME_SCALE)
        self.calls += 1
        self.batch_sizes.append(len(batch))
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("injected failure")
        if self.delay:
            time.sleep(self.delay)
        return self.inner.forward(batch)


def all_free(sched) -> bool:
    """Nothing running or waiting, every KV block free or cached, every slot free."""
    sched.planner.check()
    p = sched.planner
    return (not p.running and not p.waiting and p.pool.used == 0
            and len(p.slots) == p.kv.max_seqs)


@pytest.fixture(scope="module")
def tok(stories_model):
    return Tokenizer.from_metadata(stories_model.metadata)


def new_engine(model, max_seqs=4, engine="reference", **kw):
    return WrappedEngine(create_engine(model, engine, n_ctx=N_CTX, max_seqs=max_seqs), **kw)


def new_app(model, engine=None, **config):
    config.setdefault("max_seqs", 4)
    engine = engine or new_engine(model, config["max_seqs"])
    return create_app(engine, ServerConfig(model=model.path, **config))


def stop_app(app):
    s = app.reame.service
    if s is not None:
        s.scheduler.stop()


@pytest.fixture(scope="module")
def app(stories_model):
    a = new_app(stories_model)
    yield a
    stop_app(a)


@pytest.fixture(scope="module")
def client(app):
    return testing.TestClient(app)


def post(client, path, body, **kw):
    if isinstance(body, (bytes, str)):
        return client.simulate_post(path, body=body, **kw)
    return client.simulate_post(path, json=body, **kw)


def complete(client, **body):
    body.setdefault("model", "stories260K")
    r = post(client, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json


def chat(client, **body):
    body.setdefault("model", "stories260K")
    r = post(client, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json


def sse_events(text: str) -> list:
    """The data payloads of an SSE body; the last must be [DONE]."""
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def assert_error(r, status, param="__any__", code="__any__"):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)
    if param != "__any__":
        assert err["param"] == param, err
    if code != "__any__":
        assert err["code"] == code, err
    return err


def wait_until(cond, timeout=5.0):
    """cond() within timeout seconds (x TIME_SCALE under emulation)."""
    t = time.monotonic() + timeout * TIME_SCALE
    while time.monotonic() < t:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


# ---- /health, /v1/models, /metrics ----

def test_health_ready(client):
    r = client.simulate_get("/health")
    assert r.status_code == 200 and r.json == {"status": "ok"}


def test_health_503_while_loading_then_ready(stories_model):
    release = threading.Event()

    def factory():
        release.wait(10 * TIME_SCALE)
        return new_engine(stories_model)

    app = create_app(factory, ServerConfig(model=stories_model.path))
    c = testing.TestClient(app)
    r = c.simulate_get("/health")
    assert r.status_code == 503 and r.json["status"] == "loading"
    assert r.headers["retry-after"]
    err = assert_error(post(c, "/v1/completions", {"prompt": "x"}), 503, code="model_loading")
    assert err["type"] == "server_error"
    assert_error(c.simulate_get("/v1/models"), 503)
    release.set()
    assert wait_until(lambda: c.simulate_get("/health").status_code == 200)
    assert complete(c, prompt="Once", max_tokens=2)["usage"]["completion_tokens"] == 2
    stop_app(app)


def test_health_reports_load_failure(stories_model):
    def factory():
        raise RuntimeError("disk on fire")

    app = create_app(factory, ServerConfig(model=stories_model.path))
    c = testing.TestClient(app)
    c.simulate_get("/health")
    assert wait_until(lambda: app.reame.models.health()[0] == "failed")
    r = c.simulate_get("/health")
    assert r.status_code == 503 and r.json["status"] == "failed" and "disk on fire" in r.json["error"]
    assert_error(post(c, "/v1/completions", {"prompt": "x"}), 503, code="model_load_failed")


def engine_factory_kwargs(cfg, monkeypatch):
    """What the server's engine factory hands create_engine for `cfg` (a fake engine, no
    model built): (the keyword arguments, the fake engine)."""
    from types import SimpleNamespace
    from reame.server import service
    seen = {}
    fake = SimpleNamespace(kv=SimpleNamespace(block_bytes=1, block_size=32, kv_type="f32"),
                           attn_type="f32")
    monkeypatch.setattr("reame.engines.create_engine",
                        lambda model, name, **kw: seen.update(kw) or fake)
    assert service.engine_factory(cfg)() is fake
    return seen, fake


def served_config(monkeypatch, model, *flags) -> ServerConfig:
    """The ServerConfig `reame serve MODEL --pin off FLAGS...` hands to gunicorn (not started)."""
    import argparse
    from reame.server import cli as serve_cli
    got = {}
    monkeypatch.setattr("reame.server.gunicorn_app.run", lambda config, **kw: got.update(c=config))
    parser = argparse.ArgumentParser()
    serve_cli.add_serve_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", str(model), "--pin", "off", *flags])
    assert args.func(args) == 0
    return got["c"]


def test_attn_type_setting_reaches_the_engine(stories_path, monkeypatch):
    """REAME_ATTN_TYPE / --attn-type: read, checked, auto by default, handed to create_engine;
    `reame serve --attn-type bf16` puts it in the config."""
    from reame.errors import ReameError
    from reame.server import service
    assert ServerConfig.from_env({}, model=stories_path).attn_type == "auto"
    cfg = ServerConfig.from_env({"REAME_ATTN_TYPE": "bf16"}, model=stories_path)
    assert cfg.attn_type == "bf16"
    assert ServerConfig.from_env({"REAME_ATTN_TYPE": "bf16"}, model=stories_path,
                                 attn_type="f32").attn_type == "f32"      # the flag wins
    with pytest.raises(ReameError, match="attn_type"):
        ServerConfig.from_env({"REAME_ATTN_TYPE": "fp8"})
    seen, fake = engine_factory_kwargs(cfg, monkeypatch)
    assert seen["attn_type"] == "bf16"
    from types import SimpleNamespace
    assert served_config(monkeypatch, stories_path, "--attn-type", "bf16").attn_type == "bf16"
    # bf16 attention gives other keys and values: another prefix-cache salt
    a = SimpleNamespace(model=SimpleNamespace(path=None), name="jit", kv=fake.kv, attn_type="f32")
    b = SimpleNamespace(model=SimpleNamespace(path=None), name="jit", kv=fake.kv, attn_type="bf16")
    assert service.model_identity(a) != service.model_identity(b)


def test_kv_type_setting_reaches_the_engine(stories_path, monkeypatch):
    """REAME_KV_TYPE / --kv-type: auto by default, read, checked, handed to create_engine, and
    `reame serve` without the flag keeps the variable (a flag default of its own overrode it:
    REAME_KV_TYPE=f16 served an f32 cache)."""
    from reame.errors import ReameError
    assert ServerConfig.from_env({}, model=stories_path).kv_type == "auto"
    cfg = ServerConfig.from_env({"REAME_KV_TYPE": "f16"}, model=stories_path)
    with pytest.raises(ReameError, match="kv_type"):
        ServerConfig.from_env({"REAME_KV_TYPE": "q8"})
    seen, _ = engine_factory_kwargs(cfg, monkeypatch)
    assert seen["kv_type"] == "f16"
    monkeypatch.setenv("REAME_KV_TYPE", "f16")
    assert served_config(monkeypatch, stories_path).kv_type == "f16"
    assert served_config(monkeypatch, stories_path, "--kv-type", "f32").kv_type == "f32"


def test_act_type_setting_reaches_the_engine(stories_path, monkeypatch):
    """REAME_ACT_TYPE / --act-type: read, checked, and handed to create_engine."""
    from reame.errors import ReameError
    from reame.server import service
    cfg = ServerConfig.from_env({"REAME_ACT_TYPE": "f32", "REAME_ENGINE": "jit"}, model=stories_path)
    assert cfg.act_type == "f32"
    assert ServerConfig.from_env({}, model=stories_path).act_type is None
    with pytest.raises(ReameError, match="act_type"):
        ServerConfig.from_env({"REAME_ACT_TYPE": "q4"})
    seen, _ = engine_factory_kwargs(cfg, monkeypatch)
    assert seen["act_type"] == "f32"
    # the KV budget: --kv-cache-mb is a whole number of blocks; the context fits in the pool
    cfg = ServerConfig.from_env({"REAME_KV_CACHE_MB": "1", "REAME_BLOCK_SIZE": "16"},
                                model=stories_path, max_seqs=3)
    service.engine_factory(cfg)()
    from reame.kv_cache import bytes_per_token
    c = load_model(stories_path).config
    kv = service.kv_type_of(cfg, c)              # auto: the cache type this CPU gets
    per_block = 16 * bytes_per_token(c.n_layer, c.n_head_kv, c.head_dim, c.head_dim_v, kv)
    assert seen["kv_blocks"] == 2**20 // per_block and seen["block_size"] == 16
    assert seen["n_ctx"] == min(c.n_ctx_train, 4096, seen["kv_blocks"] * 16)
    assert seen["max_seqs"] == 3


def test_models(client):
    r = client.simulate_get("/v1/models")
    assert r.status_code == 200
    assert r.json["object"] == "list"
    (card,) = r.json["data"]
    assert card["id"] == "stories260K" and card["object"] == "model"
    assert isinstance(card["created"], int) and card["owned_by"] == "reame"
    for name in ("stories260K", "stories260K.gguf", "llama"):   # basename, file name, general.name
        r = client.simulate_get(f"/v1/models/{name}")
        assert r.status_code == 200 and r.json["id"] == "stories260K"
    assert_error(client.simulate_get("/v1/models/gpt-4"), 404, code="model_not_found")


def test_model_names_accepted(client):
    for name in ("stories260K", "stories260K.gguf", "llama"):
        out = complete(client, model=name, prompt="Once", max_tokens=1)
        assert out["model"] == "stories260K"
    out = complete(client, prompt="Once", max_tokens=1, model=None)   # model omitted: lenient
    assert out["model"] == "stories260K"


def test_alias(stories_model):
    app = new_app(stories_model, model_alias="my-model")
    c = testing.TestClient(app)
    assert c.simulate_get("/v1/models").json["data"][0]["id"] == "my-model"
    assert complete(c, model="stories260K", prompt="Once", max_tokens=1)["model"] == "my-model"
    stop_app(app)


def parse_metrics(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_metrics(stories_model, stories_expected):
    app = new_app(stories_model)
    c = testing.TestClient(app)
    case = stories_expected["cases"][0]
    complete(c, prompt=case["prompt"], max_tokens=8, temperature=0)
    r = post(c, "/v1/completions", {"prompt": case["prompt"], "max_tokens": 4, "stream": True})
    assert r.status_code == 200
    assert_error(post(c, "/v1/completions", b"{"), 400)
    c.simulate_get("/nope")
    r = c.simulate_get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(r.text)
    # the HTTP counts are the server's; every other series is the model's
    assert m['reame_requests_total{endpoint="/v1/completions",status="200"}'] == 2
    assert m['reame_requests_total{endpoint="/v1/completions",status="400"}'] == 1
    assert m['reame_requests_total{endpoint="other",status="404"}'] == 1
    model = '{model_name="stories260K"}'
    assert m["reame_prompt_tokens_total" + model] == 2 * len(case["prompt_tokens"])
    assert m["reame_generation_tokens_total" + model] == 12
    assert m["reame_time_to_first_token_seconds_count" + model] == 2
    assert m["reame_time_per_output_token_seconds_count" + model] == 7 + 3
    assert m['reame_request_duration_seconds_count{model_name="stories260K",'
             'endpoint="/v1/completions"}'] == 2
    assert m["reame_queue_depth" + model] == 0 and m["reame_running_requests" + model] == 0
    assert m["reame_running_sequences" + model] == 0 and m["reame_model_loaded" + model] == 1
    buckets = [v for k, v in m.items() if k.startswith("reame_time_to_first_token_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == 2          # cumulative, +Inf last
    assert not [k for k in m if k.startswith("reame_") and "model_name=" not in k
                and not k.startswith("reame_requests_total")]
    stop_app(app)


def test_metrics_shared_between_workers(tmp_path):
    from types import SimpleNamespace as NS

    from reame.server.metrics import Metrics
    a, b = Metrics(str(tmp_path)), Metrics(str(tmp_path))
    a.inc("reame_prompt_tokens_total", 5, ("m",))
    b.inc("reame_prompt_tokens_total", 7, ("m",))
    b.model_gauges["reame_running_requests"] = lambda s: s.running
    b.models = lambda: {"m": NS(running=3)}
    b.publish()                                 # as another worker would (same pid here)
    (tmp_path / f"worker-{__import__('os').getpid()}.json").rename(tmp_path / "worker-1.json")
    m = parse_metrics(a.render())               # pid 1 is alive (init): its gauges count
    assert m['reame_prompt_tokens_total{model_name="m"}'] == 12
    assert m['reame_running_requests{model_name="m"}'] == 3
    (tmp_path / "worker-1.json").rename(tmp_path / "worker-999999999.json")   # a dead worker
    m = parse_metrics(a.render())
    assert m['reame_prompt_tokens_total{model_name="m"}'] == 12
    assert 'reame_running_requests{model_name="m"}' not in m   # its gauges went with it


# ---- completions ----

def test_completion_greedy_matches_expected(client, stories_expected):
    for case in stories_expected["cases"]:
        out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0)
        assert out["object"] == "text_completion"
        assert out["id"].startswith("cmpl-") and isinstance(out["created"], int)
        (choice,) = out["choices"]
        assert choice["text"] == case["greedy_text"]
        assert choice["finish_reason"] == "length" and choice["index"] == 0
        assert choice["logprobs"] is None
        assert out["usage"] == {"prompt_tokens": len(case["prompt_tokens"]),
                                "completion_tokens": 64,
                                "total_tokens": len(case["prompt_tokens"]) + 64,
                                "prompt_tokens_details": {"cached_tokens": 0}}


def test_completion_prompt_list_and_token_ids(client, stories_expected):
    c0, c1 = stories_expected["cases"][:2]
    out = complete(client, prompt=[c0["prompt"], c1["prompt"]], max_tokens=64, temperature=0)
    assert [ch["index"] for ch in out["choices"]] == [0, 1]
    assert [ch["text"] for ch in out["choices"]] == [c0["greedy_text"], c1["greedy_text"]]
    assert out["usage"]["prompt_tokens"] == len(c0["prompt_tokens"]) + len(c1["prompt_tokens"])
    out = complete(client, prompt=c0["prompt_tokens"], max_tokens=64, temperature=0)
    assert out["choices"][0]["text"] == c0["greedy_text"]
    out = complete(client, prompt=[c0["prompt_tokens"], c1["prompt_tokens"]], max_tokens=64,
                   temperature=0)
    assert [ch["text"] for ch in out["choices"]] == [c0["greedy_text"], c1["greedy_text"]]


def test_completion_default_max_tokens_is_16(client):
    out = complete(client, prompt="Once upon a time", temperature=0)
    assert out["usage"]["completion_tokens"] == 16


def test_echo(client, stories_expected):
    case = stories_expected["cases"][0]
    out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0, echo=True)
    assert out["choices"][0]["text"] == case["prompt"] + case["greedy_text"]


def test_stop(client, stories_expected):
    case = stories_expected["cases"][0]
    text = case["greedy_text"]
    out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0, stop="girl")
    assert out["choices"][0]["text"] == text[:text.index("girl")]
    assert out["choices"][0]["finish_reason"] == "stop"
    out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0,
                   stop=["zzz", "park", "Lily"])
    assert out["choices"][0]["text"] == text[:text.index("Lily")]
    out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0, stop=["", "zzz"])
    assert out["choices"][0]["text"] == text             # empty stop strings are ignored


def test_stop_string_found_on_the_request_thread_ends_the_sequence(stories_model,
                                                                   stories_expected,
                                                                   monkeypatch):
    """A stop string is found where the text is made, on the request's side, and the engine
    ends the sequence at the next step boundary: the step that found it is the last to sample.
    Driven step by step (the reader takes every event between two steps). Catches: text made
    on the engine thread again (a decoder push there), a reader's stop that never reaches the
    engine (the sequence runs on to max_tokens), tokens after the stop counted in the usage."""
    from reame.server.responses import Job
    from reame.server.schemas import parse_completion
    from reame.server.service import ModelService
    from reame.tokenizer import detokenize as detok

    pushes, in_step = [], [False]
    real_push = detok.IncrementalDecoder.push

    def push(self, token):
        pushes.append("engine step" if in_step[0] else "reader")
        return real_push(self, token)

    monkeypatch.setattr(detok.IncrementalDecoder, "push", push)
    case = stories_expected["cases"][0]
    text = case["greedy_text"]
    tok = Tokenizer.from_metadata(stories_model.metadata)
    want = text[:text.index("girl")]
    # the tokens up to the one that completes the stop string
    ids = case["greedy_tokens"]
    k = next(i for i in range(1, len(ids) + 1) if "girl" in tok.decode(ids[:i]))
    engine = new_engine(stories_model, 2)
    svc = ModelService(engine, tok, ServerConfig(model=stories_model.path, max_seqs=2,
                                                 adaptive="off"))
    req = parse_completion({"prompt": case["prompt"], "max_tokens": 64, "temperature": 0,
                            "stop": "girl"}, tok.n_vocab, 4)
    job = Job(svc, req, svc.completion_prompts(req), None, "/v1/completions", 0.0)
    sched, ch = svc.scheduler, job.choices[0]
    seq = job.request.seqs[0]

    real_step = sched.step

    def step(now):
        in_step[0] = True
        try:
            return real_step(now)
        finally:
            in_step[0] = False

    sched.step = step

    def drain():
        while not job.request.out.empty():
            ev = job.request.out.get()
            if ev is not DONE:
                job._apply(ev)

    steps = 0
    while ch.finish_reason is None:
        assert sched.step(0.0)
        steps += 1
        drain()
        assert steps < 64
    assert ch.text == want and ch.finish_reason == "stop" and ch.n_tokens == k
    assert len(seq.gen.output_ids) == k and not job.request.finished
    sched.step(0.0)                                 # the boundary where the engine ends it
    assert job.request.finished and seq.gen.finish_reason == "stop"
    assert len(seq.gen.output_ids) == k             # nothing sampled past the stop
    assert all_free(sched)
    assert set(pushes) == {"reader"}                # no text made inside a step
    # a token the engine sampled before it took note (a reader behind) is not part of it
    from reame.generate import Step
    from reame.sampling import Sampled
    from reame.scheduler import Event
    job._apply(Event(0, Step(ids[k], "", Sampled(ids[k])), 0.0))
    assert ch.text == want and job.usage["completion_tokens"] == k


def test_seed_reproducible_and_n_uses_consecutive_seeds(client):
    body = dict(prompt="Once upon a time", max_tokens=24, temperature=1.5, seed=1234)
    a = complete(client, **body)["choices"][0]["text"]
    b = complete(client, **body)["choices"][0]["text"]
    assert a == b
    other = complete(client, **{**body, "seed": 99})["choices"][0]["text"]
    assert other != a
    out = complete(client, **{**body, "n": 3})
    texts = [ch["text"] for ch in out["choices"]]
    assert [ch["index"] for ch in out["choices"]] == [0, 1, 2]
    assert texts[0] == a
    assert texts[1] == complete(client, **{**body, "seed": 1235})["choices"][0]["text"]
    assert texts[2] == complete(client, **{**body, "seed": 1236})["choices"][0]["text"]
    assert out["usage"]["completion_tokens"] == 3 * 24
    assert out["usage"]["prompt_tokens"] == 5                # the prompt counts once
    assert complete(client, **{**body, "seed": -5})["choices"][0]["text"]   # any int64 seed


def test_n_greedy_choices_equal(client, stories_expected):
    case = stories_expected["cases"][1]
    out = complete(client, prompt=case["prompt"], max_tokens=64, temperature=0, n=4)
    assert [ch["text"] for ch in out["choices"]] == [case["greedy_text"]] * 4


def test_completion_logprobs(client, stories_expected):
    case = stories_expected["cases"][0]
    out = complete(client, prompt=case["prompt"], max_tokens=10, temperature=0, logprobs=3)
    ch = out["choices"][0]
    lp = ch["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 10
    assert "".join(lp["tokens"]) == ch["text"]
    assert lp["text_offset"][0] == 0
    assert lp["text_offset"] == list(np.cumsum([0] + [len(t) for t in lp["tokens"]])[:-1])
    for tok_s, tok_lp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) == 3 and tok_lp <= 0
        assert max(top.values()) == pytest.approx(tok_lp)       # greedy: the top token
        assert top[tok_s] == pytest.approx(tok_lp)
    out = complete(client, prompt=case["prompt"], max_tokens=3, temperature=0, logprobs=0)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["token_logprobs"]) == 3 and lp["top_logprobs"] is None


def test_first_step_logprobs_match_llama_cpp(client, stories_expected):
    """The reported logprob of the first token is the log-softmax of llama.cpp's first logits."""
    case = stories_expected["cases"][0]
    logits = np.asarray(case["first_step_logits"], dtype=np.float64)
    ref = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    out = complete(client, prompt=case["prompt"], max_tokens=1, temperature=0, logprobs=5)
    got = out["choices"][0]["logprobs"]["token_logprobs"][0]
    assert got == pytest.approx(ref[case["greedy_tokens"][0]], abs=1e-3)


def test_sampling_parameters(client, stories_expected):
    case = stories_expected["cases"][0]
    greedy = case["greedy_text"]
    base = dict(prompt=case["prompt"], max_tokens=64)
    # truncations that leave only the top token reproduce greedy decoding at any temperature
    for extra in ({"top_k": 1}, {"min_p": 1.0}, {"top_p": 0.0}, {"top_p": 1e-6}):
        out = complete(client, **base, temperature=1.0, seed=3, **extra)
        assert out["choices"][0]["text"] == greedy, extra
    # the penalties change greedy text
    for extra in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0},
                  {"repetition_penalty": 1.5}, {"presence_penalty": -2.0, "n": 1}):
        out = complete(client, **base, temperature=0, **extra)
        assert out["choices"][0]["text"] != greedy, extra
    # values at the edge of their ranges are accepted
    complete(client, **base, temperature=2.0, top_p=1.0, top_k=-1, min_p=0.0, seed=0,
             frequency_penalty=-2.0, repetition_penalty=10.0)


def test_logit_bias(client, tok):
    target = tok.encode("dog", add_special=False)[0]
    out = complete(client, prompt="Once upon a time", max_tokens=5, temperature=0,
                   logit_bias={str(target): 100}, logprobs=0)
    assert out["choices"][0]["logprobs"]["tokens"] == [tok.decode([target])] * 5 or \
        out["choices"][0]["text"] == tok.decode([target] * 5, strip_space_prefix=False)
    # a strong negative bias on the greedy first token moves the first choice elsewhere
    first = complete(client, prompt="Once upon a time", max_tokens=1, temperature=0,
                     logprobs=0)["choices"][0]["logprobs"]["tokens"][0]
    first_id = tok.encode(first, add_special=False)
    out = complete(client, prompt="Once upon a time", max_tokens=1, temperature=0,
                   logit_bias={str(first_id[-1]): -100}, logprobs=0)
    assert out["choices"][0]["logprobs"]["tokens"][0] != first


def test_ignore_eos_extension(client):
    out = complete(client, prompt="Once upon a time", max_tokens=200, temperature=0,
                   ignore_eos=True)
    assert out["usage"]["completion_tokens"] == 200
    assert out["choices"][0]["finish_reason"] == "length"


def test_finish_reason_stop_on_eos(client):
    # a bias that makes </s> (id 2) the most likely token ends the generation at once
    out = complete(client, prompt="Once upon a time", max_tokens=20, temperature=0,
                   logit_bias={"2": 100}, logprobs=1)
    ch = out["choices"][0]
    assert ch["finish_reason"] == "stop" and ch["text"] == ""
    assert ch["logprobs"]["tokens"] == []                    # the EOS token is not text
    assert out["usage"]["completion_tokens"] == 1


def test_context_limit_ends_with_length(client):
    # no max_tokens in a chat: generation runs to the context limit at most
    out = chat(client, messages=[{"role": "user", "content": "Tell a story"}], temperature=0,
               ignore_eos=True)
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["total_tokens"] == N_CTX


# ---- chat ----

def test_chat_basic_shape(client):
    out = chat(client, messages=[{"role": "system", "content": "You tell stories."},
                                 {"role": "user", "content": "Once upon a time"}],
               max_tokens=12, temperature=0)
    assert out["object"] == "chat.completion"
    assert out["id"].startswith("chatcmpl-") and isinstance(out["created"], int)
    assert out["model"] == "stories260K"
    (ch,) = out["choices"]
    assert ch["message"]["role"] == "assistant" and isinstance(ch["message"]["content"], str)
    assert ch["message"]["content"]
    assert ch["finish_reason"] == "length" and ch["logprobs"] is None
    assert out["usage"]["completion_tokens"] == 12
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + 12


def test_chat_content_parts_equal_string(client):
    msgs_s = [{"role": "user", "content": "Once upon\na time"}]
    msgs_p = [{"role": "user", "content": [{"type": "text", "text": "Once upon"},
                                           {"type": "text", "text": "a time"}]}]
    a = chat(client, messages=msgs_s, max_tokens=16, temperature=0)
    b = chat(client, messages=msgs_p, max_tokens=16, temperature=0)
    assert a["choices"][0]["message"] == b["choices"][0]["message"]
    assert a["usage"] == b["usage"]


def test_chat_roles_and_max_completion_tokens(client):
    msgs = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "More"}]
    out = chat(client, messages=msgs, max_completion_tokens=3, max_tokens=50, temperature=0)
    assert out["usage"]["completion_tokens"] == 3
    out = chat(client, messages=msgs, max_tokens=4, temperature=0)
    assert out["usage"]["completion_tokens"] == 4


def test_chat_logprobs(client):
    out = chat(client, messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=6,
               temperature=0, logprobs=True, top_logprobs=4)
    ch = out["choices"][0]
    content = ch["logprobs"]["content"]
    assert len(content) == 6
    assert "".join(e["token"] for e in content) == ch["message"]["content"]
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert bytes(e["bytes"]).decode("utf-8", "replace") == e["token"]
        assert len(e["top_logprobs"]) == 4
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"])
        lps = [t["logprob"] for t in e["top_logprobs"]]
        assert lps == sorted(lps, reverse=True)
    out = chat(client, messages=[{"role": "user", "content": "x"}], max_tokens=2,
               logprobs=True, temperature=0)
    assert all(e["top_logprobs"] == [] for e in out["choices"][0]["logprobs"]["content"])


def test_chat_n_and_seed(client):
    body = dict(messages=[{"role": "user", "content": "Tell a story"}], max_tokens=16,
                temperature=1.2, seed=7)
    out = chat(client, n=2, **body)
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert out["choices"][0]["message"]["content"] == \
        chat(client, **body)["choices"][0]["message"]["content"]
    assert out["choices"][1]["message"]["content"] == \
        chat(client, **{**body, "seed": 8})["choices"][0]["message"]["content"]


def test_chat_template_kwargs_and_empty_tools(client):
    chat(client, messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
         chat_template_kwargs={"enable_thinking": False}, tools=[], response_format={"type": "text"},
         user="u-1", metadata={"a": "b"}, store=False, parallel_tool_calls=False,
         cache_prompt=True)


@pytest.mark.parametrize("path,field", [
    ("/v1/chat/completions", "unknown_future_field"), ("/v1/chat/completions", "audio"),
    ("/v1/completions", "n_predict"), ("/v1/completions", "mirostat"),
    ("/v1/chat/completions", "cache_prompt")])
def test_unsupported_fields_are_refused_not_ignored(client, path, field):
    chat = path.endswith("chat/completions")
    body = {"messages": [{"role": "user", "content": "Hi"}]} if chat else {"prompt": "Hi"}
    body[field] = False if field == "cache_prompt" else 1
    err = assert_error(post(client, path, body), 400, field)
    assert err["code"] == "unsupported_parameter" and field in err["message"]


# ---- streaming ----

def test_stream_completion(client, stories_expected):
    case = stories_expected["cases"][2]
    r = post(client, "/v1/completions", {"prompt": case["prompt"], "max_tokens": 64,
                                         "temperature": 0, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-accel-buffering"] == "no" and r.headers["cache-control"] == "no-cache"
    events = sse_events(r.text)
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert all(c["object"] == "text_completion" and isinstance(c["created"], int)
               and c["model"] == "stories260K" and "usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == case["greedy_text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert len(chunks) > 1     # in pieces (a step's accepted drafts come as one chunk)


def test_stream_chat_with_usage(client):
    r = post(client, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 8,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    events = sse_events(r.text)
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"].startswith("chatcmpl-")
               for c in chunks)
    assert all(c["usage"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 8
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "length" and finish["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    full = chat(client, messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=8,
                temperature=0)
    assert text == full["choices"][0]["message"]["content"]


def test_stream_n2_logprobs(client):
    r = post(client, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "n": 2, "seed": 1,
        "stream": True, "logprobs": True, "top_logprobs": 2})
    chunks = sse_events(r.text)[:-1]
    for i in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i]
        assert mine[0]["delta"]["role"] == "assistant"
        assert mine[-1]["finish_reason"] == "length"
        lps = [e for c in mine if c["logprobs"] for e in c["logprobs"]["content"]]
        assert len(lps) == 5 and all(len(e["top_logprobs"]) == 2 for e in lps)


def test_stream_completion_logprobs_and_echo(client):
    r = post(client, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4,
                                         "stream": True, "logprobs": 1, "temperature": 0})
    chunks = sse_events(r.text)[:-1]
    toks = [t for c in chunks if c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["tokens"]]
    assert len(toks) == 4
    r = post(client, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4,
                                         "stream": True, "echo": True, "temperature": 0})
    chunks = sse_events(r.text)[:-1]
    assert chunks[0]["choices"][0]["text"] == "Once upon a time"


# ---- errors: every one is a 4xx with OpenAI's body ----

BAD_JSON = [b"{", b"[1, 2]", b"", b'"text"', b'{"prompt": "\xff\xfe"}', b'{"prompt": NaN}',
            b"[" * 100000, b'{"prompt": "\\ud800 x", "messages": [{"role": "user", '
            b'"content": "\\udfff"}]}', b'{"model": "\\uD800", "prompt": "x", "messages": []}',
            b'{"prompt": "x", "messages": [], "stop": {"\\ud800": 1}}']


@pytest.mark.parametrize("raw", BAD_JSON)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_malformed_body(client, path, raw):
    assert_error(post(client, path, raw), 400)


C, M = "/v1/completions", "/v1/chat/completions"
OK_C = {"prompt": "Once", "max_tokens": 2}
OK_M = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}

INVALID = [
    # (path, fields merged into a valid body, param)
    (C, {"prompt": None}, "prompt"), (C, {"prompt": 5}, "prompt"), (C, {"prompt": []}, "prompt"),
    (C, {"prompt": [1.5]}, "prompt"), (C, {"prompt": [[]]}, "prompt"),
    (C, {"prompt": ["a", 1]}, "prompt"), (C, {"prompt": [99999]}, "prompt"),
    (C, {"prompt": [-1]}, "prompt"), (C, {"prompt": {"text": "x"}}, "prompt"),
    (C, {"prompt": [True]}, "prompt"),
    (M, {"messages": None}, "messages"), (M, {"messages": "hi"}, "messages"),
    (M, {"messages": []}, "messages"), (M, {"messages": ["hi"]}, "messages[0]"),
    (M, {"messages": [{"content": "hi"}]}, "messages[0].role"),
    (M, {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    (M, {"messages": [{"role": "user"}]}, "messages[0].content"),
    (M, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (M, {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                    "image_url": {"url": "http://x"}}]}]},
     "messages[0].content[0].type"),
    (M, {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text"),
    (M, {"messages": [{"role": "user", "content": ["raw"]}]}, "messages[0].content[0]"),
    (M, {"tools": [{"type": "function"}]}, "tools[0].function.name"),
    (M, {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "any"},
     "tool_choice"),
    (M, {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (M, {"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    (C, {"grammar": "root ::= ("}, "grammar"), (C, {"guided_choice": []}, "guided_choice"),
    (C, {"guided_json": {"type": "nope"}}, "guided_json"),
    (M, {"response_format": "json"}, "response_format"),
    (M, {"logprobs": 1}, "logprobs"), (M, {"top_logprobs": 3}, "top_logprobs"),
    (M, {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (M, {"max_completion_tokens": 0}, "max_completion_tokens"),
    (M, {"chat_template_kwargs": [1]}, "chat_template_kwargs"),
    (C, {"logprobs": 21}, "logprobs"), (C, {"logprobs": True}, "logprobs"),
    (C, {"logprobs": -1}, "logprobs"),
    (C, {"echo": True, "logprobs": 1}, "echo"), (C, {"echo": "yes"}, "echo"),
    (C, {"suffix": "end"}, "suffix"), (C, {"best_of": 3}, "best_of"),
    (C, {"max_tokens": 0}, "max_tokens"), (C, {"max_tokens": -3}, "max_tokens"),
    (C, {"max_tokens": "10"}, "max_tokens"), (C, {"max_tokens": True}, "max_tokens"),
    (C, {"max_tokens": 2.5}, "max_tokens"),
    (C, {"temperature": "hot"}, "temperature"), (C, {"temperature": -0.1}, "temperature"),
    (C, {"temperature": 101}, "temperature"), (C, {"temperature": [1]}, "temperature"),
    (C, {"top_p": 1.5}, "top_p"), (C, {"top_p": -0.1}, "top_p"), (C, {"top_p": False}, "top_p"),
    (C, {"top_k": -5}, "top_k"), (C, {"top_k": 1.5}, "top_k"),
    (C, {"min_p": 1.5}, "min_p"), (C, {"min_p": "0"}, "min_p"),
    (C, {"presence_penalty": 2.5}, "presence_penalty"),
    (C, {"frequency_penalty": -2.5}, "frequency_penalty"),
    (C, {"frequency_penalty": "x"}, "frequency_penalty"),
    (C, {"repetition_penalty": 0}, "repetition_penalty"),
    (C, {"repetition_penalty": 11}, "repetition_penalty"),
    (C, {"logit_bias": [1]}, "logit_bias"), (C, {"logit_bias": {"abc": 1}}, "logit_bias"),
    (C, {"logit_bias": {"99999": 1}}, "logit_bias"), (C, {"logit_bias": {"-1": 1}}, "logit_bias"),
    (C, {"logit_bias": {"5": 101}}, "logit_bias"), (C, {"logit_bias": {"5": "1"}}, "logit_bias"),
    (C, {"n": 0}, "n"), (C, {"n": 5}, "n"), (C, {"n": "2"}, "n"), (C, {"n": 1000}, "n"),
    (C, {"stream": "yes"}, "stream"), (C, {"stream": 1}, "stream"),
    (C, {"stream_options": {"include_usage": True}}, "stream_options"),
    (C, {"stream": True, "stream_options": 5}, "stream_options"),
    (C, {"stream": True, "stream_options": {"include_usage": "yes"}}, "include_usage"),
    (C, {"stop": 5}, "stop"), (C, {"stop": [1]}, "stop"),
    (C, {"stop": ["x"] * (MAX_STOP + 1)}, "stop"),
    (C, {"seed": "x"}, "seed"), (C, {"seed": 1.5}, "seed"),
    (C, {"model": 5}, "model"), (M, {"model": ["a"]}, "model"),
    (C, {"ignore_eos": "true"}, "ignore_eos"),
]


@pytest.mark.parametrize("path,fields,param", INVALID,
                         ids=[f"{p[4:]}-{json.dumps(f)[:40]}" for p, f, _ in INVALID])
def test_invalid_parameters(client, path, fields, param):
    body = {**(OK_C if path == C else OK_M), **fields}
    body = {k: v for k, v in body.items() if v is not None}
    err = assert_error(post(client, path, body), 400, param=param)
    assert err["type"] == "invalid_request_error"


def test_unknown_model(client):
    for path, body in ((C, OK_C), (M, OK_M)):
        err = assert_error(post(client, path, {**body, "model": "gpt-4o"}), 404,
                           param="model", code="model_not_found")
        assert "gpt-4o" in err["message"]


def test_prompt_longer_than_context(client):
    long_prompt = "Once upon a time " * 100                  # > 256 tokens
    err = assert_error(post(client, C, {"prompt": long_prompt}), 400, param="prompt",
                       code="context_length_exceeded")
    assert str(N_CTX) in err["message"]
    assert_error(post(client, M, {"messages": [{"role": "user", "content": long_prompt}]}), 400,
                 param="messages", code="context_length_exceeded")
    # fits alone, but not with the requested completion
    assert_error(post(client, C, {"prompt": "Once upon a time", "max_tokens": N_CTX}), 400,
                 param="max_tokens", code="context_length_exceeded")
    assert_error(post(client, C, {"prompt": ["Once", long_prompt]}), 400, param="prompt")


def test_routes_and_methods(client):
    assert_error(client.simulate_get("/v1/nothing"), 404)
    assert_error(client.simulate_post("/v1/engines/x/completions", json={}), 404)
    err = assert_error(client.simulate_get(C), 405)
    assert err["type"] == "invalid_request_error"
    assert_error(client.simulate_delete("/v1/models"), 405)
    assert client.simulate_get("/v1/models/").status_code == 200      # trailing slash


def test_body_too_large(stories_model):
    app = new_app(stories_model, max_body_bytes=1000)
    c = testing.TestClient(app)
    assert_error(post(c, C, {"prompt": "x" * 2000}), 413, code="request_too_large")
    stop_app(app)


def test_no_client_input_gives_500(client):
    """A grab bag of odd inputs: all answered with 2xx or 4xx, never 5xx."""
    odd = [
        {"prompt": "\x00\ud800"[:1], "max_tokens": 1},
        {"prompt": "<s></s><unk>", "max_tokens": 2},
        {"prompt": "", "max_tokens": 1},
        {"prompt": "é" * 50, "max_tokens": 3, "stop": ["\n", "é"]},
        {"prompt": "x", "max_tokens": 1, "logit_bias": {"2": 100}},          # forces EOS at once
        {"prompt": "x", "max_tokens": 3, "logit_bias": {str(i): -100 for i in range(512)}},
        {"prompt": "x", "max_tokens": 3, "temperature": 100, "top_k": 100000},
        {"prompt": "x", "max_tokens": 1, "seed": 2**70},
        {"prompt": "x", "max_tokens": 1e300},
        {"prompt": "x", "temperature": 1e-30, "max_tokens": 2},
        {"prompt": [0, 1, 2, 511], "max_tokens": 2},
        {"prompt": "x", "max_tokens": 2, "stop": "x" * 10000},
        {"prompt": "x", "max_tokens": 2, "n": 4, "stream": True, "logprobs": 20},
    ]
    for body in odd:
        r = post(client, C, body)
        assert r.status_code < 500, (body, r.status_code, r.text)
        if r.status_code >= 400:
            assert_error(r, r.status_code)
    odd_chat = [
        {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}], "max_tokens": 1},
        {"messages": [{"role": "assistant", "content": "x", "tool_calls": []}], "max_tokens": 1},
        {"messages": [{"role": "user", "content": []}], "max_tokens": 1},
        {"messages": [{"role": "user", "content": "hi", "name": 5}], "max_tokens": 1},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
         "chat_template_kwargs": {"messages": 1, "raise_exception": 2}},
        {"messages": [{"role": "user", "content": "hi"}], "tools": [{"x": 1}],
         "tool_choice": "none", "max_tokens": 1},
    ]
    for body in odd_chat:
        r = post(client, M, body)
        assert r.status_code < 500, (body, r.status_code, r.text)


# ---- authentication ----

def test_api_key(stories_model):
    app = new_app(stories_model, api_key="s3cret")
    c = testing.TestClient(app)
    err = assert_error(post(c, C, OK_C), 401, code="invalid_api_key")
    assert err["type"] == "invalid_request_error"
    assert_error(post(c, C, OK_C, headers={"Authorization": "Bearer wrong"}), 401,
                 code="invalid_api_key")
    assert_error(post(c, C, OK_C, headers={"Authorization": "s3cret"}), 401)
    assert_error(post(c, C, OK_C, headers={"Authorization": "Basic s3cret"}), 401)
    assert_error(post(c, C, OK_C, headers={"Authorization": "Bearer s3cretX"}), 401)
    assert_error(c.simulate_get("/v1/models"), 401)
    assert_error(c.simulate_get("/metrics"), 401)
    ok = {"Authorization": "Bearer s3cret"}
    assert post(c, C, OK_C, headers=ok).status_code == 200
    assert post(c, M, OK_M, headers=ok).status_code == 200
    assert c.simulate_get("/v1/models", headers=ok).status_code == 200
    assert c.simulate_get("/health").status_code == 200               # open
    stop_app(app)


# ---- serving: queue, cancellation, timeouts, failures ----

def start_streams(app, bodies):
    """Call the WSGI app directly; return the open response iterables (and statuses)."""
    out = []
    for body in bodies:
        status = {}

        def start_response(s, headers, exc_info=None, status=status):
            status["status"] = s
            status["headers"] = dict(headers)

        env = testing.create_environ("/v1/completions", method="POST",
                                     body=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        it = app(env, start_response)
        out.append((status, it))
    return out


def test_disconnect_cancels_and_frees_slots(stories_model):
    engine = new_engine(stories_model, delay=0.01)
    app = new_app(stories_model, engine=engine)
    service = app.reame.service
    body = {"prompt": "Once upon a time", "max_tokens": 200, "stream": True, "ignore_eos": True}
    streams = start_streams(app, [body] * 4)
    for status, it in streams:
        assert status["status"].startswith("200")
        first = next(iter(it))
        assert first.startswith(b"data: ")
    assert service.scheduler.running == 4
    for _, it in streams:
        it.close()                                   # what the WSGI server does on disconnect
    assert wait_until(lambda: service.scheduler.running == 0, 2)
    assert service.scheduler.running_seqs == 0
    assert all_free(service.scheduler)
    calls = engine.calls
    time.sleep(0.1)
    assert engine.calls == calls                     # nothing is generating any more
    stop_app(app)


def test_client_connected_check():
    import socket
    from reame.server.responses import client_connected
    assert client_connected({}) is None
    a, b = socket.socketpair()
    check = client_connected({"gunicorn.socket": a})
    assert check() is True
    b.sendall(b"GET / HTTP/1.1\r\n")            # a pipelined request is not a hang-up
    assert check() is True
    b.close()
    a.recv(100)
    assert check() is False
    a.close()


def test_non_streaming_request_of_a_departed_client_is_cancelled(stories_model):
    import socket
    engine = new_engine(stories_model, delay=0.02)
    app = new_app(stories_model, engine=engine)
    a, b = socket.socketpair()
    env = testing.create_environ("/v1/completions", method="POST", body=json.dumps(
        {"prompt": "Once", "max_tokens": 250, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json"})
    env["gunicorn.socket"] = a
    status = {}
    done = threading.Event()

    def run():
        status["s"] = app(env, lambda s, h, e=None: status.setdefault("status", s))
        done.set()

    threading.Thread(target=run).start()
    sched = app.reame.service.scheduler
    assert wait_until(lambda: sched.running == 1)
    b.close()                                         # the client hangs up
    assert done.wait(5 * TIME_SCALE)
    assert status["status"].startswith("499")
    assert wait_until(lambda: sched.running == 0 and sched.running_seqs == 0, 2)
    a.close()
    stop_app(app)


def test_queue_full_answers_429(stories_model):
    engine = new_engine(stories_model, max_seqs=1)
    engine.gate.clear()                              # the engine stalls: nothing finishes
    app = new_app(stories_model, engine=engine, max_seqs=1, queue_size=1, retry_after=3)
    c = testing.TestClient(app)
    results = []
    body = {"prompt": "Once upon a time", "max_tokens": 4}
    threads = [threading.Thread(target=lambda: results.append(post(c, C, body)))
               for _ in range(2)]
    for t in threads:
        t.start()
    sched = app.reame.service.scheduler
    assert wait_until(lambda: sched.running == 1 and sched.queue_depth == 1)
    r = post(c, C, body)
    err = assert_error(r, 429, code="queue_full")
    assert r.headers["retry-after"] == "3"
    assert_error(post(c, M, {**OK_M, "n": 1}), 429)
    engine.gate.set()
    for t in threads:
        t.join(10 * TIME_SCALE)
    assert [x.status_code for x in results] == [200, 200]
    assert post(c, C, body).status_code == 200               # room again
    assert "capacity" in err["message"]
    stop_app(app)


def test_request_timeout_while_generating_ends_with_length(stories_model):
    engine = new_engine(stories_model, delay=0.02)
    app = new_app(stories_model, engine=engine, request_timeout=0.3)
    c = testing.TestClient(app)
    out = complete(c, prompt="Once upon a time", max_tokens=200, ignore_eos=True, stop=["zzzz"])
    assert out["choices"][0]["finish_reason"] == "length"
    assert 0 < out["usage"]["completion_tokens"] < 200
    r = post(c, C, {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True,
                    "stream": True})
    chunks = sse_events(r.text)[:-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert app.reame.service.scheduler.running_seqs == 0
    stop_app(app)


def test_request_timeout_while_queued_is_503(stories_model, tok):
    engine = new_engine(stories_model, max_seqs=1, delay=0.02)
    app = new_app(stories_model, engine=engine, max_seqs=1, request_timeout=0.3)
    c = testing.TestClient(app)
    sched = app.reame.service.scheduler
    ids = [1, 403]
    hog = sched.submit([ids], [[greedy_gen(tok, ids, max_tokens=200, ignore_eos=True)]])  # no timeout
    assert wait_until(lambda: sched.running == 1)
    r = post(c, C, {"prompt": "Once", "max_tokens": 5})
    assert_error(r, 503, code="timeout")
    assert r.headers["retry-after"]
    hog.cancel()
    assert wait_until(lambda: sched.running_seqs == 0)
    stop_app(app)


def test_engine_failure_is_reported_and_survived(stories_model):
    engine = new_engine(stories_model, fail_times=1)
    app = new_app(stories_model, engine=engine)
    c = testing.TestClient(app)
    err = assert_error(post(c, C, OK_C), 500, code="engine_error")
    assert err["type"] == "server_error" and "injected failure" in err["message"]
    assert post(c, C, OK_C).status_code == 200              # the engine thread lives on
    assert app.reame.service.scheduler.running_seqs == 0
    stop_app(app)


def test_stopped_engine_thread_is_reported(stories_model):
    app = new_app(stories_model)
    c = testing.TestClient(app)
    app.reame.service.scheduler.stop()
    r = c.simulate_get("/health")
    assert r.status_code == 503 and r.json["status"] == "failed"
    assert_error(post(c, C, OK_C), 503, code="shutting_down")


def test_a_bug_in_a_step_fails_its_requests_only(stories_model):
    engine = new_engine(stories_model)
    app = new_app(stories_model, engine=engine)
    c = testing.TestClient(app)
    sched = app.reame.service.scheduler
    real = sched.step
    sched.step = lambda now: (_ for _ in ()).throw(KeyError("boom"))   # a step that raises
    assert_error(post(c, C, OK_C), 500, code="engine_error")
    sched.step = real
    assert post(c, C, OK_C).status_code == 200 and sched.alive
    stop_app(app)


def test_concurrent_requests_are_batched_and_exact(stories_model, stories_expected):
    engine = new_engine(stories_model)
    app = new_app(stories_model, engine=engine)
    c = testing.TestClient(app)
    cases = stories_expected["cases"]
    results = {}

    def run(i):
        results[i] = complete(c, prompt=cases[i]["prompt"], max_tokens=64, temperature=0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30 * TIME_SCALE)
    for i, case in enumerate(cases):
        assert results[i]["choices"][0]["text"] == case["greedy_text"]
    assert max(engine.batch_sizes) > 1                       # steps carried several sequences
    assert engine.calls < 5 * 64
    stop_app(app)


# ---- the scheduler on its own ----

@pytest.fixture()
def sched_engine(stories_model):
    return new_engine(stories_model, max_seqs=2)


def greedy_gen(tok, ids, max_tokens=64, **kw):
    return Generation(tok, ids, SamplingParams(temperature=0), max_tokens=max_tokens,
                      n_ctx=N_CTX, **kw)


def drain(req, timeout=30):
    timeout *= TIME_SCALE
    out, t = [], time.monotonic() + timeout
    while time.monotonic() < t:
        ev = req.out.get(timeout=timeout)
        if ev is DONE:
            return out
        out.append(ev)
    raise AssertionError("no DONE")


def texts(events, n):
    t = [""] * n
    for ev in events:
        assert ev.error is None, ev.error
        t[ev.index] += ev.step.text if ev.step else ev.text
    return t


def test_scheduler_mixed_batches_match_single_runs(sched_engine, tok, stories_expected):
    """5 prompts on 2 slots, steps of 3 tokens mixing prefill chunks and decode tokens: same
    greedy text."""
    cases = stories_expected["cases"]
    s = Scheduler(sched_engine, SchedulerParams(max_batch=2, token_budget=3, prefill_chunk=3,
                                                max_waiting=16)).start()
    reqs = [s.submit([c["prompt_tokens"]], [[greedy_gen(tok, c["prompt_tokens"])]]) for c in cases]
    for req, c in zip(reqs, cases):
        assert texts(drain(req), 1) == [c["greedy_text"]]
    assert s.running_seqs == 0 and all_free(s)
    assert max(sched_engine.batch_sizes) <= 3                # the step budget, decode included
    s.stop()


@pytest.mark.parametrize("engine_name", ENGINES)
def test_every_engine_serves_exact_greedy_text(stories_model, stories_expected, engine_name):
    """Through the app, 5 concurrent requests on 2 slots with a step budget of 7 tokens
    (prefill chunks mixed with decode tokens): every engine gives llama.cpp's greedy text."""
    engine = new_engine(stories_model, max_seqs=2, engine=engine_name)
    app = new_app(stories_model, engine=engine, max_seqs=2)
    app.reame.service.scheduler.params.token_budget = 7
    c = testing.TestClient(app)
    cases = stories_expected["cases"]
    results = {}

    def run(i):
        results[i] = complete(c, prompt=cases[i]["prompt"], max_tokens=64, temperature=0,
                              n=1 + i % 2)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * TIME_SCALE)
    for i, case in enumerate(cases):
        assert [ch["text"] for ch in results[i]["choices"]] == [case["greedy_text"]] * (1 + i % 2)
    assert max(engine.batch_sizes) <= 7
    stop_app(app)


def test_scheduler_group_shares_prefill(sched_engine, tok, stories_expected):
    case = stories_expected["cases"][3]
    ids = case["prompt_tokens"]
    s = Scheduler(sched_engine).start()
    req = s.submit([ids], [[greedy_gen(tok, ids), greedy_gen(tok, ids)]])
    assert texts(drain(req), 2) == [case["greedy_text"]] * 2
    # the prompt was prefilled once: the first batch holds the prompt, not two copies of it
    assert sched_engine.batch_sizes[0] == len(ids)
    s.stop()


def test_scheduler_queue_full_and_group_too_large(sched_engine, tok):
    sched_engine.gate.clear()
    s = Scheduler(sched_engine, queue_size=2).start()
    ids = [1, 403]
    s.submit([ids], [[greedy_gen(tok, ids), greedy_gen(tok, ids)]])
    assert wait_until(lambda: s.running == 1)          # running: not counted as waiting
    s.submit([ids], [[greedy_gen(tok, ids), greedy_gen(tok, ids)]])
    with pytest.raises(QueueFull):
        s.submit([ids], [[greedy_gen(tok, ids)]])
    with pytest.raises(ValueError):
        s.submit([ids], [[greedy_gen(tok, ids)] * 3])
    sched_engine.gate.set()
    s.stop()


def test_scheduler_large_request_on_idle_server(sched_engine, tok, stories_expected):
    """More sequences than slots + queue is still served when nothing else is waiting."""
    cases = stories_expected["cases"]
    s = Scheduler(sched_engine, queue_size=0).start()
    prompts = [c["prompt_tokens"] for c in cases]
    req = s.submit(prompts, [[greedy_gen(tok, p)] for p in prompts])
    assert texts(drain(req), 5) == [c["greedy_text"] for c in cases]
    s.stop()


def test_scheduler_cancel_pending_and_running(sched_engine, tok):
    sched_engine.delay = 0.01
    s = Scheduler(sched_engine, queue_size=8).start()
    ids = [1, 403, 407]
    reqs = [s.submit([ids], [[greedy_gen(tok, ids, max_tokens=200, ignore_eos=True)]])
            for _ in range(4)]
    assert wait_until(lambda: s.running == 2)
    assert s.queue_depth == 2
    for r in reqs:
        r.cancel()
    assert wait_until(lambda: s.running == 0 and s.queue_depth == 0 and s._n_waiting == 0)
    assert all_free(s)
    s.stop()


def test_scheduler_errors_and_stop(sched_engine, tok):
    sched_engine.fail_times = 1
    s = Scheduler(sched_engine).start()
    ids = [1, 403]
    ev = drain(s.submit([ids], [[greedy_gen(tok, ids)]]))
    assert len(ev) == 1 and isinstance(ev[0].error, EngineFailure)
    assert texts(drain(s.submit([ids], [[greedy_gen(tok, ids, max_tokens=3)]])), 1)[0]
    # timeouts while queued: both slots busy with long generations
    sched_engine.delay = 0.01
    long = [s.submit([ids], [[greedy_gen(tok, ids, max_tokens=200, ignore_eos=True)]])
            for _ in range(2)]
    late = s.submit([ids], [[greedy_gen(tok, ids)]], timeout=0.2)
    ev = drain(late, 5)
    assert len(ev) == 1 and isinstance(ev[0].error, RequestTimeout)
    # stopping fails whatever is left, running or waiting
    waiting = s.submit([ids], [[greedy_gen(tok, ids)]])
    s.stop()
    for r in long + [waiting]:
        assert isinstance(drain(r, 5)[-1].error, SchedulerStopped)
    with pytest.raises(SchedulerStopped):
        s.submit([ids], [[greedy_gen(tok, ids)]])


# ---- fuzzing: whatever a client sends, the answer is 2xx or an OpenAI-shaped 4xx ----

def _fuzz_strategies(path):
    """Mostly valid bodies (a few fields set to valid values), with 0-2 fields then replaced by
    arbitrary JSON: deep enough to reach generation, wide enough to hit every check."""
    from hypothesis import strategies as st
    scalar = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
              | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
    anything = st.recursive(scalar, lambda c: st.lists(c, max_size=3)
                            | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
    unit = st.floats(0.0, 1.0, allow_nan=False)
    part = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)})
    message = st.fixed_dictionaries({
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]),
        "content": st.text(max_size=40) | st.lists(part, max_size=3)})
    good = {
        "model": st.sampled_from(["stories260K", "llama", "stories260K.gguf"]),
        "max_tokens": st.integers(1, 24), "temperature": st.floats(0.0, 2.0),
        "top_p": unit, "top_k": st.integers(-1, 50), "min_p": unit,
        "repetition_penalty": st.floats(0.5, 2.0), "presence_penalty": st.floats(-2.0, 2.0),
        "frequency_penalty": st.floats(-2.0, 2.0), "seed": st.integers(-2**63, 2**64),
        "n": st.integers(1, 4), "stop": st.text(max_size=3) | st.lists(st.text(max_size=3),
                                                                           max_size=4),
        "logit_bias": st.dictionaries(st.integers(0, 511).map(str), st.floats(-100, 100),
                                      max_size=3),
        "stream": st.booleans(), "ignore_eos": st.booleans(),
    }
    if path == C:
        good.update(prompt=st.text(max_size=60) | st.lists(st.text(max_size=20), min_size=1,
                                                           max_size=3)
                    | st.lists(st.integers(0, 511), min_size=1, max_size=8),
                    logprobs=st.integers(0, 20), echo=st.booleans())
        required = "prompt"
    else:
        good.update(messages=st.lists(message, min_size=1, max_size=4),
                    logprobs=st.booleans(), max_completion_tokens=st.integers(1, 24),
                    chat_template_kwargs=st.dictionaries(st.sampled_from(["a", "b"]),
                                                         st.booleans()))
        required = "messages"
    names = sorted(good)

    @st.composite
    def body(draw):
        keys = draw(st.sets(st.sampled_from(names), max_size=6)) | {required}
        b = {k: draw(good[k]) for k in keys}
        if b.get("logprobs") is True and draw(st.booleans()):
            b["top_logprobs"] = draw(st.integers(0, 20))
        if b.get("stream") and draw(st.booleans()):
            b["stream_options"] = {"include_usage": draw(st.booleans())}
        for k in draw(st.lists(st.sampled_from(names + ["tools", "response_format", "suffix",
                                                        "best_of", "tool_choice"]),
                               max_size=2)):
            b[k] = draw(anything)
        return b
    return body()


@pytest.mark.parametrize("path", [C, M])
def test_fuzz_never_5xx(client, path):
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=80, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=_fuzz_strategies(path))
    def check(body):
        body.setdefault("max_tokens", 8)
        r = post(client, path, body)
        assert r.status_code < 500, (body, r.status_code, r.text)
        if r.status_code >= 400:
            assert_error(r, r.status_code)
        elif body.get("stream") is True:
            for ev in sse_events(r.text)[:-1]:
                assert "error" not in ev, (body, ev)

    check()
