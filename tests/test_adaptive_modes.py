"""--adaptive on | off | frozen, --strategy FILE, and `reame serve --model PATH` (issue 27 items 1
and 7): off is static (the built-in defaults whatever the strategy directory holds), frozen runs
the saved strategy unchanged."""

from __future__ import annotations

import argparse

import pytest

from reame.adaptive import AdaptiveRuntime
from reame.engines import create_engine
from reame.errors import ReameError
from reame.planner import SchedulerParams
from reame.server import ServerConfig, create_app

N_CTX = 256


def jit(model):
    return create_engine(model, "jit", n_ctx=N_CTX, max_seqs=4)


def live_kernels(engine) -> list:
    engine.table.commit()                    # what the first step runs (staged choices go live)
    return [s.kernel.spec for s in engine.table.slots if s is not None]


def learned_strategy(model, directory):
    """A strategy saved for this CPU, model and version with one kernel class changed; returns
    the changed class key and the variant it chose."""
    eng = jit(model)
    rt = AdaptiveRuntime(eng, SchedulerParams(max_batch=4), state_dir=directory)
    # the first matmul candidate the (exact) tuner accepts: bit-identical to the live kernel
    cls, other = next((c, sp) for c in rt.tuner.classes.values() if c.op == "matmul"
                      for sp in list(c.candidates) if rt.tuner.apply_choices({c.key: sp}) == 1)
    eng.table.commit()
    assert rt.save()
    eng.close()
    return rt.path, cls, other


def app(model, directory, **config):
    eng = jit(model)
    config.setdefault("adaptive_boot", 1.0)
    return create_app(eng, ServerConfig(model=model.path, max_seqs=4,
                                        adaptive_dir=str(directory), **config)), eng


def test_off_is_static_and_frozen_runs_the_saved_strategy(stories_model, tmp_path):
    """Two --adaptive off servers, over a directory holding a learned strategy and over an
    empty one, run the same kernels (the built-in defaults) and explore nothing at start, even
    with a start-up benchmark configured; --adaptive frozen over the learned directory and
    --strategy FILE over an empty one run the learned choice, explore nothing, and neither
    overwrites the file. Catches an off that loads a saved strategy or runs (or plans, for the
    engine thread's idle time) the start-up benchmark, or a frozen that does not load."""
    path, cls, other = learned_strategy(stories_model, tmp_path / "learned")
    saved = path.read_text()
    runs = {}
    for name, directory, cfg in [("off-learned", tmp_path / "learned", {"adaptive": "off"}),
                                 ("off-empty", tmp_path / "empty", {"adaptive": "off"}),
                                 ("frozen", tmp_path / "learned", {"adaptive": "frozen"}),
                                 ("file", tmp_path / "empty2", {"strategy": str(path)})]:
        a, eng = app(stories_model, directory, **cfg)
        svc = a.reame.service
        try:
            runs[name] = (live_kernels(eng), svc.adaptive.tuner.tried, svc.adaptive.loaded,
                          svc.adaptive.frozen)
            # no start-up benchmark planned either (it would run in the engine thread's idle
            # time, after start() returned)
            assert svc.adaptive.report()["startup_benchmark"] == {"state": "none"}, name
        finally:
            svc.stop()
    assert runs["off-learned"][0] == runs["off-empty"][0]
    index = [i for i, s in enumerate(eng.table.slots) if s is not None].index(cls.slots[0])
    assert runs["off-learned"][0][index] != other
    for name in ("frozen", "file"):
        assert runs[name][0][index] == other and runs[name][2] == 1, name
    for name, (_, tried, _, frozen) in runs.items():
        assert tried == 0 and frozen, name
    assert path.read_text() == saved                       # nothing saved over it


def test_strategy_and_mode_settings_are_checked(tmp_path):
    f = tmp_path / "strategy-x.json"
    f.write_text("{}")
    assert ServerConfig.from_env({}, strategy=str(f)).adaptive_mode == "frozen"
    assert ServerConfig.from_env({"REAME_STRATEGY": str(f)}).adaptive_mode == "frozen"
    assert ServerConfig.from_env({"REAME_ADAPTIVE": "frozen"}).adaptive_mode == "frozen"
    with pytest.raises(ReameError, match="no such strategy"):
        ServerConfig.from_env({}, strategy=str(tmp_path / "missing.json"))
    with pytest.raises(ReameError, match="not with --adaptive off"):
        ServerConfig.from_env({}, strategy=str(f), adaptive="off")
    with pytest.raises(ReameError, match="on, off or frozen"):
        ServerConfig.from_env({"REAME_ADAPTIVE": "auto"})
    assert ServerConfig(adaptive="frozen").speculating      # auto: what was learned, frozen


def test_serve_takes_the_model_as_a_flag_too(stories_path, monkeypatch):
    """`reame serve --model PATH` (the quick start many guides show) as well as the positional
    path; neither is an error naming the fix; several (positional and --model, or --model
    repeated) serve several models, the first the default; two with one name is an error."""
    from reame.server import cli as serve_cli
    got = {}
    monkeypatch.setattr("reame.server.gunicorn_app.run", lambda config, **kw: got.update(c=config))
    parser = argparse.ArgumentParser()
    serve_cli.add_serve_command(parser.add_subparsers(dest="command"))
    for argv in (["serve", "--model", str(stories_path)], ["serve", str(stories_path)]):
        args = parser.parse_args(argv + ["--pin", "off"])
        assert args.func(args) == 0 and got.pop("c").model == str(stories_path)
    args = parser.parse_args(["serve", str(stories_path), "--model", f"b={stories_path}",
                              "--model", f"c={stories_path},pooling=mean", "--pin", "off"])
    assert args.func(args) == 0
    c = got.pop("c")
    assert c.model == str(stories_path) and c.models == (f"b={stories_path}",
                                                         f"c={stories_path},pooling=mean")
    for argv, why in ((["serve"], "give a model"),
                      (["serve", str(stories_path), "--model", str(stories_path)],
                       "two models are named 'stories260K'"),
                      (["serve", "--model", f"{stories_path},colour=red"], "not one of")):
        args = parser.parse_args(argv + ["--pin", "off"])
        with pytest.raises(ReameError, match=why):
            args.func(args)
