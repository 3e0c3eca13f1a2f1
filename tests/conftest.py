"""Shared fixtures. Test data lives in ../shared (or $REAME_SHARED).

Missing data skips a test with the reason locally, and fails it in CI (when $CI is set), so CI
can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent

# the adaptive runtime in tests (and in the `reame serve` they start): no start-up benchmark
# unless a test asks for one, learned strategies in a temporary directory, never in ~/.cache
os.environ.setdefault("REAME_ADAPTIVE_BOOT", "0")
os.environ.setdefault("REAME_ADAPTIVE_DIR", tempfile.mkdtemp(prefix="reame-adaptive-"))


@pytest.fixture(autouse=True)
def _strategy_dir_per_test(monkeypatch):
    """Each test its own (empty) strategy directory. A running adaptive runtime saves its
    strategy every 60 s of wall time, hot prefixes included; a test that runs that long (most
    under emulation) would otherwise leave one that the next test's server loads and warms into
    its prefix cache, changing that test's cache counts. Module-scoped servers keep the
    session's directory (they start before this fixture)."""
    d = tempfile.mkdtemp(prefix="reame-adaptive-")
    monkeypatch.setenv("REAME_ADAPTIVE_DIR", d)
    yield
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _progress_mode_per_test():
    """`reame generate -q` run in-process turns progress off for the process: each test starts
    from the default mode again."""
    yield
    from reame import progress
    progress.configure(None)


def shared_dir() -> Path:
    return Path(os.environ.get("REAME_SHARED") or REPO.parent / "shared")


def missing_data(msg: str):
    """Skip (locally) or fail (CI) a test whose data is absent."""
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def shared_path(rel: str) -> Path:
    """Path of a file under the shared folder; skip (locally) or fail (CI) when it is absent."""
    p = shared_dir() / rel
    if not p.exists():
        missing_data(f"test data {p} is missing (set REAME_SHARED to the shared folder)")
    return p


def _missing_shared_data_is_a_skip():
    """Synthetic models take their vocabulary from the shared folder: bench.synth raises
    MissingSharedData without it, which counts as missing data in fixtures and tests alike."""
    from bench.synth import MissingSharedData
    try:
        return (yield)
    except MissingSharedData as e:
        missing_data(str(e))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _missing_shared_data_is_a_skip())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _missing_shared_data_is_a_skip())


def isa_at(level: str):
    """This machine's ISA at `level` ("native": its highest; or a lower level it can force).
    Skips the test where this CPU cannot run `level` (an x86 level on AArch64, AVX2 on a CPU
    without it)."""
    from reame.codegen.isa import detect
    isa = detect()
    if level == "native":
        return isa
    if not isa.has(level):
        pytest.skip(f"this CPU ({isa.arch}, level {isa.level}) cannot run level {level}")
    return isa.at(level)


def amx_attention_missing() -> str | None:
    """Why attn_prefill's amx family (bf16 attention, the bf16 KV cache) cannot run on this CPU,
    or None. Tests that need it skip with this reason where the CPU has no AMX-BF16 (or the OS
    does not grant the tile state): there is no forced level to run AMX on other hardware."""
    from reame.codegen.isa import detect
    from reame.jit.select import bf16_attention
    return None if bf16_attention(detect()) else \
        f"no attn_prefill amx family on this CPU (level {detect().level}, or AMX not granted)"


def bf16dp_missing() -> str | None:
    """Why attn_decode's bf16dp family (the bf16 KV cache in the pair layout, AVX512_BF16) cannot
    run on this CPU, or None (no forced level gives a CPU instructions it lacks)."""
    from reame.codegen.isa import detect
    from reame.jit.select import bf16dp_attention
    isa = detect()
    return None if bf16dp_attention(isa) else \
        f"no AVX512_BF16 on this CPU (level {isa.level}): attn_decode's bf16dp family cannot run"


# bench/arm64_check.py runs the guest under qemu-user with REAME_EMULATED=qemu-user: emulated
# code runs ~5-20x slower, so a test's absolute wall-time bound is multiplied by this
EMULATED = os.environ.get("REAME_EMULATED", "")
TIME_SCALE = 20.0 if EMULATED else 1.0

# the first SIMD level of each architecture: kernels are tested there besides native and generic
SIMD_BASE = {"x86_64": "avx2", "aarch64": "neon"}


def simd_base() -> str:
    """This architecture's first SIMD level ("generic" where Reame knows none)."""
    from reame.codegen.isa import detect
    return SIMD_BASE.get(detect().arch, "generic")


def host_levels() -> tuple[str, ...]:
    """The levels kernel tests run at on this machine: "native" (its level), the first SIMD
    level of its architecture (avx2 on x86-64, neon on AArch64) and generic, each where the
    machine may run it and once (a level equal to native is native)."""
    from reame.codegen.isa import detect
    isa = detect()
    out = ["native"]
    for level in (simd_base(), "generic"):
        if level != isa.level and isa.has(level) and level not in out:
            out.append(level)
    return tuple(out)


def variant_levels(variant) -> list[str]:
    """The levels a kernel variant is tested at: the host's levels (host_levels) and the
    variant's own lowest level, where this machine can build it and the variant runs there
    (`Variant.below`: not at levels with that one, where another variant serves)."""
    from reame.codegen.isa import detect
    isa = detect()
    out = []
    for level in (*host_levels(), variant.min_level):
        name = isa.level if level == "native" else level
        if level in out or name not in isa.levels or (level != "native" and name == isa.level):
            continue
        if variant.usable(isa_at(level)):
            out.append(level)
    return out


def type_variant_params(op, dtypes) -> list:
    """pytest params (dtype, family, level, tile) of every type x variant (that runs the type) x
    tested level x tile of an op, with readable ids."""
    out = []
    for dtype in dtypes:
        for v in op.variants:
            if dtype not in v.dtypes:
                continue
            for level in variant_levels(v):
                for tile in v.tiles:
                    tiles = ",".join(f"{k}{x}" for k, x in tile.items())
                    out.append(pytest.param(dtype, v.family, level, tile,
                                            id=f"{dtype}-{level}-{v.family}-{tiles}"))
    return out


def guarded_bytes(nbytes: int, at_end: bool):
    """A uint8 array of nbytes that ends exactly at (at_end) or starts exactly after (not
    at_end) a PROT_NONE page: any read outside it segfaults."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    span = (nbytes + page - 1) // page * page
    buf = mmap.mmap(-1, span + 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(base, page, 0) == 0
    assert libc.mprotect(base + page + span, page, 0) == 0
    off = page + (span - nbytes if at_end else 0)
    return buf, np.frombuffer(buf, np.uint8, nbytes, off)


def check_every_tile_native(variants, make_spec, case, want, tolerance, threads=(1, 3)):
    """Run every variant x tile of an op (make_spec(family, tile) -> spec at the native level)
    on one case (acc=1: y restored from case.meta["y0"] before each run) and compare y."""
    from reame.codegen.isa import detect
    from reame.codegen.kernels import build
    rtol, atol = tolerance
    for v in variants:
        if not v.usable(detect()):          # e.g. the x86 families on AArch64
            continue
        for tile in v.tiles:
            spec = make_spec(v.family, tile)
            if spec.dtype not in v.dtypes:     # a family without this type
                break
            for nth in threads:
                case.buffers["y"][...] = case.meta["y0"]
                build(spec, detect()).run_threads(case.args, nth)
                np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                                           err_msg=f"{spec.label()} nth={nth}")


@pytest.fixture(scope="session")
def stories_path() -> Path:
    return shared_path("models/stories260K.gguf")


@pytest.fixture(scope="session")
def stories_expected() -> dict:
    import json
    return json.loads(shared_path("testdata/stories260K.expected.json").read_text())


@pytest.fixture(scope="session")
def stories_model(stories_path):
    from reame.model import load_model
    return load_model(stories_path)


def check_against_reference(op, dtype, family, level, tile, dims, ns=(1, 5, 10),
                            threads=(1, 2, 3, 7)):
    """Build op/dtype/family at `level` with `tile` for each (M, K, acc) of dims and compare
    every n x thread count (7 slices: more than some row counts' panels) with op.reference in
    float64, by op.tolerance."""
    import numpy as np
    from reame.codegen.kernels import build
    from reame.codegen.spec import KernelSpec
    rtol, atol = op.tolerance(dtype)
    isa = isa_at(level)
    for M, K, acc in dims:
        spec = KernelSpec.make(op.name, dtype, family, isa.level, M=M, K=K, acc=acc, **tile)
        k = build(spec, isa)
        for n in ns:
            for nth in threads:
                case = op.make_case(spec, np.random.default_rng([M, K, n, nth]), n)
                want = op.reference(spec, case)["y"]
                k.run_threads(case.args, nth)
                got = case.buffers["y"].astype(np.float64)
                err = np.abs(got - want) / (atol + rtol * np.abs(want))
                assert err.max() <= 1.0, (M, K, acc, n, nth, float(err.max()))


def check_reads_inside_weights(op, dtype, isa, shapes, at_end):
    """Every spec of op/dtype at `isa` for each (M, K) of shapes, with its weights between
    PROT_NONE pages (guarded_bytes): no load outside them, and the reference's result."""
    import numpy as np
    from reame.codegen.kernels import build
    rtol, atol = op.tolerance(dtype)
    for M, K in shapes:
        for spec in op.specs(dtype, isa, M=M, K=K, acc=0):
            case = op.make_case(spec, np.random.default_rng(0), 5)
            want = op.reference(spec, case)["y"]
            w = case.buffers["w"]
            keep, g = guarded_bytes(w.nbytes, at_end)
            g[:] = w
            args = case.args.copy()
            args[0] = g.ctypes.data
            case.buffers["y"][...] = np.nan
            build(spec, isa).run_threads(args, 2)
            np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                                       err_msg=spec.label())
            del g, keep
