"""Golden IR: the rendered text of a few kernel specs and of the runtime template is pinned in
tests/golden/*.ll, so any change to a template (or to what rendering feeds it) shows up as a diff
in review. Rendering uses fixed, synthetic ISA facts (not this machine's), so the files are the
same on every host.

After an intended template change, regenerate the files and review the diff:

    REAME_UPDATE_GOLDEN=1 python -m pytest tests/test_codegen_golden.py
    git diff tests/golden/

On a mismatch the test prints a unified diff (golden -> rendered). Rendering must also be
deterministic: twice in one process, with a fresh jinja2 environment, and in other processes
with other hash seeds, it gives the same text and symbols.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reame.codegen import isa as isa_mod
from reame.codegen import spec as spec_mod
from reame.codegen.isa import ARM_LEVELS
from reame.codegen.registry import get_op
from reame.codegen.spec import render

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("REAME_UPDATE_GOLDEN") == "1"

# the ISA facts rendering sees, fixed: an AVX-512 BF16 machine with GFNI, and an AArch64 one
X86_FEATURES = ("+avx,+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512vnni,"
                "+avx512bf16,+gfni")
ARM_FEATURES = "+neon,+dotprod,+i8mm"


GOLDEN_X86_LEVELS = ("generic", "avx2", "avx512", "avx512_vnni", "avx512_bf16")


def golden_isa(level: str, arch: str = "x86_64") -> isa_mod.ISA:
    if arch == "x86_64":
        return isa_mod._make(arch, GOLDEN_X86_LEVELS, level, "znver5", X86_FEATURES)
    return isa_mod._make(arch, ARM_LEVELS[:4], level, "neoverse-v1", ARM_FEATURES)


def _kernel(op_name, dtype, family, level, **dims):
    """The first spec (first tile) of an op's family at a level, with `dims`."""
    def make():
        isa = golden_isa(level)
        op = get_op(op_name)
        specs = [s for s in op.specs(dtype, isa, **{**op.example_dims, **dims})
                 if s.family == family]
        assert specs, f"no {op_name}/{dtype}/{family} at {level}"
        symbol, ir = render(specs[0], isa)
        return specs[0].label(), symbol, ir
    return make


def _runtime(arch, level="generic", os_name="linux"):
    """The runtime template as codegen/runtime.py renders it (prefix placeholder kept)."""
    def make():
        tpl = spec_mod.environment().get_template("runtime_generic.ll.j2")
        ir = tpl.render(p={"prefix": "__RT__", "os": os_name}, isa=golden_isa(level, arch))
        return f"runtime_generic[{arch},{os_name}]", "__RT___run", ir
    return make


CASES = {
    "rms_norm_F32_generic": _kernel("rms_norm", "F32", "generic", "generic", K=64, eps=1e-6),
    "matmul_Q8_0_generic": _kernel("matmul", "Q8_0", "generic", "generic", M=64, K=64, acc=0),
    "matmul_q8a_Q4_K_kvnni": _kernel("matmul_q8a", "Q4_K", "kvnni", "avx512_vnni",
                                    M=64, K=256, acc=0),
    "attn_decode_simd_f16": _kernel("attn_decode", "F32", "simd", "avx2", kv="f16"),
    "runtime_x86_64_linux": _runtime("x86_64"),
    "runtime_aarch64_linux": _runtime("aarch64"),
}


def golden_text(name: str) -> str:
    label, symbol, ir = CASES[name]()
    return f"; golden: {name}: {label}\n; symbol: {symbol}\n{ir}"


def fingerprints() -> dict[str, list[str]]:
    """name -> [symbol, sha256 of the text]: what another process must reproduce."""
    out = {}
    for name, make in CASES.items():
        _, symbol, ir = make()
        out[name] = [symbol, hashlib.sha256(ir.encode()).hexdigest()]
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_golden(name):
    path = GOLDEN_DIR / f"{name}.ll"
    text = golden_text(name)
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        old = path.read_text() if path.exists() else None
        if old != text:
            path.write_text(text)
            pytest.skip(f"REAME_UPDATE_GOLDEN=1: wrote {path.relative_to(GOLDEN_DIR.parent.parent)}")
        return
    assert path.exists(), (f"{path} is missing: create it with "
                           f"REAME_UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}")
    want = path.read_text()
    if want != text:
        diff = "".join(difflib.unified_diff(
            want.splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=f"tests/golden/{name}.ll", tofile=f"rendered {name}", n=2))
        print(diff)                               # the whole diff, in the captured output
        lines = diff.splitlines()
        shown = "\n".join(lines[:80]) + (f"\n... ({len(lines) - 80} more diff lines above in "
                                         f"the captured stdout)" if len(lines) > 80 else "")
        pytest.fail(f"rendered IR of {name} differs from tests/golden/{name}.ll "
                    f"(if intended: REAME_UPDATE_GOLDEN=1 python -m pytest "
                    f"tests/test_codegen_golden.py, then review git diff):\n{shown}",
                    pytrace=False)


def test_golden_files_have_no_strays():
    """Every file in tests/golden belongs to a case (a renamed case leaves no stale file)."""
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.ll")) == sorted(CASES)


def test_kernel_golden_files_name_only_their_symbol():
    for name in CASES:
        if name.startswith("runtime"):
            continue
        text = (GOLDEN_DIR / f"{name}.ll").read_text()
        symbol = text.splitlines()[1].removeprefix("; symbol: ")
        defined = [ln.split("@", 1)[1].split("(", 1)[0] for ln in text.splitlines()
                   if ln.startswith("define ") and " internal " not in ln
                   and not ln.startswith("define internal")]
        assert defined == [symbol], f"{name}: external definitions {defined}"
        assert symbol.endswith(hashlib.sha256(
            text.split("\n", 2)[2].replace(symbol, "__KERNEL__").encode()).hexdigest()[:12])


def test_golden_files_are_valid_ir():
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name in CASES:
        text = (GOLDEN_DIR / f"{name}.ll").read_text().replace("__RT__", "reame_rt_golden")
        llvm.parse_assembly(text).verify()


def test_rendering_twice_is_identical():
    first = {n: make() for n, make in CASES.items()}
    old_env = spec_mod._ENV
    spec_mod._ENV = None                          # a fresh jinja2 environment, no cached template
    try:
        second = {n: make() for n, make in CASES.items()}
    finally:
        spec_mod._ENV = old_env
    assert first == second


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_rendering_in_another_process_is_identical(hash_seed):
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "import test_codegen_golden as g; print(json.dumps(g.fingerprints()))")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    r = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == fingerprints()
