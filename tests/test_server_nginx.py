"""nginx (Debian's package, /usr/sbin/nginx) in front of `reame serve`: streamed completions
arrive chunk by chunk, and a client that hangs up at nginx cancels the generation in Reame.

CI installs nginx (`apt-get install -y nginx` in .ci/run); there a missing nginx FAILS this test,
locally it skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_server_e2e import LONG, LONG_CTX, MODEL, ReameServer, free_port, http, per_model

NGINX = os.environ.get("REAME_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"

# The site from docs/deploy.md, with paths under a temporary prefix.
CONFIG = """
{user}
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;

    upstream reame {{
        server 127.0.0.1:{upstream};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 16m;
        location / {{
            proxy_pass http://reame;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
        }}
    }}
}}
"""


def nginx_binary() -> str:
    if not os.path.exists(NGINX):
        msg = f"nginx is not installed ({NGINX}); apt-get install -y nginx"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return NGINX


@pytest.fixture(scope="module")
def stack(stories_path, tmp_path_factory):
    binary = nginx_binary()
    reame = ReameServer(stories_path, "--max-seqs", "4", "--ctx-size", LONG_CTX,
                        log_dir=tmp_path_factory.mktemp("reame"))
    prefix = tmp_path_factory.mktemp("nginx")
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(CONFIG.format(prefix=prefix, port=port, upstream=reame.port,
                                  user="user root;" if os.geteuid() == 0 else ""))
    proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-e",
                             str(prefix / "error.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    t = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            reame.stop()
            pytest.fail(f"nginx exited: {proc.stdout.read().decode(errors='replace')}"
                        f"{_read(prefix / 'error.log')}")
        try:
            if http("GET", url + "/health", timeout=2)[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > t:
            proc.kill()
            reame.stop()
            pytest.fail("nginx did not come up:\n" + _read(prefix / "error.log"))
        time.sleep(0.1)
    yield reame, url
    proc.terminate()
    proc.wait(10)
    reame.stop()


def _read(p: Path) -> str:
    return p.read_text(errors="replace")[-3000:] if p.exists() else ""


def test_stream_through_nginx_chunk_by_chunk(stack, stories_expected):
    import openai
    reame, url = stack
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    # a long generation: its first chunks reach us while Reame is still generating it
    before = reame.metrics()[per_model("reame_generation_tokens_total")]
    stream = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=LONG,
                                       stream=True, extra_body={"ignore_eos": True})
    it = iter(stream)
    pieces = [next(it).choices[0].text for _ in range(21)]
    assert all(p is not None for p in pieces) and "".join(pieces)
    # hanging up at nginx cancels the generation in Reame, long before its end
    stream.close()
    t = time.monotonic() + 10
    while reame.metrics()[per_model("reame_running_requests")] != 0:
        assert time.monotonic() < t, "the generation kept running after the client left"
        time.sleep(0.05)
    generated = reame.metrics()[per_model("reame_generation_tokens_total")] - before
    assert 21 <= generated < LONG, "the first chunks came only after the whole generation"
    # and a whole streamed completion through nginx equals the expected greedy text
    case = stories_expected["cases"][0]
    chunks = list(client.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=64,
                                            temperature=0, stream=True))
    assert len(chunks) > 1     # in pieces (a step's accepted drafts come as one chunk)
    assert "".join(c.choices[0].text for c in chunks) == case["greedy_text"]
    client.close()


def test_nginx_forwards_each_event_as_it_comes(stack):
    """Raw HTTP: the body arrives in small reads of an event or a few (a reader slower than the
    generator may find several waiting), not as one buffered block."""
    import http.client
    import json
    _, url = stack
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({
        "model": MODEL, "prompt": "Once upon a time", "max_tokens": LONG, "stream": True,
        "ignore_eos": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
    reads = [resp.read1(65536) for _ in range(20)]
    conn.close()
    sizes = sorted(len(r) for r in reads)
    body = b"".join(reads)
    assert body.startswith(b"data: ") and body.count(b"data: ") >= len(reads)
    assert sizes[len(sizes) // 2] < 600, sizes           # typically one ~250-byte event per read


def test_json_and_errors_through_nginx(stack):
    _, url = stack
    status, headers, body = http("POST", url + "/v1/completions",
                                 {"model": MODEL, "prompt": "Once", "max_tokens": 3})
    assert status == 200 and b'"text_completion"' in body
    status, _, body = http("POST", url + "/v1/completions", {"model": "nope", "prompt": "x"})
    assert status == 404 and b"model_not_found" in body
