"""One planning pass: the model's graph (reame/graph.py) as the kernels of one step program.

For every node of the graph, `plan_step` picks the kernel (op, variant, tiles) a program for
steps of up to `bucket` tokens starts with, and for every matrix product the activation format
and weight layout (select.matmul_site, from the type table's traits). An 8-bit copy of a
product's input is an op of its own, inserted once per producer and format: a later product
reading the same buffer reuses it until the buffer is written again. Barriers come from the data:
an op waits for the threads of the ops before it only when it reads what they wrote since the
last barrier or writes what they read or wrote. The engine turns the plan into a program
(program.ProgramBuilder); the adaptive runtime then swaps variants per site through the dispatch
table (reame/kernel_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..codegen import q8a, q8k
from ..codegen.spec import KernelSpec
from ..graph import Node
from ..tensor_types import PROMPT_STEP
from .program import D, M, N, P as PROMPT_ROWS, Dyn
from .select import attn_prefill_spec, choose, matmul_site

# The 8-bit activation copies a product may read: format -> (the op making it, its row bytes)
ACT_COPIES = {"q8a": ("quantize_q8a", q8a.row_stride), "q8k": ("quantize_q8k", q8k.row_stride)}


@dataclass(eq=False)
class PlannedOp:
    site: str                          # the dispatch-table site (without the program's label)
    spec: KernelSpec                   # the kernel it starts with
    args: dict                         # the op's arguments: arrays, ints or per-step Dyn words
    reads: frozenset = frozenset()     # buffers read and written (names), for the barriers
    writes: frozenset = frozenset()
    barrier: bool | None = None        # wait after it; None: decided from reads and writes


@dataclass
class StepPlan:
    bucket: int
    ops: list[PlannedOp] = field(default_factory=list)
    # mixture-of-experts layers: (the router's argument-address block, the (gate, up, down) ops
    # of each expert), filled once the program's argument blocks exist
    experts: list = field(default_factory=list)

    def describe(self) -> list[str]:
        """One line per op: site, kernel, whether it waits after."""
        return [f"{op.site} {op.spec.label()}{'' if op.barrier else ' (no wait)'}"
                for op in self.ops]


def plan_step(graph: list[Node], bucket: int, eng) -> StepPlan:
    """The plan of the program for steps of up to `bucket` tokens of JIT engine `eng` (its
    options, buffers and weights)."""
    lower = _Lowering(eng, bucket)
    for node in graph:
        getattr(lower, node.op)(node)
    place_barriers(lower.plan.ops)
    return lower.plan


def place_barriers(ops: list[PlannedOp]) -> None:
    """Set every undecided barrier: wait after op i when op i + 1 reads a buffer written since
    the last wait, or writes one read or written since then; always after the last op."""
    reads, writes = set(), set()
    for i, op in enumerate(ops):
        if i:
            prev = ops[i - 1]
            if prev.barrier is None:
                prev.barrier = bool(op.reads & writes or op.writes & (reads | writes))
            if prev.barrier:
                reads, writes = set(), set()
        reads |= op.reads
        writes |= op.writes
    if ops and ops[-1].barrier is None:
        ops[-1].barrier = True


class _Lowering:
    """Graph nodes -> planned ops, one method per graph op (reame/graph.OPS)."""

    def __init__(self, eng, bucket: int):
        self.e, self.c, self.isa, self.bucket = eng, eng.config, eng.isa, bucket
        self.plan = StepPlan(bucket)
        self.copies: set[str] = set()      # valid 8-bit copies ("h:q8a"), until h is written
        # rows needing logits (the head's tiles are chosen for that many): as many as one step
        # may return, one per sequence and more in speculation's verify steps (every drafted
        # position's); the sequences alone undercounted them (--max-seqs 1: a 16-row verify
        # step's output head ran the 1-token tile 16 times, 17.6 of its 41 thread-ms)
        self.head = min(bucket, eng.max_logits)

    def emit(self, site, spec, reads=(), writes=(), barrier=None, **args) -> PlannedOp:
        op = PlannedOp(site, spec, args, frozenset(reads), frozenset(writes), barrier)
        self.copies -= {c for c in self.copies if c.split(":")[0] in op.writes}
        self.plan.ops.append(op)
        return op

    def spec(self, op: str, tokens: int | None = None, dtype: str = "F32", **dims) -> KernelSpec:
        return choose(op, dtype, self.isa, tokens or self.bucket, **dims)

    def buf(self, name: str) -> np.ndarray:
        return self.e.buffers[name]

    def count(self, node: Node) -> Dyn:
        return M if node.rows == "m" else N

    def tokens(self, node: Node) -> int:
        return self.head if node.rows == "m" else self.bucket

    # ---- graph ops

    def embed(self, node: Node) -> None:
        t, scale = self.e.model.tensor(node.weight), node.attr("scale")
        self.emit(node.site, self.spec("get_rows", dtype=t.type.name, K=self.c.n_embd,
                                       **({"scale": scale} if scale else {})),
                  ("tokens",), (node.out,), w=t.data, ids=self.buf("tokens"),
                  y=self.buf(node.out), n=N)

    def rms_norm(self, node: Node) -> None:
        heads, x = node.attr("heads"), self.buf(node.ins[0])
        self.emit(node.site, self.spec("rms_norm", K=x.shape[1] // heads, eps=node.attr("eps")),
                  node.ins, (node.out,), x=x, w=self.e.small[node.weight],
                  y=self.buf(node.out), n=self.count(node) * heads)

    def linear(self, node: Node, barrier=None) -> PlannedOp:
        return self.product(node.site, node.ins[0], node.out, self.count(node),
                            acc=node.attr("acc"), tokens=self.tokens(node), barrier=barrier)

    def product(self, weight: str, src: str, dst: str, n: Dyn, acc: int = 0,
                tokens: int | None = None, barrier=None) -> PlannedOp:
        """dst (+)= src @ W^T, as select.matmul_site decides; the 8-bit copy of src it reads made
        first unless a valid one exists."""
        e, t = self.e, self.e.model.tensor(weight)
        K, rows = t.shape[0], t.n_rows
        site = matmul_site(t.type.name, rows, K, tokens or self.bucket, self.isa, acc,
                           int_dot=e.int_dot, q8k_min_tokens=e.q8k_min_tokens,
                           q8a_ok=e.copies.get(src + ":q8a") is not None,
                           q8k_ok=e.copies.get(src + ":q8k") is not None,
                           row_panel=e.row_panels)
        w = e.repacked(t) if site.layout == "row_panel" else t.data
        reads = (src, dst) if acc else (src,)
        if site.act is None:
            return self.emit(weight, site.spec, reads, (dst,), barrier, w=w, x=self.buf(src),
                             y=self.buf(dst), n=n)
        copy = f"{src}:{site.act}"
        if copy not in self.copies:
            qop = ACT_COPIES[site.act][0]
            self.emit(f"{'quantize' if site.act == 'q8a' else qop}.{weight}",
                      self.spec(qop, K=K), (src,), (copy,), x=self.buf(src),
                      xq=e.copies[copy], n=n)
            self.copies.add(copy)
        return self.emit(weight, site.spec, (copy,) + reads[1:], (dst,), barrier,
                         w=w, xq=e.copies[copy], y=self.buf(dst), n=n)

    def add(self, node: Node) -> None:
        a = self.buf(node.ins[0])
        b = self.e.small[node.weight] if node.weight else self.buf(node.ins[1])
        self.emit(node.site, self.spec("add", K=a.shape[1], bcast=int(node.weight is not None)),
                  node.ins, (node.out,), a=a, b=b, y=self.buf(node.out), n=N)

    def rope(self, node: Node) -> None:
        c, x = self.c, self.buf(node.ins[0])
        self.emit(node.site, self.spec("rope", H=node.attr("heads"), D=c.head_dim, R=c.rope_dim,
                                       neox=int(c.rope_neox)),
                  node.ins, (node.out,), x=x, pos=self.buf("pos"),
                  cs=self.e.rope_cs[node.attr("swa")], n=N)

    def kv_args(self, layer: int) -> dict:
        kv = self.e.kv
        return dict(kc=kv.k[layer], vc=kv.v[layer], bt=kv.tables)

    def store_kv(self, node: Node) -> None:
        c, kv = self.c, self.e.kv
        self.emit(node.site, self.spec("store_kv", Hkv=c.n_head_kv, D=c.head_dim, Dv=c.head_dim_v,
                                       C=kv.table_ctx, BS=kv.block_size, kv=self.e.kv_dtype),
                  node.ins, (node.out,), k=self.buf("k"), v=self.buf("v"), pos=self.buf("pos"),
                  seq=self.buf("seq"), n=N, **self.kv_args(node.layer))

    def attention(self, node: Node) -> None:
        """attn_decode over the decode rows and, in programs of more than one token with split
        attention, attn_prefill over the prompt rows after them (the one-token program has no
        prompt-row attention: a one-token prompt step runs the next program); with a bf16
        cache, attn_prefill's amx family over every row (the AMX tile layout) or attn_decode's
        bf16dp family (the pair layout)."""
        c, e, kv = self.c, self.e, self.e.kv
        dims = dict(H=c.n_head, Hkv=c.n_head_kv, D=c.head_dim, Dv=c.head_dim_v, C=kv.table_ctx,
                    BS=kv.block_size, kv=e.kv_dtype, scale=float(c.kq_scale))
        if c.attn_softcap:                           # Gemma 2 (absent otherwise: same kernels)
            dims["softcap"] = float(c.attn_softcap)
        if node.attr("window"):                      # sliding-window layer (Gemma)
            dims["swa"] = node.attr("window")
        q, out, pos, seq = (self.buf(b) for b in ("q", "att", "pos", "seq"))
        if e.kv_dtype == "bf16":
            # the AMX tile layout: every row, decode and prompt, on the amx family that reads
            # it in place, one tile choice in every program (a row's bits: its key tiles)
            self.emit(node.site, attn_prefill_spec("bf16", self.isa, PROMPT_STEP, **dims),
                      node.ins, (node.out,), q=q, out=out, pos=pos, seq=seq, n=N,
                      **self.kv_args(node.layer))
            return
        if e.kv_dtype == "bf16p":
            # the pair layout: every row on attn_decode's bf16dp family, one tile (its key blocks
            # fix a row's bits) in every program
            self.emit(node.site, self.spec("attn_decode", 1, "BF16", **dims), node.ins,
                      (node.out,), q=q, out=out, pos=pos, seq=seq, n=N,
                      **self.kv_args(node.layer))
            return
        split = e.split_attention and self.bucket > 1
        self.emit(node.site, self.spec("attn_decode", **dims), node.ins, (node.out,),
                  False if split else None, q=q, out=out, pos=pos, seq=seq,
                  n=D if split else N, **self.kv_args(node.layer))
        if split:
            rows = {a: Dyn("d", arr.strides[0], arr)
                    for a, arr in (("q", q), ("out", out), ("pos", pos), ("seq", seq))}
            self.emit(node.site + "_prompt",
                      attn_prefill_spec(e.attn_type, self.isa, max(self.bucket, PROMPT_STEP),
                                        **dims),
                      node.ins, (node.out,), n=PROMPT_ROWS, **rows, **self.kv_args(node.layer))

    def glu(self, node: Node) -> None:
        act = node.attr("act")
        self.emit(node.site, self.spec("swiglu", F=node.attr("width"),
                                       **({"act": act} if act != "silu" else {})),
                  node.ins, (node.out,), g=self.buf("g"), u=self.buf("u"), y=self.buf(node.out),
                  n=N)

    def rows(self, node: Node) -> None:
        self.emit(node.site, self.spec("get_rows", self.head, K=self.c.n_embd), node.ins,
                  (node.out,), w=self.buf(node.ins[0]), ids=self.buf("rows"),
                  y=self.buf(node.out), n=M)

    def softcap(self, node: Node) -> None:
        x = self.buf(node.ins[0])
        self.emit(node.site, self.spec("softcap", self.tokens(node), K=x.shape[1],
                                       cap=float(node.attr("cap"))),
                  node.ins, (node.out,), x=x, y=self.buf(node.out), n=self.count(node))

    def moe(self, node: Node) -> None:
        from .plan_moe import lower_moe
        lower_moe(self, node)

