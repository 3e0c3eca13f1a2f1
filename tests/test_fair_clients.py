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
    p = [7, 8, 9] * 10
    g = FakeGen(8)
    y = s.submit([p], [[g]], client="y")
    assert steps_to_first_token(s, y) <= 3
    while s.step(0.0):
        pass
    assert g.output_ids == expected(p, 8)
    for p_x, g_x, _ in xs:
        assert g_x.output_ids == expected(p_x, 300)
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
