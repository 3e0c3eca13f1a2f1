"""bench/speculate.py: the workloads (seeded, repetitive, the control sharing nothing), the
statistics on hand-made records, the identity check, and main end to end against a fake streaming
chat server over loopback (the servers' start replaced: no model is served)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import speculate as sp
from bench import trace

BLOCK = 200


def shares_block(text: str, earlier: list[str], size: int = BLOCK, stride: int = 20) -> bool:
    """Whether some `size`-character piece of text occurs in one of the earlier texts."""
    return any(text[k:k + size] in e for k in range(0, max(len(text) - size, 0) + 1, stride)
               for e in earlier)


def shared_fraction(work: list[dict]) -> float:
    texts = [sp.request_text(r) for r in work]
    return sum(shares_block(t, texts[:k]) for k, t in enumerate(texts)) / len(texts)


# ------------------------------------------------------------------------------ workloads
def test_repetitive_workload_is_seeded_and_repeats_content():
    w = sp.repetitive_workload(60, seed=3)
    assert w == sp.repetitive_workload(60, seed=3)
    assert [r["messages"] for r in w] != [r["messages"] for r in sp.repetitive_workload(60, 4)]
    assert [r["i"] for r in w] == list(range(60))
    assert {r["kind"] for r in w} == {"code", "json"}
    assert sum(r["reuse"] for r in w) == 30 and not any(r["reuse"] for r in w[:5])
    assert shared_fraction(w) >= 0.4
    for r in w:                        # a reused request carries its content, character for char
        if r["reuse"]:
            first = next(x for x in w if x["content"] == r["content"])
            assert shares_block(sp.request_text(r), [sp.request_text(first)])
    same = [r for r in w if r["same_question"]]
    assert same and all(any(x["messages"] == r["messages"] for x in w[:r["i"]]) for r in same)
    assert len(same) < 30                               # and others ask something else
    quick = sp.repetitive_workload(12, seed=0)
    assert sum(r["reuse"] for r in quick) == 6 and shared_fraction(quick) >= 0.4
    for seed in range(5):
        assert shared_fraction(sp.repetitive_workload(20, seed)) >= 0.4


def test_workload_contents_are_python_and_json():
    import random
    rng = random.Random(0)
    for _ in range(30):
        path, text, functions = sp.python_file(rng)
        assert 40 <= len(text.splitlines()) <= 140 and path.endswith(".py")
        compile(text, path, "exec")                        # valid Python
        assert functions and len(set(functions)) == len(functions)
        name, recs = sp.json_records(rng)
        assert 5 <= len(recs) <= 15 and json.loads(sp.json_text(recs)) == recs
        assert len({r["id"] for r in recs}) == len(recs)
    for r in sp.repetitive_workload(40, 1):
        body = r["messages"][0]["content"]
        fenced = body.split("```")[1]
        if r["kind"] == "json":
            json.loads(fenced.removeprefix("json\n"))
        else:
            compile(fenced.removeprefix("python\n"), "x.py", "exec")
        assert len(body) < 6000                 # fits llama-server's 2,048-token slots at -np 4


def test_control_workload_shares_nothing():
    c = sp.control_workload(48, seed=0)
    assert c == sp.control_workload(48, seed=0) and [r["i"] for r in c] == list(range(48))
    texts = [sp.request_text(r) for r in c]
    assert len(set(texts)) == 48
    assert not any(shares_block(t, texts[:k], size=BLOCK, stride=1) for k, t in enumerate(texts))
    assert shared_fraction(c) == 0


# ------------------------------------------------------------------------------ statistics
def rec(i, decode=None, outcome="ok", completion=11, ttft=0.5, text="x", sent=None,
        latency=2.0, prompt=100):
    """A record whose decode speed is `decode` tok/s: last_token - ttft = (completion - 1) /
    decode."""
    last = ttft + (completion - 1) / decode if decode else ttft
    r = {"i": i, "outcome": outcome, "completion_tokens": completion, "prompt_tokens": prompt,
         "ttft": ttft, "last_token": last, "text": text, "sent": float(i) if sent is None else
         sent, "latency": latency}
    r["decode_tok_s"] = sp.decode_tok_s(r)
    return r


def test_decode_tok_s_by_hand():
    assert sp.decode_tok_s({"outcome": "ok", "completion_tokens": 11, "ttft": 0.5,
                            "last_token": 1.5}) == 10
    assert sp.decode_tok_s({"outcome": "ok", "completion_tokens": 201, "ttft": 1.0,
                            "last_token": 5.0}) == 50
    for bad in ({"completion_tokens": 1, "last_token": 0.5},          # one token: no interval
                {"completion_tokens": None}, {"outcome": "failed"},
                {"last_token": None}, {"last_token": 0.4}):
        assert sp.decode_tok_s({"outcome": "ok", "completion_tokens": 11, "ttft": 0.5,
                                "last_token": 1.5, **bad}) is None


def test_summary_first5_last20_by_hand():
    """30 requests: the first 5 at 10, 12, 14, 16, 18 tok/s (median 14), the last 20 at
    30..49 (median 39.5), the 5 between at 1000 (in neither). Listed out of order: the windows
    are taken in send (index) order."""
    speeds = [10, 12, 14, 16, 18] + [1000] * 5 + list(range(30, 50))
    records = [rec(i, s, sent=0.1 * i, latency=1.0) for i, s in enumerate(speeds)][::-1]
    s = sp.summarize(records)
    assert s["decode_first5"] == pytest.approx(14) and s["decode_last20"] == pytest.approx(39.5)
    assert s["decode_ratio"] == pytest.approx(39.5 / 14)
    assert s["wall_s"] == pytest.approx(2.9 + 1.0)           # first send to the last completion
    assert s["completion_tokens"] == 330 and s["tok_s"] == pytest.approx(330 / 3.9)
    assert s["ok"] == 30 and s["failed"] == 0 and s["ttft_p50"] == 0.5

    few = [rec(0, 10), rec(1, None, outcome="failed", completion=None), rec(2, 30), rec(3, 20)]
    s = sp.summarize(few)                   # fewer than 5 / 20: every request; failed left out
    assert s["decode_first5"] == s["decode_last20"] == pytest.approx(20)
    assert s["decode_ratio"] == 1
    assert (s["ok"], s["failed"], s["completion_tokens"]) == (3, 1, 33)


def test_identity_check_flags_a_changed_output():
    off = [rec(i, 10, text=f"out {i}") for i in range(6)]
    same = [dict(r) for r in off]
    assert sp.mismatches(off, same) == []
    changed = [dict(r) for r in off]
    changed[4]["text"] = "out 4 "                                    # one byte more
    changed[1] = rec(1, None, outcome="failed", text="out 1")        # a failed one counts too
    assert sp.mismatches(off, changed) == [1, 4]
    assert sp.mismatches(off, changed[:5]) == [1, 4, 5]              # a missing one too
    run = {"server": "reame-on", "workload": "repetitive", "concurrency": 4,
           "summary": sp.summarize(changed), "mismatches": [1, 4]}
    assert sp.identity_lines([run]) == [
        "reame-on repetitive C=4: 2 of 6 outputs differ from reame-off (requests 1, 4)"]
    assert "| 2 / 6 |" in sp.table([run])


def test_acceptance_from_metrics_adaptive_or_llama_timings():
    metrics = ['vllm:spec_decode_num_draft_tokens_total{model_name="m"} 120.0',
               'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 90.0',
               'vllm:spec_decode_num_drafts_total{model_name="m"} 30.0']
    assert sp.acceptance({"spec_metrics": metrics}) == (90, 120)
    other = ['vllm:spec_decode_accepted_tokens_total{pos="0"} 5',
             'vllm:spec_decode_accepted_tokens_total{pos="1"} 3',
             'vllm:spec_decode_accepted_tokens_created 1.7e9', "vllm:spec_decode_draft_tokens 16"]
    assert sp.acceptance({"spec_metrics": other}) == (8, 16)      # summed over labels
    assert sp.acceptance({"spec_metrics": [], "speculation": {
        "mode": "on", "draft_tokens": {"proposed": 50, "accepted": 20}}}) == (20, 50)
    assert sp.acceptance({"speculation": {"mode": "on", "acceptance_rate": 0.4}}) is None
    reqs = [{"timings": {"draft_n": 8, "draft_n_accepted": 6}}, {"timings": None},
            {"timings": {"draft_n": 4, "draft_n_accepted": 1}}]
    assert sp.acceptance({"requests": reqs}) == (7, 12)
    assert sp.acceptance({"requests": [{"timings": {"predicted_n": 5}}]}) == (0, 0)  # no draft
    assert sp.acceptance({"requests": [{"timings": None}]}) is None


# ------------------------------------------------------------------------------ fake server
class FakeChat:
    """An OpenAI-like streaming /v1/chat/completions: a role-only first chunk, then one word a
    chunk (`gap` s apart) derived from the last message, usage at the end. `mode` (the server
    label) changes what it says: reame-restart changes the reply to the request holding
    `self.diverge`, llama-ngram adds llama-server timings with drafts. GET /v1/adaptive and
    /metrics answer with speculation counters."""

    def __init__(self, gap=0.002):
        self.gap, self.mode, self.diverge = gap, None, None
        self.log, self.inflight, self.max_inflight, self.lock = [], 0, 0, threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status, data, ctype="application/json"):
                data = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self.send(200, {"status": "ok"})
                elif self.path == "/v1/adaptive":
                    self.send(200, {"kernels": {}, "speculation": {"mode": fake.mode,
                                                                    "proposed": 10,
                                                                    "accepted": 7}})
                elif self.path == "/metrics":
                    self.send(200, b"# HELP x\n"          # per model, as Reame's
                              b'vllm:spec_decode_num_draft_tokens_total{model_name="fake-model",'
                              b'engine="0"} 40\n'
                              b'vllm:spec_decode_num_accepted_tokens_total{model_name='
                              b'"fake-model",engine="0"} 30\n'
                              b'vllm:spec_decode_num_draft_tokens_total{model_name="other",'
                              b'engine="0"} 99\n'
                              b'vllm:num_requests_running{model_name="fake-model",engine="0"}'
                              b" 0\n", "text/plain")
                else:
                    self.send(200, {"data": [{"id": "fake-model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/v1/chat/completions"
                with fake.lock:
                    fake.log.append((time.perf_counter(), fake.mode, body))
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                content = body["messages"][-1]["content"]
                words = content.split()[-body["max_tokens"]:]
                if fake.mode == "reame-restart" and fake.diverge and fake.diverge in content:
                    words = ["different"] + words[1:]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

                def event(obj):
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                    self.wfile.flush()
                event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                time.sleep(0.005)
                for w in words:
                    event({"choices": [{"index": 0, "delta": {"content": " " + w}}]})
                    time.sleep(fake.gap)
                last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
                if fake.mode == "llama-ngram":
                    last["timings"] = {"draft_n": 4, "draft_n_accepted": 3}
                event(last)
                with fake.lock:
                    fake.inflight -= 1
                event({"choices": [], "usage": {"prompt_tokens": len(content.split()),
                                                "completion_tokens": len(words)}})
                self.wfile.write(b"data: [DONE]\n\n")

        class Server(ThreadingHTTPServer):
            request_queue_size = 64               # 16 concurrent connections at once
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    srv = FakeChat()
    yield srv
    srv.close()


def test_replay_caps_concurrency_and_sends_in_order(fake):
    work = sp.repetitive_workload(10, seed=0)
    body = {"max_tokens": 6, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    records = asyncio.run(sp.replay(fake.url, work, body, 1))
    assert fake.max_inflight == 1
    assert [b["messages"] for _, _, b in fake.log] == [r["messages"] for r in work]  # in order
    assert [r["i"] for r in records] == list(range(10))
    for r, w in zip(records, work):
        assert r["outcome"] == "ok" and r["completion_tokens"] == 6
        assert r["text"] == " " + " ".join(w["messages"][0]["content"].split()[-6:])
        assert 0.005 <= r["ttft"] < r["last_token"] <= r["latency"]    # role-only chunk skipped
        assert 0 < r["decode_tok_s"] == pytest.approx(5 / (r["last_token"] - r["ttft"]))
        assert r["kind"] == w["kind"] and r["reuse"] == w["reuse"]
    fake.log.clear()
    fake.gap = 0.02                                  # ~0.13 s a request: the three overlap
    asyncio.run(sp.replay(fake.url, sp.control_workload(12, 0), body, 3))
    assert fake.max_inflight == 3 and len(fake.log) == 12


def test_main_end_to_end_with_a_fake_server(fake, tmp_path, monkeypatch, capsys):
    """Every server of --quick against the fake (its start replaced): each run's command, the
    adaptive dirs (fresh, reame-restart on reame-on's), the identity check catching the
    restart's changed reply, the speculation counters, two control rounds in alternating order
    (the second checked for identity once reame-off ran after it) pooled into one line, JSON
    and the Markdown section."""
    started = []
    fake.gap = 0.0005

    @contextlib.contextmanager
    def serving(cmd, url, label):
        started.append((label, cmd))
        fake.mode = label.removeprefix("speculate-")
        yield None
    monkeypatch.setattr(trace, "serving", serving)
    monkeypatch.setattr(trace, "free_port", lambda: fake.port)
    work = sp.repetitive_workload(12, seed=0)
    fake.diverge = work[7]["messages"][0]["content"][-120:]      # request 7's own tail
    out, md = tmp_path / "s.json", tmp_path / "speculation.md"
    md.write_text("# Speculation\n\nintro\n")
    argv = ["--quick", "--gguf", "m.gguf", "--threads", "1", "--llama-server", "/opt/llama-server",
            "--control", "--control-rounds", "2", "--json", str(out), "--markdown", str(md)]
    assert sp.main(argv) == 0
    labels = [lab.removeprefix("speculate-") for lab, _ in started]
    assert labels == ["reame-off", "reame-on", "reame-restart", "llama", "llama-ngram",
                      "reame-off", "reame-on", "reame-on", "reame-off"]   # then the control
    cmds = [c for _, c in started]
    dirs = [c[c.index("--adaptive-dir") + 1] for c in cmds if "--adaptive-dir" in c]
    assert dirs[2] == dirs[1] and len({dirs[0], dirs[1], dirs[3], dirs[4]}) == 4
    assert [c[c.index("--speculate") + 1] for c in cmds if "--speculate" in c] == [
        "off", "on", "on", "off", "on", "on", "off"]
    assert len(set(dirs[3:])) == 4                      # every control server on a fresh dir
    assert cmds[0][2:5] == ["reame", "serve", "m.gguf"] and "--threads" in cmds[0]
    assert cmds[3][:1] == ["/opt/llama-server"] and cmds[3][cmds[3].index("-np") + 1] == "1"
    assert "--spec-type" not in cmds[3] and cmds[4][-2:] == ["--spec-type", "ngram-mod"]
    assert all(b["temperature"] == 0 and b["stream_options"] == {"include_usage": True}
               and "logit_bias" not in b and b["model"] == "fake-model" for _, _, b in fake.log)
    timed = [b for _, mode, b in fake.log if b["max_tokens"] == 48]
    assert len(timed) == 5 * 12 + 4 * 16                        # + 2 warm-ups a server

    res = json.loads(out.read_text())
    runs = {(r["server"], r["workload"]): r for r in res["runs"]}
    assert runs["reame-on", "repetitive"]["mismatches"] == []
    assert runs["reame-restart", "repetitive"]["mismatches"] == [7]
    control_on = [r for r in res["runs"]
                  if r["server"] == "reame-on" and r["workload"] == "control"]
    assert [r["mismatches"] for r in control_on] == [[], []] and control_on[1]["round"] == 1
    assert "mismatches" not in runs["llama", "repetitive"]
    on = runs["reame-on", "repetitive"]
    assert on["speculation"] == {"mode": "reame-on", "proposed": 10, "accepted": 7}
    assert on["spec_metrics"] == [       # the benchmarked model's lines, not another's
        'vllm:spec_decode_num_draft_tokens_total{model_name="fake-model",engine="0"} 40',
        'vllm:spec_decode_num_accepted_tokens_total{model_name="fake-model",engine="0"} 30']
    summary = {(s["server"], s["workload"]): s for s in res["summary"]}
    assert summary["reame-on", "repetitive"]["acceptance"] == [30, 40]
    assert summary["llama-ngram", "repetitive"]["acceptance"] == [36, 48]
    assert summary["llama", "repetitive"]["acceptance"] is None    # the fake sends no timings
    assert all(s["ok"] == s["requests"] and s["decode_first5"] > 0 for s in res["summary"])
    assert len(runs["reame-off", "control"]["requests"]) == 16
    assert runs["reame-off", "control"]["concurrency"] == 16
    assert 1 < fake.max_inflight <= 16                 # concurrent (short replies: not all 16)

    printed = capsys.readouterr().out
    assert "byte identity with reame-off: 1 mismatches" in printed
    assert "reame-restart repetitive C=1: 1 of 12 outputs differ from reame-off (requests 7)" \
        in printed
    assert "C=1: reame-restart first 5 " in printed and "vs reame-on last 20 " in printed
    assert "control, 2 round(s) pooled: throughput reame-on / reame-off " in printed
    assert "over 32 / 32 requests" in printed
    text = md.read_text()
    assert text.startswith("# Speculation\n\nintro\n")
    assert "<!-- speculate:begin -->\n## Speculative decoding benchmark (" in text
    assert f"`python -m bench.speculate {' '.join(argv)}`" in text
    assert "| reame-restart | repetitive | 1 | 12/12 |" in text and "| 1 / 12 |" in text
    assert "| llama-ngram | repetitive | 1 | 12/12 |" in text and "36 / 48 (75%)" in text
    assert "| reame-on | control r2 | 16 | 16/16 |" in text and "- control, 2 round(s)" in text
    again = ["--quick", "--servers", "reame-off", "--json", str(out), "--markdown", str(md)]
    assert sp.main(again) == 0                                       # replaced, not appended
    text = md.read_text()
    assert text.count("speculate:begin") == 1 and "llama-ngram" not in text
    assert text.startswith("# Speculation\n\nintro\n") and "| reame-off | repetitive |" in text


def test_missing_llama_server_and_restart_without_on_are_skipped(fake, tmp_path, monkeypatch,
                                                                 capsys):
    started = []

    @contextlib.contextmanager
    def serving(cmd, url, label):
        started.append(label)
        yield None
    monkeypatch.setattr(trace, "serving", serving)
    monkeypatch.setattr(trace, "free_port", lambda: fake.port)
    assert sp.main(["--quick", "--servers", "reame-off,reame-restart,llama,llama-ngram",
                    "--json", str(tmp_path / "s.json"), "--plot",
                    str(tmp_path / "p.png")]) == 0
    printed = capsys.readouterr().out
    assert started == ["speculate-reame-off"]
    assert "note: llama skipped (no --llama-server)" in printed
    assert "note: llama-ngram skipped" in printed and "note: reame-restart skipped" in printed
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "p.png").stat().st_size > 0
    except ImportError:
        assert "note: matplotlib is not installed: no plot" in printed
    with pytest.raises(SystemExit):
        sp.parse_args(["--servers", "reame,vllm"])


def test_control_lines_split_off_the_drain_and_show_the_guard():
    """The control's diagnostics: the p95 ratio without each round's last 16 requests (the
    drain) and reame-on's tpot_vs_no_drafts per round. Requests 0-23 of 40 are as fast with
    speculation on, the last 16 slower: the pooled p95 ratio is above one, the drain-less one
    exactly one. Catches a filter dropping the first 16 instead of the last (its ratio would be
    the slow requests') or the guard's figures read from another run."""
    def run(server, slow, guard=None):
        reqs = [{"i": i, "decode_tok_s": 20.0 if slow and i >= 24 else 40.0 - i % 7}
                for i in range(40)]
        return {"workload": "control", "server": server, "requests": reqs,
                "summary": {"completion_tokens": 4000, "wall_s": 10.0},
                "speculation": {"tpot_vs_no_drafts": guard} if guard else None}
    g = [{"p95": 1.021, "max": 1.03}, {"p95": 1.025, "max": 1.031}]
    runs = [run("reame-off", False), run("reame-on", True, g[0]),
            run("reame-on", True, g[1]), run("reame-off", False),
            {**run("reame-on", False, {"p95": 9.0, "max": 9.0}), "workload": "repetitive"}]
    lines = sp.control_lines(runs)
    assert "(1.700x)" in lines[0] and lines[1].endswith("p95 time per output token 1.000x")
    assert lines[2].endswith("per round: p95 1.021, 1.025; max 1.030, 1.031")



def test_group_lines_split_the_last_20_by_request_group():
    """The last 20 of 30 requests by group, each request's ratio to reame-off's same request:
    new content at 1.0x, reused content 1.5x, the same question 3.0x; the first 10 (outside the
    window) at 9x. Catches a window taken from the front, ratios inverted (off / on), groups
    read from the wrong flag (reuse for same_question: the same-question requests are reused
    too) and reame-on set against another concurrency's reame-off."""
    work = [{"i": i, "reuse": i % 3 > 0, "same_question": i % 3 == 2} for i in range(30)]
    speed = {"new": 1.0, "reuse": 1.5, "same": 3.0}

    def run(server, c, on):
        reqs = [{"i": i, "decode_tok_s": 50.0 * (9.0 if on and i < 10 else
                                                 speed[sp.request_group(w)] if on else 1.0)}
                for i, w in enumerate(work)]
        return {"server": server, "workload": "repetitive", "concurrency": c, "requests": reqs}
    runs = [run("reame-off", 1, False), run("reame-on", 1, True),
            {**run("reame-off", 4, False), "requests": [{"i": i, "decode_tok_s": 25.0}
                                                        for i in range(30)]},
            run("reame-on", 4, True), run("llama", 1, False)]
    lines = sp.group_lines(runs, work)
    want = ("new content 6 (median 1.00x, 0 at >= 2x); reused content, a new question 7 "
            "(median 1.50x, 0 at >= 2x); the same question again 7 (median 3.00x, 7 at >= 2x)")
    assert lines[0] == "C=1: reame-on's last 20 / reame-off's, by request: " + want
    assert lines[1].startswith("C=4: reame-on's last 20")
    assert "new content 6 (median 2.00x, 6 at" in lines[1]
    assert len(lines) == 2


def test_control_lines_give_each_rounds_throughput_ratio():
    """Three rounds, reame-on at 0.9x, 1.0x and 1.2x its round's reame-off (reame-off itself
    at 500, 600 and 400 tok/s): the per-round line pairs each round's two servers. Catches the
    ratio inverted (1.111, 1.000, 0.833) and a repetitive run counted in as round 0's reame-on."""
    def run(server, round_, tok_s, workload="control"):
        return {"workload": workload, "server": server, "round": round_,
                "requests": [{"i": i, "decode_tok_s": 40.0} for i in range(20)],
                "summary": {"completion_tokens": int(tok_s * 10), "wall_s": 10.0}}
    runs = [run("reame-off", 0, 500), run("reame-on", 0, 450), run("reame-on", 1, 600),
            run("reame-off", 1, 600), run("reame-off", 2, 400), run("reame-on", 2, 480),
            run("reame-on", 0, 5000, "repetitive")]
    lines = sp.control_lines(runs)
    assert ("control, throughput reame-on / reame-off per round: 0.900, 1.000, 1.200 "
            "(from 0.900 to 1.200)") in lines
