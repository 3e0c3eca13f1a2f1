"""bench/trace.py: the trace generators, the statistics, the Markdown section, the replay's timing
against a fake streaming server (http.server in a thread), and one --quick run against a real
`reame serve` on the stories260K model."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import trace
from tests.conftest import shared_path

BODY = {"max_tokens": 4, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "logit_bias": {"2": -100}}


# ------------------------------------------------------------------------------ generators
@pytest.fixture(scope="module")
def qwen2_tokenizer():
    from reame.tokenizer import Tokenizer
    return Tokenizer.from_gguf(shared_path("testdata/vocab/ggml-vocab-qwen2.gguf"))


def test_agentic_trace_is_seeded_with_one_600_token_prefix(qwen2_tokenizer):
    t = trace.agentic_trace(40, 2.0, seed=1)
    assert t == trace.agentic_trace(40, 2.0, seed=1)
    assert [r["prompt"] for r in t] != [r["prompt"] for r in trace.agentic_trace(40, 2.0, seed=2)]
    prefix = trace.tool_prefix(1)
    assert os.path.commonprefix([r["prompt"] for r in t]) == prefix + "User: "
    assert 540 <= trace.approx_tokens(prefix) <= 660
    assert 540 <= len(qwen2_tokenizer.encode(prefix)) <= 660
    json.loads(prefix.splitlines()[1])                           # tool schemas are JSON
    tasks = [r["prompt"][len(prefix):] for r in t]
    assert len(set(tasks)) == len(tasks)                         # every user turn is unique
    assert all(8 <= len(qwen2_tokenizer.encode(x)) - 5 <= 32 for x in tasks)   # minus the frame


def test_arrivals_are_a_poisson_process_of_the_rate():
    import random
    at = trace.arrivals(20000, 4.0, random.Random(0))
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert at[0] == 0 and min(gaps) >= 0
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.03)          # 1 / rate
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1, abs=0.05)  # not even
    assert [r["at"] for r in trace.agentic_trace(5, 2.0, 0)] == trace.arrivals(
        5, 2.0, random.Random("0-agentic-arrivals"))


def test_multiturn_prompts_resend_the_history_and_grow_to_3000_tokens(qwen2_tokenizer):
    t = trace.multiturn_trace(3, 10, 2.0, seed=0)
    assert t == trace.multiturn_trace(3, 10, 2.0, seed=0)
    assert len({c["user"][0] for c in t}) == 3 and all(len(c["user"]) == 10 for c in t)
    assert t[0]["at"] == 0 < t[1]["at"] < t[2]["at"]
    prompt, sizes = "", []
    for k, message in enumerate(t[0]["user"]):
        reply = " and then".join(["it worked"] * 11)             # ~32 tokens
        new = trace.next_prompt(prompt, reply if prompt else "", message)
        assert new.startswith(prompt + (reply if prompt else "")) and new.endswith("Assistant:")
        prompt = new
        sizes.append(len(qwen2_tokenizer.encode(prompt)))
    assert all(250 <= b - a <= 350 for a, b in zip(sizes, sizes[1:]))
    assert 2700 <= sizes[-1] <= 3300


# ------------------------------------------------------------------------------ statistics
def rec(outcome="ok", sent=0.0, latency=1.0, ttft=0.5, completion=10, prompt=100, cached=None,
        **kw):
    return {"outcome": outcome, "sent": sent, "latency": latency, "ttft": ttft,
            "completion_tokens": completion, "prompt_tokens": prompt, "cached_tokens": cached, **kw}


def test_percentile_matches_linear_interpolation():
    assert trace.percentile([4, 1, 3, 2], 50) == 2.5
    assert trace.percentile(range(1, 11), 95) == pytest.approx(9.55)
    assert trace.percentile([7], 95) == 7 and trace.percentile([], 50) is None


def test_summary_agentic_by_hand():
    records = [rec(sent=1, latency=2, ttft=0.5, cached=50), rec(sent=2, latency=3, ttft=1.0),
               rec("rejected_429", sent=1.5, latency=0.01, completion=None),
               rec("rejected_other", sent=1.6, latency=0.01, completion=None),
               rec("failed", sent=1.7, latency=0.02, completion=5)]
    s = trace.summarize(records, "agentic", 2.0, 32)
    assert s["wall_s"] == 4                      # from the first send to the last completion
    assert s["completion_tokens"] == 20 and s["tok_s"] == 5      # of the successful requests
    assert s["offered_tok_s"] == 64
    assert (s["requests"], s["ok"], s["rejected"], s["rejected_429"], s["failed"]) == (
        5, 2, 2, 1, 1)
    assert (s["latency_p50"], s["ttft_p50"]) == (2.5, 0.75)
    assert s["ttft_p95"] == pytest.approx(0.975) and s["latency_p95"] == pytest.approx(2.95)
    assert s["prefix_hits"] == 0.5                  # over the requests that report cached_tokens
    assert trace.summarize(records[1:], "agentic", 2.0, 32)["prefix_hits"] is None


def test_summary_multiturn_ttft_by_turn():
    records = [rec(turn=1, ttft=0.1, cached=0), rec(turn=1, ttft=0.3, cached=0),
               rec(turn=2, ttft=0.5, prompt=300, cached=100),
               rec(turn=2, ttft=0.7, prompt=300, cached=200)]
    s = trace.summarize(records, "multiturn", 1.0, 32)
    assert s["ttft_p50_by_turn"] == pytest.approx([0.2, 0.6])
    assert s["ttft_turn_ratio"] == pytest.approx(3.0) and s["offered_tok_s"] is None
    assert s["prefix_hits"] == pytest.approx(300 / 800)
    row = trace.table([{"server": "x", "pattern": "multiturn", "summary": s}], 2).splitlines()[-1]
    assert "0.20 / 0.60 s (3.0x)" in row and "| 38% |" in row


def test_pool_takes_each_turns_median_over_every_run(tmp_path):
    """--pool: a turn's p50 over the requests of all runs together, per server; agentic runs and
    failed requests left out. Run A (3 conversations) goes 1 -> 2 s, run B (5) 4 -> 4 s (p50):
    pooled, 3.5 -> 3.0 s (0.86x). Wrong poolings give other figures: the last run alone 1.0x,
    the mean of the runs' medians 2.5 -> 3.0 s (1.2x), the mean of their ratios 1.5x."""
    def run(server, firsts, lasts, pattern="multiturn", extra=()):
        reqs = [rec(turn=1, ttft=t) for t in firsts] + [rec(turn=2, ttft=t) for t in lasts]
        return {"server": server, "pattern": pattern, "requests": reqs + list(extra)}
    failed = rec(outcome="failed", turn=2, ttft=0.01)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"runs": [run("reame", [1] * 3, [2] * 3),
                                      run("reame", [9] * 4, [9] * 4, pattern="agentic"),
                                      run("llama-server", [10] * 3, [30] * 3)]}))
    b.write_text(json.dumps({"runs": [run("reame", [3, 4, 4, 5, 5], [3, 3, 4, 6, 6],
                                          extra=[failed] * 6)]}))
    got = {p["server"]: p for p in trace.pool([a, b])}
    assert got["reame"]["runs"] == 2 and got["reame"]["conversations"] == 8
    assert got["reame"]["ttft_p50_by_turn"] == pytest.approx([3.5, 3.0])
    assert got["reame"]["ttft_turn_ratio"] == pytest.approx(3.0 / 3.5)
    assert got["llama-server"]["ttft_turn_ratio"] == pytest.approx(3.0)
    md = tmp_path / "b.md"
    assert trace.main(["--pool", str(a), str(b), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "| reame | 2 | 8 | 3.50 | 3.00 | 0.86x |" in text and "trace-pool:begin" in text


def test_markdown_section_replaces_only_itself(tmp_path):
    md = tmp_path / "b.md"
    other = ("# Benchmarks\n\nintro\n\n<!-- bench.engine:begin -->\nengine\n"
             "<!-- bench.engine:end -->\n")
    md.write_text(other)
    trace.write_section(md, "Trace benchmark (2026-01-01)", "old table")
    first = md.read_text()
    assert first.startswith(other.rstrip()) and first.endswith(
        "<!-- trace:begin -->\n## Trace benchmark (2026-01-01)\n\nold table\n<!-- trace:end -->\n")
    md.write_text(first + "\n## Later section\n\nkept\n")
    for _ in range(2):                                            # idempotent
        trace.write_section(md, "Trace benchmark (2026-02-02)", "new table")
        text = md.read_text()
        assert "old table" not in text and "2026-01-01" not in text
        assert text.count("new table") == 1 and text.count("<!-- trace:begin -->") == 1
        assert text.startswith(other.rstrip()) and text.endswith("## Later section\n\nkept\n")


# ------------------------------------------------------------------------------ fake server
class FakeServer:
    """An OpenAI-like streaming /v1/completions: `first` s before the first token, `gap` s
    between tokens, usage with cached_tokens; a prompt containing REJECT gets a 429; `short`
    returns one token too few. Logs (arrival time, body) of every completion request."""

    def __init__(self, first=0.3, gap=0.05, short=False):
        self.first, self.gap, self.short = first, gap, short
        self.log, self.inflight, self.max_inflight, self.lock = [], 0, 0, threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self.send(200, {"status": "ok"})
                else:
                    self.send(200, {"data": [{"id": "fake-model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.log.append((time.perf_counter(), body))
                    n = len(fake.log)
                if "REJECT" in body["prompt"]:
                    return self.send(429, {"error": {"message": "queue full"}})
                with fake.lock:
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                time.sleep(fake.first)
                tokens = body["max_tokens"] - fake.short
                for k in range(tokens):
                    chunk = {"choices": [{"index": 0, "text": f" r{n}.{k}"}], "usage": None}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(fake.gap)
                usage = {"prompt_tokens": 100, "completion_tokens": tokens,
                         "prompt_tokens_details": {"cached_tokens": 25}}
                with fake.lock:     # before the last write: the client may send its next turn
                    fake.inflight -= 1      # as soon as it reads [DONE]
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                                 "data: [DONE]\n\n".encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    servers = []

    def make(**kw):
        servers.append(FakeServer(**kw))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


def test_agentic_replay_sends_at_the_arrival_times_concurrently(fake):
    srv = fake(first=0.3, gap=0.05)                # each request takes ~0.5 s
    reqs = [{"i": k, "at": 0.15 * k, "prompt": f"p{k}" + (" REJECT" if k == 2 else "")}
            for k in range(6)]
    records = asyncio.run(trace.replay_agentic(srv.url, reqs, BODY))
    arrived = [t - srv.log[0][0] for t, _ in sorted(srv.log, key=lambda e: e[1]["prompt"])]
    assert arrived == pytest.approx([0.15 * k for k in range(6)], abs=0.1)   # not one by one
    assert srv.max_inflight >= 3 and len(srv.log) == 6                        # and no retry
    assert all(abs(r["sent"] - r["at"]) < 0.1 for r in records)
    assert [r["outcome"] for r in records] == ["ok"] * 2 + ["rejected_429"] + ["ok"] * 3
    assert all(b["temperature"] == 0 and b["stream"] and b["stream_options"]["include_usage"]
               and b["logit_bias"] == {"2": -100} for _, b in srv.log)
    ok = [r for r in records if r["outcome"] == "ok"]
    assert all(0.3 <= r["ttft"] <= r["latency"] - 0.1 and r["latency"] >= 0.45 for r in ok)
    assert all(r["completion_tokens"] == 4 and r["cached_tokens"] == 25 for r in ok)
    s = trace.summarize(records, "agentic", 1 / 0.15, 4)
    assert s["rejected"] == s["rejected_429"] == 1 and s["prefix_hits"] == 0.25
    assert s["wall_s"] < 2 and s["tok_s"] == pytest.approx(20 / s["wall_s"])


def test_multiturn_think_time_is_seeded_exponential_and_waited(fake):
    """--think: a seeded exponential pause before turns 2.. (mean as asked), and the replay
    sends a turn only that long after the previous reply ended. A pause drawn but never
    slept, or slept before the first turn, fails."""
    t = trace.multiturn_trace(200, 6, 2.0, seed=0, think=3.0)
    assert t == trace.multiturn_trace(200, 6, 2.0, seed=0, think=3.0)
    assert all(c["think"][0] == 0 and len(c["think"]) == 6 for c in t)
    pauses = [p for c in t for p in c["think"][1:]]
    assert statistics.mean(pauses) == pytest.approx(3.0, rel=0.1)
    assert [c["user"] for c in t] == [c["user"] for c in trace.multiturn_trace(200, 6, 2.0, 0)]
    srv = fake(first=0.02, gap=0.01)
    conv = trace.multiturn_trace(1, 3, 2.0, seed=0, user_tokens=10)[0]
    conv["think"] = [0.0, 0.3, 0.2]
    records = sorted(asyncio.run(trace.replay_multiturn(srv.url, [conv], BODY)),
                     key=lambda r: r["turn"])
    assert records[0]["sent"] < 0.1
    for a, b, pause in zip(records, records[1:], (0.3, 0.2)):
        assert b["sent"] >= a["sent"] + a["latency"] + pause - 1e-3


def test_multiturn_replay_appends_each_reply_and_waits_for_it(fake):
    srv = fake(first=0.1, gap=0.02)
    convs = trace.multiturn_trace(2, 3, 2.0, seed=0, user_tokens=20)
    convs[1]["at"] = 0.05
    records = asyncio.run(trace.replay_multiturn(srv.url, convs, BODY))
    assert [(r["conv"], r["turn"]) for r in sorted(records, key=lambda r: (r["conv"], r["turn"]))
            ] == [(c, k) for c in (0, 1) for k in (1, 2, 3)]
    assert srv.max_inflight == 2                                  # conversations overlap
    for c in (0, 1):
        turns = sorted((r for r in records if r["conv"] == c), key=lambda r: r["turn"])
        assert all(r["outcome"] == "ok" and r["text"].startswith(" r") for r in turns)
        for a, b in zip(turns, turns[1:]):
            assert b["sent"] >= a["sent"] + a["latency"] - 1e-3   # after the previous finished
        prompts = [b["prompt"] for _, b in srv.log if convs[c]["user"][0] in b["prompt"]]
        assert len(prompts) == 3 and convs[c]["user"][2] in prompts[2]
        for k in (1, 2):
            assert prompts[k].startswith(prompts[k - 1] + turns[k - 1]["text"] + "\nUser: ")
    s = trace.summarize(records, "multiturn", 2.0, 4)
    assert len(s["ttft_p50_by_turn"]) == 3 and s["ttft_turn_ratio"] > 0


def test_main_against_url_validates_then_writes_json_and_markdown(fake, tmp_path):
    srv = fake(first=0.01, gap=0.001)
    out, md = tmp_path / "t.json", tmp_path / "b.md"
    md.write_text("# Benchmarks\n\nkeep me\n")
    argv = ["--url", srv.url, "--quick", "--eog-ids", "2,7", "--json", str(out),
            "--markdown", str(md)]
    assert trace.main(argv) == 0
    res = json.loads(out.read_text())
    assert [(s["server"], s["pattern"], s["requests"], s["rejected"]) for s in res["summary"]] == [
        (srv.url, "agentic", 6, 0), (srv.url, "multiturn", 6, 0)]
    assert len(srv.log) == 1 + 6 + 6 and srv.log[0][1]["prompt"].startswith("Warm-up")
    assert all(b["model"] == "fake-model" and b["max_tokens"] == 8
               and b["logit_bias"] == {"2": -100, "7": -100} for _, b in srv.log)
    text = md.read_text()
    assert text.startswith("# Benchmarks\n\nkeep me\n")
    assert "<!-- trace-agentic-multiturn:begin -->\n## Trace benchmark: agentic, multiturn (" in text
    assert trace.main(argv[:-2] + ["--pattern", "agentic", "--markdown", str(md)]) == 0
    both = md.read_text()                      # another set of patterns: its own section
    assert both.startswith(text.rstrip()) and "<!-- trace-agentic:begin -->" in both
    assert f"`python -m bench.trace {' '.join(argv)}`" in text and "| 25% |" in text

    short = fake(short=True)                   # one token short: refused before timing anything
    with pytest.raises(SystemExit, match="returned 7 tokens, expected 8"):
        trace.main(["--url", short.url, "--quick", "--eog-ids", "2", "--json", str(out)])
    assert len(short.log) == 1


# ------------------------------------------------------------------------------ end to end
def test_quick_run_against_reame_serve(stories_path, tmp_path):
    out = tmp_path / "t.json"
    assert trace.main(["--gguf", str(stories_path), "--quick", "--threads", "1",
                       "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["eog_ids"] and res["config"]["output_tokens"] == 8
    agentic, multiturn = res["summary"]
    assert (agentic["server"], agentic["pattern"], multiturn["pattern"]) == (
        "reame", "agentic", "multiturn")
    for s in (agentic, multiturn):
        assert s["requests"] == s["ok"] == 6 and s["rejected"] == s["failed"] == 0
        assert s["completion_tokens"] == 6 * 8 and s["tok_s"] > 0
        assert 0 < s["ttft_p50"] <= s["latency_p50"]
        assert s["prefix_hits"] is None or 0 <= s["prefix_hits"] <= 1
    assert len(multiturn["ttft_p50_by_turn"]) == 3
