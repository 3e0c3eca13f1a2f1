"""Issue 29, item 4's other half: a client holding every place in the batch (50 streams nobody
reads, or simply many) does not keep another client out. The planner's round robin runs over
clients, then requests, and with the batch full a client holding two places more than a
waiting client's yields its newest sequence. Driven through Scheduler.step() on a fake engine."""

from __future__ import annotations

import numpy as np

from reame.planner import SchedulerParams
from reame.scheduler import Scheduler
from test_hostile_bounds import FakeGen
from test_planner import FakeEngine, expected


def scheduler(max_batch=4):
    eng = FakeEngine(slots=max_batch, blocks=4096, bs=16, n_ctx=1024)
    return Scheduler(eng, SchedulerParams(max_batch=max_batch, token_budget=256,
                                          prefill_chunk=256, max_waiting=1024))


def streams(s, client, n, length=300, seed=0):
    """n one-prompt requests of `client`, each generating `length` tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = [int(t) for t in rng.integers(3, 900, 20)]
        g = FakeGen(length)
        out.append((p, g, s.submit([p], [[g]], client=client)))
    return out


def steps_to_first_token(s, req, limit=2000) -> int:
    for n in range(1, limit):
        s.step(0.0)
        if not req.out.empty():
            return n
    raise AssertionError("no token")


def second_client_gets_in(s, xs, within: int, x_tokens: int) -> None:
    """Client y's 8-token request gets its first token within `within` steps; then every
    output, y's and x's, is what the model gives alone."""
    p, g = [7, 8, 9] * 10, FakeGen(8)
    y = s.submit([p], [[g]], client="y")
    assert steps_to_first_token(s, y) <= within
    while s.step(0.0):
        pass
    assert g.output_ids == expected(p, 8)
    for p_x, g_x, _ in xs:
        assert g_x.output_ids == expected(p_x, x_tokens)


def test_another_client_gets_a_place_at_once_when_one_holds_the_batch():
    """Client X runs 4 streams (the whole batch) with 8 more waiting; client Y's request gets
    its first token within 3 steps (it waited for one of X's 300-token streams to end, ~300
    steps, and behind X's 8 waiting ones), and every output is still right (the preempted
    stream recomputes). Catches round robin by request only (Y behind X's waiting streams)
    and a planner that admits Y only when a place frees."""
    s = scheduler()
    xs = streams(s, "x", 12)
    for _ in range(5):
        s.step(0.0)                                  # X's first 4 run
    second_client_gets_in(s, xs, within=3, x_tokens=300)
    assert s.planner.preemptions <= 2                # one place yielded, no ping-pong


def test_one_client_does_not_preempt_itself():
    """The same request from client X itself waits for a place (fairness is between clients):
    catches a planner that preempts whenever anything waits."""
    s = scheduler()
    streams(s, "x", 4)
    for _ in range(5):
        s.step(0.0)
    y = s.submit([[7, 8, 9] * 10], [[FakeGen(8)]], client="x")
    assert steps_to_first_token(s, y) > 250
    assert s.planner.preemptions == 0


def test_clients_take_turns_in_admission():
    """Three clients, one with 6 waiting requests and two with one each, arriving after it:
    with 2 places, the next admissions go to the two single requests before X's third."""
    s = scheduler(max_batch=2)
    xs = streams(s, "x", 6, length=3)
    a = s.submit([[5] * 20], [[FakeGen(3)]], client="a")
    b = s.submit([[6] * 20], [[FakeGen(3)]], client="b")
    order = []
    seen = set()
    while s.step(0.0):
        for name, r in [("a", a), ("b", b)] + [(f"x{i}", r) for i, (_, _, r) in enumerate(xs)]:
            if name not in seen and not r.out.empty():
                seen.add(name)
                order.append(name)
    assert order.index("a") < order.index("x2") and order.index("b") < order.index("x3"), order


def test_the_client_is_the_peer_or_what_a_local_proxy_saw():
    """A request's client is its peer address; behind a proxy on this machine (loopback peer)
    the last X-Forwarded-For entry, the address that proxy saw. A remote peer's header is not
    believed (a client could name itself anything). Catches fairness keyed on a header any
    client sets, or on the proxy's address (every client one behind nginx)."""
    from reame.server.responses import client_key
    assert client_key({"REMOTE_ADDR": "10.0.0.5"}) == "10.0.0.5"
    assert client_key({"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}) == \
        "10.0.0.5"
    assert client_key({"REMOTE_ADDR": "127.0.0.1",
                       "HTTP_X_FORWARDED_FOR": "9.9.9.9, 1.2.3.4"}) == "1.2.3.4"
    assert client_key({"REMOTE_ADDR": "::1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}) == "1.2.3.4"


def prompt_tokens_per_step(other_client: str) -> tuple[list[int], list, tuple]:
    """Client y decodes 12 tokens; then client `other_client` sends 8 prompts of 600 tokens
    (one token each). The prompt tokens of each step while y decodes, and the outputs."""
    eng = FakeEngine(slots=16, blocks=4096, bs=16, n_ctx=1024)
    s = Scheduler(eng, SchedulerParams(max_batch=16, token_budget=512, prefill_chunk=512,
                                       max_waiting=1024))
    p_y = [7, 8, 9] * 5
    g_y = FakeGen(12)
    y = s.submit([p_y], [[g_y]], client="y")
    while y.out.empty():
        s.step(0.0)
    rng = np.random.default_rng(3)
    xs = [[int(t) for t in rng.integers(3, 900, 600)] for _ in range(8)]
    g_x = [[FakeGen(1)] for _ in xs]
    s.submit(xs, g_x, client=other_client)
    sizes = []
    while not g_y.finished:
        s.step(0.0)
        sizes.append(len(eng.batches[-1].tokens) - 1)       # less y's decode token
    while s.step(0.0):
        pass
    return sizes, [g.output_ids for (g,) in g_x], (g_y.output_ids, p_y, xs)


def test_a_client_decoding_waits_for_little_of_anothers_prompts():
    """While client y decodes, client x's prompts take at most 64 tokens of each step (they
    took the step's whole 512-token budget, so y's every token waited for 512 prompt tokens);
    the same prompts from y itself are not held back. Outputs unchanged. Catches a bound
    applied to every client (y's own long prompt would crawl beside its decoding) and no
    bound at all."""
    sizes, outs, (out_y, p_y, xs) = prompt_tokens_per_step("x")
    assert max(sizes) <= 64 and sum(sizes) > 0, sizes
    assert out_y == expected(p_y, 12)
    assert outs == [expected(p, 1) for p in xs]
    sizes_own, _, _ = prompt_tokens_per_step("y")
    assert max(sizes_own) > 256, sizes_own


def test_a_client_holding_the_kv_pool_yields_blocks_to_another():
    """Client x's three long streams hold the whole KV pool (the batch has room); client y's
    short request gets its first token within 3 steps instead of waiting for one of x's to
    end, and every output is right. Catches a yield that looks only at batch places (3 prompts
    of 4,000 tokens held a 512 MiB pool and the other client waited seconds)."""
    eng = FakeEngine(slots=8, blocks=31, bs=16, n_ctx=1024)
    s = Scheduler(eng, SchedulerParams(max_batch=8, token_budget=256, prefill_chunk=256,
                                       max_waiting=1024, reserve_per_running=0))
    rng = np.random.default_rng(2)
    xs = []
    for _ in range(3):
        p = [int(t) for t in rng.integers(3, 900, 150)]
        g = FakeGen(10)                          # 160 tokens: 10 blocks each, 30 of 31
        xs.append((p, g, s.submit([p], [[g]], client="x")))
    for _ in range(3):
        s.step(0.0)
    second_client_gets_in(s, xs, within=2, x_tokens=10)
