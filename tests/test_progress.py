"""reame.progress: a bar on a terminal, log lines otherwise, nothing for fast steps, rate-limited
output; the tqdm adapter huggingface_hub downloads report through; model loading's progress."""

from __future__ import annotations

import io

import pytest

from reame import progress
from reame.progress import Task, format_amount


class TTY(io.StringIO):
    def isatty(self):
        return True


class Clock:
    """Time that moves only when told (in binary fractions of a second: exact sums)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture(autouse=True)
def default_mode(monkeypatch):
    monkeypatch.delenv("REAME_PROGRESS", raising=False)
    progress.configure(None)
    yield
    progress.configure(None)


def run(stream, clock, total=1000, steps=80, dt=1 / 16, unit="B", n=None):
    t = Task("loading m.gguf", total, unit, stream=stream, clock=clock)
    for _ in range(steps):
        clock.t += dt
        t.update(n if n is not None else total / steps)
    t.close()
    return stream.getvalue()


def test_log_lines_when_not_a_terminal():
    out = run(io.StringIO(), Clock())                   # 80 updates over 5 s
    lines = out.splitlines()
    assert "\r" not in out
    assert lines[0] == "reame: loading m.gguf: 10% (100 B/1000 B, 0.5 s)"   # first after DELAY
    assert [ln.split(": ")[2].split("%")[0] for ln in lines[1:-1]] == ["25", "50", "75", "100"]
    assert lines[-1] == "reame: loading m.gguf: done (1000 B in 5.0 s)"


def test_log_lines_every_few_seconds_without_a_total():
    out = run(io.StringIO(), Clock(), total=None, steps=240, dt=1 / 8, unit="kernels", n=1)
    lines = out.splitlines()
    # at 0.5 s, then every LOG_INTERVAL (5 s) of the 30 s, then the final line
    assert len(lines) == 1 + 5 + 1, out
    assert lines[0] == "reame: loading m.gguf: 4 kernels (0.5 s)"
    assert lines[1] == "reame: loading m.gguf: 44 kernels (5.5 s)"
    assert lines[-1] == "reame: loading m.gguf: done (240 kernels in 30.0 s)"


def test_bar_on_a_terminal_is_redrawn_at_most_every_tenth_of_a_second():
    clock = Clock()
    out = run(TTY(), clock, steps=512, dt=1 / 128)      # 512 updates over 4 s
    assert out.endswith("\n") and out.count("\n") == 1
    redraws = out.count("\r")
    assert 30 <= redraws <= 37, redraws                 # (4 - 0.5) s / 0.1 s, plus the final one
    last = out.rsplit("\r", 1)[1]
    assert last.startswith("loading m.gguf [####################] 100% 1000 B/1000 B 4.0 s")
    mid = out.split("\r")[10]
    assert "[" in mid and "#" in mid and "." in mid and "%" in mid


def test_fast_steps_print_nothing():
    for stream in (io.StringIO(), TTY()):
        assert run(stream, Clock(), steps=7, dt=1 / 16) == ""     # done in 0.44 s < DELAY


def test_a_slow_step_without_updates_still_says_done():
    clock, s = Clock(), io.StringIO()
    with Task("compiling kernels", None, "", stream=s, clock=clock):
        clock.t += 2.0
    assert s.getvalue() == "reame: compiling kernels: done (2.0 s)\n"


def test_failure_is_marked():
    clock, s = Clock(), io.StringIO()
    with pytest.raises(RuntimeError):
        with Task("repacking weights", 10, "B", stream=s, clock=clock):
            clock.t += 1.0
            raise RuntimeError("boom")
    assert s.getvalue() == "reame: repacking weights: failed (0 B in 1.0 s)\n"


def test_modes(monkeypatch):
    monkeypatch.setenv("REAME_PROGRESS", "off")
    assert run(TTY(), Clock()) == ""
    monkeypatch.setenv("REAME_PROGRESS", "bar")
    assert "\r" in run(io.StringIO(), Clock())
    monkeypatch.setenv("REAME_PROGRESS", "log")
    out = run(TTY(), Clock())
    assert "\r" not in out and out.startswith("reame: ")
    progress.configure("off")                           # the code's choice beats the environment
    assert run(TTY(), Clock()) == ""
    with pytest.raises(ValueError):
        progress.configure("loud")


def test_note_labels_the_innermost_task():
    clock, s = Clock(), io.StringIO()
    with Task("building programs", 4, "programs", stream=s, clock=clock) as t:
        clock.t += 1.0
        progress.note("repacking blk.0.ffn_down.weight")   # from deep inside, no handle needed
        t.update(1)
    assert "reame: building programs: 25% (1/4 programs, 1.0 s) repacking blk.0.ffn_down.weight" \
        in s.getvalue()
    progress.note("no task: nothing happens")


def test_a_broken_stream_is_not_fatal():
    class Broken(io.StringIO):
        def write(self, s):
            raise OSError("gone")
    assert run(Broken(), Clock()) == ""


def test_format_amount():
    assert format_amount(512, "B") == "512 B"
    assert format_amount(3 << 19, "B") == "1.5 MiB"
    assert format_amount(5 << 30, "B") == "5.0 GiB"
    assert format_amount(7, "kernels") == "7 kernels"


def test_tqdm_adapter_reports_through_a_task(monkeypatch):
    """huggingface_hub creates its bar as cls(total=..., unit="B", unit_scale=True, desc=...,
    initial=...) and calls update(n) / close()."""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    s = io.StringIO()
    cls = progress.tqdm_class("downloading m.gguf", stream=s)
    with cls(total=4000, unit="B", unit_scale=True, desc="(…)resolve/main/m.gguf",
             initial=0) as bar:
        for i in range(4):
            bar.update(1000)
            assert f"{25 * (i + 1)}% (" in s.getvalue()     # live, not only at close
        bar.update_transfer(1000)                       # Xet's network counter: ignored
    lines = s.getvalue().splitlines()
    assert lines[-1].startswith("reame: downloading m.gguf: done (3.9 KiB in ")
    assert any("100% (3.9 KiB/3.9 KiB" in ln for ln in lines)


def test_model_loading_reports_its_header(monkeypatch, capsys, stories_path):
    from reame.gguf_file import GGUFFile
    from reame.model import load_model
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setenv("REAME_PROGRESS", "log")
    load_model(stories_path)
    gf = GGUFFile(stories_path)
    n = len(gf.metadata) + len(gf.tensors)
    err = capsys.readouterr().err
    assert f"reame: loading stories260K.gguf: done ({n} header entries in " in err, err
    assert f"100% ({n}/{n} header entries" in err
