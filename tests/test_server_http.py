"""The HTTP layer (issue 13): slow and hostile clients, HTTP conformance, /tokenize and
/detokenize, CORS and the vLLM-named metrics.

Three levels: the pieces on their own (`RequestReader`, the error mapping, `Metrics`), the app
through falcon.testing on the reference engine, and `reame serve` as a real gunicorn process
driven with raw sockets, `http.client` and the official `openai` client.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import weakref
from http.client import HTTPConnection

import pytest
from conftest import TIME_SCALE
from falcon import testing

from reame.server import ServerConfig, create_app
from reame.server.metrics import SERIES, VLLM_SERIES, Metrics
from reame.server.worker import RequestReader, http_error, parse_error_status

from test_server_e2e import LONG, LONG_CTX, MODEL, ReameServer, http, per_model
from test_server_unit import assert_error, new_engine, sse_events, stop_app

ORIGIN = "https://app.example.com"


# ======================================================================================
# RequestReader: when is a request whole?
# ======================================================================================

def reader(max_line=4094, max_head=100 * 8192 + 4, max_body=1000):
    return RequestReader(max_line, max_head, max_body)


def feed_bytewise(r: RequestReader, data: bytes):
    """Feed one byte at a time (as a slow client sends); every verdict before the last is None."""
    for i in range(len(data)):
        v = r.feed(data[i:i + 1])
        if v is not None:
            return i + 1, v
    return len(data), None


def test_reader_waits_for_the_whole_head_and_content_length_body():
    req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"a\": \"bcd\"}"
    r = reader()
    n, verdict = feed_bytewise(r, req)
    assert (n, verdict) == (len(req), "ready")              # not one byte early
    assert bytes(r.buf) == req
    r = reader()
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    assert feed_bytewise(r, get) == (len(get), "ready")


def test_reader_walks_chunked_bodies_and_trailers():
    body = b"5;ext=1\r\n{\"a\":\r\n3\r\n 12\r\n1\r\n}\r\n0\r\n"
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    for tail in (b"\r\n", b"X-Trailer: 1\r\n\r\n"):
        r = reader()
        n, verdict = feed_bytewise(r, head + body + tail)
        assert (n, verdict) == (len(head + body + tail), "ready")
    r = reader()                         # chunk data that itself contains CRLF is not a terminator
    data = head + b"4\r\n\r\n\r\n\r\n0\r\n\r\n"
    assert feed_bytewise(r, data) == (len(data), "ready")


def test_reader_refuses_over_limits_without_waiting():
    r = reader(max_body=100)
    assert r.feed(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n") == \
        (413, "The request body is larger than 100 bytes.")
    r = reader(max_body=100)           # a chunk announcing more than the limit: refused at once
    v = r.feed(b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n"
               + b"x" * 64 + b"\r\n41\r\n")
    assert v[0] == 413
    r = reader(max_line=100)
    assert r.feed(b"GET /" + b"a" * 200)[0] == 414          # no CRLF yet, already too long
    r = reader(max_line=100)
    assert r.feed(b"GET /" + b"a" * 120 + b" HTTP/1.1\r\n")[0] == 414
    r = reader(max_head=1000)
    assert r.feed(b"GET / HTTP/1.1\r\n") is None
    assert r.feed(b"X-A: " + b"a" * 1000 + b"\r\n")[0] == 431  # the head never ends


def test_reader_hands_malformed_heads_to_gunicorn_at_once():
    # gunicorn's parser rejects these from the bytes it has, so no thread waits on the client
    for data in (b"GET /health HTTP/1.1\nHost: x\n",            # bare LF
                 b"\n",
                 b"GET / HTTP/1.1\r\nNo colon here\r\n\r\n",
                 b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                 b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                 b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                 b"POST / HTTP/1.1\r\nExpect: something\r\nContent-Length: 3\r\n\r\n"):
        assert reader().feed(data) == "ready", data


CHUNKED = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_reader_answers_malformed_chunked_bodies_itself():
    """Issue 29, item 1: a body the reader found malformed was handed to gunicorn ("ready"),
    whose parser then waited for more bytes in a thread (NoMoreData, a 500, once the client
    left): the reader answers 400 at once instead. Leading zeros in a chunk size are legal
    (the issue's `0000000000000000010` is 16 bytes): the request is not whole until they come.
    Catches: a reader that returns "ready" for a malformed chunk again, or that bounds the
    size line by digits (refusing leading zeros) instead of by its length."""
    for body in (b"zz\r\n", b"3\r\nabcXX", b"1" * 5000, b"-1\r\n"):
        v = reader().feed(CHUNKED + body)
        assert isinstance(v, tuple) and v[0] == 400, (body[:20], v)
    r = reader(max_body=100)
    assert r.feed(CHUNKED + b"0000000000000000010\r\nabc") is None          # 13 bytes to come
    assert r.feed(b"d" * 13 + b"\r\n0\r\n\r\n") == "ready"
    assert reader().feed(CHUNKED + b"2" * 20 + b"\r\n")[0] == 413           # not a hex error


def test_reader_refuses_tls_and_a_missing_host_at_once():
    """Issue 29, item 11: TLS bytes on the plain port waited 10 s for a 408, and an HTTP/1.1
    request without Host was served. Catches: a reader that waits for a CRLF before looking at
    the first byte; a Host check that also refuses HTTP/1.0 (where Host is optional)."""
    hello = bytes.fromhex("16030100c4010000c00303") + bytes(32)
    assert reader().feed(hello)[0] == 400
    assert reader().feed(b"GET /health HTTP/1.1\r\n\r\n")[0] == 400
    assert reader().feed(b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")[0] == 400
    assert reader().feed(b"GET /health HTTP/1.0\r\n\r\n") == "ready"
    assert reader().feed(b"\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n") == "ready"


def test_reader_takes_over_expect_100_continue():
    r = reader()
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert r.feed(head) is None and r.take_expect()
    assert not r.take_expect()                  # once
    assert r.feed(b"{}") == "ready"
    assert bytes(r.buf) == b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


# ======================================================================================
# gunicorn's errors as JSON
# ======================================================================================

def test_parse_errors_map_to_statuses_and_json():
    from gunicorn.http import errors as E
    assert parse_error_status(E.LimitRequestLine(5000, 4094))[0] == 414
    assert parse_error_status(E.LimitRequestHeaders("limit request headers fields"))[0] == 431
    assert parse_error_status(E.InvalidRequestLine("BLAH"))[0] == 400
    assert parse_error_status(E.InvalidHeader("X"))[0] == 400
    assert parse_error_status(E.UnsupportedTransferCoding("br"))[0] == 501
    assert parse_error_status(E.InvalidResponseHeaderName("x"))[0] == 500   # the app's fault
    assert parse_error_status(RuntimeError("boom"))[0] == 500
    raw = http_error(431, "too big")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"Content-Type: application/json" in head and b"Connection: close" in head
    assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) == len(body)
    assert json.loads(body) == {"error": {"message": "too big", "type": "invalid_request_error",
                                          "param": None,
                                          "code": "request_header_fields_too_large"}}


# ======================================================================================
# Metrics: vLLM's names beside reame_*
# ======================================================================================

def parse_exposition(text: str) -> dict:
    """{(sample name, frozenset(labels)): value}, parsed by Prometheus's own client library."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(parsed: dict, name: str, **labels) -> float:
    return parsed[(name, frozenset(labels.items()))]


def summed(parsed: dict, name: str, **labels) -> float:
    """The sum of the samples of `name` that carry `labels` (and any others)."""
    want = set(labels.items())
    found = [v for (n, lab), v in parsed.items() if n == name and want <= lab]
    assert found, (name, labels)
    return sum(found)


def vllm_matches_reame(parsed: dict, model: str) -> int:
    """Every vllm:* series of `model` equals its reame_* source of that model (both summed
    over their other labels); the number of values compared."""
    sample = summed
    checked = 0
    lab = {"model_name": model, "engine": "0"}
    for name, (kind, _, source) in VLLM_SERIES.items():
        src = {}
        for (n, labels), v in parsed.items():
            if n.startswith(source) and dict(labels)["model_name"] == model:
                key = (n[len(source):], dict(labels).get("le"))
                src[key] = src.get(key, 0.0) + v
        if kind == "histogram":
            for suffix in ("_sum", "_count"):
                assert sample(parsed, name + suffix, **lab) == pytest.approx(src[(suffix, None)])
                checked += 1
            for b in SERIES[source][3]:
                le = str(float(b))
                assert sample(parsed, name + "_bucket", le=le, **lab) == src[("_bucket", le)]
                checked += 1
        else:
            assert sample(parsed, name, **lab) == pytest.approx(src[("", None)]), name
            checked += 1
    return checked


class FakeService:
    """The values the model series below read, as a model's service would give them."""

    def __init__(self, **values):
        self.__dict__.update(values)


def test_vllm_series_parse_and_equal_the_reame_ones():
    """Two models: each one's vllm:* series equal its own reame_* ones."""
    m = Metrics()
    mine = FakeService(running=3, waiting=5, used=6, capacity=24, queries=128, hits=64,
                       preemptions=2)
    other = FakeService(running=1, waiting=0, used=2, capacity=8, queries=4, hits=0,
                        preemptions=0)
    m.models = lambda: {"my-model": mine, "other-model": other}
    for model in ("my-model", "other-model"):
        m.inc("reame_prompt_tokens_total", 17, (model,))
        m.inc("reame_generation_tokens_total", 40, (model,))
    for v in (0.02, 0.3, 7.0):
        m.observe("reame_time_to_first_token_seconds", v, ("my-model",))
        m.observe("reame_time_per_output_token_seconds", v / 10, ("my-model",))
    m.observe("reame_time_to_first_token_seconds", 0.1, ("other-model",))
    m.observe("reame_request_duration_seconds", 0.7, ("my-model", "/v1/completions"))
    m.observe("reame_request_duration_seconds", 3.0, ("my-model", "/v1/chat/completions"))
    m.observe("reame_request_duration_seconds", 1.0, ("other-model", "/v1/completions"))
    m.model_gauges.update({"reame_running_requests": lambda s: s.running,
                           "reame_queue_depth": lambda s: s.waiting,
                           "reame_kv_blocks_used": lambda s: s.used,
                           "reame_kv_blocks_capacity": lambda s: s.capacity,
                           "reame_kv_cache_usage_ratio": lambda s: s.used / s.capacity})
    m.model_counters.update({"reame_prefix_cache_queries_total": lambda s: s.queries,
                             "reame_prefix_cache_hits_total": lambda s: s.hits,
                             "reame_preemptions_total": lambda s: s.preemptions})
    parsed = parse_exposition(m.render())
    assert vllm_matches_reame(parsed, "my-model") > 30
    assert vllm_matches_reame(parsed, "other-model") > 30
    lab = {"model_name": "my-model", "engine": "0"}
    assert sample(parsed, "vllm:num_requests_waiting", **lab) == 5
    assert sample(parsed, "vllm:kv_cache_usage_perc", **lab) == 0.25
    assert sample(parsed, "vllm:prefix_cache_hits_total", **lab) == 64
    assert sample(parsed, "vllm:e2e_request_latency_seconds_count", **lab) == 2
    assert sample(parsed, "vllm:inter_token_latency_seconds_count", **lab) == 3
    assert sample(parsed, "vllm:time_to_first_token_seconds_count", model_name="other-model",
                  engine="0") == 1


def test_kv_usage_is_a_ratio_of_the_whole_server(tmp_path):
    """With two workers serving a model its usage is (used1 + used2) / (total1 + total2), not
    a sum of ratios."""
    m = Metrics(str(tmp_path))
    m.models = lambda: {"reame": FakeService(used=90, capacity=100)}
    m.model_gauges.update({"reame_kv_blocks_used": lambda s: s.used,
                           "reame_kv_blocks_capacity": lambda s: s.capacity,
                           "reame_kv_cache_usage_ratio": lambda s: s.used / s.capacity})
    other = {"reame_kv_blocks_used": [[["reame"], 30.0]],
             "reame_kv_blocks_capacity": [[["reame"], 100.0]],
             "reame_kv_cache_usage_ratio": [[["reame"], 0.3]]}
    (tmp_path / f"worker-{os.getppid()}.json").write_text(json.dumps(other))   # a live pid
    parsed = parse_exposition(m.render())
    assert sample(parsed, "reame_kv_cache_usage_ratio", model_name="reame") == pytest.approx(0.6)
    assert sample(parsed, "vllm:kv_cache_usage_perc", model_name="reame", engine="0") == \
        pytest.approx(0.6)


# ======================================================================================
# The app through falcon.testing
# ======================================================================================

@pytest.fixture(scope="module")
def tok(stories_model):
    from reame.tokenizer import Tokenizer
    return Tokenizer.from_metadata(stories_model.metadata)


@pytest.fixture(scope="module")
def app(stories_model):
    a = create_app(new_engine(stories_model).inner,      # the engine itself: final_hidden too
                   ServerConfig(model=stories_model.path, max_seqs=4))
    yield a
    stop_app(a)


@pytest.fixture(scope="module")
def client(app):
    return testing.TestClient(app)


def requests_total(app, endpoint: str, status: int) -> float:
    return app.reame.metrics._values["reame_requests_total"].get((endpoint, str(status)), 0)


def call(app, method, path, body=b"", headers=None, drop=()):
    """Call the WSGI app directly: (status line, headers, body). `drop` removes environ keys
    falcon.testing would set (CONTENT_LENGTH for a chunked body)."""
    env = testing.create_environ(method=method, path=path, body=body, headers=headers)
    for k in drop:
        env.pop(k, None)
    out = {}

    def start(status, hdrs, exc_info=None):
        out["status"], out["headers"] = status, dict(hdrs)

    it = app(env, start)
    try:
        data = b"".join(it)
    finally:
        getattr(it, "close", lambda: None)()
    return out["status"], out["headers"], data


def test_chunked_request_body(app):
    """Transfer-Encoding: chunked with no Content-Length: the body is read to its end (the
    server de-chunks wsgi.input); it was answered 400 "The request body is empty"."""
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4,
                       "temperature": 0}).encode()
    status, _, data = call(app, "POST", "/v1/completions", body,
                           {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                           drop=("CONTENT_LENGTH",))
    assert status.startswith("200"), data
    assert json.loads(data)["usage"]["completion_tokens"] == 4
    status, _, data = call(app, "POST", "/v1/completions", b"x" * (16 * 2**20 + 1),
                           {"Transfer-Encoding": "chunked"}, drop=("CONTENT_LENGTH",))
    assert status.startswith("413") and json.loads(data)["error"]["code"] == "request_too_large"
    status, _, data = call(app, "POST", "/v1/completions", body, drop=("CONTENT_LENGTH",))
    assert status.startswith("400") and "empty" in data.decode()   # no length, not chunked


def test_head_wherever_get_is_served(app, client):
    """Every route that answers GET answers HEAD with the same status and headers, no body."""
    from reame.server.app import ENDPOINTS
    paths = [p.replace("{model_id}", MODEL) for p in ENDPOINTS] + ["/v1/models/nope"]
    served = 0
    for path in paths:
        g = client.simulate_get(path)
        h = client.simulate_head(path)
        if g.status_code == 405:
            assert h.status_code == 405, path
            continue
        served += 1
        assert h.status_code == g.status_code, (path, h.status_code, g.status_code)
        assert h.content == b""
        assert h.headers.get("content-type") == g.headers.get("content-type"), path
        if path != "/metrics":              # the metrics change between the two requests
            assert h.headers["content-length"] == str(len(g.content)), path
    assert served == 8          # /health, /metrics, /v1/models, /v1/models/{id}, an unknown id,
    #                             /v1/adaptive, /v1/responses/{id} and its input_items (404s here)


def test_tokenize_llama_server_shapes(client, tok):
    r = client.simulate_post("/tokenize", json={"content": "Once upon a time"})
    assert r.status_code == 200, r.text
    ids = tok.encode("Once upon a time", add_special=False)
    assert r.json == {"tokens": ids, "count": len(ids), "max_model_len": 256}
    r = client.simulate_post("/tokenize", json={"content": "Once", "add_special": True})
    assert r.json["tokens"][0] == tok.bos_id and r.json["tokens"][1:] == tok.encode(
        "Once", add_special=False)
    # special tokens in the text are parsed unless told not to (llama-server's default)
    assert client.simulate_post("/tokenize", json={"content": "<s>"}).json["tokens"] == \
        [tok.bos_id]
    no_parse = client.simulate_post("/tokenize", json={"content": "<s>", "parse_special": False})
    assert tok.bos_id not in no_parse.json["tokens"]
    # pieces: text when valid UTF-8, else the byte values
    r = client.simulate_post("/tokenize", json={"content": "a 猫", "with_pieces": True})
    pieces = r.json["tokens"]
    assert [p["id"] for p in pieces] == tok.encode("a 猫", add_special=False)
    assert all(set(p) == {"id", "piece"} for p in pieces)
    assert [p["piece"] for p in pieces][-3:] == [[0xE7], [0x8C], [0xAB]]
    assert bytes(b for p in pieces for b in (p["piece"].encode() if isinstance(p["piece"], str)
                                             else p["piece"])) == b" a \xe7\x8c\xab"


def test_tokenize_vllm_shape_and_detokenize_round_trip(client, tok):
    r = client.simulate_post("/tokenize", json={"model": MODEL, "prompt": "The little dog"})
    ids = r.json["tokens"]
    assert ids[0] == tok.bos_id                             # vLLM: add_special_tokens=True
    assert client.simulate_post("/tokenize", json={"prompt": "x", "add_special_tokens": False}
                                ).json["tokens"] == tok.encode("x", add_special=False)
    for text in ("The little dog", "a 猫 and ð", "<s>"):
        ids = client.simulate_post("/tokenize", json={"content": text}).json["tokens"]
        r = client.simulate_post("/detokenize", json={"tokens": ids})
        assert r.status_code == 200 and r.json == {"content": text, "prompt": text}


def test_tokenize_errors_are_openai_shaped(client):
    assert_error(client.simulate_post("/tokenize", json={}), 400, "content",
                 "missing_required_parameter")
    assert_error(client.simulate_post("/tokenize", json={"content": 3}), 400, "content")
    assert_error(client.simulate_post("/tokenize", json={"content": "x", "with_pieces": "yes"}),
                 400, "with_pieces")
    assert_error(client.simulate_post("/tokenize", json={"content": "x", "model": "gpt-4"}),
                 404, "model", "model_not_found")
    assert_error(client.simulate_post("/tokenize", body=b"{nope"), 400)
    assert_error(client.simulate_post("/detokenize", json={}), 400, "tokens")
    assert_error(client.simulate_post("/detokenize", json={"tokens": "abc"}), 400, "tokens")
    assert_error(client.simulate_post("/detokenize", json={"tokens": [1, True]}), 400, "tokens")
    assert_error(client.simulate_post("/detokenize", json={"tokens": [1, 512]}), 400, "tokens")
    assert_error(client.simulate_post("/detokenize", json={"tokens": [-1]}), 400, "tokens")
    assert_error(client.simulate_get("/tokenize"), 405)


def pooled_oracle(model, tok, text_or_ids, pooling):
    """The reference engine's final hidden states of the whole prompt in one step, pooled and
    scaled to unit length in numpy."""
    import numpy as np

    from reame.batch import Batch
    from reame.engines import create_engine
    ids = tok.encode(text_or_ids, add_special=True) if isinstance(text_or_ids, str) \
        else text_or_ids
    eng = create_engine(model, "reference", n_ctx=256, max_seqs=1)
    eng.forward(Batch.prefill(ids, 0, 0))
    h = eng.final_hidden(0, len(ids)).astype(np.float64)
    v = h.mean(0) if pooling == "mean" else h[-1]
    return v / np.linalg.norm(v), len(ids)


def test_embeddings_are_the_pooled_final_hidden_states(stories_model, client, tok):
    """stories260K's GGUF names no pooling: the last token's, as decoder embedding models."""
    import base64

    import numpy as np
    texts = ["Once upon a time", "The little dog ran to the park"]
    r = client.simulate_post("/v1/embeddings", json={"model": MODEL, "input": texts})
    assert r.status_code == 200, r.text
    body = r.json
    assert body["object"] == "list" and body["model"] == MODEL
    n = 0
    for i, (d, text) in enumerate(zip(body["data"], texts)):
        want, k = pooled_oracle(stories_model, tok, text, "last")
        n += k
        assert d["object"] == "embedding" and d["index"] == i and len(d["embedding"]) == 64
        np.testing.assert_allclose(d["embedding"], want, atol=2e-5)
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    # base64: the same float32 values, little-endian, for the same batch given as token ids
    # (another batch may round differently: 2e-7 with numpy 2.4); a shorter token-id input
    ids = tok.encode(texts[0], add_special=True)
    r = client.simulate_post("/v1/embeddings", json={
        "input": [ids, tok.encode(texts[1], add_special=True)], "encoding_format": "base64"})
    got = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in r.json["data"]]
    for g, d in zip(got, body["data"], strict=True):
        np.testing.assert_array_equal(g, np.float32(d["embedding"]))
    r = client.simulate_post("/v1/embeddings", json={"input": [ids[:3]],
                                                     "encoding_format": "base64"})
    short = np.frombuffer(base64.b64decode(r.json["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(short, pooled_oracle(stories_model, tok, ids[:3], "last")[0],
                               atol=2e-5)
    r = client.simulate_post("/v1/embeddings", json={"input": ids, "dimensions": 64})
    np.testing.assert_allclose(r.json["data"][0]["embedding"], got[0], atol=2e-6)


def test_embeddings_mean_pooling(stories_model, tok):
    import numpy as np
    app = create_app(new_engine(stories_model).inner,
                     ServerConfig.from_env({"REAME_POOLING": "mean"}, model=stories_model.path))
    try:
        r = testing.TestClient(app).simulate_post("/v1/embeddings", json={"input": "The dog"})
        np.testing.assert_allclose(r.json["data"][0]["embedding"],
                                   pooled_oracle(stories_model, tok, "The dog", "mean")[0],
                                   atol=2e-5)
    finally:
        stop_app(app)


def test_embedding_pooling_from_the_model(stories_model):
    from types import SimpleNamespace as NS

    from reame.server.service import embedding_pooling

    def engine(md):       # every engine gives its final hidden states (reame.engine_api)
        return NS(model=NS(metadata=md), config=NS(arch="qwen3"),
                  final_hidden=lambda lo, hi: None)

    cfg = ServerConfig()
    assert embedding_pooling(engine({}), cfg) == ("last", None)
    assert embedding_pooling(engine({"qwen3.pooling_type": 1}), cfg) == ("mean", None)
    assert embedding_pooling(engine({"qwen3.pooling_type": 3}), cfg) == ("last", None)
    assert embedding_pooling(engine({"llama.pooling_type": 1}), cfg) == ("last", None)  # arch
    kind, why = embedding_pooling(engine({"qwen3.pooling_type": 2}), cfg)
    assert kind is None and "cls" in why
    assert embedding_pooling(engine({"qwen3.pooling_type": 2}), ServerConfig(pooling="mean")) \
        == ("mean", None)


def test_embeddings_errors(client, app):
    assert_error(client.simulate_post("/v1/embeddings", json={}), 400, "input",
                 "missing_required_parameter")
    for bad in ("", [], [""], ["a", 3], [[1, 2], []], [True], {"a": 1}, [[1, 512]], [-1]):
        assert_error(client.simulate_post("/v1/embeddings", json={"input": bad}), 400, "input")
    assert_error(client.simulate_post("/v1/embeddings", json={"input": "x", "dimensions": 32}),
                 400, "dimensions", "unsupported_parameter")
    assert_error(client.simulate_post("/v1/embeddings",
                                      json={"input": "x", "encoding_format": "int8"}),
                 400, "encoding_format")
    assert_error(client.simulate_post("/v1/embeddings", json={"input": "x", "model": "ada"}),
                 404, "model", "model_not_found")
    assert_error(client.simulate_post("/v1/embeddings",
                                      json={"input": [[1] * 257]}), 400, "input",
                 "context_length_exceeded")
    assert_error(client.simulate_post("/v1/embeddings", json={"input": ["x"] * 2049}), 400,
                 "input")
    ok = requests_total(app, "/v1/embeddings", 200)
    assert client.simulate_post("/v1/embeddings", json={"input": "x"}).status_code == 200
    assert requests_total(app, "/v1/embeddings", 200) == ok + 1


def test_stream_counted_when_it_ends_499_if_cut(app):
    """A stream is counted with its outcome: 200 when read to the end, 499 when the client
    leaves (it was counted 200 as soon as its headers went out)."""
    def start(status, headers, exc_info=None):
        start.status = status

    def stream(max_tokens):
        body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "stream": True,
                           "max_tokens": max_tokens, "ignore_eos": True}).encode()
        env = testing.create_environ(method="POST", path="/v1/completions", body=body,
                                     headers={"Content-Type": "application/json"})
        return app(env, start)

    ep = "/v1/completions"
    ok0, cut0 = requests_total(app, ep, 200), requests_total(app, ep, 499)
    it = stream(200)
    assert start.status.startswith("200")
    next(iter(it))                                  # the first chunk, then the client hangs up
    assert requests_total(app, ep, 200) == ok0      # not counted before the stream ends
    it.close()
    assert requests_total(app, ep, 499) == cut0 + 1
    assert requests_total(app, ep, 200) == ok0
    it = stream(3)
    chunks = b"".join(it)
    it.close()
    assert chunks.endswith(b"data: [DONE]\n\n")
    assert requests_total(app, ep, 200) == ok0 + 1 and requests_total(app, ep, 499) == cut0 + 1


def test_a_stream_the_client_did_not_take_whole_counts_499(app):
    """Issue 29, item 9: a stream written whole into the kernel's buffers after its client
    left was counted 200 (4 of 24 cut streams under load), in /metrics and the access log.
    The outcome is 200 only once the client acknowledged every byte (the worker's socket
    says so through gunicorn.socket); the access line gives the stream's outcome. Catches a
    stream counted by what was written, and an access log that prints the header status."""
    from reame.server.worker import logged_status

    class Socket:                       # gunicorn.socket as the worker gives it
        def __init__(self, took_all):
            self.took_all = took_all

        def delivered(self):
            return self.took_all

        def recv(self, *a):             # for the client_connected probe: still there
            raise BlockingIOError

        def fileno(self):
            return 0

    ep = "/v1/completions"
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "stream": True,
                       "max_tokens": 3, "ignore_eos": True}).encode()
    for took_all, want in ((False, 499), (True, 200)):
        before = requests_total(app, ep, want)
        env = testing.create_environ(method="POST", path=ep, body=body,
                                     headers={"Content-Type": "application/json"})
        env["gunicorn.socket"] = Socket(took_all)
        it = app(env, lambda status, headers, exc_info=None: None)
        assert b"".join(it).endswith(b"data: [DONE]\n\n")      # written whole either way

        logged = logged_status("200 OK", env)
        assert logged == ("200 OK" if want == 200 else "499 Client Closed Request")
        it.close()
        assert requests_total(app, ep, want) == before + 1


def test_cors_preflight_with_api_key_and_the_answers(stories_model):
    app = create_app(new_engine(stories_model),
                     ServerConfig(model=stories_model.path, api_key="sk-k",
                                  cors_origins=f"{ORIGIN}, http://localhost:3000"))
    try:
        c = testing.TestClient(app)
        pre = c.simulate_options("/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 200                      # no key needed for the preflight
        assert pre.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert "authorization" in pre.headers["access-control-allow-headers"].lower()
        r = c.simulate_post("/tokenize", json={"content": "x"},
                            headers={"Origin": ORIGIN, "Authorization": "Bearer sk-k"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
        assert "Retry-After" in r.headers["access-control-expose-headers"]
        denied = c.simulate_post("/tokenize", json={"content": "x"}, headers={"Origin": ORIGIN})
        assert denied.status_code == 401       # the browser may read why: CORS headers on errors
        assert denied.headers["access-control-allow-origin"] == ORIGIN
        other = c.simulate_post("/tokenize", json={"content": "x"},
                                headers={"Origin": "https://evil.example",
                                         "Authorization": "Bearer sk-k"})
        assert "access-control-allow-origin" not in other.headers
    finally:
        stop_app(app)


def test_cors_off_by_default_and_from_environment(stories_model, client):
    r = client.simulate_get("/v1/models", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in r.headers
    cfg = ServerConfig.from_env({"REAME_CORS_ORIGINS": "*"}, model=stories_model.path)
    app = create_app(new_engine(stories_model), cfg)
    try:
        r = testing.TestClient(app).simulate_get("/v1/models", headers={"Origin": ORIGIN})
        assert r.headers["access-control-allow-origin"] == "*"
    finally:
        stop_app(app)


def test_server_settings_are_checked():
    from reame.errors import ReameError
    for bad in ("https://x.example/path", "x.example", "ftp://x.example", "*, https://a.b"):
        with pytest.raises(ReameError, match="CORS origin"):
            ServerConfig(cors_origins=bad).check()
    assert ServerConfig(cors_origins=" * ").cors_allow_origins() == "*"
    assert ServerConfig(cors_origins="http://a:1,https://b").cors_allow_origins() == \
        ["http://a:1", "https://b"]
    for field in ("header_timeout", "body_timeout"):
        with pytest.raises(ReameError):
            ServerConfig(**{field: 0}).check()
    with pytest.raises(ReameError):
        ServerConfig(max_connections=0).check()
    with pytest.raises(ReameError, match="send_buffer"):
        ServerConfig(send_buffer=-1).check()
    assert ServerConfig.from_env({"REAME_SEND_BUFFER": "8192"}).send_buffer == 8192
    with pytest.raises(ReameError, match="pooling"):
        ServerConfig.from_env({"REAME_POOLING": "cls"})
    cfg = ServerConfig.from_env({"REAME_HEADER_TIMEOUT": "3", "REAME_BODY_TIMEOUT": "4",
                                 "REAME_SEND_TIMEOUT": "0", "REAME_MAX_CONNECTIONS": "77"})
    assert (cfg.header_timeout, cfg.body_timeout, cfg.send_timeout, cfg.max_connections) == \
        (3.0, 4.0, 0.0, 77)


def test_gunicorn_settings_use_the_reame_worker(monkeypatch):
    import importlib

    from reame.server import gunicorn_app
    opts = gunicorn_app.gunicorn_options(ServerConfig(max_connections=321))
    assert opts["worker_class"] == "reame.server.worker.ReameWorker"
    assert opts["worker_connections"] == 321
    monkeypatch.setenv("REAME_MAX_CONNECTIONS", "77")
    import reame.server.gunicorn_conf as conf
    conf = importlib.reload(conf)
    assert conf.worker_class == "reame.server.worker.ReameWorker"
    assert conf.worker_connections == 77


# ======================================================================================
# reame serve: a real gunicorn
# ======================================================================================

@pytest.fixture(scope="module")
def server(stories_path, tmp_path_factory):
    """16 HTTP threads (the old worker stopped answering once 16 connections were slow), the
    default timeouts (10 s head, 60 s body), CORS for one origin."""
    s = ReameServer(stories_path, "--max-seqs", "4", "--queue-size", "16", "--http-threads",
                    "16", "--ctx-size", LONG_CTX, "--cors-origins", ORIGIN,
                    "--attn-type", "f32",      # embeddings are checked against the f32 oracle
                    log_dir=tmp_path_factory.mktemp("http"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def strict(stories_path, tmp_path_factory):
    """Short timeouts, a 4 KiB body limit, an API key, mean pooling."""
    s = ReameServer(stories_path, "--max-seqs", "2", "--http-threads", "8", "--ctx-size",
                    LONG_CTX, "--header-timeout", "1", "--body-timeout", "1", "--send-timeout",
                    "1", "--api-key", "sk-strict", "--cors-origins",
                    ORIGIN, "--pooling", "mean", "--attn-type", "f32",
                    env={"REAME_MAX_BODY_BYTES": "4096"},
                    log_dir=tmp_path_factory.mktemp("strict"))
    yield s
    s.stop()


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


_LEFTOVER: "weakref.WeakKeyDictionary[socket.socket, bytes]" = weakref.WeakKeyDictionary()


def read_response(sock: socket.socket, timeout: float = 10):
    """(status, headers, body) of one response; 1xx responses are returned as they come. Bytes
    of the next response received with this one are kept for the next call (pipelining)."""
    sock.settimeout(timeout)
    data = _LEFTOVER.pop(sock, b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", 0)) if status >= 200 else 0
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    if rest[n:]:
        _LEFTOVER[sock] = rest[n:]
    return status, headers, rest[:n]


def json_error(status, headers, body, want_status, code="__any__"):
    assert status == want_status, (status, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code != "__any__":
        assert err["code"] == code
    return err


def timed(fn):
    t = time.monotonic()
    try:
        ok = fn()
    except OSError as e:
        ok = repr(e)
    return ok, time.monotonic() - t


def health_ok(server, timeout=5.0):
    return http("GET", server.url + "/health", timeout=timeout)[0] == 200


def completion_ok(server, timeout=5.0):
    status, _, body = http("POST", server.url + "/v1/completions",
                           {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8,
                            "temperature": 0}, {"Content-Type": "application/json"},
                           timeout=timeout)
    return status == 200 and json.loads(body)["usage"]["completion_tokens"] == 8


def test_200_slow_clients_do_not_starve_the_server(server):
    """Issue 13: connections sending their head or body a byte at a time held one gunicorn
    thread each, so 16 of them (44 in the report) stopped the server. Here 200 trickle for 6 s
    (within the timeouts: they are not cut), while /health and a small completion keep their
    usual latency."""
    base = [timed(lambda: health_ok(server))[1] for _ in range(5)]
    base += [timed(lambda: completion_ok(server))[1] for _ in range(3)]
    socks, stop = [], threading.Event()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    try:
        for i in range(200):
            s = connect(server)
            if i % 2:
                s.sendall(head)                                         # a partial head
            else:
                s.sendall(head + b"Content-Length: 5000\r\n\r\n{\"prompt\": \"")  # partial body
            socks.append(s)

        def trickle():
            while not stop.is_set():
                for s in socks:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
                stop.wait(0.5)

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        time.sleep(1.0)
        lat_h, lat_c, results = [], [], []
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            ok, dt = timed(lambda: health_ok(server))
            results.append(ok)
            lat_h.append(dt)
            ok, dt = timed(lambda: completion_ok(server))
            results.append(ok)
            lat_c.append(dt)
        # the slow connections are still open, waiting: not dropped to make room
        still_open = 0
        for s in socks:
            s.setblocking(False)
            try:
                s.recv(1)
            except BlockingIOError:
                still_open += 1
            except OSError:
                pass
    finally:
        stop.set()
        for s in socks:
            s.close()
    pace = statistics.median(base[:5]) + statistics.median(base[5:])    # one unloaded round
    print(f"\nbaseline max {max(base) * 1000:.1f} ms, a round {pace * 1000:.1f} ms; under 200 "
          f"slow clients: /health max "
          f"{max(lat_h) * 1000:.1f} ms over {len(lat_h)}, completion max "
          f"{max(lat_c) * 1000:.1f} ms over {len(lat_c)}")
    assert all(r is True for r in results), [r for r in results if r is not True][:3]
    # at least a quarter of the rounds the unloaded pace allows in the 5 s (x86: a round ~12 ms,
    # so >= ~100 required, ~700 made; the 10 this asked before was 6 under emulation)
    assert len(lat_h) >= max(3, 0.25 * 5 / pace), (len(lat_h), pace)
    # latencies: 1 s / 2 s, or twice the unloaded worst where that is longer (emulated: ~5 s)
    assert max(lat_h) < max(1.0, 2 * max(base[:5])), (max(lat_h), base[:5])
    assert max(lat_c) < max(2.0, 2 * max(base[5:])), (max(lat_c), base[5:])
    assert still_open == 200


def test_connection_close_clients_do_not_stall_the_event_loop(server):
    """gthread closes a `Connection: close` answer with blocking reads in its event loop (up to
    2 s each, waiting for the client's FIN): 20 clients that never close froze the server for
    40 s. Here they linger outside the loop."""
    socks = []
    try:
        for _ in range(20):
            s = connect(server)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            socks.append(s)                             # never read, never closed
        time.sleep(0.3)
        lat = [timed(lambda: health_ok(server))[1] for _ in range(20)]
    finally:
        for s in socks:
            s.close()
    assert max(lat) < 1.0, max(lat)


def test_head_and_body_timeouts_answer_408(strict):
    a, b, c = connect(strict), connect(strict), connect(strict)
    try:
        a.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")             # head unfinished
        b.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        err = json_error(*read_response(a, 5), 408, "request_timeout")
        assert "head" in err["message"]
        err = json_error(*read_response(b, 5), 408, "request_timeout")
        assert "body" in err["message"]
        assert time.monotonic() - t0 < 4
        c.settimeout(5)
        assert c.recv(100) == b""                   # sent nothing: closed without an answer
    finally:
        for s in (a, b, c):
            s.close()
    assert health_ok(strict)


def test_bodies_being_received_have_a_memory_budget(strict):
    """The bodies a worker is receiving hold at most 16 x the body limit (4 KiB here): beyond,
    503 with Retry-After at once. The budget is given back: a second round of 16 fits."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"

    def round_(n):
        socks = [connect(strict) for _ in range(n)]
        try:
            for s in socks:
                s.sendall(head + b" " * 4000)              # 96 bytes short of the body
            statuses = []
            for s in socks:
                status, headers, body = read_response(s, 5)
                json_error(status, headers, body, status)
                if status == 503:
                    assert headers["retry-after"] == "1"
                statuses.append(status)
            return statuses
        finally:
            for s in socks:
                s.close()

    first = round_(20)
    assert 3 <= first.count(503) <= 5 and first.count(408) == 20 - first.count(503), first
    assert round_(16) == [408] * 16                       # nothing left counted against it


def test_gunicorn_config_file_runs_the_same_worker(stories_path, tmp_path_factory):
    """`gunicorn -c python:reame.server.gunicorn_conf reame.wsgi:app` reads its HTTP-layer
    settings from REAME_* variables: a head timeout of 1 s answers 408."""
    from test_server_e2e import free_port
    port = free_port()
    cmd = [sys.executable, "-m", "gunicorn", "-c", "python:reame.server.gunicorn_conf",
           "reame.wsgi:app"]
    s = ReameServer(None, cmd=cmd, port=port, log_dir=tmp_path_factory.mktemp("conf"),
                    env={"REAME_MODEL": str(stories_path), "REAME_BIND": f"127.0.0.1:{port}",
                         "REAME_THREADS": "1", "REAME_HEADER_TIMEOUT": "1"})
    c = connect(s)
    try:
        c.sendall(b"GET /health HTTP/1.1\r\n")
        t0 = time.monotonic()
        json_error(*read_response(c, 5), 408, "request_timeout")
        assert time.monotonic() - t0 < 3
    finally:
        c.close()
        s.stop()


def test_connections_per_worker_are_bounded(stories_path, tmp_path_factory):
    """--max-connections 4: four idle connections fill the worker; a fifth client waits in the
    listen backlog until the head timeout closes them, then is served."""
    s = ReameServer(stories_path, "--max-connections", "4", "--header-timeout", "2",
                    log_dir=tmp_path_factory.mktemp("maxconn"))
    idle = []
    try:
        time.sleep(2.5)                             # the start-up health checks' connections
        idle = [connect(s) for _ in range(4)]
        time.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(OSError):                # not accepted while the four are open
            http("GET", s.url + "/health", timeout=0.8)
        assert health_ok(s, timeout=10)
        waited = time.monotonic() - t0
        assert 1.0 < waited < 6, waited
    finally:
        for c in idle:
            c.close()
        s.stop()


def test_shutdown_does_not_wait_for_slow_clients(stories_path, tmp_path_factory):
    """On SIGTERM, a request still being sent gets 2 s, then 503 shutting_down; the server
    exits at once instead of waiting out the head timeout (or gunicorn's 30 s grace)."""
    s = ReameServer(stories_path, log_dir=tmp_path_factory.mktemp("stop"))
    c = connect(s)
    try:
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        t0 = time.monotonic()
        s.proc.terminate()
        err = json_error(*read_response(c, 10), 503, "shutting_down")
        assert "shutting down" in err["message"]
        s.proc.wait(10)
        assert time.monotonic() - t0 < 6 and s.proc.returncode == 0, s.log()
    finally:
        c.close()
        s.stop()


def test_chunked_request_bodies(server, strict):
    """Transfer-Encoding: chunked through gunicorn: answered like the same body with a
    Content-Length (it was 400 "The request body is empty"); over the limit: 413."""
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16,
                       "temperature": 0}).encode()
    want = json.loads(http("POST", server.url + "/v1/completions", body,
                           {"Content-Type": "application/json"})[2])["choices"][0]["text"]
    conn = HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
        conn.request("POST", "/v1/completions", body=iter(pieces), encode_chunked=True,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200, r.read()
        assert json.loads(r.read())["choices"][0]["text"] == want
        # and again on the same kept-alive connection, with a chunk extension and a trailer
        raw = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"a;x=y\r\n{\"content\"\r\nc\r\n: \"Once\"}   \r\n0\r\nX-T: 1\r\n\r\n")
        conn.sock.sendall(raw)
        status, _, got = read_response(conn.sock)
        assert status == 200 and json.loads(got)["tokens"] == [403]
    finally:
        conn.close()
    s = connect(strict)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Authorization: Bearer sk-strict\r\n\r\n1001\r\n" + b" " * 4097 + b"\r\n")
        json_error(*read_response(s), 413, "request_too_large")
    finally:
        s.close()
    s = connect(strict)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        json_error(*read_response(s), 413, "request_too_large")  # at once, not after the body
    finally:
        s.close()


def test_unfinished_chunked_uploads_hold_no_thread(strict):
    """Issue 29, item 1: connections sending `POST /tokenize` chunked with a first chunk
    `0000000000000000010` + "abc" and then idling held one HTTP thread each (the reader
    called the size line malformed and handed the request to gunicorn, which read on): 340 of
    them made /health take 58 s, and each ended as a 500. Now they wait in the event loop and
    end as 408 (the strict server's 1 s body timeout); a size line of 6 KB without CRLF is a
    400 at once. 24 connections against the strict server's 8 HTTP threads. Catches the
    reader's old "ready" for a long size line or for leading zeros."""
    auth = b"Authorization: Bearer sk-strict\r\n"
    idle = []
    try:
        for _ in range(24):
            s = connect(strict)
            s.sendall(CHUNKED.replace(b"\r\n\r\n", b"\r\n" + auth + b"\r\n", 1)
                      + b"0000000000000000010\r\nabc")
            idle.append(s)
        ok, took = timed(lambda: health_ok(strict, timeout=5))
        assert ok is True and took < 2, (ok, took)
        for s in idle:
            json_error(*read_response(s), 408, "request_timeout")
        s = connect(strict)
        s.sendall(CHUNKED + b"1" * 6000)
        json_error(*read_response(s, 2), 400)
        s.close()
    finally:
        for s in idle:
            s.close()
    assert "Traceback" not in strict.log_path.read_text(errors="replace")


def test_pipelined_requests(server):
    """Requests sent back to back in one write are answered in order (the second is read from
    what the first one's reading left over, then handed to a thread like any other)."""
    body = b'{"content": "Once"}'
    s = connect(server)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" % (len(body), body))
        status, _, got = read_response(s)
        assert status == 200 and json.loads(got) == {"status": "ok"}
        status, _, got = read_response(s)
        assert status == 200 and json.loads(got)["tokens"] == [403]
        s.sendall(b"\r\n")                             # the third head ends later
        status, _, got = read_response(s)
        assert status == 200 and json.loads(got)["data"][0]["id"] == MODEL
    finally:
        s.close()


def test_expect_100_continue(server):
    body = json.dumps({"content": "Once upon a time"}).encode()
    s = connect(server)
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        status, _, rest = read_response(s, 5)
        assert status == 100                         # before the body is sent
        s.sendall(body)
        status, _, got = read_response(s)
        assert status == 200 and json.loads(got)["tokens"] == [403, 407, 261, 378]
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):            # exactly one interim answer, then nothing
            s.recv(1)
    finally:
        s.close()


@pytest.mark.parametrize("request_bytes,status", [
    (b"GET /health?x=" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(101))
     + b"\r\n", 431),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Many: " + b"a" * 850_000, 431),
    (b"BLAH\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\nHost: x\n\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: br\r\n\r\n", 501),
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
], ids=["414-long-url", "431-many-fields", "431-big-field", "431-endless-head", "400-request-line",
        "400-bare-lf", "501-coding", "400-two-lengths"])
def test_http_layer_errors_are_json(server, request_bytes, status):
    s = connect(server)
    try:
        s.sendall(request_bytes)
        json_error(*read_response(s), status)
    finally:
        s.close()
    assert health_ok(server)                         # the worker lives on


def test_head_over_http(server):
    for path in ("/health", "/v1/models", f"/v1/models/{MODEL}", "/metrics"):
        status, headers, body = http("HEAD", server.url + path)
        assert status == 200 and body == b"", path
        assert int({k.lower(): v for k, v in headers.items()}["content-length"]) > 0
    assert http("HEAD", server.url + "/v1/models/nope")[0] == 404
    assert http("HEAD", server.url + "/v1/completions")[0] == 405


def test_cut_streams_count_as_499(server):
    ep = "/v1/completions"
    key = 'reame_requests_total{endpoint="%s",status="%d"}'
    m0 = server.metrics()
    client = server.client()
    for _ in range(5):
        stream = client.completions.create(model=MODEL, prompt="Once upon a time",
                                           max_tokens=LONG, stream=True,
                                           extra_body={"ignore_eos": True})
        next(iter(stream))
        stream.close()
    for _ in range(2):
        list(client.completions.create(model=MODEL, prompt="Once", max_tokens=4, stream=True))
    t = time.monotonic() + 10 * TIME_SCALE
    while server.metrics().get(key % (ep, 499), 0) - m0.get(key % (ep, 499), 0) < 5:
        assert time.monotonic() < t, server.metrics()
        time.sleep(0.05)
    m = server.metrics()
    assert m.get(key % (ep, 499), 0) - m0.get(key % (ep, 499), 0) == 5
    assert m.get(key % (ep, 200), 0) - m0.get(key % (ep, 200), 0) == 2


def test_a_client_that_reads_nothing_is_disconnected(strict):
    """--send-timeout 1: a stream whose client stops reading frees its thread and its sequence;
    the request counts as 499. Issue 29, item 4: with the OS's buffers as they are (no
    --send-buffer, a client socket as it comes), the stream ran to its end into the kernel's
    send buffer, which Linux grows to megabytes, and the timeout never fired. Catches a worker
    that relies on the socket timeout alone, or that counts bytes written instead of bytes the
    client acknowledged."""
    key = 'reame_requests_total{endpoint="/v1/completions",status="499"}'
    auth = {"Authorization": "Bearer sk-strict"}
    before = strict.metrics(auth)
    s = socket.socket()
    s.connect(("127.0.0.1", strict.port))
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8000,
                       "stream": True, "ignore_eos": True, "logprobs": 20}).encode()  # big chunks
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-strict"
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        t = time.monotonic() + 20 * TIME_SCALE
        while strict.metrics(auth).get(key, 0) == before.get(key, 0):
            assert time.monotonic() < t, "the server still waits on a client that reads nothing"
            time.sleep(0.2)
        m = strict.metrics(auth)
        assert m[per_model("reame_running_requests")] == 0
        generated = (m[per_model("reame_generation_tokens_total")]
                     - before.get(per_model("reame_generation_tokens_total"), 0))
        # cancelled, not finished, and early: the client's receive buffer takes ~100 chunks,
        # then 1 s without an acknowledgement (~1,300 here); the server's send buffer took ~2,300
        # chunks before the socket timeout could fire
        assert generated < 2000, generated
    finally:
        s.close()


def guarded_pair(guard):
    from reame.server.worker import GuardedSocket
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_side, _ = listener.accept()
    listener.close()
    sock = GuardedSocket.adopt(server_side)
    sock.settimeout(30)
    sock.guard = guard
    return sock, client


@pytest.mark.skipif(sys.platform != "linux", reason="the guard reads Linux's TCP_INFO")
def test_guarded_socket_cuts_a_client_that_takes_nothing():
    """Issue 29, item 4 at the socket: writes to a client that reads nothing stop, with
    TimeoutError, once it has acknowledged nothing for `guard` seconds, whatever the kernel
    would still buffer; the server parks at most UNACKED_CAP bytes meanwhile. A client that
    reads is never cut. Catches a guard that times from the first write (cutting slow
    readers) or that trusts sendall to block (Linux buffers megabytes)."""
    from reame.server.worker import UNACKED_CAP
    sock, client = guarded_pair(0.3)
    sent, t0 = 0, time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            while sent < 64 * UNACKED_CAP:
                sock.sendall(b"x" * 16384)
                sent += 16384
        assert sent < UNACKED_CAP + (8 << 20)      # the client's buffer + the server's cap
        assert time.monotonic() - t0 < 20
        assert not sock.delivered()                # bytes still owed: not taken whole
    finally:
        sock.close(), client.close()
    sock, client = guarded_pair(0.3)               # a client reading slowly, in bursts
    total = 4 * UNACKED_CAP

    def read_slowly():
        got = 0
        while got < total:
            got += len(client.recv(1 << 20))
            time.sleep(0.2)                        # the whole takes longer than the guard

    reader = threading.Thread(target=read_slowly, daemon=True)
    try:
        reader.start()
        for _ in range(total // 65536):
            sock.sendall(b"y" * 65536)
        assert sock.delivered()
        reader.join(10)
    finally:
        sock.close(), client.close()


def test_tokenize_and_detokenize_over_http(server):
    status, _, body = http("POST", server.url + "/tokenize",
                           {"content": "Once upon a time", "with_pieces": True})
    assert status == 200
    tokens = json.loads(body)["tokens"]
    assert [t["piece"] for t in tokens] == [" Once", " upon", " a", " time"]
    status, _, body = http("POST", server.url + "/detokenize",
                           {"tokens": [t["id"] for t in tokens]})
    assert status == 200 and json.loads(body)["content"] == "Once upon a time"


def test_cors_over_http_with_the_openai_client(strict):
    status, headers, _ = http("OPTIONS", strict.url + "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    h = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and h["access-control-allow-origin"] == ORIGIN
    assert "POST" in h["access-control-allow-methods"]
    client = strict.client(api_key="sk-strict", default_headers={"Origin": ORIGIN})
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="Once", max_tokens=2)
    assert raw.headers["access-control-allow-origin"] == ORIGIN
    assert raw.parse().usage.completion_tokens == 2
    other = strict.client(api_key="sk-strict", default_headers={"Origin": "https://evil.example"})
    raw = other.models.with_raw_response.list()
    assert "access-control-allow-origin" not in raw.headers


def test_vllm_metrics_over_http(server):
    client = server.client()
    client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8)
    list(client.completions.create(model=MODEL, prompt="Once", max_tokens=8, stream=True))
    status, _, body = http("GET", server.url + "/metrics")
    assert status == 200
    parsed = parse_exposition(body.decode())
    assert vllm_matches_reame(parsed, MODEL) > 30
    lab = {"model_name": MODEL, "engine": "0"}
    assert sample(parsed, "vllm:generation_tokens_total", **lab) >= 16
    assert sample(parsed, "vllm:time_to_first_token_seconds_count", **lab) >= 2
    assert 0 <= sample(parsed, "vllm:kv_cache_usage_perc", **lab) <= 1


def test_embeddings_with_the_openai_client(server, strict, stories_model, tok):
    """The official client (which asks for base64 and decodes it); --pooling mean on the
    strict server."""
    import numpy as np
    texts = ["Once upon a time", "The little dog"]
    r = server.client().embeddings.create(model=MODEL, input=texts)
    assert [d.index for d in r.data] == [0, 1] and r.model == MODEL
    for d, text in zip(r.data, texts):
        np.testing.assert_allclose(d.embedding, pooled_oracle(stories_model, tok, text,
                                                              "last")[0], atol=2e-5)
    assert r.usage.prompt_tokens == sum(len(tok.encode(t, add_special=True)) for t in texts)
    r = strict.client(api_key="sk-strict").embeddings.create(model=MODEL, input=texts[1],
                                                             encoding_format="float")
    np.testing.assert_allclose(r.data[0].embedding,
                               pooled_oracle(stories_model, tok, texts[1], "mean")[0], atol=2e-5)


def test_serve_rejects_a_bad_cors_origin(stories_path):
    p = subprocess.run([sys.executable, "-m", "reame", "serve", str(stories_path),
                        "--cors-origins", "https://app.example.com/"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "CORS origin" in p.stderr
