"""Hostile model files and a hostile start-up environment: each is one line `reame: error: ...`
on stderr, exit code 2, quickly and in bounded memory, for every command that loads a model.

The GGUF files are stories260K (../shared) with a few header fields rewritten byte for byte
(`hostile`): a count or size the file claims that nothing checked before it drove an
allocation or a recursion, or a value the server starts with and then refuses every request.
The commands run as real subprocesses (`python -m reame`), so a traceback or a worker's log
would show; their peak RSS is read with os.wait4 (that child's own rusage)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gguf import GGUFReader

from conftest import REPO, shared_path

STORIES = "models/stories260K.gguf"
PORT = 8941                       # this file's `reame serve` runs (8940-8949 are this item's)
RSS_LIMIT_MB = 300                # a CLI run on stories260K peaks at ~60-110 MB


# ---- building hostile files -------------------------------------------------------------------

def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    """One metadata pair as GGUF stores it: key, value type, value bytes."""
    return _str(key) + struct.pack("<I", vtype) + payload


def u32(key, v):
    return kv(key, 4, struct.pack("<I", v))


def i32(key, v):
    return kv(key, 5, struct.pack("<i", v))


def f32(key, v):
    return kv(key, 6, struct.pack("<f", v))


def string(key, v):
    return kv(key, 8, _str(v))


def hostile(dst: Path, replace: dict | None = None, extra=(), dims: dict | None = None,
            counts: tuple[int, int] | None = None) -> Path:
    """stories260K rewritten: metadata pairs replaced ({key: kv bytes}) or appended (extra),
    tensor dimensions replaced ({name: dims}), or the header's (tensor, key) counts replaced.
    Everything else (the other pairs, the tensor data) is copied byte for byte."""
    src = shared_path(STORIES)
    blob, r = src.read_bytes(), GGUFReader(src)
    pairs = {}
    for k, f in r.fields.items():
        if not k.startswith("GGUF."):
            pairs[k] = blob[f.offset:f.offset + sum(p.nbytes for p in f.parts)]
    pairs.update(replace or {})
    kvs = [*pairs.values(), *extra]
    infos = b""
    for t in r.tensors:
        shape = (dims or {}).get(t.name, [int(d) for d in t.shape])
        infos += (_str(t.name) + struct.pack("<I", len(shape))
                  + b"".join(struct.pack("<Q", d) for d in shape)
                  + struct.pack("<IQ", int(t.tensor_type), t.data_offset - r.data_offset))
    n_tensors, n_kv = counts or (len(r.tensors), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + b"".join(kvs) + infos
    dst.write_bytes(head + bytes(-len(head) % 32) + blob[r.data_offset:])
    return dst


def test_hostile_rewrites_nothing_by_itself(tmp_path):
    """The builder with no change gives back stories260K itself (so each test below changes
    only what it names)."""
    assert hostile(tmp_path / "same.gguf").read_bytes() == shared_path(STORIES).read_bytes()


# ---- running the CLI ----------------------------------------------------------------------------

def run_reame(tmp_path, *argv, timeout=120, env=None):
    """(exit code, stdout, stderr, peak RSS in MB, seconds) of `python -m reame ARGV`. The child
    runs in its own process group, killed whole if it outlives `timeout` (a server that started
    when it should have refused to: its gunicorn workers go with it)."""
    out, err, hwm = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "hwm"
    hwm.unlink(missing_ok=True)
    with open(out, "wb") as o, open(err, "wb") as e:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-c", HWM_RUNNER, str(hwm), *map(str, argv)],
                             stdout=o, stderr=e, cwd=REPO, env={**os.environ, **(env or {})},
                             start_new_session=True)
        killer = threading.Timer(timeout, os.killpg, (p.pid, signal.SIGKILL))
        killer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - t0
    try:
        os.killpg(p.pid, signal.SIGKILL)          # any worker left behind by a failed run
    except ProcessLookupError:
        pass
    # the child's own peak (VmHWM of its image): ru_maxrss counts the pytest process it was
    # forked from (~1 GB late in the suite), which exec does not reset
    peak = int(hwm.read_text()) / 1024 if hwm.exists() else usage.ru_maxrss / 1024
    return (p.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"),
            peak, seconds)


# `python -m reame ARGV` that writes its peak resident memory (kB) to argv[1] as it exits
HWM_RUNNER = """
import atexit, runpy, sys
path = sys.argv.pop(1)
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(path, "w").write(line.split()[1])
atexit.register(hwm)
sys.argv[0] = "reame"
runpy.run_module("reame", run_name="__main__", alter_sys=True)
"""


def one_line_error(result) -> str:
    rc, out, err, rss, _ = result
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"
    assert rc == 2, (rc, out, err[-3000:])
    assert out == "", out
    assert err.count("\n") == 1 and err.startswith("reame: error: "), err[-3000:]
    return err[len("reame: error: "):-1]


# the commands that load a model (generate on the reference engine: no kernels to build first)
LOADERS = {
    "info": ["info", "{path}"],
    "generate": ["generate", "{path}", "-p", "Once", "-n", "2", "--engine", "reference", "-q"],
    "serve": ["serve", "{path}", "--port", str(PORT), "--adaptive", "off", "--threads", "1"],
}


def each_loader(tmp_path, path, commands=LOADERS):
    for name, argv in commands.items():
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        yield name, one_line_error(run_reame(d, *[a.format(path=path) for a in argv]))


# ---- item: claimed counts that drove allocation -------------------------------------------------

def test_block_count_bomb(tmp_path):
    """block_count 10^6 in a 1.2 MB file with 5 blocks. Catches a loader that builds its
    per-layer tables (the expected tensor names and shapes, ~15 per layer) from the claimed
    count before looking at the tensors: 1.5 GB and ~10-15 s before "missing tensor blk.5..."
    (measured on the old code)."""
    p = hostile(tmp_path / "blocks.gguf", {"llama.block_count": u32("llama.block_count", 10**6)})
    for name, msg in each_loader(tmp_path, p):
        assert msg == (f"{p}: metadata key llama.block_count is 1,000,000, but the file has "
                       "tensors for 5 blocks"), (name, msg)


def test_tensor_size_that_wraps_around_int64(tmp_path):
    """token_embd and output claim 64 x 2^58 elements: 2^64, which an int64 product (numpy's)
    wraps to 0 bytes, so the truncation check passed: `info` reported a 2^58-token vocabulary
    and `generate` crashed reshaping the empty embedding (the old code). Catches computing
    tensor sizes in fixed-width integers."""
    big = [64, 1 << 58]
    p = hostile(tmp_path / "wrap.gguf", dims={"token_embd.weight": big, "output.weight": big})
    for name, msg in each_loader(tmp_path, p, {"info": LOADERS["info"]}):
        assert "truncated file: tensor 'token_embd.weight' needs bytes up to" in msg, msg


N_PRESENT = 10**6


@pytest.mark.parametrize("what,extra,counts,want", [
    # an array's element count against the bytes left: the claim is 2^50 / 2^40 elements and a
    # million small ones are really there (10 / 12 MB), so a loop that allocates per claimed
    # element until the bytes run out builds a million objects before it fails
    ("2^50 strings", [_str("x.s") + struct.pack("<IIQ", 9, 8, 1 << 50) + _str("ab") * N_PRESENT],
     None, "truncated GGUF header (needs byte 9,007,199,254,"),
    ("2^40 arrays", [_str("x.a") + struct.pack("<IIQ", 9, 9, 1 << 40)
                     + struct.pack("<IQ", 0, 0) * N_PRESENT], None, "truncated GGUF header"),
    ("a 2^60-byte string", [_str("x.l") + struct.pack("<IQ", 8, 1 << 60)], None,
     "truncated GGUF header"),
    # the header's counts against the fewest bytes their entries take
    ("a million keys", (), (48, 10**6), "corrupt GGUF header or truncated file: 1,000,000 keys "
                                        "and 48 tensors need at least 13,001,176 bytes"),
])
def test_claimed_counts_are_checked_against_the_file(tmp_path, what, extra, counts, want):
    """Counts the file claims are checked against its size before a loop runs on them, so each
    fails at once in a few MB (in process: the CLI path is the same load_model). Catches
    checking the bytes element by element only: the million-element cases then allocate
    ~60-150 MB of Python objects before the error (the old code; its header-count and
    string-length cases were already errors, less specific ones)."""
    import tracemalloc

    from reame.errors import ModelError
    from reame.model import load_model
    p = hostile(tmp_path / "m.gguf", extra=extra, counts=counts)
    tracemalloc.start()
    try:
        with pytest.raises(ModelError) as e:
            load_model(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, f"{what}: {peak / 2**20:.0f} MB traced"
    assert want in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("rows", [100, 0])
def test_embedding_rows_fewer_than_the_vocabulary(tmp_path, rows):
    """token_embd and output with 100 (or 0) rows for stories' 512-token vocabulary. Catches
    taking the vocabulary size from the tensor alone: the first prompt token past the rows was
    an IndexError traceback (reference engine) or "token id outside the vocabulary" (JIT), in
    `generate` and in every request to a server."""
    p = hostile(tmp_path / "m.gguf", dims={"token_embd.weight": [64, rows],
                                           "output.weight": [64, rows]})
    for name, msg in each_loader(tmp_path, p, {"generate": LOADERS["generate"]}):
        assert msg == (f"{p}: tensor token_embd.weight has {rows} rows for a vocabulary of 512 "
                       "tokens"), msg


# ---- item: recursion --------------------------------------------------------------------------

def test_arrays_nested_5000_deep(tmp_path):
    """A metadata array of arrays nested 5,000 deep (60 kB). Catches a recursive parser with no
    depth bound: RecursionError, a 3,000-line traceback and exit 1 (the old code, for every
    command, tokenize included, which reads the metadata only)."""
    deep = b"".join(struct.pack("<IQ", 9, 1) for _ in range(5000)) + struct.pack("<IQ", 4, 0)
    p = hostile(tmp_path / "deep.gguf", extra=[_str("x.deep") + struct.pack("<I", 9) + deep])
    commands = {**LOADERS, "tokenize": ["tokenize", "{path}", "Once", "--ids-only"]}
    for name, msg in each_loader(tmp_path, p, commands):
        assert msg == f"{p}: metadata key 'x.deep': arrays nested more than 4 deep", (name, msg)


# ---- item: values a server starts with and then refuses every request -------------------------

@pytest.mark.parametrize("value", [0, -1])
def test_context_length_below_one(tmp_path, value):
    """context_length 0 or -1. Catches a config that takes any integer: `reame serve` started
    and answered every request with an error (the KV cache had no block), `generate` crashed
    with a traceback or said the context holds -1 tokens."""
    p = hostile(tmp_path / "ctx.gguf", {"llama.context_length": i32("llama.context_length", value)})
    for name, msg in each_loader(tmp_path, p):
        assert msg == f"{p}: metadata key llama.context_length is {value}, expected at least 1", \
            (name, msg)


@pytest.mark.parametrize("extra,want", [
    ([string("llama.rope.scaling.type", "yarn"), f32("llama.rope.scaling.factor", 4.0),
      u32("llama.rope.scaling.original_context_length", 0)],
     "yarn rope scaling with an original context of 0"),
    ([f32("llama.rope.freq_base", 0.0)], "metadata key llama.rope.freq_base is 0.0, expected a "
                                         "positive number"),
    ([f32("llama.rope.freq_base", -1e4)], "llama.rope.freq_base is -10000.0"),
])
def test_rope_values_that_crashed_generation(tmp_path, extra, want):
    """Values the loader took and the engine then crashed on, a traceback and exit 1 (a math
    domain error in YaRN's correction dims; an empty reduction over the RoPE table). Catches
    checking only that a key is a number."""
    p = hostile(tmp_path / "m.gguf", extra=extra)
    commands = {"generate": LOADERS["generate"]}
    for name, msg in each_loader(tmp_path, p, commands):
        assert want in msg, (name, msg)


# ---- item: the start-up environment (the CLI parts of item 11) ---------------------------------

def test_serve_on_a_port_in_use(tmp_path, stories_path):
    """Another process listens on the port. Catches leaving the bind to gunicorn: it retried
    five times a second apart, logged ten ERROR lines and exited 1 (the old code). The socket
    is bound before anything starts and handed to gunicorn (bind fd://N), so no other process
    can take the port between a check and the bind."""
    port = PORT + 1
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", port))
        busy.listen()
        for argv in (["serve", stories_path, "--port", port],
                     ["serve", "--model", stories_path, "--port", port, "--host", "localhost"]):
            msg = one_line_error(run_reame(tmp_path, *argv, "--adaptive", "off", timeout=60))
            host = "localhost" if "localhost" in argv else "127.0.0.1"
            assert msg == f"port {port} on {host} is in use", msg


def test_serve_on_an_address_not_of_this_machine(tmp_path, stories_path):
    """--host names an address no interface has (TEST-NET-2, RFC 5737). Catches the same
    gunicorn retry loop ("Invalid address" five times)."""
    msg = one_line_error(run_reame(tmp_path, "serve", stories_path, "--port", PORT,
                                   "--host", "198.51.100.7", timeout=60))
    assert msg == "cannot listen on 198.51.100.7: not an address of this machine", msg


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """The Hub unreachable (HF_ENDPOINT on the discard port of this machine, nothing listening:
    every connection refused at once) and an empty cache."""
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "hub-cache"),
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(k, raising=False)
    return env


@pytest.mark.parametrize("name", ["hf://org/repo/model-Q8_0.gguf", "org/repo", "hf://org/repo"])
def test_hub_name_without_network_does_not_retry(no_network, monkeypatch, name):
    """No network and nothing cached. Catches handing a named file straight to
    hf_hub_download: it retried an unreachable Hub five times with back-off sleeps (1+2+4+8+8
    s, 24 s with "Retrying in 8s [Retry 5/5]" lines) before the error. time.sleep is recorded
    here instead of slept, so the check does not depend on the machine's speed."""
    from reame.errors import ReameError
    from reame.hub import resolve_model
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    with pytest.raises(ReameError) as e:
        resolve_model(name)
    assert str(e.value) == (f"{name}: cannot reach http://127.0.0.1:9 and the file is not in "
                            "the local cache")
    assert slept == []


def test_hub_offline_and_not_cached(no_network, monkeypatch):
    """HF_HUB_OFFLINE=1 and a named file not in the cache. Catches reporting it as a network
    failure ("cannot reach https://huggingface.co"), when no request was made."""
    from reame.errors import ReameError
    from reame.hub import resolve_model
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "hf://org/repo/model-Q8_0.gguf"
    with pytest.raises(ReameError) as e:
        resolve_model(name)
    assert str(e.value) == f"{name}: not in the local cache and HF_HUB_OFFLINE is set"


def test_hub_name_without_network_cli(tmp_path, no_network):
    """The same through `reame info` and `reame serve`: one line, exit 2 (the old code printed
    ten retry lines over 24 s first)."""
    name = "hf://org/repo/model-Q8_0.gguf"
    for argv in (["info", name], ["serve", name, "--port", PORT]):
        msg = one_line_error(run_reame(tmp_path, *argv, timeout=60, env=no_network))
        assert msg == f"{name}: cannot reach http://127.0.0.1:9 and the file is not in the local " \
                      "cache", msg
