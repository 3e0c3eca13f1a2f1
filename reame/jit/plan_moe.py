"""The plan of a mixture-of-experts FFN (graph op `moe`): one node of the graph, many kernels.

Router logits and their softmax; moe_route (top-k, the FFN inputs gathered by expert, and each
expert's matmul arguments: its rows, its output rows and its token count, written at run time);
every expert's gate and up matmuls (n = 0 for the experts no token picked: they return at once,
so decode reads only the picked experts' weights); SwiGLU over all (token, expert) pairs; the
down matmuls; moe_combine (x += the weighted outputs, plus Qwen2-MoE's gated shared expert).
"""

from __future__ import annotations

import numpy as np

from ..graph import Node
from .program import N
from .select import matmul_site


def lower_moe(low, node: Node) -> None:
    """Add the ops of `node` to the plan `low` is making (plan._Lowering), and record the
    router's argument-address block with each expert's (gate, up, down) ops."""
    from .plan import ACT_COPIES
    c, e, isa, bucket = low.c, low.e, low.isa, low.bucket
    E, NU, FE = c.n_expert, c.n_expert_used, c.n_ff_exp
    b = f"blk.{node.layer}."
    buf = low.buf
    low.product(b + "ffn_gate_inp.weight", "h", "router", N)
    low.emit(b + "ffn_router_softmax", low.spec("softmax", K=E), ("router",), ("router",),
             x=buf("router"), n=N)
    per_expert = max(1, bucket * NU // E)      # tokens an expert sees in such a step
    tg, tu, td = (e.model.tensor(f"{b}ffn_{m}_exps.weight") for m in ("gate", "up", "down"))
    sg, su, sd = (matmul_site(t.type.name, M_, K_, bucket, isa, int_dot=e.int_dot,
                              q8k_min_tokens=e.q8k_min_tokens, row_panel=False,
                              tile_tokens=per_expert)
                  for t, M_, K_ in ((tg, FE, c.n_embd), (tu, FE, c.n_embd), (td, c.n_embd, FE)))
    if sg.act != su.act:                   # gate and up read one copy of the inputs
        sg, su = (matmul_site(t.type.name, FE, c.n_embd, bucket, isa, int_dot=False,
                              tile_tokens=per_expert) for t in (tg, tu))
    row_bytes = lambda act, k: ACT_COPIES[act][1](k) if act else 4 * k   # noqa: E731
    xin, din = ("xgq" if sg.act else "xg"), ("egq" if sd.act else "eg")
    blocks = np.zeros((E, 3), np.int64)
    outs = np.array([buf(m).ctypes.data for m in ("eg", "eu", "ed", xin, din)], np.int64)
    low.emit(b + "ffn_route", low.spec("moe_route", E=E, NU=NU, K=c.n_embd, F=FE,
                                       norm=int(c.moe_norm), XS=row_bytes(sg.act, c.n_embd),
                                       DS=row_bytes(sd.act, FE)),
             ("router", "h"), ("xg", "epos", "ewgt", "experts"),
             probs=buf("router"), h=buf("h"), xg=buf("xg"), pos=buf("epos"), wgt=buf("ewgt"),
             blocks=blocks, outs=outs, n=N)
    if sg.act:
        low.emit(b + "ffn_exps_quantize", low.spec(ACT_COPIES[sg.act][0], K=c.n_embd), ("xg",),
                 ("xgq",), x=buf("xg"), xq=buf("xgq"), n=N * NU)
    ops = [[None] * 3 for _ in range(E)]
    for j, (m, t, site, M_, src, dst) in enumerate((
            ("gate", tg, sg, FE, xin, "eg"), ("up", tu, su, FE, xin, "eu"),
            ("down", td, sd, c.n_embd, din, "ed"))):
        size = M_ * t.row_bytes
        for x in range(E):       # x, y and n are written by moe_route before every step
            ops[x][j] = low.emit(f"{b}ffn_{m}_exps.{x}", site.spec, (src, "experts"), (dst,),
                                 False, w=t.data[x * size:(x + 1) * size], y=0, n=0,
                                 **{"xq" if site.act else "x": 0})
        if m != "gate":
            ops[-1][j].barrier = True
        if m == "up":
            low.emit(b + "ffn_exps_swiglu", low.spec("swiglu", F=FE), ("eg", "eu"), ("eg",),
                     g=buf("eg"), u=buf("eu"), y=buf("eg"), n=N * NU)
            if sd.act:
                low.emit(b + "ffn_exps_quantize_down", low.spec(ACT_COPIES[sd.act][0], K=FE),
                         ("eg",), ("egq",), x=buf("eg"), xq=buf("egq"), n=N * NU)
    if c.n_ff_shexp:                           # Qwen2-MoE: a shared expert, gated
        low.product(b + "ffn_gate_shexp.weight", "h", "g", N)
        low.product(b + "ffn_up_shexp.weight", "h", "u", N)
        low.emit(b + "ffn_shexp_swiglu", low.spec("swiglu", F=c.n_ff_shexp), ("g", "u"), ("g",),
                 g=buf("g"), u=buf("u"), y=buf("g"), n=N)
        low.product(b + "ffn_down_shexp.weight", "g", "ys", N, barrier=True)
        low.emit(b + "ffn_gate_inp_shexp", low.spec("matmul", M=1, K=c.n_embd, acc=0), ("h",),
                 ("sg",), w=e.small[b + "ffn_gate_inp_shexp.weight"], x=buf("h"), y=buf("sg"),
                 n=N)
    low.emit(b + "ffn_moe_combine", low.spec("moe_combine", K=c.n_embd, NU=NU,
                                             shexp=int(bool(c.n_ff_shexp))),
             ("x", "ed", "epos", "ewgt", "ys", "sg"), ("x",),
             x=buf("x"), d=buf("ed"), pos=buf("epos"), wgt=buf("ewgt"), ys=buf("ys"),
             sg=buf("sg"), n=N)
    low.plan.experts.append((blocks, ops))
