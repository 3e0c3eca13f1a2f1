"""Scale-out: two `reame serve` replicas behind nginx running deploy/nginx/reame-scaleout.conf
(and its njs variant, and reame-models.conf), as shipped, with only addresses and paths
changed.

- Affinity: every request of a session (X-Session-Id header; with njs also the body's
  `prompt_cache_key`, Anthropic's `metadata.user_id`, `user`, `safety_identifier`, in that
  order) goes to one replica, both replicas get sessions, and a session's later requests find
  its prompt in that replica's prefix cache; a /v1/responses conversation keyed by
  `prompt_cache_key` finds its stored responses (`previous_response_id`). A replica is told by
  its answers: each runs with its own `--alias`, which Reame reports as the `model` of every
  answer; its own /metrics counts agree.
- Failover: a replica killed (SIGKILL, the whole process tree, as a machine dying) while it is
  generating is routed around. "No request lost" means: every non-streamed request gets a 200,
  those that were running on the dead replica included (nginx sends them again to the
  survivor), and every stream that had not received its first byte when the replica died
  completes; a stream already under way is cut, and its client sees the cut (the OpenAI client
  raises APIConnectionError), never a clean, shortened end.
- Several models (deploy/nginx/reame-models.conf): replicas serving the same model names, each
  model routed to one replica by the body's `model` whatever the request's session keys and
  client address, so that only that replica loads it; requests naming no model follow the
  first model; a busy model's line spreads its sessions; a dead replica's models move to the
  other (its running request retried there). Told by nginx's access log, as answers name the
  model, not the replica.

nginx is Debian's package (/usr/sbin/nginx), the njs module Debian's libnginx-mod-http-js; CI
must install both (.ci/run). Under CI=1 a missing one FAILS these tests, locally it skips them.
The Dockerfile's test at the end is static: Docker cannot run here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection
from pathlib import Path

import openai
import pytest

from conftest import TIME_SCALE, missing_data
from test_server_e2e import (LONG, LONG_CTX, MODEL, REPO, ReameServer, free_port, http,
                             per_model)
from test_server_nginx import nginx_binary

DEPLOY = REPO / "deploy" / "nginx"
SITE = DEPLOY / "reame-scaleout.conf"
SITE_NJS = DEPLOY / "reame-scaleout-njs.conf"
SITE_MODELS = DEPLOY / "reame-models.conf"
ALIASES = ("replica-a", "replica-b")
COMPLETIONS_200 = 'reame_requests_total{endpoint="/v1/completions",status="200"}'
# a chat template for the replicas (stories260K has none), for /v1/messages and /v1/responses:
# only "user: " before the first message's content, so a conversation's prompt starts with its
# key and shares no cached 16-token block with another conversation's
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")

# The main context around the shipped http-level file, with every path under a temporary prefix.
MAIN = """
{user}
{modules}
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {site};
}}
"""


def js_module() -> str:
    """The njs module's path (Debian: libnginx-mod-http-js); skip locally, fail in CI."""
    binary = nginx_binary()
    out = subprocess.run([binary, "-V"], capture_output=True, text=True).stderr
    m = re.search(r"--modules-path=(\S+)", out)
    path = os.path.join(m.group(1) if m else "/usr/lib/nginx/modules", "ngx_http_js_module.so")
    if not os.path.exists(path):
        missing_data(f"nginx's njs module is not installed ({path}); "
                     "apt-get install -y libnginx-mod-http-js")
    return path


def render_site(site: Path, upstreams, port: int, log: Path, default_model: str | None = None,
                edits=()) -> str:
    """The shipped file with the replicas' addresses, the listen address, the access log's and
    the njs scripts' paths replaced (and, for reame-models.conf, the first model's id in its
    map's `""` line); everything else (hash, failover, timeouts) as shipped. `edits`: (old, new)
    pairs of text, each found once, for a variant the file's comments describe."""
    text = site.read_text()
    servers = iter(upstreams)
    text, n = re.subn(r"^(\s*server )\S+:\d+(\s[^;]*)?;",
                      lambda m: f"{m.group(1)}127.0.0.1:{next(servers)}{m.group(2) or ''};",
                      text, flags=re.M)
    assert n == len(upstreams), f"{site}: expected {len(upstreams)} upstream servers, found {n}"
    for old, new in ((r"^(\s*)listen 80;", rf"\g<1>listen 127.0.0.1:{port};"),
                     (r"(access_log )/var/log/nginx/reame\.access\.log", rf"\g<1>{log}")):
        text, n = re.subn(old, new, text, flags=re.M)
        assert n == 1, f"{site}: {old!r} not found once"
    imports = len(re.findall(r"^js_import ", text, flags=re.M))
    text, n = re.subn(r"^(js_import \w+ from )/etc/nginx/reame/(\w+\.js);",
                      lambda m: f"{m.group(1)}{DEPLOY / m.group(2)};", text, flags=re.M)
    assert n == imports, f"{site}: {imports - n} js_import not in /etc/nginx/reame/"
    if default_model is not None:
        text, n = re.subn(r'^(\s*""\s+)[^\s;]+;', rf"\g<1>{default_model};", text, flags=re.M)
        assert n == 1, f"{site}: no map line for requests naming no model"
    for old, new in edits:
        assert text.count(old) == 1, f"{site}: {old!r} not found once"
        text = text.replace(old, new)
    return text


class Balancer:
    """nginx running a site file in front of the given replica ports."""

    def __init__(self, site: Path, upstreams, prefix: Path, **render):
        binary = nginx_binary()
        self.prefix, self.port = prefix, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.access_log = prefix / "access.log"
        text = render_site(site, upstreams, self.port, self.access_log, **render)
        modules = f"load_module {js_module()};" if re.search(r"^js_import ", text, re.M) else ""
        (prefix / "site.conf").write_text(text)
        conf = prefix / "nginx.conf"
        conf.write_text(MAIN.format(prefix=prefix, site=prefix / "site.conf", modules=modules,
                                    user="user root;" if os.geteuid() == 0 else ""))
        self.proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-e",
                                      str(prefix / "error.log")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t = time.monotonic() + 20 * TIME_SCALE
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"nginx exited: {self.proc.stdout.read().decode(errors='replace')}"
                            f"{self.error_log()}")
            try:
                if http("GET", self.url + "/health", timeout=2 * TIME_SCALE)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > t:
                self.stop()
                pytest.fail("nginx did not come up:\n" + self.error_log())
            time.sleep(0.1)

    def error_log(self) -> str:
        p = self.prefix / "error.log"
        return p.read_text(errors="replace")[-3000:] if p.exists() else ""

    def log_lines(self) -> list[str]:
        return self.access_log.read_text(errors="replace").splitlines()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_replicas(stories_path, log_dir, models=()) -> dict[str, ReameServer]:
    """Two replicas, started side by side, named by their aliases. With `models` (--model
    flags), each serves those too, after its first model, and the aliases name the replicas
    only here (an --alias would rename a replica's first model)."""
    template = Path(log_dir) / "chat.jinja"
    template.write_text(TEMPLATE)

    def start(alias):
        named = tuple(models) or ("--alias", alias)
        return ReameServer(stories_path, *named, "--max-seqs", "4", "--queue-size",
                           "64", "--ctx-size", LONG_CTX, "--block-size", "16",
                           "--chat-template-file", str(template), log_dir=log_dir,
                           new_session=True)               # kill_tree kills its group
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start, a) for a in ALIASES]
    started = {}
    for alias, f in zip(ALIASES, futures):
        try:
            started[alias] = f.result()
        except Exception:
            for r in started.values():
                r.stop()
            raise
    return started


def kill_tree(pid: int):
    """SIGKILL a replica started in its own session (gunicorn's master and its workers) at
    once: one kill for its process group. (A walk of /proc found no workers under qemu-user,
    whose guest sees the root filesystem's empty /proc when it lists it: the orphaned worker
    then shut down gracefully instead of dying.)"""
    os.killpg(pid, signal.SIGKILL)


def complete(url, key=None, user=None, prompt="Once upon a time", max_tokens=4,
             timeout=60 * TIME_SCALE, **extra):
    """POST /v1/completions, the session key in X-Session-Id and/or `user`: (status, body)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    if user is not None:
        body["user"] = user
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["X-Session-Id"] = key
    status, _, raw = http("POST", url + "/v1/completions", body, headers=headers, timeout=timeout)
    return status, (json.loads(raw) if raw.startswith(b"{") else raw)


def session_prompt(key: str) -> str:
    # unique from its first tokens (the key), and several 16-token blocks long
    return f"{key}. Once upon a time, there was a little girl named Lily. She liked to play " \
           f"with her ball in the park. One day, she saw a big dog."


@pytest.fixture(scope="module")
def replicas(stories_path, tmp_path_factory):
    nginx_binary()                  # skip (or fail in CI) before starting anything
    started = start_replicas(stories_path, tmp_path_factory.mktemp("replicas"))
    yield started
    for r in started.values():
        r.stop()


@pytest.fixture(scope="module")
def balancers(replicas, tmp_path_factory):
    """balancers(kind): nginx with the map-only site ("map") or the njs one ("njs") in front of
    the replicas, started on first use."""
    started = {}

    def get(kind):
        if kind not in started:
            site = SITE if kind == "map" else SITE_NJS
            started[kind] = Balancer(site, [r.port for r in replicas.values()],
                                     tmp_path_factory.mktemp(f"nginx-{kind}"))
        return started[kind]
    yield get
    for b in started.values():
        b.stop()


def served_by(replicas, send, keys, rounds=3, endpoint="/v1/completions"):
    """Send `send(key)` for every key, `rounds` times (a round at a time, keys in parallel):
    {key: [answer, ...]}; checks every answer is a 200 from one of the replicas and that each
    replica's /metrics counted exactly the answers that name it."""
    ok = f'reame_requests_total{{endpoint="{endpoint}",status="200"}}'
    before = {a: r.metrics().get(ok, 0) for a, r in replicas.items()}
    answers = {k: [] for k in keys}
    with ThreadPoolExecutor(4) as pool:
        for _ in range(rounds):
            for k, (status, body) in zip(keys, pool.map(send, keys)):
                assert status == 200, (k, status, body)
                assert body["model"] in replicas, body
                answers[k].append(body)
    for a, r in replicas.items():
        counted = r.metrics().get(ok, 0) - before[a]
        named = sum(b["model"] == a for bodies in answers.values() for b in bodies)
        assert counted == named, f"{a}: /metrics counted {counted} {endpoint}, answers say {named}"
    return answers


def cached_tokens(body) -> int:
    """Prompt tokens found in the prefix cache, in any of the three APIs' usage."""
    u = body["usage"]
    if "cache_read_input_tokens" in u:                          # /v1/messages
        return u["cache_read_input_tokens"]
    return (u.get("prompt_tokens_details") or u.get("input_tokens_details"))["cached_tokens"]


def assert_affine(answers, replicas):
    where = {k: {b["model"] for b in bodies} for k, bodies in answers.items()}
    moved = {k: w for k, w in where.items() if len(w) != 1}
    assert not moved, f"sessions answered by both replicas: {moved}"
    assert {w for ws in where.values() for w in ws} == set(replicas), \
        f"every session went to one replica: {where}"
    # the point of affinity: a session's later prompts are found in its replica's prefix cache
    for k, bodies in answers.items():
        for b in bodies[1:]:
            assert cached_tokens(b) > 0, (k, b["usage"])


@pytest.mark.parametrize("kind", ["map", "njs"])
def test_sessions_stick_to_one_replica(replicas, balancers, kind):
    balancer = balancers(kind)
    keys = [uuid.uuid4().hex[:12] for _ in range(24)]
    answers = served_by(replicas, lambda k: complete(balancer.url, key=k,
                                                     prompt=session_prompt(k)), keys)
    assert_affine(answers, replicas)


@pytest.mark.parametrize("kind", ["map", "njs"])
def test_requests_without_a_key_stick_to_the_client_address(replicas, balancers, kind):
    """No header (and, with njs, no `user`): the client's address is the key. An empty key would
    make nginx's hash fall back to round robin."""
    balancer = balancers(kind)
    answers = served_by(replicas, lambda i: complete(balancer.url), list(range(8)), rounds=2)
    assert len({b["model"] for bodies in answers.values() for b in bodies}) == 1


def test_user_field_routes_with_njs(replicas, balancers):
    """A conversation whose only key is `user` stays on one replica, 24 of them spread, the
    header wins over `user`, and a body beyond nginx's default buffer still routes. Catches a
    key function that ignores `user` (all on the address's replica), one that puts the body
    before the header, and a site that lets large bodies go to a file the script cannot read."""
    balancer = balancers("njs")
    users = [f"user-{uuid.uuid4().hex[:10]}" for _ in range(24)]
    answers = served_by(replicas, lambda u: complete(balancer.url, user=u,
                                                     prompt=session_prompt(u)), users)
    assert_affine(answers, replicas)
    # the header wins over `user`: a request with a user's header and another user's field
    # goes where the header's session lives
    home = {u: bodies[0]["model"] for u, bodies in answers.items()}
    for i, u in enumerate(users):
        status, body = complete(balancer.url, key=u, user=users[(i + 1) % len(users)])
        assert status == 200 and body["model"] == home[u], (u, body)
    # a body larger than nginx's default body buffer (16 KiB: beyond it the body goes to a file,
    # where the script cannot read it) still routes on its `user`: pad the JSON with blanks, and
    # take a user whose replica is not the one of the client's address
    address_home = complete(balancer.url)[1]["model"]
    u = next(u for u in users if home[u] != address_home)
    raw = json.dumps({"model": MODEL, "prompt": "Once", "max_tokens": 2, "user": u}).encode()
    status, _, out = http("POST", balancer.url + "/v1/completions", raw + b" " * 65536,
                          headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(out)["model"] == home[u], out[:300]


def post(url, path, body, key=None):
    """POST a JSON body (a dict, or raw bytes), the session key in X-Session-Id if given:
    (status, parsed answer or raw bytes)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["X-Session-Id"] = key
    status, _, raw = http("POST", url + path, body, headers=headers, timeout=60 * TIME_SCALE)
    return status, (json.loads(raw) if raw.startswith(b"{") else raw)


def with_key(field, key, body):
    """`body` with `key` in `field` ("metadata.user_id": inside `metadata`)."""
    if field == "metadata.user_id":
        return {**body, "metadata": {**body.get("metadata", {}), "user_id": key}}
    return {**body, field: key}


def completion_body(prompt="Once upon a time", max_tokens=4):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}


def message_body(prompt):
    return {"model": MODEL, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}


@pytest.mark.parametrize("field,endpoint", [("prompt_cache_key", "/v1/completions"),
                                            ("safety_identifier", "/v1/completions"),
                                            ("metadata.user_id", "/v1/messages")])
def test_body_keys_route_with_njs(replicas, balancers, field, endpoint):
    """A conversation whose only key is the body's `field` stays on one replica (and finds its
    prompt cached there) while 12 conversations spread over both replicas; the same string sent
    as X-Session-Id reaches the same replica. Catches a key function that ignores the field
    (every request falls back to the client's address: all on one replica, so "both replicas
    get conversations" fails), one that reads it from the wrong place (`user_id` at the top
    level, `metadata` as a string), one whose cheap pre-check looks for other names (the body is
    never parsed: the address again), and one that prefixes the key with the field's name
    (the header's K and the body's K on different replicas for some keys)."""
    balancer = balancers("njs")
    keys = [f"{field[:4]}-{uuid.uuid4().hex[:10]}" for _ in range(20)]
    make = completion_body if endpoint == "/v1/completions" else message_body
    answers = served_by(replicas, lambda k: post(balancer.url, endpoint,
                                                 with_key(field, k, make(session_prompt(k)))),
                        keys, endpoint=endpoint)
    assert_affine(answers, replicas)
    for k, bodies in answers.items():
        status, body = post(balancer.url, "/v1/completions", completion_body(), key=k)
        assert status == 200 and body["model"] == bodies[0]["model"], (k, body)


def test_responses_conversation_with_prompt_cache_key_stays_on_its_replica(replicas,
                                                                           balancers):
    """/v1/responses conversations, each sending one `prompt_cache_key` on every request and
    continuing with `previous_response_id`: every continuation finds the previous response in
    its replica's store (200, not `400 previous_response_not_found`) and its prompt in the prefix
    cache, and the conversations spread over both replicas; GET /v1/responses/{id} with the key
    as X-Session-Id (a GET has no body) finds the response too. Catches a key function that
    ignores prompt_cache_key (all on the address's replica: no spread), and one that keys on
    the body as a whole or on previous_response_id (a chain's requests move replicas: 400s)."""
    balancer = balancers("njs")
    # 24, as the other affinity tests: with 8 random keys, all on one replica of two ~1 run in
    # 100 (CI saw it once)
    keys = [f"conv-{uuid.uuid4().hex[:10]}" for _ in range(24)]
    last = {}

    def send(k):
        body = {"model": MODEL, "max_output_tokens": 4, "temperature": 0,
                "prompt_cache_key": k}
        if k in last:
            body.update(input="And then?", previous_response_id=last[k])
        else:
            body["input"] = session_prompt(k)
        status, out = post(balancer.url, "/v1/responses", body)
        if status == 200:
            last[k] = out["id"]
        return status, out

    answers = served_by(replicas, send, keys, endpoint="/v1/responses")
    assert_affine(answers, replicas)
    for k, rid in last.items():
        status, _, raw = http("GET", f"{balancer.url}/v1/responses/{rid}",
                              headers={"X-Session-Id": k})
        assert status == 200 and json.loads(raw)["model"] == answers[k][0]["model"], (k, raw)


def test_key_precedence_with_njs(replicas, balancers):
    """X-Session-Id over `prompt_cache_key` over `metadata.user_id` over `user` over
    `safety_identifier` (reame_session.js says why). For each adjacent pair, two keys whose
    replicas differ are sent one in each field, both ways round, the lower field written first
    in the JSON: the request must reach the higher field's key's replica. Catches a wrong order
    and a key taken from whichever name comes first in the body's text. Also a key written
    `"prompt_cache_key" : "K"` (JSON allows blanks before the colon) routes on K: catches a
    pre-check that wants the colon right after the name (the body would not be parsed)."""
    balancer = balancers("njs")
    home = {}
    for _ in range(16):                 # keys until there is one on each replica
        k = uuid.uuid4().hex[:12]
        status, body = post(balancer.url, "/v1/completions", completion_body(), key=k)
        assert status == 200, body
        home.setdefault(body["model"], k)
        if len(home) == 2:
            break
    assert len(home) == 2, f"16 keys, all on one replica: {home}"
    a, b = home.values()
    where = {v: r for r, v in home.items()}
    order = ["X-Session-Id", "prompt_cache_key", "metadata.user_id", "user",
             "safety_identifier"]
    for hi, lo in zip(order, order[1:]):
        for top, low in ((a, b), (b, a)):
            body = with_key(lo, low, {})            # the lower field first in the text
            if hi == "X-Session-Id":
                body, key = {**body, **completion_body()}, top
            else:
                body, key = {**with_key(hi, top, body), **completion_body()}, None
            status, out = post(balancer.url, "/v1/completions", body, key=key)
            assert status == 200 and out["model"] == where[top], (hi, lo, body, out)
    address_home = post(balancer.url, "/v1/completions", completion_body())[1]["model"]
    other = next(k for r, k in home.items() if r != address_home)
    raw = json.dumps(completion_body())[:-1] + f', "prompt_cache_key" : "{other}"}}'
    status, out = post(balancer.url, "/v1/completions", raw.encode())
    assert status == 200 and out["model"] == where[other], (raw, out)


# ---- several models: deploy/nginx/reame-models.conf ----

# The replicas of these tests serve the same models: the first (MODEL, as in the tests above)
# and one file under 12 more names, each a model with its own id (loaded on demand; until then
# it costs nothing), plus BUSY for the busy-model variant. Which replica a name hashes to
# depends on the replicas' ports, so each test first finds where the names go (probe_homes) and
# takes names on both replicas. A replica is told by nginx's access log (every request is
# tagged in its query string), since an answer's `model` names the model, not the replica.
MODEL_NAMES = tuple(f"m{i}" for i in range(12))
BUSY = "busy"
BUSY_LINE = '# "qwen2.5-7b"                  "qwen2.5-7b $reame_session";'


@pytest.fixture(scope="module")
def model_replicas(stories_path, tmp_path_factory):
    nginx_binary()                  # skip (or fail in CI) before starting anything
    js_module()
    models = [a for n in (*MODEL_NAMES, BUSY) for a in ("--model", f"{n}={stories_path}")]
    started = start_replicas(stories_path, tmp_path_factory.mktemp("model-replicas"), models)
    yield started
    for r in started.values():
        r.stop()


@pytest.fixture(scope="module")
def model_balancers(model_replicas, tmp_path_factory):
    """model_balancers(): nginx running reame-models.conf (MODEL as the first model's id in its
    map) in front of the model replicas; model_balancers(busy=True): the same with its
    busy-model line, uncommented for BUSY."""
    started = {}

    def get(busy=False):
        if busy not in started:
            edits = [(BUSY_LINE, f'"{BUSY}" "{BUSY} $reame_session";')] if busy else []
            started[busy] = Balancer(SITE_MODELS, [r.port for r in model_replicas.values()],
                                     tmp_path_factory.mktemp("nginx-models"),
                                     default_model=MODEL, edits=edits)
        return started[busy]
    yield get
    for b in started.values():
        b.stop()


def send(balancer, path, body=None, headers=None, source="127.0.0.1", method="POST"):
    """One request through `balancer` from the client address `source` (any of 127.0.0.0/8),
    tagged in its query string for answered_by: (tag, status, parsed answer or raw bytes)."""
    tag = uuid.uuid4().hex[:16]
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    headers = dict(headers or {})
    if data is not None:
        headers.setdefault("Content-Type", "application/json")
    conn = HTTPConnection("127.0.0.1", balancer.port, timeout=60 * TIME_SCALE,
                          source_address=(source, 0))
    try:
        conn.request(method, f"{path}?tag={tag}", data, headers)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    return tag, resp.status, (json.loads(raw) if raw.startswith(b"{") else raw)


def answered_by(balancer, replicas, tags) -> dict[str, str]:
    """{tag: the replica that answered it}, from nginx's access log (which writes a request's
    line after its answer: waits for them). A request tried on two replicas fails the test."""
    where = {f"127.0.0.1:{r.port}": a for a, r in replicas.items()}
    want = set(tags)
    deadline = time.monotonic() + 10 * TIME_SCALE
    while True:
        found = {}
        for ln in balancer.log_lines():
            m = re.search(r'\?tag=(\w+) HTTP/[\d.]+" .*? upstream="([^"]*)"', ln)
            if m and m.group(1) in want:
                found[m.group(1)] = m.group(2)
        if len(found) == len(want) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(found) == len(want), f"{len(want) - len(found)} requests not in the access log"
    assert set(found.values()) <= set(where), f"retried or unknown: {found}"
    return {t: where[u] for t, u in found.items()}


def probe_homes(balancer, replicas, names) -> dict[str, str]:
    """{model name: the replica the site sends it to}, by a POST naming it on a path Reame does
    not serve (a 404, which loads nothing)."""
    tags = {}
    for n in names:
        tag, status, out = send(balancer, "/v1/route-probe", {"model": n})
        assert status == 404, out
        tags[tag] = n
    by = answered_by(balancer, replicas, tags)
    return {n: by[t] for t, n in tags.items()}


def model_states(replica) -> dict[str, str]:
    """{model id: state} as the replica's GET /v1/models reports."""
    status, _, raw = http("GET", replica.url + "/v1/models")
    assert status == 200, raw
    return {m["id"]: m["state"] for m in json.loads(raw)["data"]}


def keyed_body(model=None, k=None, max_tokens=2):
    """A completion request carrying session keys of its own in every body field the session
    sites read (and, with `model`, naming it)."""
    k = k or uuid.uuid4().hex[:10]
    body = {"prompt": f"{k}. Once upon a time", "max_tokens": max_tokens, "temperature": 0,
            "user": f"user-{k}", "prompt_cache_key": f"pck-{k}"}
    return body if model is None else {"model": model, **body}


def test_each_model_is_served_by_one_replica(model_replicas, model_balancers):
    """Every request naming a model reaches one replica, whatever its X-Session-Id, `user`,
    `prompt_cache_key` and client address (each request its own), and only that replica loads
    the model (GET /v1/models: loaded there, unloaded on the other); the 12 names spread over
    both replicas, and each replica's /metrics counts the requests the access log gives it.
    Catches a site hashing on the session (reame_session.key: a model's requests spread, and
    both replicas load it) or on the client's address (6 addresses spread), and a key function
    that does not read the body's `model` (every name on the first model's replica: no
    spread)."""
    bal = model_balancers()
    home = probe_homes(bal, model_replicas, MODEL_NAMES)
    names = {a: [n for n in MODEL_NAMES if home[n] == a] for a in model_replicas}
    assert all(names.values()), f"12 names, all on one replica: {home}"
    chosen = [n for ns in names.values() for n in ns[:2]]
    before = {a: r.metrics().get(COMPLETIONS_200, 0) for a, r in model_replicas.items()}

    def request(job):
        name, i = job
        k = uuid.uuid4().hex[:10]
        return name, send(bal, "/v1/completions", keyed_body(name, k),
                          headers={"X-Session-Id": f"s-{k}"}, source=f"127.0.0.{2 + i}")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(request, [(n, i) for i in range(6) for n in chosen]))
    by = answered_by(bal, model_replicas, [tag for _, (tag, _, _) in results])
    where = {}
    for name, (tag, status, out) in results:
        assert status == 200 and out["model"] == name, (name, status, out)
        where.setdefault(name, set()).add(by[tag])
    assert where == {n: {home[n]} for n in chosen}, f"replicas per model: {where}"
    for a, r in model_replicas.items():
        states = model_states(r)
        loaded = {n: states[n] for n in chosen}
        assert loaded == {n: "loaded" if home[n] == a else "unloaded" for n in chosen}, \
            (a, loaded)
        counted = r.metrics().get(COMPLETIONS_200, 0) - before[a]
        assert counted == sum(by[tag] == a for _, (tag, _, _) in results), (a, counted)


def test_requests_naming_no_model_go_to_the_first_models_replica(model_replicas,
                                                                 model_balancers):
    """A request without `model` is served with the first model, and the site sends it where
    the requests naming that model go (its map's `""` line), whatever its session keys and
    client address. Catches a site without that line (an empty key: nginx falls back to round
    robin, the requests spread), and a key function that falls back to the client's address (8
    addresses spread) or to a session key."""
    bal = model_balancers()
    home = probe_homes(bal, model_replicas, [MODEL])[MODEL]

    def request(i):
        k = uuid.uuid4().hex[:10]
        return send(bal, "/v1/completions", keyed_body(None, k),
                    headers={"X-Session-Id": f"s-{k}"}, source=f"127.0.0.{2 + i % 8}")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(request, range(16)))
    by = answered_by(bal, model_replicas, [tag for tag, _, _ in results])
    for tag, status, out in results:
        assert status == 200 and out["model"] == MODEL, (status, out)
    assert {by[tag] for tag, _, _ in results} == {home}, \
        f"{MODEL} is on {home}; requests naming no model: {sorted(by.values())}"


def test_model_key_order_bodies_and_bodyless_requests(model_replicas, model_balancers):
    """The body's top-level `model` is the key: over an X-Reame-Model header naming another
    model (both ways round), over a `model` nested deeper and written first, with blanks before
    its colon, and in a body beyond nginx's default body buffer (16 KiB; it would go to a file,
    where the script cannot read it). A request without a body routes on X-Reame-Model: GET
    /v1/responses/{id} finds a response on its model's replica, and without the header lands on
    the first model's, which does not hold it (404). Catches a key function that reads the
    header first, one that finds `"model":` in the text instead of parsing (the nested one), one
    whose pre-check wants the colon right after the name, a site without
    client_body_buffer_size, and one that ignores the header."""
    bal = model_balancers()
    home = probe_homes(bal, model_replicas, (MODEL, *MODEL_NAMES))
    first = home[MODEL]
    far = next((n for n in MODEL_NAMES if home[n] != first), None)
    assert far, f"12 names, all on the first model's replica: {home}"
    rest = '"prompt": "Once", "max_tokens": 2, "temperature": 0'
    cases = [   # (what, body, headers, the model that must answer, on its replica)
        ("body over header", keyed_body(far), {"X-Reame-Model": MODEL}, far),
        ("body over header", keyed_body(MODEL), {"X-Reame-Model": far}, MODEL),
        ("top level over nested",
         f'{{"metadata": {{"model": "{MODEL}"}}, "model": "{far}", {rest}}}'.encode(), {}, far),
        ("top level over nested",
         f'{{"metadata": {{"model": "{far}"}}, "model": "{MODEL}", {rest}}}'.encode(), {},
         MODEL),
        ("blanks before the colon", f'{{{rest}, "model" : "{far}"}}'.encode(), {}, far),
        ("a 64 KiB body", json.dumps(keyed_body(far)).encode() + b" " * 65536, {}, far),
    ]
    sent = [(what, want, send(bal, "/v1/completions", body, headers))
            for what, body, headers, want in cases]
    by = answered_by(bal, model_replicas, [tag for _, _, (tag, _, _) in sent])
    for what, want, (tag, status, out) in sent:
        assert status == 200 and out["model"] == want and by[tag] == home[want], \
            (what, want, home[want], by[tag], status, out)

    tag, status, out = send(bal, "/v1/responses", {"model": far, "input": "Once upon a time",
                                                   "max_output_tokens": 4, "temperature": 0})
    assert status == 200, out
    rid = out["id"]
    found = send(bal, f"/v1/responses/{rid}", headers={"X-Reame-Model": far}, method="GET")
    lost = send(bal, f"/v1/responses/{rid}", method="GET")
    by = answered_by(bal, model_replicas, [tag, found[0], lost[0]])
    assert by[tag] == by[found[0]] == home[far] and found[1] == 200 and found[2]["id"] == rid, \
        (by, found)
    assert by[lost[0]] == first and lost[1] == 404, (by, lost)


def test_busy_model_keyed_by_session_spreads_its_sessions(model_replicas, model_balancers):
    """The site's variant for a model too busy for one replica: its line in the second map
    keys BUSY by model and session, so BUSY's sessions (X-Session-Id, or the body's `user`)
    spread over both replicas, each of which loads it, while each session stays on one replica
    from any client address; the other models keep one replica each. Catches a line that does
    not take effect (BUSY on one replica), a session key that moves between requests, and a
    line that changes the other models' keys."""
    bal = model_balancers(busy=True)
    sessions = [f"s-{uuid.uuid4().hex[:10]}" for _ in range(12)]

    def request(job):
        i, rnd = job
        k = sessions[i]
        body = {**completion_body(f"{k}. Once upon a time", 2), "model": BUSY}
        if i % 2:
            body["user"], headers = k, {}
        else:
            headers = {"X-Session-Id": k}
        return k, send(bal, "/v1/completions", body, headers, source=f"127.0.0.{2 + rnd}")
    with ThreadPoolExecutor(4) as pool:
        results = [r for rnd in range(2)
                   for r in pool.map(request, [(i, rnd) for i in range(len(sessions))])]
    by = answered_by(bal, model_replicas, [tag for _, (tag, _, _) in results])
    where = {}
    for k, (tag, status, out) in results:
        assert status == 200 and out["model"] == BUSY, (k, status, out)
        where.setdefault(k, set()).add(by[tag])
    assert all(len(w) == 1 for w in where.values()), f"sessions on both replicas: {where}"
    assert set.union(*where.values()) == set(model_replicas), f"no spread: {where}"
    assert all(model_states(r)[BUSY] == "loaded" for r in model_replicas.values())

    home = probe_homes(bal, model_replicas, MODEL_NAMES[:4])
    tags = {}
    for i in range(3):
        for n in home:
            tag, status, out = send(bal, "/v1/completions", keyed_body(n),
                                    {"X-Session-Id": uuid.uuid4().hex}, source=f"127.0.0.{2 + i}")
            assert status == 200 and out["model"] == n, (n, status, out)
            tags[tag] = n
    by = answered_by(bal, model_replicas, tags)
    assert all(by[t] == home[n] for t, n in tags.items()), (home, by, tags)


# ---- failover ----

THREADS = 6
LONG_GEN = 1500         # tokens of a request long enough to be running when its replica dies


def cut_stream_errors() -> tuple:
    """What the openai client raises for a stream cut before `data: [DONE]`."""
    import importlib
    errors = [openai.APIConnectionError]
    for name in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(name).RemoteProtocolError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def test_killed_replica_is_routed_around(stories_path, tmp_path_factory):
    nginx_binary()
    reps = start_replicas(stories_path, tmp_path_factory.mktemp("failover"))
    bal = None
    try:
        bal = Balancer(SITE, [r.port for r in reps.values()], tmp_path_factory.mktemp("nginx"))
        _failover(reps, bal)
    finally:
        if bal is not None:
            bal.stop()
        for r in reps.values():
            r.stop()


def _failover(reps, bal):
    keys = [uuid.uuid4().hex[:12] for _ in range(24)]
    home = {}
    for k in keys:
        status, body = complete(bal.url, key=k)
        assert status == 200, body
        home[k] = body["model"]
    assert set(home.values()) == set(ALIASES), home
    victim, survivor = ALIASES
    victim_keys = [k for k in keys if home[k] == victim]
    port = {a: r.port for a, r in reps.items()}

    results = []                # (key, started after the kill, status, answering replica)
    killed = threading.Event()
    enough = threading.Event()
    lock = threading.Lock()

    def load(n):
        i = n
        while not enough.is_set():
            k = keys[i % len(keys)]
            i += THREADS
            after = killed.is_set()
            # long requests until the kill (so some run there when it dies), then short ones
            status, body = complete(bal.url, key=k, max_tokens=32 if after else LONG_GEN,
                                    ignore_eos=True)
            with lock:
                results.append((k, after, status,
                                body["model"] if status == 200 else str(body)[:60]))
                done_after = sum(1 for r in results if r[1] and r[0] in victim_keys)
            if done_after >= 3 * THREADS:
                enough.set()

    # a stream of the victim's under way when it dies, read with the OpenAI client, the session
    # key in its default headers as docs/deploy.md shows
    client = openai.OpenAI(base_url=bal.url + "/v1", api_key="none", max_retries=0,
                           timeout=30 * TIME_SCALE,
                           default_headers={"X-Session-Id": victim_keys[0]})
    cut = iter(client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=LONG,
                                         stream=True, extra_body={"ignore_eos": True}))
    assert next(cut).model == victim

    threads = [threading.Thread(target=load, args=(n,), daemon=True) for n in range(THREADS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 20 * TIME_SCALE
        running = per_model("reame_running_requests", victim)      # its model's id: its alias
        while reps[victim].metrics()[running] < 3:                  # the stream + 2 of ours
            assert time.monotonic() < deadline, "the victim never ran several requests at once"
            time.sleep(0.02)
        kill_tree(reps[victim].proc.pid)
        killed.set()
        t_kill = time.monotonic()
        reps[victim].proc.wait(10 * TIME_SCALE)

        # the cut stream: its client gets an error, not a clean, shortened end (openai on
        # httpx wraps the incomplete chunked body as APIConnectionError; openai 3.3 on httpx2
        # lets the transport's RemoteProtocolError through)
        with pytest.raises(cut_stream_errors()):
            for _ in cut:
                assert time.monotonic() < t_kill + 20 * TIME_SCALE, "the cut stream went on"
        client.close()

        # a stream of the victim's sessions begun after the kill completes, from the survivor
        conn = HTTPConnection("127.0.0.1", bal.port, timeout=30 * TIME_SCALE)
        conn.request("POST", "/v1/completions", json.dumps({
            "model": MODEL, "prompt": "Once upon a time", "max_tokens": 16, "stream": True}),
            {"Content-Type": "application/json", "X-Session-Id": victim_keys[-1]})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        assert resp.status == 200 and body.rstrip().endswith(b"data: [DONE]"), body[-300:]
        assert f'"model": "{survivor}"'.encode() in body

        for t in threads:
            t.join(60 * TIME_SCALE)
        assert not any(t.is_alive() for t in threads), "the load did not finish"
        time.sleep(0.2)                 # nginx writes a request's log line after its answer

        # no request lost: every one got a 200, those running on the victim when it died included
        failed = [r for r in results if r[2] != 200]
        assert not failed, f"{len(failed)} of {len(results)} requests failed: {failed[:5]}"
        # after the kill, the victim's sessions are answered by the survivor
        after = [r for r in results if r[1]]
        assert after and all(r[3] == survivor for r in after), after
        assert sum(r[0] in victim_keys for r in after) >= 3 * THREADS
        # nginx's log: requests in flight on the victim were sent again to the survivor and
        # answered ("victim, survivor" / "502, 200"); once the victim failed, nginx stopped trying
        # it (max_fails/fail_timeout): at most one attempt per client thread, not one per request
        a, b = f"127.0.0.1:{port[victim]}", f"127.0.0.1:{port[survivor]}"
        lines = [ln for ln in bal.log_lines() if '"POST /v1/completions' in ln]
        retried = [ln for ln in lines if f'upstream="{a}, {b}"' in ln]
        assert any('" 200 ' in ln and 'upstream_status="502, 200"' in ln for ln in retried), \
            "\n".join(lines[-20:])
        assert len(retried) <= THREADS + 1, "\n".join(retried)
        # and they were answered once: the survivor's /metrics counts what its answers say
        ours = sum(r[3] == survivor for r in results)
        keys_on_survivor = sum(v == survivor for v in home.values())
        counted = reps[survivor].metrics()[COMPLETIONS_200]
        assert counted == ours + keys_on_survivor + 1, (counted, ours, keys_on_survivor)

    finally:
        enough.set()                # the load stops, whatever failed


def test_models_of_a_killed_replica_move_to_the_other(stories_path, tmp_path_factory):
    """reame-models.conf's failover: a replica SIGKILLed (its process group, as a machine dying)
    while it generates for one of its models. That request is sent again to the other replica
    and answered there (upstream "victim, survivor", "502, 200"); the dead replica's models are
    then answered by the survivor, which loads them, and the survivor's own models stay on it.
    Catches a site whose proxy_next_upstream lacks `non_idempotent` (the running request, a
    POST already sent, gets a 502)."""
    nginx_binary()
    js_module()
    models = [a for n in MODEL_NAMES for a in ("--model", f"{n}={stories_path}")]
    reps = start_replicas(stories_path, tmp_path_factory.mktemp("model-failover"), models)
    bal = None
    try:
        bal = Balancer(SITE_MODELS, [r.port for r in reps.values()],
                       tmp_path_factory.mktemp("nginx-model-failover"), default_model=MODEL)
        victim, survivor = ALIASES
        home = probe_homes(bal, reps, MODEL_NAMES)
        gone = [n for n in MODEL_NAMES if home[n] == victim][:2]
        kept = [n for n in MODEL_NAMES if home[n] == survivor][:1]
        assert gone and kept, f"12 names, all on one replica: {home}"
        for n in gone + kept:
            tag, status, out = send(bal, "/v1/completions", keyed_body(n))
            assert status == 200 and out["model"] == n, out
        running = per_model("reame_running_requests", gone[0])
        long = {}
        worker = threading.Thread(target=lambda: long.update(r=send(
            bal, "/v1/completions", {**keyed_body(gone[0], max_tokens=LONG_GEN),
                                     "ignore_eos": True})), daemon=True)
        worker.start()
        deadline = time.monotonic() + 20 * TIME_SCALE
        while reps[victim].metrics().get(running, 0) < 1:
            assert time.monotonic() < deadline, "the long request never ran on its replica"
            time.sleep(0.02)
        kill_tree(reps[victim].proc.pid)
        reps[victim].proc.wait(10 * TIME_SCALE)
        worker.join(60 * TIME_SCALE)
        assert "r" in long, "the long request did not end"
        tag, status, out = long["r"]
        assert status == 200 and out["model"] == gone[0], (status, str(out)[:300])
        a, b = (f"127.0.0.1:{reps[x].port}" for x in (victim, survivor))
        line = next(ln for ln in bal.log_lines() if f"?tag={tag} " in ln)
        assert f'upstream="{a}, {b}"' in line and 'upstream_status="502, 200"' in line, line

        sent = [(n, send(bal, "/v1/completions", keyed_body(n))) for _ in range(2)
                for n in gone + kept]
        for n, (tag, status, out) in sent:
            assert status == 200 and out["model"] == n, (n, status, out)
        time.sleep(0.2)                 # nginx writes a request's log line after its answer
        lines = bal.log_lines()
        for n, (tag, _, _) in sent:
            line = next(ln for ln in lines if f"?tag={tag} " in ln)
            assert re.search(rf'upstream="([^"]*, )?{re.escape(b)}"', line), (n, line)
        states = model_states(reps[survivor])
        assert all(states[n] == "loaded" for n in gone + kept), states
    finally:
        if bal is not None:
            bal.stop()
        for r in reps.values():
            r.stop()


# ---- the container image ----

def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, (INSTRUCTION, arguments) per build stage."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            stages.append([])
        stages[-1].append((op.upper(), args.strip()))
    return stages


def test_dockerfile_builds_from_the_package_sources_and_runs_unprivileged():
    """Docker cannot run here (no daemon), so this checks the Dockerfile statically: the build
    stage copies every source directory pyproject.toml builds the package from, and
    .dockerignore keeps none of them out; the image runs `reame serve` as a non-root user on
    0.0.0.0:8000 with a health check on /health and the kernel cache in a volume.
    (docs/deploy.md#docker says what was checked by hand: hadolint, and the install and run
    steps replayed outside Docker.)"""
    import fnmatch
    import tomllib
    stages = _dockerfile_stages()
    assert stages[0][0][1].startswith("python:3.11-slim") and stages[-1][0][1] == "python:3.11-slim"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"],
              *project["tool"]["setuptools"]["package-dir"].values()}
    copied = set()
    for op, args in stages[0]:
        if op == "COPY" and not args.startswith("--from"):
            copied.update(p.rstrip("/") for p in args.split()[:-1])
    assert needed <= copied, f"the build stage does not copy {sorted(needed - copied)}"
    assert any(op == "RUN" and "pip install" in a and "'.[" in a for op, a in stages[0])
    ignored = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
               if ln.strip() and not ln.startswith("#")]
    kept_out = {n for n in needed for pat in ignored if fnmatch.fnmatch(n, pat.lstrip("/"))}
    assert not kept_out, f".dockerignore keeps {sorted(kept_out)} out of the build context"

    final = dict(stages[-1])                # the last of each instruction wins, as in Docker
    user = final.get("USER", "0").split(":")[0]
    assert user.isdigit() and user != "0", "the image must run as a numeric, non-root user"
    assert final["EXPOSE"] == "8000"
    assert "/health" in final["HEALTHCHECK"] and "8000" in final["HEALTHCHECK"]
    entry = json.loads(final["ENTRYPOINT"])
    assert entry[:2] == ["reame", "serve"] and entry[entry.index("--host") + 1] == "0.0.0.0" \
        and entry[entry.index("--port") + 1] == "8000", entry
    assert json.loads(final["CMD"])[0].startswith("/models/")
    env = " ".join(a for op, a in stages[-1] if op == "ENV")
    cache = re.search(r"REAME_CACHE_DIR=(\S+)", env).group(1)
    volumes = [v for op, a in stages[-1] if op == "VOLUME" for v in json.loads(a)]
    assert any(cache.startswith(v.rstrip("/") + "/") for v in volumes), (cache, volumes)
