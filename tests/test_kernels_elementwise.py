"""Element-wise ops of the forward pass (add, swiglu, softmax, rope, store_kv, rms_norm) against
their float64 references: every variant x tile, at the native, avx2|neon and generic levels, ragged
sizes (not multiples of the vector widths or unroll steps), 1/2/3 threads (uneven splits).
Plus the shared macros of templates/_math.ll.j2 (exp, f16 conversions) and in-place use."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from reame.codegen.compiler import get_compiler
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from reame.codegen.spec import environment
from conftest import host_levels, isa_at as _isa

LEVELS = host_levels()


def _params(op_name, grid):
    op = get_op(op_name)
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for dims in grid:
            for spec in op.specs("F32", isa, **dims):
                tiles = ",".join(f"{k}={v}" for k, v in spec.params if k not in dims)
                label = ",".join(f"{k}={v}" for k, v in dims.items())
                out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}[{tiles}]-{label}"))
    return out


def _compare(op, spec, case, want, what):
    rtol, atol = op.tolerance(spec.dtype)
    for name in case.outputs:
        got = case.buffers[name]
        assert np.all(np.isfinite(got)), f"{what}: non-finite values in {name}"
        diff = np.abs(got.astype(np.float64) - want[name])
        err = np.where(diff == 0, 0.0, diff / (atol + rtol * np.abs(want[name])))
        worst = np.unravel_index(np.argmax(err), err.shape)
        assert err.max() <= 1.0, (f"{what}: {name}{list(worst)} = {got[worst]!r}, want "
                                  f"{want[name][worst]!r} ({err.max():.3g} x tolerance)")


def _check_all(op_name, spec, isa, ns=(1, 5), nths=(1, 2, 3)):
    op = get_op(op_name)
    k = build(spec, isa)
    for n in ns:
        for nth in nths:
            rng = np.random.default_rng(1000 * n + nth)
            case = op.make_case(spec, rng, n)
            want = op.reference(spec, case)
            k.run_threads(case.args, nth)
            _compare(op, spec, case, want, f"{spec.label()} n={n} nth={nth}")


# ---- every variant x tile x level on a ragged grid ----

@pytest.mark.parametrize("spec,isa", _params("add", [
    {"K": K, "bcast": b} for K in (1000, 37, 5) for b in (0, 1)]))
def test_add(spec, isa):
    _check_all("add", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("swiglu", [{"F": F} for F in (1000, 37)]
                                              + [{"F": F, "act": "gelu"} for F in (1000, 37)]))
def test_swiglu(spec, isa):
    """act=gelu (GeGLU) against float64 tanh-GELU: catches silu kept, the exact (erf) GELU, a
    wrong constant in 2 sqrt(2/pi) (g + 0.044715 g^3), and NaN at large |g|."""
    _check_all("swiglu", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("softcap", [
    {"K": K, "cap": cap} for K in (1000, 37) for cap in (30.0, 2.5)]))
def test_softcap(spec, isa):
    """cap * tanh(x / cap) (Gemma 2's logits): catches the cap applied once instead of twice,
    a tanh that overflows to NaN for |x| >> cap, and a lost sign."""
    _check_all("softcap", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("softmax", [{"K": K} for K in (1000, 37, 1)]))
def test_softmax(spec, isa):
    _check_all("softmax", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("rope", [
    {"H": H, "D": D, "R": R, "neox": x}
    for H, D, R in ((14, 64, 64), (3, 20, 12), (2, 80, 80), (5, 128, 64)) for x in (0, 1)]))
def test_rope(spec, isa):
    _check_all("rope", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("store_kv", [
    {"Hkv": Hkv, "D": D, "Dv": Dv, "C": C, "BS": BS, "kv": kv}
    for Hkv, D, Dv, C, BS in ((2, 64, 64, 16, 0), (3, 20, 12, 7, 0), (2, 64, 64, 64, 16),
                              (3, 20, 12, 96, 32)) for kv in ("f32", "f16", "bf16", "bf16p")
    if BS or kv != "bf16p"]))           # bf16p: the pair layout, paged only
def test_store_kv(spec, isa):
    _check_all("store_kv", spec, isa)


@pytest.mark.parametrize("spec,isa", _params("rms_norm", [
    {"K": K, "eps": 1e-6} for K in (64, 1000, 37, 130)]))
def test_rms_norm(spec, isa):
    _check_all("rms_norm", spec, isa)


# ---- behaviours the random grid does not pin down ----

def _best(op_name, level, **dims):
    isa = _isa(level)
    return get_op(op_name).specs("F32", isa, **dims)[-1], isa


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("bcast", (0, 1))
def test_add_in_place(level, bcast):
    op = get_op("add")
    spec, isa = _best("add", level, K=300, bcast=bcast)
    k = build(spec, isa)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 300)).astype(np.float32)
    b = rng.standard_normal((300,) if bcast else (4, 300)).astype(np.float32)
    want = a + b
    k.run_threads(op.pack({"a": a, "b": b, "y": a}, n=4), 3)
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("level", LEVELS)
def test_swiglu_in_place(level):
    op = get_op("swiglu")
    spec, isa = _best("swiglu", level, F=300)
    k = build(spec, isa)
    rng = np.random.default_rng(4)
    g = rng.standard_normal((3, 300)).astype(np.float32)
    u = rng.standard_normal((3, 300)).astype(np.float32)
    want = g.astype(np.float64) * u / (1 + np.exp(-g.astype(np.float64)))
    k.run_threads(op.pack({"g": g, "u": u, "y": g}, n=3), 2)
    np.testing.assert_allclose(g, want, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op_name,dims", [("add", {"K": 1000, "bcast": 0}),
                                          ("swiglu", {"F": 1000})])
def test_one_row_is_shared_by_threads(op_name, dims):
    """Decode (n = 1): thread 0 of 2 writes the first half of the row and nothing else."""
    op = get_op(op_name)
    spec, isa = _best(op_name, "native", **dims)
    k = build(spec, isa)
    case = op.make_case(spec, np.random.default_rng(5), 1)
    want = op.reference(spec, case)
    k(case.args, 0, 2)
    y = case.buffers["y"][0]
    assert np.all(np.isfinite(y[:512])) and np.all(np.isnan(y[512:]))   # blocks of 64 floats
    np.testing.assert_allclose(y[:512], want["y"][0, :512], rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("level", LEVELS)
def test_softmax_masked_and_huge(level):
    op = get_op("softmax")
    spec, isa = _best("softmax", level, K=50)
    k = build(spec, isa)
    x = np.zeros((3, 50), np.float32)
    x[0, ::2] = -np.inf                                  # masked logits: exactly 0
    x[1] = np.linspace(-1e4, 1e4, 50)                     # one logit dominates: exactly 1
    x[2] = 1e30                                           # equal huge logits: uniform
    k.run_threads(op.pack({"x": x}, n=3), 2)
    assert np.all(x[0, ::2] == 0.0)
    np.testing.assert_allclose(x[0, 1::2], 1 / 25, rtol=1e-6)
    assert x[1, -1] == 1.0 and np.all(x[1, :-1] == 0.0)
    np.testing.assert_allclose(x[2], 1 / 50, rtol=1e-6)


@pytest.mark.parametrize("level", LEVELS)
def test_rope_leaves_unrotated_dims(level):
    op = get_op("rope")
    spec, isa = _best("rope", level, H=3, D=40, R=16, neox=1)
    k = build(spec, isa)
    case = op.make_case(spec, np.random.default_rng(6), 4)
    x_in = case.buffers["x"].copy()
    k.run_threads(case.args, 3)
    np.testing.assert_array_equal(case.buffers["x"][..., 16:], x_in[..., 16:])


def _store_one_token(level, kv, BS, vals, dtype, vshape):
    """store_kv at `level` of one token at position 2 of a 4-position cache (one kv head, keys
    = vals, values = vals[:8], cache arrays zeroed, v of shape vshape): (kc, vc)."""
    op = get_op("store_kv")
    spec, isa = _best("store_kv", level, Hkv=1, D=len(vals), Dv=8, C=4, BS=BS, kv=kv)
    kc = np.zeros((1, 1, 4, len(vals)), dtype)
    vc = np.zeros((1, 1) + vshape, dtype)
    build(spec, isa)(op.pack({"k": vals.reshape(1, 1, -1), "v": vals[:8].reshape(1, 1, 8).copy(),
                              "kc": kc, "vc": vc, "pos": np.array([2], np.int32),
                              "seq": np.array([0], np.int32), "bt": np.zeros(1, np.int32)}, n=1))
    return kc, vc


@pytest.mark.parametrize("level", LEVELS)
def test_store_kv_f16_bit_exact(level):
    """Round to nearest even, ties, overflow to +-inf, denormal halves, NaN stays NaN."""
    vals = np.array([65504, 65519, 65520, 1e9, -70000, np.inf, -np.inf, 6e-8, 2.9e-8, 3e-8,
                     5.96e-8, 6.1e-5, 6.09e-5, -1e-7, 1.00048828125, 1.00146484375, 0.0, -0.0,
                     np.nan, 1 / 3, -2 / 3, 1e-30, 3.14159, 2049.0], np.float32)
    kc, _ = _store_one_token(level, "f16", 0, vals, np.float16, (4, 8))
    with np.errstate(over="ignore", invalid="ignore"):
        want = vals.astype(np.float16)
    got = kc[0, 0, 2]
    nan = np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.all(np.isnan(got[nan]))
    assert np.all(kc[0, 0, [0, 1, 3]] == 0)


@pytest.mark.parametrize("BS", (0, 4))
@pytest.mark.parametrize("level", LEVELS)
def test_store_kv_bf16_bit_exact(level, BS):
    """bf16 (the AMX tile layout): round to nearest even at ties (both ways), overflow of the
    largest finite values to inf, denormals, NaN a quiet NaN; keys in a row, values in a
    column of the block's transposed values, nothing else written. Catches truncation instead
    of rounding, values stored as rows, a column stride of D instead of BS."""
    from reame.codegen.ops.kv_layout import bf16_bits
    bits = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0x7F7FFFFF, 0x7F7F7FFF,
                     0xFF800000, 0x00000001, 0x00018000, 0x80000000, 0x7FC00001, 0xFF800001,
                     0x3EAAAAAB, 0xBF2AAAAB, 0x40490FDB, 0x45001000], np.uint32)
    vals = np.concatenate([bits.view(np.float32), np.linspace(-3, 3, 16, dtype=np.float32)])
    kc, vc = _store_one_token(level, "bf16", BS, vals, np.uint16, (8, 4))
    want = bf16_bits(vals)
    np.testing.assert_array_equal(want[:6], [0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0x7F7F])
    assert want[10] & 0x7FC0 == 0x7FC0 and want[11] & 0xFFC0 == 0xFFC0      # quiet NaNs
    np.testing.assert_array_equal(kc[0, 0, 2], want)
    np.testing.assert_array_equal(vc[0, 0, :, 2], want[:8])
    assert not kc[0, 0, [0, 1, 3]].any() and not vc[0, 0, :, [0, 1, 3]].any()



@pytest.mark.parametrize("level", LEVELS)
def test_store_kv_bf16_threads_take_whole_heads(level):
    """The bf16 cache's transposed values put a block's consecutive positions in one cache line:
    threads that split one head's tokens write the same lines (16 verify rows of one sequence:
    1.69 thread-ms a step on SmolLM2 against 0.26 split by heads). Thread 0 of 2 must store
    every token of its heads and nothing of the others'. Catches the (token, head) split."""
    op = get_op("store_kv")
    Hkv, D, n, BS = 2, 32, 8, 16
    spec, isa = _best("store_kv", level, Hkv=Hkv, D=D, Dv=D, C=BS, BS=BS, kv="bf16")
    rng = np.random.default_rng(3)
    k = rng.standard_normal((n, Hkv, D)).astype(np.float32) + 4
    v = rng.standard_normal((n, Hkv, D)).astype(np.float32) + 4
    kc = np.zeros((1, Hkv, BS, D), np.uint16)
    vc = np.zeros((1, Hkv, D, BS), np.uint16)
    args = op.pack({"k": k, "v": v, "kc": kc, "vc": vc, "pos": np.arange(n, dtype=np.int32),
                    "seq": np.zeros(n, np.int32), "bt": np.zeros(1, np.int32)}, n=n)
    build(spec, isa)(args, 0, 2)
    assert kc[0, 0, :n].all() and vc[0, 0, :, :n].all(), "thread 0 left tokens of head 0"
    assert not kc[0, 1].any() and not vc[0, 1].any(), "thread 0 wrote tokens of head 1"


# ---- templates/_math.ll.j2 on its own ----

_MATH_PROBE = """{% import "_math.ll.j2" as m %}
define void @probe(ptr %x, ptr %y, ptr %h, ptr %g, i64 %cnt) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %px = getelementptr float, ptr %x, i64 %i
  %vx = load <{{ n }} x float>, ptr %px, align 4
{{ m.exp("%e", "%vx", n, kind) }}
  %py = getelementptr float, ptr %y, i64 %i
  store <{{ n }} x float> %e, ptr %py, align 4
{{ m.f2h("%hh", "%vx", n, kind) }}
  %ph = getelementptr i16, ptr %h, i64 %i
  store <{{ n }} x i16> %hh, ptr %ph, align 2
{{ m.h2f("%ff", "%hh", n, kind) }}
  %pg = getelementptr float, ptr %g, i64 %i
  store <{{ n }} x float> %ff, ptr %pg, align 4
  %i1 = add i64 %i, {{ n }}
  %c = icmp ult i64 %i1, %cnt
  br i1 %c, label %loop, label %done
done:
  ret void
}
{{ m.declares() }}
"""

_PROBE_FUNC = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4, ctypes.c_int64)


@pytest.mark.parametrize("kind,level,n", [("generic", "generic", 4), ("avx2", "avx2", 8),
                                          ("avx512", "native", 16)])
def test_math_macros(kind, level, n):
    """exp within 1 ulp on [ln FLT_MIN, 88.37], 0 below (and for -inf), inf above; f32 -> f16
    bit-exact with numpy on random and special values; f16 -> f32 exact."""
    if kind != "generic" and not detect().has(kind):     # the avx2/avx512 macros are x86's
        pytest.skip(f"no {kind} level here")
    isa = _isa(level)
    ir = environment().from_string(_MATH_PROBE).render(n=n, kind=kind)
    ir = ir.replace("@probe", f"@probe_{kind}_{n}")
    addr = get_compiler(isa, cache_dir=None).compile(ir, [f"probe_{kind}_{n}"])[f"probe_{kind}_{n}"]
    f = _PROBE_FUNC(addr)
    rng = np.random.default_rng(7)
    N = 1 << 16
    x = np.concatenate([rng.uniform(-100, 90, N // 2), rng.uniform(-2, 2, N // 4),
                        rng.standard_normal(N // 4) * 1e-5]).astype(np.float32)
    special = np.array([0, -0.0, 65504, 65519, 65520, 7e4, -7e4, np.inf, -np.inf, 6e-8, 2.98e-8,
                        5.96e-8, 6.1e-5, 6.09e-5, 1.00048828125, np.nan, -87.5, 88.5, 88.8,
                        -1e9, 1e-40], np.float32)
    x[:len(special)] = special
    y, g = np.zeros_like(x), np.zeros_like(x)
    h = np.zeros(N, np.uint16)
    f(x.ctypes.data, y.ctypes.data, h.ctypes.data, g.ctypes.data, N)
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64))
        in_range = (x >= -87.33) & (x <= 88.37)
        ulp = np.abs(y - ref) / np.spacing(ref.astype(np.float32))
        hr = x.astype(np.float16).view(np.uint16)
    assert ulp[in_range].max() <= 1.0
    assert np.all(y[x < -110] == 0) and y[x == -np.inf][0] == 0
    assert np.all(np.isinf(y[x > 88.73])) and np.isnan(y[np.isnan(x)][0])
    ok = ~np.isnan(x)
    np.testing.assert_array_equal(h[ok], hr[ok])
    assert (h[~ok] & 0x7FFF)[0] == 0x7E00
    np.testing.assert_array_equal(g[ok].view(np.uint32),
                                  hr[ok].view(np.float16).astype(np.float32).view(np.uint32))
