"""End to end: `reame serve` as a real gunicorn process on a loopback port, driven by the
official `openai` client (and raw HTTP where the client hides what we check)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import openai  # noqa: E402  (the official client, from the test extra)
from conftest import TIME_SCALE

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body=None, headers=None, timeout=30 * TIME_SCALE):
    """(status, headers, body bytes) without raising on 4xx/5xx."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class ReameServer:
    """`reame serve MODEL` (or any command) on a free loopback port; waits for /health."""

    def __init__(self, model, *args, cmd=None, env=None, port=None, log_dir=None,
                 start_timeout=180 * TIME_SCALE, new_session=False):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir or "/tmp") / f"reame-serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self._clients = []
        if "--threads" not in args and "--workers" not in args:
            # one compute thread: on a shared 2-core machine, kernels whose threads meet at spin
            # barriers slow down badly when another process holds the other core
            args = (*args, "--threads", "1")
        if TIME_SCALE != 1 and "--timeout" not in args:
            # the server's own 600 s limit per request would end emulated long generations early
            args = (*args, "--timeout", str(600 * TIME_SCALE))
        cmd = cmd or [sys.executable, "-m", "reame", "serve", str(model), "--host", "127.0.0.1",
                      "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, cwd=REPO,
                                     start_new_session=new_session)  # own process group
        t = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if http("GET", self.url + "/health", timeout=2 * TIME_SCALE)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > t:
                self.stop()
                raise RuntimeError(f"server not healthy after {start_timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]

    def metrics(self, headers=None) -> dict:
        status, _, body = http("GET", self.url + "/metrics", headers=headers)
        assert status == 200, body
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def client(self, **kw):
        kw.setdefault("api_key", "none")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 60 * TIME_SCALE)       # a safety bound, not a check
        c = openai.OpenAI(base_url=self.url + "/v1", **kw)
        self._clients.append(c)
        return c

    def stop(self):
        for c in self._clients:             # idle keep-alive connections delay the shutdown
            c.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20 * TIME_SCALE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@pytest.fixture(scope="module")
def server(stories_path, tmp_path_factory):
    s = ReameServer(stories_path, "--max-seqs", "4", "--queue-size", "64", "--ctx-size", LONG_CTX,
                    log_dir=tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()           # a clean, graceful shutdown


@pytest.fixture(scope="module")
def client(server):
    return server.client()


MODEL = "stories260K"
LONG_CTX = "8192"       # beyond the model's 2048: long generations that outlast client timeouts
LONG = 8000             # max_tokens of a generation that must still be running when we hang up


def per_model(name: str, model: str = MODEL) -> str:
    """The key in ReameServer.metrics() of a per-model series: every series but
    reame_requests_total carries the served model's id as model_name."""
    return f'{name}{{model_name="{model}"}}'


# ---- the API through the official client ----

def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_greedy_completion_equals_expected(client, stories_expected):
    for case in stories_expected["cases"]:
        r = client.completions.create(model=MODEL, prompt=case["prompt"], temperature=0,
                                      max_tokens=64)
        assert r.choices[0].text == case["greedy_text"]
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(case["prompt_tokens"])     # BOS included
        assert r.usage.completion_tokens == 64
        assert r.id and r.created and r.model == MODEL


def test_streamed_completion_equals_expected(client, stories_expected):
    case = stories_expected["cases"][1]
    stream = client.completions.create(model=MODEL, prompt=case["prompt"], temperature=0,
                                       max_tokens=64, stream=True)
    chunks = list(stream)
    assert len(chunks) > 1     # in pieces (a step's accepted drafts come as one chunk)
    assert "".join(c.choices[0].text for c in chunks) == case["greedy_text"]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert len({c.id for c in chunks}) == 1 and all(c.created for c in chunks)


def test_chat(client):
    msgs = [{"role": "system", "content": "You write stories."},
            {"role": "user", "content": "Once upon a time"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=20)
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant" and text
    assert r.usage.completion_tokens == 20 and r.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(model=MODEL, messages=msgs, temperature=0,
                                            max_tokens=20, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    parts = [{"type": "text", "text": "Once upon a time"}]
    r2 = client.chat.completions.create(model=MODEL, messages=[msgs[0], {"role": "user",
                                                                       "content": parts}],
                                        temperature=0, max_tokens=20)
    assert r2.choices[0].message.content == text


def test_n2(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=16, n=2,
                                  seed=11, temperature=1.0)
    assert [c.index for c in r.choices] == [0, 1]
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=8, n=2, seed=3)
    assert len(r.choices) == 2 and r.usage.completion_tokens == 16
    stream = client.chat.completions.create(model=MODEL, n=2, max_tokens=8, stream=True,
                                            messages=[{"role": "user", "content": "Hi"}])
    finished = {c.choices[0].index for c in stream if c.choices[0].finish_reason}
    assert finished == {0, 1}


def test_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    assert "".join(t.token for t in content) == r.choices[0].message.content
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
               for t in content)
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5,
                                  temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == r.choices[0].text


def test_stop(client, stories_expected):
    case = stories_expected["cases"][0]
    r = client.completions.create(model=MODEL, prompt=case["prompt"], temperature=0,
                                  max_tokens=64, stop=["park", "ball"])
    text = case["greedy_text"]
    assert r.choices[0].text == text[:text.index("park")]
    assert r.choices[0].finish_reason == "stop"
    stream = client.completions.create(model=MODEL, prompt=case["prompt"], temperature=0,
                                       max_tokens=64, stop="park", stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == text[:text.index("park")]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seed_reproducibility(client):
    kw = dict(model=MODEL, prompt="The little dog", max_tokens=32, temperature=1.3, top_p=0.95)
    a = client.completions.create(seed=42, **kw).choices[0].text
    b = client.completions.create(seed=42, **kw).choices[0].text
    c = client.completions.create(seed=43, **kw).choices[0].text
    assert a == b and a != c
    both = client.completions.create(seed=42, n=2, **kw)
    assert [x.text for x in both.choices] == [a, c]            # choice k uses seed + k
    stream = client.completions.create(seed=42, stream=True, **kw)
    assert "".join(x.choices[0].text for x in stream) == a


def test_extensions_through_extra_body(client, stories_expected):
    case = stories_expected["cases"][0]
    r = client.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=64,
                                  temperature=1.0, seed=5,
                                  extra_body={"top_k": 1, "min_p": 0.0,
                                              "repetition_penalty": 1.0})
    assert r.choices[0].text == case["greedy_text"]


def test_errors_through_client(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, temperature=-1)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=1)
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Once upon a time " * 3000, max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded"


def test_raw_http_errors(server):
    status, headers, body = http("POST", server.url + "/v1/chat/completions", b"{not json",
                                 {"Content-Type": "application/json"})
    assert status == 400 and set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    status, _, body = http("GET", server.url + "/v2/anything")
    assert status == 404 and "error" in json.loads(body)
    status, _, _ = http("GET", server.url + "/health")
    assert status == 200                                        # the worker survived


# ---- serving behaviour ----

def test_disconnects_leave_nothing_running(server, client):
    """50 streaming requests closed after their first chunk: all their generations end."""
    before = server.metrics()[per_model("reame_generation_tokens_total")]

    def one(i):
        stream = client.completions.create(model=MODEL, prompt="Once upon a time",
                                           max_tokens=LONG, stream=True,
                                           extra_body={"ignore_eos": True})
        first = next(iter(stream))
        assert first.choices[0].text is not None
        stream.close()                                          # hang up mid-stream

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(50)))
    t = time.monotonic() + 10
    while True:
        m = server.metrics()
        if m[per_model("reame_running_requests")] == 0 and m[per_model("reame_queue_depth")] == 0:
            break
        assert time.monotonic() < t, m
        time.sleep(0.05)
    assert m[per_model("reame_running_sequences")] == 0
    time.sleep(0.3)
    generated = server.metrics()[per_model("reame_generation_tokens_total")] - before
    # nothing still generating
    assert generated == m[per_model("reame_generation_tokens_total")] - before
    assert generated < 50 * LONG / 10                         # they were cut short, not finished
    assert http("GET", server.url + "/health")[0] == 200


def test_non_streaming_client_timeout_cancels(server):
    """A client that gives up on a non-streamed request frees its slot within a poll interval."""
    before = server.metrics()[per_model("reame_generation_tokens_total")]
    impatient = server.client(timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=LONG,
                                     n=4, extra_body={"ignore_eos": True})
    t = time.monotonic() + 5
    while server.metrics()[per_model("reame_running_requests")] != 0:
        assert time.monotonic() < t, "the abandoned generation kept running"
        time.sleep(0.05)
    assert server.metrics()[per_model("reame_generation_tokens_total")] - before < 4 * LONG


@pytest.fixture(scope="module")
def small_server(stories_path, tmp_path_factory):
    """Room for 2 generating + 2 waiting sequences; plenty of HTTP threads to say 429."""
    s = ReameServer(stories_path, "--max-seqs", "2", "--queue-size", "2", "--http-threads", "32",
                    "--ctx-size", LONG_CTX, log_dir=tmp_path_factory.mktemp("small"))
    yield s
    s.stop()


def test_overload_gets_429_and_accepted_requests_complete(small_server):
    client = small_server.client()
    n_req, n_tok = 16, 3000
    start = threading.Barrier(n_req)

    def one(i):
        start.wait(10)
        try:
            r = client.completions.create(model=MODEL, prompt="Once upon a time",
                                          max_tokens=n_tok, extra_body={"ignore_eos": True})
        except openai.RateLimitError as e:
            assert e.response.headers.get("retry-after")
            assert e.body["code"] == "queue_full"
            return 429
        assert r.usage.completion_tokens == n_tok and r.choices[0].finish_reason == "length"
        return 200

    with ThreadPoolExecutor(n_req) as pool:
        codes = list(pool.map(one, range(n_req)))
    assert codes.count(429) >= 1, codes
    assert codes.count(200) >= 4, codes                  # 2 running + 2 waiting at least
    assert codes.count(200) + codes.count(429) == n_req
    assert http("GET", small_server.url + "/health")[0] == 200
    m = small_server.metrics()
    assert m['reame_requests_total{endpoint="/v1/completions",status="429"}'] == codes.count(429)
    assert m[per_model("reame_running_requests")] == 0
    # and it still serves
    assert client.completions.create(model=MODEL, prompt="Once", max_tokens=2).usage


def test_api_key(stories_path, tmp_path_factory):
    s = ReameServer(stories_path, "--api-key", "sk-test-123",
                    log_dir=tmp_path_factory.mktemp("auth"))
    try:
        for key in ("wrong", "sk-test-12", "sk-test-1234"):
            with pytest.raises(openai.AuthenticationError) as e:
                s.client(api_key=key).models.list()
            assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        status, _, body = http("POST", s.url + "/v1/completions", {"prompt": "x"})
        assert status == 401
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
        assert http("GET", s.url + "/health")[0] == 200
        ok = s.client(api_key="sk-test-123")
        assert ok.completions.create(model=MODEL, prompt="Once", max_tokens=2).usage
    finally:
        s.stop()


def test_api_key_from_environment(stories_path, tmp_path_factory):
    s = ReameServer(stories_path, env={"REAME_API_KEY": "env-key"},
                    log_dir=tmp_path_factory.mktemp("authenv"))
    try:
        with pytest.raises(openai.AuthenticationError):
            s.client().models.list()
        assert s.client(api_key="env-key").models.list().data[0].id == MODEL
    finally:
        s.stop()


def test_two_workers_share_metrics(stories_path, tmp_path_factory):
    s = ReameServer(stories_path, "--workers", "2", log_dir=tmp_path_factory.mktemp("w2"))
    try:
        # /health answered by one worker; wait until both have loaded their replica
        t = time.monotonic() + 60
        while s.metrics()[per_model("reame_model_loaded")] != 2:
            assert time.monotonic() < t, s.log()
            time.sleep(0.2)
        client = s.client()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: client.completions.create(model=MODEL, prompt="Once",
                                                              max_tokens=3), range(8)))
        time.sleep(1.5)                         # each worker publishes its snapshot every second
        m = s.metrics()
        assert m['reame_requests_total{endpoint="/v1/completions",status="200"}'] == 8
        assert m[per_model("reame_generation_tokens_total")] == 24
        assert "Booting worker" in s.log()
    finally:
        s.stop()


def test_gunicorn_wsgi_entry_point(stories_path, tmp_path_factory):
    port = free_port()
    cmd = [sys.executable, "-m", "gunicorn", "-c", "python:reame.server.gunicorn_conf",
           "reame.wsgi:app"]
    s = ReameServer(None, cmd=cmd, port=port, log_dir=tmp_path_factory.mktemp("wsgi"),
                    env={"REAME_MODEL": str(stories_path), "REAME_BIND": f"127.0.0.1:{port}",
                         "REAME_MAX_SEQS": "2", "REAME_THREADS": "1"})
    try:
        r = s.client().completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8,
                                          temperature=0, stream=True)
        assert "".join(c.choices[0].text for c in r).startswith(", there was")
    finally:
        s.stop()


def _other_engines():
    from reame.engines import DEFAULT_ENGINE, ENGINES
    return [e for e in ENGINES if e != DEFAULT_ENGINE]


@pytest.mark.parametrize("engine", _other_engines())
def test_other_engines_serve_expected_greedy_text(stories_path, stories_expected, engine,
                                                  tmp_path_factory):
    """The module's server runs the default engine; every other --engine serves the same text."""
    s = ReameServer(stories_path, "--engine", engine, log_dir=tmp_path_factory.mktemp(engine))
    try:
        case = stories_expected["cases"][2]
        stream = s.client().completions.create(model=MODEL, prompt=case["prompt"], max_tokens=64,
                                               temperature=0, stream=True)
        assert "".join(c.choices[0].text for c in stream) == case["greedy_text"]
    finally:
        s.stop()


def test_serve_rejects_a_bad_model_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    p = subprocess.run([sys.executable, "-m", "reame", "serve", str(bad), "--port", "1"],
                       capture_output=True, text=True, timeout=60 * TIME_SCALE)
    assert p.returncode == 2 and "bad.gguf" in p.stderr
    p = subprocess.run([sys.executable, "-m", "reame", "serve", str(tmp_path / "none.gguf")],
                       capture_output=True, text=True, timeout=60 * TIME_SCALE)
    assert p.returncode == 2 and "no such file" in p.stderr.lower()
