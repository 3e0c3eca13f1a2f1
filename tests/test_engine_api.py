"""`reame.engine_api.Engine`: both engines and every test double have each member, and the
scheduler, the adaptive runtime and the server use them without probing."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from reame.engine_api import Engine

REPO = Path(__file__).resolve().parent.parent
MEMBERS = [m for m in typing.get_type_hints(Engine)] + ["forward", "final_hidden", "close"]


def members_missing(engine) -> list[str]:
    return [m for m in MEMBERS if not hasattr(engine, m)]


@pytest.mark.parametrize("name", ["reference", "jit"])
def test_both_engines_have_every_member(stories_model, name):
    # catches: an engine without a member the scheduler now reads directly (the reference had
    # no max_tokens, max_logits, attn_type or close: callers guessed with getattr defaults)
    from reame.engines import create_engine
    eng = create_engine(stories_model, name, n_ctx=64, max_seqs=2, threads=1)
    try:
        assert isinstance(eng, Engine) and not members_missing(eng)
        assert (eng.kernel_plan is None) == (name == "reference")
        assert eng.max_tokens is None or eng.max_tokens >= 2
    finally:
        eng.close()


def test_the_test_doubles_are_whole_engines(stories_model):
    # catches: a fake that lets a test pass only because production code tolerates a missing
    # member (what the getattr defaults did)
    from reame.engines import create_engine
    from tests.test_metrics_requests import SlowEngine
    from tests.test_multi_model import Recording
    from tests.test_planner import FakeEngine
    from tests.test_server_unit import WrappedEngine
    inner = create_engine(stories_model, "reference", n_ctx=64, max_seqs=2)
    for double in (FakeEngine(), SlowEngine(inner), WrappedEngine(inner),
                   Recording(inner, "a", [], [])):
        assert isinstance(double, Engine) and not members_missing(double), type(double)


def test_no_caller_probes_an_engine():
    # catches: getattr(engine, "max_tokens", 512), hasattr(engine, ...) and the like coming back
    # in the scheduler, the adaptive runtime or the server (each hid a missing member behind a
    # default that was wrong for one engine or the other)
    probe = re.compile(r"(getattr|hasattr)\((self\.)?(engine|eng)\b")
    paths = [REPO / "reame" / "scheduler.py", REPO / "reame" / "planner.py",
             *sorted((REPO / "reame" / "adaptive").glob("*.py")),
             *sorted((REPO / "reame" / "server").glob("*.py"))]
    for path in paths:
        found = probe.findall(path.read_text())
        assert not found, (str(path.relative_to(REPO)), found)
