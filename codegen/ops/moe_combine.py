"""moe_combine: a mixture-of-experts layer's output added to the residual stream.

args ("x", "d", "pos", "wgt", "ys", "sg", "n"):
  x    f32 [n, K]     the residual stream, updated in place
  d    f32 [n*NU, K]  the experts' down outputs in moe_route's order (pair p at row pos[p])
  pos  i32 [n*NU], wgt f32 [n*NU]: from moe_route
  ys   f32 [n, K]     the shared expert's output (shexp = 1; Qwen2-MoE), else unused
  sg   f32 [n]        the shared expert's gate logit (its weight is sigmoid(sg))
dims: K, NU, shexp.
x[t] += (sum_j wgt[p] d[pos[p]]) (+ sigmoid(sg[t]) ys[t]), p = t*NU + j, summed in j order
(as llama.cpp adds the experts' outputs). Threads split the tokens.
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    K, NU = spec.p["K"], spec.p["NU"]
    perm = rng.permutation(n * NU).astype(np.int32)
    bufs = {"x": rng.standard_normal((n, K)).astype(np.float32),
            "d": rng.standard_normal((n * NU, K)).astype(np.float32), "pos": perm,
            "wgt": rng.random(n * NU).astype(np.float32),
            "ys": rng.standard_normal((n, K)).astype(np.float32),
            "sg": (rng.standard_normal(n) * 3).astype(np.float32)}
    return Case(bufs, OP.pack(bufs, n=n), ("x",), {"x0": bufs["x"].copy()})


def _reference(spec, case):
    K, NU = spec.p["K"], spec.p["NU"]
    b = case.buffers
    n = b["x"].shape[0]
    d = b["d"].astype(np.float64)[b["pos"]].reshape(n, NU, K)
    out = (d * b["wgt"].astype(np.float64).reshape(n, NU, 1)).sum(1)
    if spec.p["shexp"]:
        out += b["ys"] / (1 + np.exp(-b["sg"].astype(np.float64)))[:, None]
    return {"x": case.meta["x0"] + out}


OP = Op(
    name="moe_combine",
    args=("x", "d", "pos", "wgt", "ys", "sg", "n"),
    dims=("K", "NU", "shexp"),
    variants=(Variant("generic", "generic", ("F32",), ({},), "4-lane vectors"),),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-5, 1e-5),
    example_dims={"K": 2048, "NU": 8, "shexp": 0},
    doc="x += the routed experts' outputs by their weights (+ the gated shared expert)",
)
