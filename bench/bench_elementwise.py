"""Benchmark the element-wise ops (validated first) and the polynomial exp against llvm.exp.

    python -m bench.bench_elementwise

Times are the minimum over many single-thread calls (the machine is shared), in microseconds.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from reame.codegen.compiler import get_compiler
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from reame.codegen.spec import environment

from .bench_attention import time_kernel

# (op, dims, n): decode (n=1) and prefill (n=512) sizes of a Qwen2.5-0.5B-like model
CASES = [
    ("add", {"K": 896, "bcast": 0}, 512),
    ("add", {"K": 896, "bcast": 1}, 512),
    ("swiglu", {"F": 4864}, 1),
    ("swiglu", {"F": 4864}, 512),
    ("softmax", {"K": 151936}, 1),
    ("rope", {"H": 14, "D": 64, "R": 64, "neox": 1}, 512),
    ("store_kv", {"Hkv": 2, "D": 64, "Dv": 64, "C": 4096, "BS": 64, "kv": "f16"}, 512),
    ("rms_norm", {"K": 896, "eps": 1e-6}, 512),
    ("rms_norm", {"K": 128, "eps": 1e-6}, 512 * 16),
]

_EXP_PROBE = """{% import "_math.ll.j2" as m %}
define void @{{ name }}(ptr %g, ptr %u, ptr %y, i64 %cnt) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %pg = getelementptr float, ptr %g, i64 %i
  %vg = load <16 x float>, ptr %pg, align 4
  %pu = getelementptr float, ptr %u, i64 %i
  %vu = load <16 x float>, ptr %pu, align 4
  %ng = fneg <16 x float> %vg
{% if libm %}
  %e = call <16 x float> @llvm.exp.v16f32(<16 x float> %ng)
{% else %}
{{ m.exp("%e", "%ng", 16, kind) }}
{% endif %}
  %den = fadd <16 x float> %e, splat (float 1.0)
  %gu = fmul <16 x float> %vg, %vu
  %s = fdiv <16 x float> %gu, %den
  %py = getelementptr float, ptr %y, i64 %i
  store <16 x float> %s, ptr %py, align 4
  %i1 = add i64 %i, 16
  %c = icmp ult i64 %i1, %cnt
  br i1 %c, label %loop, label %done
done:
  ret void
}
declare <16 x float> @llvm.exp.v16f32(<16 x float>)
{{ m.declares() }}
"""


def exp_comparison(isa, F=4864 * 8):
    """silu(g) * u over F floats with the polynomial exp (generic and vscalefps) and llvm.exp."""
    comp = get_compiler(isa, cache_dir=None)
    rng = np.random.default_rng(0)
    g = (rng.standard_normal(F) * 4).astype(np.float32)
    u = rng.standard_normal(F).astype(np.float32)
    want = g.astype(np.float64) * u / (1 + np.exp(-g.astype(np.float64)))
    out = []
    for name, kind, libm in (("poly_generic", "generic", False), ("poly_scalef", "avx512", False),
                             ("llvm_exp", "generic", True)):
        ir = environment().from_string(_EXP_PROBE).render(name=f"probe_{name}", kind=kind,
                                                          libm=libm)
        f = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, ctypes.c_int64)(
            comp.compile(ir, [f"probe_{name}"])[f"probe_{name}"])
        y = np.zeros(F, np.float32)
        f(g.ctypes.data, u.ctypes.data, y.ctypes.data, F)
        assert np.allclose(y, want, rtol=2e-6, atol=1e-30), name
        best = float("inf")
        for _ in range(200):
            t = time.perf_counter()
            f(g.ctypes.data, u.ctypes.data, y.ctypes.data, F)
            best = min(best, time.perf_counter() - t)
        out.append((name, best * 1e9 / F))
    return out


def main():
    isa = detect()
    print(f"# {isa.level}; min over calls, 1 thread")
    for name, dims, n in CASES:
        op = get_op(name)
        line = []
        for spec in op.specs("F32", isa, **dims):
            k = build(spec, isa)
            ok, worst = op.check(k, np.random.default_rng(1), n=3)
            assert ok, spec.label()
            case = op.make_case(spec, np.random.default_rng(2), n)
            t = time_kernel(k, case.args, 1, budget=0.15)
            tiles = ",".join(f"{a}={b}" for a, b in spec.params if a not in dims)
            line.append(f"{spec.family}[{tiles}] {t * 1e6:.1f}")
        label = ",".join(f"{a}={b}" for a, b in dims.items())
        print(f"{name}({label}) n={n}: " + "  ".join(line) + "  (us)")
    if isa.has("avx512"):
        print("exp inside silu*u, ns per element: " + "  ".join(
            f"{name} {t:.3f}" for name, t in exp_comparison(isa)))


if __name__ == "__main__":
    main()
