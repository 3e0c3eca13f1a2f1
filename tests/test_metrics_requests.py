"""vLLM's per-request metrics (issue 28 item 8): `vllm:request_success_total{finished_reason}`,
the queue / prefill / decode / inference time histograms and the per-request prompt and
generation token histograms, each beside its reame_* source; and the KV pool's size as a gauge
without a counter's suffix. In-process app (falcon.testing) on the shared stories260K, the
reference engine slowed down per step so that the phases have lengths to measure."""

from __future__ import annotations

import json
import threading
import time

import pytest
from falcon import testing

from reame.engines import create_engine
from reame.server import ServerConfig, create_app
from reame.server.metrics import Metrics

DELAY = 0.02                    # seconds per engine step
MODEL = "stories260K"           # the served model's id (model_name of every reame_* series but
                                # reame_requests_total)


class SlowEngine:
    def __init__(self, inner):
        self.inner = inner
        self.model, self.config, self.n_ctx, self.kv = inner.model, inner.config, inner.n_ctx, \
            inner.kv

    kernel_plan = None      # no adaptive runtime: the tests set the scheduler's parameters

    def __getattr__(self, name):               # the rest of reame.engine_api.Engine: inner's
        return getattr(self.inner, name)

    def forward(self, batch):
        time.sleep(DELAY)
        return self.inner.forward(batch)


def parse(text: str) -> dict:
    """{(sample name, frozenset(labels)): value}, by Prometheus's own parser (which also checks
    the exposition)."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed, name, **labels):
    return parsed[(name, frozenset({k: str(v) for k, v in labels.items()}.items()))]


def start_stream(app, body):
    env = testing.create_environ("/v1/completions", method="POST",
                                 body=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return app(env, lambda s, h, exc_info=None: None)


@pytest.fixture(scope="module")
def scraped(stories_model):
    """One server, two slots: a stream of n = 2 the client leaves (abort) while a completion
    waits for a slot (its queue time is the stream's life); then a completion of n = 2 choices
    (length) and one ended by a stop string (stop). The scrape after them, and what was sent."""
    eng = SlowEngine(create_engine(stories_model, "reference", n_ctx=256, max_seqs=2))
    app = create_app(eng, ServerConfig(model=stories_model.path, max_seqs=2, adaptive_boot=0))
    c = testing.TestClient(app)
    sent = {}
    try:
        stream = start_stream(app, {"prompt": "Once upon a time", "max_tokens": 200, "n": 2,
                                    "stream": True, "ignore_eos": True})
        assert next(iter(stream)).startswith(b"data: ")
        waiting = {}
        t = threading.Thread(target=lambda: waiting.update(r=c.simulate_post(
            "/v1/completions", json={"prompt": "The dog", "max_tokens": 3, "ignore_eos": True})))
        t.start()
        time.sleep(0.3)                         # the completion waits for the slot meanwhile
        stream.close()                          # the client leaves: abort
        t.join(30)
        sent["queued"] = waiting["r"].json["usage"]
        r = c.simulate_post("/v1/completions", json={
            "prompt": "Lily", "max_tokens": 6, "n": 2, "ignore_eos": True, "temperature": 0})
        sent["n2"] = r.json["usage"]
        free = c.simulate_post("/v1/completions", json={"prompt": "Tom", "max_tokens": 12,
                                                        "temperature": 0}).json
        text = free["choices"][0]["text"]
        stop = text.strip().split()[1]          # a word of the greedy text: a stop string
        r = c.simulate_post("/v1/completions", json={"prompt": "Tom", "max_tokens": 12,
                                                     "temperature": 0, "stop": [stop]}).json
        assert r["choices"][0]["finish_reason"] == "stop"
        sent["free"], sent["stop"] = free["usage"], r["usage"]
        sent["free_reason"] = free["choices"][0]["finish_reason"]
        text = c.simulate_get("/metrics").text
    finally:
        app.reame.service.stop()
    return parse(text), text, sent


def test_request_success_counts_each_sequence_by_finished_reason(scraped, stories_model):
    """abort (the client left: both choices), length (max_tokens: the queued completion and both choices of
    n = 2), stop (a stop string, and the free one if it met its end); every reason is present
    from the start; the vllm:* series keeps finished_reason. Catches counting per HTTP request
    instead of per sequence (n = 2 counted once), a missing abort, reasons not labelled."""
    m, _, sent = scraped
    want = {"abort": 2, "length": 1 + 2, "stop": 1}
    want[sent["free_reason"]] += 1
    for reason, n in want.items():
        assert value(m, "reame_request_success_total", model_name=MODEL,
                     finished_reason=reason) == n, reason
        assert value(m, "vllm:request_success_total", finished_reason=reason,
                     model_name=MODEL, engine=0) == n, reason


def test_token_histograms_are_per_sequence(scraped):
    """One observation per sequence: prompt tokens (the n = 2 prompt twice) and generated
    tokens (what usage reported, the aborted stream's on top). Catches histograms observed
    once per request or fed the request's totals."""
    m, _, sent = scraped
    assert value(m, "reame_request_prompt_tokens_count", model_name=MODEL) == 7
    assert value(m, "vllm:request_prompt_tokens_count", model_name=MODEL, engine=0) == 7
    known = [sent["queued"], sent["free"], sent["stop"]]
    prompts = sum(u["prompt_tokens"] for u in known) + sent["n2"]["prompt_tokens"] * 2
    aborted_prompt = value(m, "reame_request_prompt_tokens_sum", model_name=MODEL) - prompts
    assert aborted_prompt == 2 * 5              # BOS + "Once upon a time", twice
    gen = sum(u["completion_tokens"] for u in known) + sent["n2"]["completion_tokens"]
    aborted = value(m, "reame_request_generation_tokens_sum", model_name=MODEL) - gen
    assert aborted >= 1                         # the stream got at least its first token
    assert value(m, "reame_request_generation_tokens_count", model_name=MODEL) == 7
    # 3 and 6 tokens: in the le=5 bucket the 3-token ones only (not the 6-token choices)
    le5 = value(m, "reame_request_generation_tokens_bucket", model_name=MODEL, le="5.0")
    small = sum(1 for u in known if u["completion_tokens"] <= 5)
    assert aborted <= 5 and le5 == small + 2    # the aborted two had a token or none


def test_phase_times(scraped):
    """The queued completion waited for the stream's life (>= 0.3 s) and no other did; prefill
    takes at least one step; decode (first token to last) at least a step per later token;
    inference = prefill + decode. Catches a queue time measured to the first token (it would
    hold the prefill step), prefill and decode swapped, decode counted from admission."""
    m, _, sent = scraped
    assert value(m, "reame_request_queue_time_seconds_count", model_name=MODEL) == 7
    assert value(m, "reame_request_queue_time_seconds_bucket", model_name=MODEL, le="0.25") == 6
    assert value(m, "reame_request_queue_time_seconds_bucket", model_name=MODEL, le="0.01") == 6
    assert value(m, "reame_request_prefill_time_seconds_bucket", model_name=MODEL, le="0.01") == 0
    assert value(m, "reame_request_prefill_time_seconds_count", model_name=MODEL) == 7
    assert value(m, "reame_request_prefill_time_seconds_sum", model_name=MODEL) >= 7 * DELAY * 0.9
    # decode: (tokens - 1) steps of each sequence; the n = 2 choices decode together
    steps = sum(u["completion_tokens"] - 1 for u in (sent["queued"], sent["free"], sent["stop"]))
    steps += 2 * (sent["n2"]["completion_tokens"] // 2 - 1)
    decode = value(m, "reame_request_decode_time_seconds_sum", model_name=MODEL)
    assert decode >= steps * DELAY * 0.9
    inference = value(m, "reame_request_inference_time_seconds_sum", model_name=MODEL)
    prefill = value(m, "reame_request_prefill_time_seconds_sum", model_name=MODEL)
    assert inference == pytest.approx(prefill + decode, rel=1e-6)
    assert value(m, "vllm:request_decode_time_seconds_sum", model_name=MODEL,
                 engine=0) == pytest.approx(decode)


def test_kv_pool_size_is_a_gauge_without_a_counter_suffix(scraped):
    """Catches the old `reame_kv_blocks_total`: a gauge named like a counter (promtool
    rejects it)."""
    m, text, _ = scraped
    assert "# TYPE reame_kv_blocks_capacity gauge" in text
    assert value(m, "reame_kv_blocks_capacity", model_name=MODEL) > 0
    assert "reame_kv_blocks_total" not in text
    for line in text.splitlines():              # no other gauge ends in _total
        if line.startswith("# TYPE ") and line.endswith(" gauge"):
            assert not line.split()[2].endswith("_total"), line


def test_finished_maps_tool_calls_to_stop_and_unknown_to_abort():
    """The API's "tool_calls" is the engine's stop; a sequence without a reason (the client
    left, an error) is an abort; times missing where the sequence never got that far."""
    m = Metrics()
    m.finished(MODEL, ["tool_calls", None, "length"], [4, 0, 2], [10, 10, 10],
               [(0.0, 1.0, 2.0, 5.0), (0.0, None, None, None), (0.0, 0.5, 1.0, 1.0)])
    p = parse(m.render())
    assert value(p, "reame_request_success_total", model_name=MODEL, finished_reason="stop") == 1
    assert value(p, "reame_request_success_total", model_name=MODEL, finished_reason="abort") == 1
    assert value(p, "reame_request_queue_time_seconds_count", model_name=MODEL) == 2
    assert value(p, "reame_request_queue_time_seconds_sum", model_name=MODEL) == 1.5
    assert value(p, "reame_request_prefill_time_seconds_sum", model_name=MODEL) == 1.5
    assert value(p, "reame_request_decode_time_seconds_sum", model_name=MODEL) == 3.0
    assert value(p, "reame_request_inference_time_seconds_sum", model_name=MODEL) == 4.5
