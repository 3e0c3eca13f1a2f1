"""bench/adaptive.py's trace and statistics, by hand (no server)."""

from bench.adaptive import make_trace, summarize, table, tpot


def test_trace_is_seeded_phased_and_at_the_rates():
    tr = make_trace(["chat", "documents", "agentic"], [2.0, 0.5, 6.0], 300.0, seed=1)
    assert tr == make_trace(["chat", "documents", "agentic"], [2.0, 0.5, 6.0], 300.0, seed=1)
    for k, (phase, rate) in enumerate([("chat", 2.0), ("documents", 0.5), ("agentic", 6.0)]):
        rs = [r for r in tr if r["phase_index"] == k]
        assert all(r["phase"] == phase and 300 * k <= r["at"] < 300 * (k + 1) for r in rs)
        assert 0.75 * rate * 300 < len(rs) < 1.25 * rate * 300      # Poisson (bursts: agentic)
    agentic = [r["prompt"] for r in tr if r["phase"] == "agentic"]
    prefix = agentic[0][:2000]
    assert all(p.startswith(prefix) for p in agentic) and len(set(agentic)) == len(agentic)
    docs = [r for r in tr if r["phase"] == "documents"]
    assert min(len(r["prompt"]) for r in docs) > 3 * max(len(r["prompt"]) for r in tr
                                                          if r["phase"] == "chat")


def rec(sent, latency, tokens, phase_index, ttft=0.1, outcome="ok"):
    return {"sent": sent, "latency": latency, "completion_tokens": tokens, "ttft": ttft,
            "outcome": outcome, "phase_index": phase_index}


def test_steady_state_is_the_second_half_by_completion_time():
    # phase 0 (0-100 s): 10 tokens finish every second; phase 1 (100-200 s): 30 a second
    # (catches: windows by send time, or the whole phase as the steady state)
    rs = [rec(t - 5.5, 5.0, 10, 0) for t in range(1, 101)]       # done at 0.5, 1.5, ...

    rs += [rec(t - 5.5, 5.0, 30, 1) for t in range(101, 201)]
    rs.append(rec(1.0, 1.0, 0, 0, outcome="rejected_429"))
    s = summarize(rs, ["chat", "agentic"], 100.0, 10.0)
    a, b = s["phases"]
    assert a["steady_tok_s"] == 10.0 and b["steady_tok_s"] == 30.0
    assert a["rejected"] == 1 and b["rejected"] == 0
    assert b["reconverged_s"] == 10.0                # the first window after the change
    assert s["first_minute_tok_s"] == 10.0
    assert a["steady_tpot_p95"] == tpot(rs[0]) == (5.0 - 0.1) / 9
    text = table([{"label": "adaptive off", "summary": s}, {"label": "adaptive on", "summary": s}])
    assert "| adaptive on | agentic | 30.0 | 1.00x |" in text


def test_a_request_unfinished_when_its_phase_ends_is_abandoned(monkeypatch):
    # catches: a replay whose backlog of one phase runs into the next (the first bench run's
    # documents backlog hid its agentic phase), and one that abandons requests of the phase
    # that is still running
    import asyncio
    import bench.adaptive as ba
    done = []

    async def fake_complete(client, url, body, t0):
        try:
            await asyncio.sleep(body["max_tokens"] / 10)
        except asyncio.CancelledError:
            done.append(("cancelled", body["prompt"]))
            raise
        return {"sent": 0.0, "status": 200, "outcome": "ok", "ttft": 0.01, "latency": 0.1,
                "completion_tokens": body["max_tokens"], "text": ""}
    monkeypatch.setattr(ba, "complete", fake_complete)
    trace = [{"i": 0, "at": 0.0, "phase": "chat", "phase_index": 0, "prompt": "slow",
              "max_tokens": 5},                                   # 0.5 s, its phase 0.3 s
             {"i": 1, "at": 0.05, "phase": "chat", "phase_index": 0, "prompt": "quick",
              "max_tokens": 1},
             {"i": 2, "at": 0.35, "phase": "chat", "phase_index": 1, "prompt": "next",
              "max_tokens": 1}]
    out = asyncio.run(ba.replay("http://unused", trace, {}, 0.3))
    assert [r["outcome"] for r in out] == ["abandoned", "ok", "ok"]
    assert done == [("cancelled", "slow")]
    assert 0.25 < out[0]["latency"] < 0.45
    s = summarize(out, ["chat", "chat"], 0.3, 0.1)
    assert s["phases"][0]["abandoned"] == 1 and s["phases"][1]["abandoned"] == 0
