"""Several models served by one process (issue 32), on the real models of ../shared: the
outputs of each equal a single-model server's whatever the others do; a budget that fits two of
three unloads the coldest and reloads it on demand with no request failing; two models' steps
never overlap on the CPU and take turns."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace

import pytest
from falcon import testing

from conftest import shared_path
from reame.engines import create_engine
from reame.model import load_model
from reame.scheduler import Scheduler
from reame.server.app import create_app
from reame.server.config import ServerConfig
from reame.server.model_specs import server_registry
from reame.server.service import engine_factory
from reame.turns import Turns

PROMPTS = ["Once upon a time", "The little dog"]
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "user", "content": "Name a color."}]]
TEXTS = ["hello world", "a cat sat on the mat"]


def base_config(**kw) -> ServerConfig:
    return ServerConfig(kv_cache_mb=16, max_seqs=4, adaptive="off", speculate="off",
                        request_timeout=300, **kw)


def ask(client, kind: str, model: str, x):
    if kind == "completion":
        r = client.simulate_post("/v1/completions", json={
            "model": model, "prompt": x, "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json["choices"][0]["text"]
    if kind == "chat":
        r = client.simulate_post("/v1/chat/completions", json={
            "model": model, "messages": x, "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json["choices"][0]["message"]["content"]
    r = client.simulate_post("/v1/embeddings", json={"model": model, "input": x})
    assert r.status_code == 200, r.text
    return r.json["data"][0]["embedding"]


WORK = [("completion", "stories260K", PROMPTS), ("chat", "smol", CHATS),
        ("embedding", "embed", TEXTS)]


@pytest.fixture(scope="module")
def paths():
    return (str(shared_path("models/stories260K.gguf")),
            str(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf")))


@pytest.fixture(scope="module")
def alone(paths):
    """What three single-model servers answer."""
    stories, smol = paths
    out = {}
    for (kind, name, xs), cfg in zip(WORK, [
            base_config(model=stories), base_config(model=smol),
            base_config(model=smol, pooling="mean")]):
        app = create_app(engine_factory(cfg)(), cfg)
        client = testing.TestClient(app)
        out[name] = [ask(client, kind, app.reame.service.id, x) for x in xs]
        app.reame.stop()
    return out


def three_models(paths, budget_mb=None):
    stories, smol = paths
    cfg = base_config(model=stories, models=(f"smol={smol}", f"embed={smol},pooling=mean"),
                      memory_budget_mb=budget_mb)
    reg = server_registry(cfg)
    app = create_app(config=cfg, registry=reg)
    app.reame.start()
    return app, reg


def test_three_models_in_one_process_answer_as_three_servers(paths, alone):
    # catches: a request served by the wrong model (the first one), a pooling or a chat
    # template of one model used for another, a shared KV pool or prefix cache between models
    app, reg = three_models(paths)
    try:
        client = testing.TestClient(app)
        for i in range(2):
            for kind, name, xs in WORK:
                assert ask(client, kind, name, xs[i]) == alone[name][i], (name, i)
        # Ollama's keep_alive on every API, set by a request that succeeds only (catches: a
        # schema refusing it, or a 400 request leaving its keep_alive on the model)
        for path, length, body in (
                ("/v1/chat/completions", "max_tokens", {"messages": CHATS[0]}),
                ("/v1/completions", "max_tokens", {"prompt": "Hi"}),
                ("/v1/responses", "max_output_tokens", {"input": "Hi"}),
                ("/v1/messages", "max_tokens", {"messages": CHATS[0]})):
            r = client.simulate_post(path, json={"model": "smol", length: 16,
                                                 "keep_alive": "10m", **body})
            assert r.status_code == 200, (path, r.text)
            r = client.simulate_post(path, json={"model": "smol", length: "two",
                                                 "keep_alive": 0, **body})
            assert r.status_code == 400, (path, r.text)
            assert reg.find("smol").keep_alive == 600, path
        r = client.simulate_post("/v1/embeddings", json={"model": "embed", "input": "x",
                                                         "keep_alive": "1h"})
        assert r.status_code == 200 and reg.find("embed").keep_alive == 3600
        r = client.simulate_post("/v1/completions", json={"model": "smol", "prompt": "x",
                                                          "keep_alive": "soon"})
        assert r.status_code == 400 and r.json["error"]["param"] == "keep_alive"
        cards = {m["id"]: m for m in client.simulate_get("/v1/models").json["data"]}
        assert {k: v["state"] for k, v in cards.items()} == {
            "stories260K": "loaded", "smol": "loaded", "embed": "loaded"}
        assert cards["smol"]["size"] == cards["embed"]["size"] > 0
        assert all(v["memory_bytes"] > v["size"] for v in cards.values())
    finally:
        app.reame.stop()


def test_a_budget_for_two_unloads_the_coldest_and_reloads_it_with_no_request_failing(paths,
                                                                                       alone):
    # catches: a load that fails or times out instead of making room, an unload of a model
    # whose request is running (its answer would be a 503 or cut), a reloaded model that
    # answers differently (a stale KV pool or prefix cache)
    probe = server_registry(replace(base_config(model=paths[0]),
                                    models=(f"smol={paths[1]}",
                                            f"embed={paths[1]},pooling=mean")))
    needs = {e.id: e.need for e in probe.entries}
    budget = (needs["smol"] + needs["embed"] + needs["stories260K"] // 2) // 2**20 + 1
    app, reg = three_models(paths, budget)
    try:
        assert reg.budget < sum(needs.values())
        client = testing.TestClient(app)
        for i in range(2):                  # in turn: each request's model is the coldest
            for kind, name, xs in WORK:
                assert ask(client, kind, name, xs[i]) == alone[name][i], (name, i)
                loaded = [e.id for e in reg.entries if e.state == "loaded"]
                assert name in loaded and len(loaded) == min(2, 1 + i * 3 + WORK.index(
                    (kind, name, xs))), (name, loaded)
        assert {e.id: e.loads for e in reg.entries} == {"stories260K": 2, "smol": 2,
                                                        "embed": 2}
        # each model's metrics apart, an unloaded one's kept (catches: one model's counters
        # under another's name, or lost when it unloads)
        text = client.simulate_get("/metrics").text
        loaded = {m: text.count(f'reame_model_loaded{{model_name="{m}"}} 1')
                  for m in ("stories260K", "smol", "embed")}
        assert sorted(loaded.values()) == [0, 1, 1], loaded
        for m in ("stories260K", "smol"):
            line = next(x for x in text.splitlines()
                        if x.startswith(f'reame_generation_tokens_total{{model_name="{m}"}}'))
            assert 2 <= float(line.split()[-1]) <= 2 * 16, line     # two requests of <= 16
        errors, answers = [], {name: [] for _, name, _ in WORK}

        def client_of(kind, name, xs):
            client = testing.TestClient(app)
            try:
                for _ in range(3):
                    for x in xs:
                        answers[name].append(ask(client, kind, name, x))
            except BaseException as e:          # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=client_of, args=w) for w in WORK]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not errors, errors
        for _, name, xs in WORK:
            assert answers[name] == alone[name] * 3, name
        held = sum(e.need for e in reg.entries if e.state == "loaded")
        assert held <= reg.budget
    finally:
        app.reame.stop()


class Recording:
    """An engine in front of another that records when its forward passes run."""

    def __init__(self, inner, name, log, inside):
        self.inner, self.name, self.log, self.inside = inner, name, log, inside
        self.model, self.config, self.n_ctx, self.kv = (inner.model, inner.config, inner.n_ctx,
                                                        inner.kv)

    kernel_plan = None      # no adaptive runtime: the tests set the scheduler's parameters

    def __getattr__(self, name):               # the rest of reame.engine_api.Engine: inner's
        return getattr(self.inner, name)

    def forward(self, batch):
        self.inside.append(self.name)
        self.log.append((self.name, len(self.inside)))
        threading.Event().wait(0.002)           # long enough for another to come in, if it can
        out = self.inner.forward(batch)
        self.inside.remove(self.name)
        return out


def test_two_models_steps_never_overlap_and_take_turns(paths):
    # catches: a scheduler that calls the engine without taking its turn (two forward passes
    # at once, each on half the cores), or one model's steps all before the other's
    model = load_model(paths[0])
    log, inside, turns = [], [], Turns()
    scheds = []
    for name in ("a", "b"):
        eng = Recording(create_engine(model, "reference", n_ctx=256, max_seqs=2), name, log,
                        inside)
        scheds.append(Scheduler(eng, turns=turns).start())
    from reame.generate import Generation
    from reame.sampling import SamplingParams
    from reame.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(model.metadata)
    ids = tok.encode(PROMPTS[0], add_special=True)
    reqs = [s.submit([ids], [[Generation(tok, ids, SamplingParams(temperature=0),
                                         max_tokens=24, ignore_eos=True)]])
            for s in scheds]
    for r in reqs:
        assert all(ev.error is None for ev in r.events())
    for s in scheds:
        s.stop()
    assert max(n for _, n in log) == 1, "two forward passes ran at once"
    order = [name for name, _ in log]
    assert order.count("a") == order.count("b") == 24
    first_b = order.index("b")
    switches = sum(1 for x, y in zip(order, order[1:]) if x != y)
    assert first_b < 12 and switches >= 16, order


def test_two_workers_each_serve_every_model_and_metrics_sum_per_model(paths, tmp_path):
    # catches: a worker that knows only the first model (the registry built before the fork,
    # or from REAME_MODEL alone), or per-model metrics that lose a worker's share
    from concurrent.futures import ThreadPoolExecutor

    from test_server_e2e import ReameServer, http
    stories, _ = paths
    s = ReameServer(stories, "--model", f"twin={stories}", "--workers", "2",
                    "--kv-cache-mb", "8", "--adaptive", "off", "--pin", "off",
                    log_dir=tmp_path)
    try:
        def one(i):
            model = ("stories260K", "twin")[i % 2]
            st, _, body = http("POST", s.url + "/v1/completions", {
                "model": model, "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0})
            return st, model, json.loads(body)
        with ThreadPoolExecutor(8) as ex:
            answers = list(ex.map(one, range(32)))
        assert all(st == 200 and body["model"] == m for st, m, body in answers), answers[:2]
        texts = {body["choices"][0]["text"] for _, _, body in answers}
        assert len(texts) == 1                    # one file, one greedy answer
        # loaded on demand by the workers its requests reached (gunicorn spreads connections:
        # usually both, not by rule)
        pids = set(re.findall(r"\[(\d+)\] \[INFO\] reame.server: model twin ready", s.log()))
        assert 1 <= len(pids) <= 2, s.log()
        deadline = time.monotonic() + 10
        while True:                               # the other worker's snapshot lands in <= 1 s
            text = http("GET", s.url + "/metrics")[2].decode()
            got = {m: sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(
                f'reame_generation_tokens_total{{model_name="{m}"}}'))
                for m in ("stories260K", "twin")}
            if got == {"stories260K": 64, "twin": 64} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got == {"stories260K": 64, "twin": 64}, got
    finally:
        s.stop()
