"""`reame codegen`: --list names every registered op; --dump at every stage (template, ir, opt,
asm) with --isa / --family / --tile / --dims; bad requests (unknown op, unknown or unavailable
level, no matching tile, dims a template rejects) give one line on stderr and exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from reame.cli import main
from reame.codegen.isa import X86_LEVELS, ARM_LEVELS, detect
from reame.codegen.registry import get_op, ops
from reame.codegen.spec import KernelSpec, render, template_source

HOST = detect()


def run(capsys, *argv):
    rc = main(["codegen", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def dumped(out: str) -> tuple[str, str]:
    """(label, body) of a --dump: the first line is `; <spec label>`."""
    first, _, body = out.partition("\n")
    assert first.startswith("; "), first
    return first[2:], body


def spec_of(label: str, op: str, dtype: str) -> KernelSpec:
    """Rebuild the spec a --dump label names (op/dtype/family@level[k=v,...])."""
    m = re.fullmatch(rf"{op}/{dtype}/(\w+)@(\w+)\[(.*)\]", label)
    assert m, label
    params = {}
    for kv in m.group(3).split(","):
        k, v = kv.split("=", 1)
        params[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v) if re.fullmatch(
            r"[-+.e\d]+", v) else v
    return KernelSpec.make(op, dtype, m.group(1), m.group(2), **params)


def parse_ir(text: str):
    mod = llvm.parse_assembly(text)
    mod.verify()
    return mod


# ---- --list ----

def test_list_names_every_op(capsys):
    rc, out, err = run(capsys, "--list")
    assert rc == 0 and err == ""
    assert out.startswith("CPU: ") and f"building for {HOST.level}" in out.splitlines()[0]
    listed = re.findall(r"^(\w+): ", out.split("\n", 1)[1], re.M)
    assert listed == list(ops()), "every op of the registry, in registry order"
    for name, op in ops().items():
        block = out.split(f"\n{name}: ", 1)[1].split("\n\n", 1)[0]
        for v in op.variants:
            assert re.search(rf"^  {v.family}\s+from {v.min_level}\b", block, re.M), (name, v)


def test_list_says_which_programs_start_on_a_variant(capsys):
    """A variant limited to prompt chunks (min_tokens) or to small steps (max_tokens) says so:
    catches a listing that shows matmul_q8a_rp's two zmm panel variants as the same thing."""
    rc, out, _ = run(capsys, "--list")
    block = out.split("\nmatmul_q8a_rp: ", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"tiles: nt=12   \(programs of 1-16 tokens start on it\)", block), block
    assert re.search(r"tiles: nt=8,lanes=8   \(programs of 17\+ tokens start on it\)", block)
    assert re.search(r"tiles: nt=1 \| nt=2 \| nt=4 \| nt=8$", block, re.M), block


def test_list_at_a_forced_level_marks_unusable_variants(capsys):
    rc, out, _ = run(capsys, "--list", "--isa", "generic")
    assert rc == 0 and "building for generic" in out
    usable = [ln for ln in out.splitlines() if ln.startswith("  ") and "not on this CPU" not in ln]
    assert usable and all(re.match(r"  \w+\s+from generic\b", ln) for ln in usable)


def test_list_as_a_real_command():
    exe = Path(sys.executable).with_name("reame")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "reame"]
    r = subprocess.run(cmd + ["codegen", "--list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("CPU: ")
    assert re.findall(r"^(\w+): ", r.stdout.split("\n", 1)[1], re.M) == list(ops())


# ---- --dump at every stage ----

def test_dump_template(capsys):
    rc, out, _ = run(capsys, "--dump", "rms_norm", "--dims", "K=64", "--stage", "template")
    assert rc == 0
    label, body = dumped(out)
    spec = spec_of(label, "rms_norm", "F32")
    assert body.rstrip("\n") == template_source(spec).rstrip("\n")
    assert "{{ kernel }}" in body or "{%" in body


@pytest.mark.parametrize("op_name,argv", [
    ("rms_norm", ["--dims", "K=64"]),
    ("matmul", ["--dtype", "Q8_0", "--family", "generic", "--dims", "M=64,K=64"]),
])
def test_dump_ir_is_the_rendered_kernel(capsys, op_name, argv):
    rc, out, _ = run(capsys, "--dump", op_name, *argv)          # --stage ir is the default
    assert rc == 0
    label, body = dumped(out)
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "F32"
    spec = spec_of(label, op_name, dtype)
    symbol, ir = render(spec, HOST)
    assert body.rstrip("\n") == ir.rstrip("\n")
    mod = parse_ir(body)
    assert [f.name for f in mod.functions if not f.is_declaration and
            f.linkage == llvm.Linkage.external] == [symbol]


def test_dump_opt_is_valid_ir(capsys):
    rc, out, _ = run(capsys, "--dump", "add", "--dims", "K=100", "--stage", "opt")
    assert rc == 0
    label, body = dumped(out)
    symbol, _ = render(spec_of(label, "add", "F32"), HOST)
    mod = parse_ir(out)                         # the label line is an IR comment
    assert mod.get_function(symbol).name == symbol
    assert "target datalayout" in body


@pytest.mark.parametrize("op_name,argv", [
    ("rms_norm", ["--dims", "K=64"]),
    ("matmul", ["--dtype", "Q8_0", "--family", "generic", "--dims", "M=64,K=64"]),
])
def test_dump_asm_defines_the_symbol(capsys, op_name, argv):
    rc, out, _ = run(capsys, "--dump", op_name, *argv, "--stage", "asm")
    assert rc == 0
    label, body = dumped(out)
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "F32"
    symbol, _ = render(spec_of(label, op_name, dtype), HOST)
    assert re.search(rf"^{symbol}:", body, re.M)
    assert re.search(r"^\s+ret", body, re.M)


@pytest.mark.skipif("avx2" not in HOST.levels, reason="needs an AVX2 machine")
def test_dump_with_isa_tile_and_dims(capsys):
    rc, out, _ = run(capsys, "--dump", "rms_norm", "--isa", "avx2", "--family", "simd",
                     "--tile", "vl=8,unroll=4", "--dims", "K=96", "--stage", "asm")
    assert rc == 0
    label, body = dumped(out)
    assert label == "rms_norm/F32/simd@avx2[K=96,eps=1e-06,unroll=4,vl=8]"
    assert "ymm" in body and "zmm" not in body
    # --tile picks among several tiles; without it the last (most specific) one is dumped
    rc, out, _ = run(capsys, "--dump", "matmul", "--dtype", "Q4_K", "--family", "generic",
                     "--tile", "rows=1", "--dims", "M=64,K=256", "--isa", "generic")
    assert dumped(out)[0] == "matmul/Q4_K/generic@generic[K=256,M=64,acc=0,nt=4,rows=1,vl=4]"
    rc, out, _ = run(capsys, "--dump", "matmul", "--dtype", "Q4_K", "--family", "generic",
                     "--dims", "M=64,K=256", "--isa", "generic")
    assert dumped(out)[0] == "matmul/Q4_K/generic@generic[K=256,M=64,acc=0,nt=4,rows=2,vl=4]"


def test_dump_defaults_to_the_first_type_and_example_dims(capsys):
    rc, out, _ = run(capsys, "--dump", "get_rows", "--isa", "generic", "--stage", "ir")
    op = get_op("get_rows")
    label, _ = dumped(out)
    assert rc == 0 and label.startswith(f"get_rows/{op.dtypes()[0]}/generic@generic[")
    assert f"K={op.example_dims['K']}" in label


# ---- errors: one line, exit code 2 ----

def _one_line_error(capsys, *argv) -> str:
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (rc, err)
    assert out == "", out
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("reame: error: "), err
    return lines[0]


def test_unknown_op(capsys):
    msg = _one_line_error(capsys, "--dump", "no_such_op")
    assert "unknown op 'no_such_op'" in msg and "rms_norm" in msg


def test_unknown_level(capsys):
    msg = _one_line_error(capsys, "--list", "--isa", "avx9000")
    assert "unknown ISA level 'avx9000'" in msg


def test_level_above_this_cpu(capsys):
    above = [lv for lv in (X86_LEVELS if HOST.arch == "x86_64" else ARM_LEVELS)
             if lv not in HOST.levels]
    if not above:
        pytest.skip("this CPU has every level")
    msg = _one_line_error(capsys, "--dump", "rms_norm", "--isa", above[0])
    assert "not available on this CPU" in msg


def test_impossible_tile(capsys):
    msg = _one_line_error(capsys, "--dump", "rms_norm", "--tile", "vl=3")
    assert "no rms_norm variant for F32" in msg and "vl=3" in msg
    msg = _one_line_error(capsys, "--dump", "rms_norm", "--family", "nosuch")
    assert "no rms_norm variant" in msg
    _one_line_error(capsys, "--dump", "rms_norm", "--tile", "vl")          # not NAME=VALUE


def test_no_variant_names_the_dims_it_tried(capsys):
    """A dtype whose variants do not serve the example dims (attn_decode's BF16 family reads a
    bf16p cache, the examples are an f32 one) says which dims it tried and that --dims changes
    them; a dtype no variant has lists the ones that exist. Catches an error that leaves the
    user guessing why a listed variant cannot be dumped."""
    msg = _one_line_error(capsys, "--dump", "attn_decode", "--dtype", "BF16")
    assert "kv=f32" in msg and "--dims" in msg
    msg = _one_line_error(capsys, "--dump", "attn_decode", "--dtype", "Q4_K")
    assert "dtypes here:" in msg and "F32" in msg


def test_unknown_type(capsys):
    msg = _one_line_error(capsys, "--dump", "matmul", "--dtype", "Q9_9")
    assert "Q9_9" in msg


def test_dims_the_template_rejects(capsys):
    # K not a whole number of Q8_0 blocks: the template refuses by name
    msg = _one_line_error(capsys, "--dump", "matmul", "--dtype", "Q8_0", "--family", "generic",
                          "--dims", "M=64,K=63")
    assert "K_must_be_a_multiple_of_the_type_block_size" in msg
    msg = _one_line_error(capsys, "--dump", "matmul", "--dtype", "Q8_0", "--family", "generic",
                          "--dims", "M=abc")
    assert "matmul/Q8_0/generic" in msg
