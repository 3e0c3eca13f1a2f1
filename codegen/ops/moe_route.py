"""moe_route: a mixture-of-experts layer's routing, and the grouping that lets the experts run
as ordinary matmuls (each expert's weights read once per step, decode reading only the experts
its token picked).

args ("probs", "h", "xg", "pos", "wgt", "blocks", "outs", "n"):
  probs  f32 [n, E]    the router's softmax (op softmax over the router logits)
  h      f32 [n, K]    the FFN input (normed hidden states)
  xg     f32 [n*NU, K] out: h's rows gathered by expert (every token once per expert it picked)
  pos    i32 [n*NU]    out: where pair p = t*NU + j (token t's j-th expert) sits in xg
  wgt    f32 [n*NU]    out: that pair's weight
  blocks i64 [E, 3]    addresses of the argument blocks of expert e's gate, up and down matmuls
                       (args w, x, y, n): words x, y and n are written here
  outs   i64 [5]       base addresses of the gate output g, the up output u (f32 [n*NU, F]), the
                       down output d (f32 [n*NU, K]), all in xg's order; of what the gate and up
                       matmuls read (xg, or its 8-bit copy) and of what down reads (g, or its
                       8-bit copy)
dims: E experts, NU experts per token, K, F (expert inner size), norm (1: the NU weights are
renormalised to sum 1, with llama.cpp's floor of 6.1e-5 on the sum), XS and DS: bytes per row
of what gate/up and down read (4 K and 4 F for float rows; a Q8A/Q8K row stride when the
experts take quantised activations, made by a quantize op between the route and the experts).

Top-k: NU passes of argmax over the experts not yet taken (largest first, the lowest index on
ties, as a stable argsort). Then a counting sort by expert: expert e's pairs are rows [o_e,
o_e + c_e) of xg in token order, and its gate matmul gets x = xg + o_e K, y = g + o_e F, n =
c_e (n = 0: it returns at once); up the same into u; down x = g + o_e F (where swiglu leaves
silu(g) u), y = d + o_e K (x words: in XS / DS units from outs[3] / outs[4]). One thread (slice 0) does it all: the work is n*E compares and a copy
of n*NU rows, small beside the experts' products.
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def route(probs: np.ndarray, nu: int, norm: bool):
    """(expert ids [n, nu], weights [n, nu]) as the kernel computes them (float32): the nu
    largest probabilities per row, largest first (ties: the lowest index), renormalised to sum
    1 (with llama.cpp's floor on the sum) when `norm`. Also the reference engine's routing."""
    ids = np.argsort(-probs, axis=1, kind="stable")[:, :nu]
    w = np.take_along_axis(probs, ids, axis=1).astype(np.float32)
    if norm:
        w = w / np.maximum(w.sum(1, keepdims=True, dtype=np.float32), np.float32(6.103515625e-5))
    return ids, w


def _case(spec, rng, n):
    E, NU, K, F, XS, DS = (spec.p[k] for k in ("E", "NU", "K", "F", "XS", "DS"))
    logits = rng.standard_normal((n, E)).astype(np.float32)
    if n > 1:
        logits[1] = logits[0]                      # two tokens with the same experts
        logits[-1, :2] = logits[-1, 2:4] = 1.5     # ties between experts
    e = np.exp(logits - logits.max(1, keepdims=True))
    probs = (e / e.sum(1, keepdims=True)).astype(np.float32)
    bufs = {"probs": probs, "h": rng.standard_normal((n, K)).astype(np.float32),
            "xg": np.full((n * NU, K), np.nan, np.float32),
            "pos": np.full(n * NU, -1, np.int32), "wgt": np.full(n * NU, np.nan, np.float32),
            "blocks": np.zeros((E, 3), np.int64), "outs": np.zeros(5, np.int64)}
    # the expert matmuls' argument blocks (w, x, y, n) and the output buffers they point into
    blk = np.full((E, 3, 4), -7, np.int64)
    bufs["blocks"][...] = blk.ctypes.data + 32 * np.arange(E * 3).reshape(E, 3)
    g, u, d = (np.zeros((n * NU, F), np.float32), np.zeros((n * NU, F), np.float32),
               np.zeros((n * NU, K), np.float32))
    xs, ds = np.zeros((n * NU, XS), np.uint8), np.zeros((n * NU, DS), np.uint8)
    bufs["outs"][...] = [g.ctypes.data, u.ctypes.data, d.ctypes.data,
                         bufs["xg"].ctypes.data if XS == 4 * K else xs.ctypes.data,
                         g.ctypes.data if DS == 4 * F else ds.ctypes.data]
    bufs["blk"] = blk
    return Case(bufs, OP.pack(bufs, n=n), ("xg", "pos", "wgt", "blk"), {"keep": (g, u, d, xs, ds)})


def _reference(spec, case):
    E, NU, K, F, XS, DS = (spec.p[k] for k in ("E", "NU", "K", "F", "XS", "DS"))
    b = case.buffers
    n = b["probs"].shape[0]
    ids, w = route(b["probs"], NU, bool(spec.p["norm"]))
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")                 # pairs grouped by expert, token order
    pos = np.empty(n * NU, np.int64)
    pos[order] = np.arange(n * NU)
    cnt = np.bincount(flat, minlength=E)
    off = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    g, u, d, xsrc, dsrc = (int(a) for a in b["outs"])
    xg = b["h"][np.arange(n * NU) // NU][order]
    blk = np.full((E, 3, 4), -7, np.int64)
    blk[:, 0, 1] = blk[:, 1, 1] = xsrc + off * XS
    blk[:, 0, 2], blk[:, 1, 2] = g + off * F * 4, u + off * F * 4
    blk[:, 2, 1], blk[:, 2, 2] = dsrc + off * DS, d + off * K * 4
    blk[:, :, 3] = cnt[:, None]
    return {"xg": xg, "pos": pos, "wgt": w.reshape(-1), "blk": blk.astype(np.float64)}


OP = Op(
    name="moe_route",
    args=("probs", "h", "xg", "pos", "wgt", "blocks", "outs", "n"),
    dims=("E", "NU", "K", "F", "norm", "XS", "DS"),
    variants=(Variant("generic", "generic", ("F32",), ({},),
                      "scalar top-k and counting sort, one thread"),),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-6, 0.0),
    example_dims={"E": 128, "NU": 8, "K": 2048, "F": 768, "norm": 1, "XS": 8192, "DS": 3072},
    doc="mixture-of-experts routing: top-k, weights, rows grouped by expert, expert matmul args",
)
