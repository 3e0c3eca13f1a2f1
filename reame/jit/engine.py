"""The JIT engine: the whole forward pass as compiled kernels, one native call per step.

At load, the model's graph (reame/graph.py, the same nodes the reference engine interprets) is
planned (plan.py) and laid out by `_build` as a program of op sites for each bucket of step
sizes: 1 token (decode of one sequence), up to 4, 8 and 16 tokens (batched decode, mixed steps)
and up to the prefill chunk, each with the kernel tiles that suit that many tokens. Each op
site calls its kernel through the live dispatch table. A step writes the batch (token ids,
positions, KV slots, logits rows) into fixed buffers, sets the per-step words of the argument
blocks, swaps in staged variants (the step boundary) and launches the program on the thread
pool: every thread walks the ops once and the threads meet at barriers inside generated code.
No numpy runs in the per-token path.
"""

from __future__ import annotations

import logging

import numpy as np

from .. import progress
from ..batch import Batch
from ..codegen import panel_layout, q8a, q8k
from ..codegen.isa import detect
from ..codegen.runtime import NativePool, shared_pool
from ..dispatch import DispatchTable
from ..kv_cache import DEFAULT_BLOCK_SIZE, PagedKVCache
from ..model import Model
from ..codegen.ops.rms_norm import rms_norm
from ..codegen.ops.rope import rope_angles
from .. import graph as graph_
from ..tensor_types import PROMPT_STEP
from .plan import plan_step
from .program import ProgramBuilder, StepProgram
from .select import Q8K_MIN_TOKENS, attn_precision, bf16_cache_refusal  # noqa: F401 (Q8K_MIN_TOKENS: re-exported)

log = logging.getLogger("reame.jit")

FLOAT_TYPES = ("F32", "F16", "BF16")
MAX_BATCH_TOKENS = 512      # tokens per step (prefill chunk); larger prompts are chunked
BUCKETS = (1, 2, 4, 8, 12, 16)  # step sizes with their own program (+ one up to the chunk size)
assert BUCKETS[-1] + 1 == PROMPT_STEP   # the prompt-chunk rule of the type table (and reference)
# Which kernel, activations and weight layout serve each matmul site: select.matmul_site, from
# the type table's traits (reame/tensor_types.py: int_dot, q8k, row_panel) and Q8K_MIN_TOKENS,
# for every node of the model's graph (reame/graph.py) in one planning pass (plan.py).
# The buffers a step program works in (see _alloc), by their names in the graph
BUFFERS = ("tokens", "pos", "seq", "rows", "x", "h", "q", "k", "v", "att", "o", "g", "u",
           "router", "xg", "eg", "eu", "ed", "epos", "ewgt", "xgq", "egq", "ys", "sg", "xo", "ho",
           "logits")


class JITEngine:
    name = "jit"

    def __init__(self, model: Model, n_ctx: int, max_seqs: int = 4, kv_dtype: str = "f32",
                 threads: int | None = None, max_batch_tokens: int = MAX_BATCH_TOKENS,
                 isa=None, int_dot: bool = True, max_logits: int | None = None,
                 q8k_min_tokens: int | None = Q8K_MIN_TOKENS,
                 block_size: int = DEFAULT_BLOCK_SIZE, kv_blocks: int | None = None,
                 row_panels: bool = True, cpus: list[int] | None = None,
                 attn_type: str = "auto", shared_pools: bool = False,
                 graph: list | None = None):
        """`cpus`: pin compute thread i to cpus[i] (reame/topology.py); None: threads float.
        `attn_type`: the attention of prompt rows: "f32", or "bf16" on AMX-BF16 tiles
        (select.attn_prefill_spec; without AMX a warning is logged and attention stays f32), or
        "auto": bf16 where this ISA has AMX-BF16 and activations are q8 (int_dot), else f32;
        in every program a step's decode rows (Batch.n_decode: generated tokens and drafts,
        first) run attn_decode (f32) and its prompt rows attn_prefill, each kernel computing a
        row on its own, so a token's attention is computed the same way whatever shares its
        step (with matmul_q8a's row panels its logits then do not depend on the batch:
        docs/speculation.md). "invariant": every row on attn_decode, prompts included
        (reame.engines.ATTN_TYPES). `shared_pools`: run on the process's pool of this many
        compute threads (codegen.runtime.shared_pool, for several models whose steps take turns)
        instead of a pool of its own. `graph`: the step's nodes (default: reame/graph.build)."""
        self.model, self.config = model, model.config
        self.graph = graph if graph is not None else graph_.build(model.config)
        c = self.config
        self.isa = isa or detect()
        self.attn_type = attn_precision(attn_type, self.isa, int_dot)
        # decode rows on attn_decode and prompt rows on attn_prefill in every program
        self.split_attention = _has_op("attn_prefill") and self.attn_type != "invariant"
        if kv_dtype in ("bf16", "bf16p"):   # every row in bf16 on the kernels of the layout
            why = bf16_cache_refusal(self.isa, c, block_size, attn_type, kv_dtype)
            if why:
                raise ValueError(why)
            self.attn_type, self.split_attention = "bf16", False
        self.max_tokens = max(max_batch_tokens, max_seqs)
        self.max_logits = max_logits or max(max_seqs, 16)   # logits rows one step can return
        # a pool of kv_blocks blocks (default: a whole context per slot) and the block tables
        # the attention kernels read through
        self.kv = PagedKVCache(c.n_layer, max_seqs, c.n_head_kv, n_ctx, c.head_dim, c.head_dim_v,
                               kv_dtype, block_size, kv_blocks)
        self.n_ctx = self.kv.n_ctx
        self.kv_dtype = kv_dtype
        self.max_seqs = max_seqs
        self.int_dot = int_dot     # quantised weights x Q8A activations (False: f32 activations)
        self.row_panels = row_panels   # repack the type table's row_panel types (matmul_q8*_rp)
        # K-quant weights x Q8K activations in programs for >= this many tokens (None: never)
        self.q8k_min_tokens = q8k_min_tokens if int_dot else None
        self.buckets = sorted({b for b in BUCKETS if b < self.max_tokens} | {self.max_tokens})
        if self.q8k_min_tokens not in (None, 1, *(b + 1 for b in self.buckets)):
            # a program serves every step size of its bucket: the switch must fall on a bucket
            # edge for "steps of >= q8k_min_tokens tokens use Q8K" to hold exactly (the rule
            # the reference engine's act_quant oracle emulates)
            raise ValueError(f"q8k_min_tokens={self.q8k_min_tokens}: must be None, 1 or one more "
                             f"than a bucket size {self.buckets}")
        nth = threads or auto_threads(model)
        self._own_pool = not shared_pools
        if shared_pools:
            self.pool = shared_pool(nth, self.isa, cpus)
        else:
            self.pool = NativePool(nth, self.isa, cpus=cpus)
        self.threads = self.pool.nth
        self.table = DispatchTable(threads=self.pool.nth)   # candidates checked as they run
        self.kernels: dict = {}
        self.panel_weights: dict[str, np.ndarray] = {}   # repacked copies, by tensor name
        self._alloc()
        self.programs: dict[int, StepProgram] = {}
        self.plans: dict = {}                  # bucket -> plan.StepPlan (what each site runs)
        with progress.task("compiling kernels and repacking weights", total=len(self.buckets),
                           unit="step programs") as task:
            for b in self.buckets:
                self.programs[b] = self._build(b)
                task.update()
        self._bucket_of = [0] + [next(b for b in self.buckets if b >= k)
                                 for k in range(1, self.max_tokens + 1)]
        self.steps = 0
        self.sample_every = 0          # >0: time every op on every k-th step (dispatch stats)
        self.time_next = False         # time every op of the next step (the adaptive runtime)

    # ------------------------------------------------------------------ buffers
    def _alloc(self) -> None:
        c, T, L = self.config, self.max_tokens, self.max_logits
        f32 = lambda *shape: np.zeros(shape, np.float32)   # noqa: E731
        qd, kvd, vd = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_head_kv * c.head_dim_v
        self.tokens = np.zeros(T, np.int32)          # [T]  token ids of the step
        self.pos = np.zeros(T, np.int32)             # [T]  their positions
        self.seq = np.zeros(T, np.int32)             # [T]  their KV slots
        self.rows = np.zeros(L, np.int32)            # [L]  tokens whose logits are wanted
        self.x = f32(T, c.n_embd)                    # residual stream
        self.h = f32(T, c.n_embd)                    # normed input of a block
        self.q, self.k, self.v = f32(T, qd), f32(T, kvd), f32(T, c.n_head_kv * c.head_dim_v)
        self.att = f32(T, c.n_head * c.head_dim_v)   # attention output, all heads
        self.o = f32(T, c.n_embd) if c.post_norms else None   # a block's output (Gemma: normed)
        F = max(c.n_ff, c.n_ff_shexp)
        self.g, self.u = f32(T, F), f32(T, F)        # FFN gate / up (g becomes silu(g)*u)
        if c.n_expert:                               # mixture of experts (plan_moe.py)
            E, NU, FE = c.n_expert, c.n_expert_used, c.n_ff_exp
            self.router = f32(T, E)                  # router logits, then probabilities
            self.xg = f32(T * NU, c.n_embd)          # FFN inputs gathered by expert
            self.eg, self.eu = f32(T * NU, FE), f32(T * NU, FE)   # experts' gate / up
            self.ed = f32(T * NU, c.n_embd)          # experts' down outputs
            self.epos = np.zeros(T * NU, np.int32)   # where each (token, expert) pair sits
            self.ewgt = np.zeros(T * NU, np.float32)  # its weight
            # their 8-bit copies when the experts take integer dots (Q8A or Q8K rows)
            stride = lambda k: max(q8a.row_stride(k) if k % 32 == 0 else 0,  # noqa: E731
                                   q8k.row_stride(k) if k % 256 == 0 else 0)
            self.xgq = np.zeros((T * NU, stride(c.n_embd)), np.uint8)
            self.egq = np.zeros((T * NU, stride(FE)), np.uint8)
            self.ys, self.sg = f32(T, c.n_embd), f32(T)   # shared expert: output, gate logit
        self.xo, self.ho = f32(L, c.n_embd), f32(L, c.n_embd)   # rows gathered for the head
        self.logits = f32(L, c.n_vocab)
        # the 8-bit copies of activations products may read ("h:q8a": Q8A rows of h; ":q8k":
        # Q8K rows, for K-quant weights), None where the width does not divide into blocks
        self.copies = {}
        for name, k, rows in (("h", c.n_embd, T), ("att", c.n_head * c.head_dim_v, T),
                              ("g", F, T), ("ho", c.n_embd, L)):
            self.copies[name + ":q8a"] = (np.zeros((rows, q8a.row_stride(k)), np.uint8)
                                          if k % 32 == 0 else None)
            self.copies[name + ":q8k"] = (np.zeros((rows, q8k.row_stride(k)), np.uint8)
                                          if self.q8k_min_tokens is not None and k % 256 == 0
                                          else None)
        self.rope_cs = {}                            # cos/sin tables: global layers, windowed ones
        for swa in {c.is_swa(il) for il in range(c.n_layer)}:
            cos, sin = rope_angles(c.rope_config(swa), np.arange(self.n_ctx),
                                   self.model.rope_factors(self.n_ctx))
            self.rope_cs[swa] = np.ascontiguousarray(np.stack([cos, sin], axis=-1), np.float32)
        self.small = {}                              # norms and biases as float32
        for name, t in self.model.tensors.items():
            if len(t.shape) == 1:
                self.small[name] = np.ascontiguousarray(t.dequantize(), np.float32)
        # the step's buffers by their names in the graph (reame/graph.py)
        self.buffers = {name: a for name, a in vars(self).items()
                        if isinstance(a, np.ndarray) and name in BUFFERS}

    # ------------------------------------------------------------------ the forward pass
    def _build(self, bucket: int) -> StepProgram:
        """The program for steps of up to `bucket` tokens (op sites named `<site>@<bucket>`):
        the graph's plan (plan.py) laid out over the dispatch table."""
        lo = max([b for b in self.buckets if b < bucket], default=0) + 1
        plan = self.plans[bucket] = plan_step(self.graph, bucket, self)
        P = ProgramBuilder(self.table, self.kernels, str(bucket), self.isa,
                           ranges={"n": (lo, bucket), "m": (1, min(bucket, self.max_logits)),
                                   "d": (1, bucket), "p": (1, bucket)})
        index = {id(op): P.op(op.site, op.spec, barrier=op.barrier, **op.args)
                 for op in plan.ops}
        prog = P.finish()
        for blocks, ops in plan.experts:      # each router writes its experts' argument words
            blocks[...] = [[prog.arg_addrs[index[id(op)]] for op in trio] for trio in ops]
        return prog

    # ------------------------------------------------------------------ one step
    def forward(self, batch: Batch) -> np.ndarray:
        n, mrows = len(batch), len(batch.logits_rows)
        if n == 0:
            return np.zeros((0, self.config.n_vocab), np.float32)
        if n > self.max_tokens:
            raise ValueError(f"{n} tokens in one step; at most {self.max_tokens}")
        if mrows > self.max_logits:
            raise ValueError(f"{mrows} logits rows in one step; at most {self.max_logits}")
        self._check(batch, n)
        self.tokens[:n] = batch.tokens
        self.pos[:n] = batch.positions
        self.seq[:n] = batch.seq_ids
        self.rows[:mrows] = batch.logits_rows
        bucket, d = self.program_for(batch)
        prog = self.programs[bucket]
        prog.set(n=n, m=mrows, d=d)
        self.table.commit()                       # step boundary: staged variants go live
        self.steps += 1
        timed = self.time_next or (self.sample_every and self.steps % self.sample_every == 0)
        self.time_next = False
        prog.program.set_stats(self.table.stats if timed else None)
        self.pool.run(prog.program.words)
        return self.logits[:mrows].copy()

    # ---- the KernelPlan (reame/kernel_plan.py): what the adaptive runtime reads and changes

    @property
    def kernel_plan(self) -> "JITEngine":
        """This engine's kernels can be tuned: it is its own KernelPlan."""
        return self

    def program_of(self, n_tokens: int) -> int:
        return self._bucket_of[n_tokens]

    def time_next_step(self) -> None:
        self.time_next = True

    def slot_cycles(self, slots) -> float:
        return float(self.table.stats[slots, 1].sum())

    def kernel(self, spec):
        k = self.kernels.get(spec)
        if k is None:
            from ..codegen.kernels import build
            k = self.kernels[spec] = build(spec, self.isa)
        return k

    def program_for(self, batch: Batch) -> tuple[int, int]:
        """(the program a step runs: its bucket, the step's decode rows). Batch.n_decode None
        (not said): a decode-sized program's rows decode, a prompt program's are prompt rows.
        A one-token step whose row is a prompt row runs the next program (the one-token program
        has no prompt-row attention)."""
        n = len(batch)
        bucket, d = self._bucket_of[n], batch.n_decode
        if d is None:
            d = n if bucket <= BUCKETS[-1] else 0
        elif d < n and bucket == 1 and self.split_attention:
            bucket = self._bucket_of[2]
        return bucket, d

    def final_hidden(self, lo: int, hi: int) -> np.ndarray:
        """The final hidden states (after the output norm) of tokens lo..hi-1 of the last
        forward's batch: what embeddings pool. The program leaves every token's final residual
        in `x`; the norm of a few rows is done here."""
        x = self.x[lo:hi].astype(np.float64)
        return rms_norm(x, self.small["output_norm.weight"], self.config.rms_eps).astype(np.float32)

    def _check(self, batch: Batch, n: int) -> None:
        """Every index the kernels will follow is in range (they do not check)."""
        if n <= 16:                               # decode steps: Python beats numpy on tiny arrays
            t, p, s, r = (batch.tokens.tolist(), batch.positions.tolist(),
                          batch.seq_ids.tolist(), batch.logits_rows.tolist())
            lo = (min(t), min(p), min(s), min(r) if r else 0)
            hi = (max(t), max(p), max(s), max(r) if r else 0)
        else:
            lo = (batch.tokens.min(), batch.positions.min(), batch.seq_ids.min(),
                  batch.logits_rows.min() if len(batch.logits_rows) else 0)
            hi = (batch.tokens.max(), batch.positions.max(), batch.seq_ids.max(),
                  batch.logits_rows.max() if len(batch.logits_rows) else 0)
        if min(lo) < 0 or hi[0] >= self.config.n_vocab:
            raise ValueError("token id outside the vocabulary" if lo[0] < 0 or
                             hi[0] >= self.config.n_vocab else "negative position, slot or row")
        if hi[1] >= self.n_ctx:
            raise ValueError(f"position out of the KV cache (n_ctx={self.n_ctx})")
        if hi[2] >= self.kv.max_seqs:
            raise ValueError(f"sequence slot out of range (max_seqs={self.kv.max_seqs})")
        if hi[3] >= n:
            raise ValueError("logits row outside the batch")

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    # ------------------------------------------------------------------ weight layouts
    def repacked(self, t) -> np.ndarray:
        """t's weights in the row-panel layout, made once (shared by every program); the file's
        pages of t are then dropped from this process, which reads only the copy."""
        w = self.panel_weights.get(t.name)
        if w is None:
            progress.note(f"repacking {t.name}")
            w = self.panel_weights[t.name] = panel_layout.repack(t.rows(), t.type.name)
            self.model.file.release(t)
        return w


SMALL_MODEL_BYTES = 16 << 20   # below this, one thread beats splitting every op


def auto_threads(model: Model) -> int:
    """Threads when the user gives none: the physical cores this process may use, except for
    tiny models, whose ops are too small to split (stories260K: 21k tok/s on 1 thread, 10k on 2).
    The adaptive runtime refines this by measurement."""
    from ..codegen.runtime import default_threads
    size = sum(t.data.nbytes for t in model.tensors.values())
    return 1 if size < SMALL_MODEL_BYTES else default_threads()


def _has_op(name: str) -> bool:
    from ..codegen import registry
    return name in registry.ops()
