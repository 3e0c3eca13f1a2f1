"""The JIT engine: the whole forward pass as compiled kernels, one native call per step.

At load, `_build` lays out the forward pass of the model (the same steps as reame/reference.py)
as a program of op sites for each bucket of step sizes: 1 token (decode of one sequence), up
to 4, 8 and 16 tokens (batched decode, mixed steps) and up to the prefill chunk, each with the
kernel tiles that suit that many tokens. Each op site calls its kernel through the live
dispatch table. A step writes the batch (token ids, positions, KV slots, logits rows) into
fixed buffers, sets the per-step words of the argument blocks, swaps in staged variants (the
step boundary) and launches the program on the thread pool: every thread walks the ops once and
the threads meet at barriers inside generated code. No numpy runs in the per-token path.
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
from ..codegen.ops.rope import rope_angles
from .program import D, M, N, P as PROMPT_ROWS, Dyn, ProgramBuilder, StepProgram
from ..tensor_types import PROMPT_STEP
from .select import (Q8K_MIN_TOKENS, attn_precision, attn_prefill_spec, choose,  # noqa: F401
                     matmul_site)                           # (Q8K_MIN_TOKENS: re-exported)

log = logging.getLogger("reame.jit")

FLOAT_TYPES = ("F32", "F16", "BF16")
MAX_BATCH_TOKENS = 512      # tokens per step (prefill chunk); larger prompts are chunked
BUCKETS = (1, 4, 8, 16)     # step sizes with their own program (plus one up to the chunk size)
assert BUCKETS[-1] + 1 == PROMPT_STEP   # the prompt-chunk rule of the type table (and reference)
# Which kernel, activations and weight layout serve each matmul site: select.matmul_site, from
# the type table's traits (reame/tensor_types.py: int_dot, q8k, row_panel) and Q8K_MIN_TOKENS.
# The 8-bit activation copies a site may read: format -> (the op making it, its row bytes)
ACT_COPIES = {"q8a": ("quantize_q8", q8a.row_stride), "q8k": ("quantize_q8k", q8k.row_stride)}


class JITEngine:
    name = "jit"
    q8k_sources = ("h", "att", "g", "ho")     # producers whose K-quant consumers may read Q8K

    def __init__(self, model: Model, n_ctx: int, max_seqs: int = 4, kv_dtype: str = "f32",
                 threads: int | None = None, max_batch_tokens: int = MAX_BATCH_TOKENS,
                 isa=None, int_dot: bool = True, max_logits: int | None = None,
                 q8k_min_tokens: int | None = Q8K_MIN_TOKENS,
                 block_size: int = DEFAULT_BLOCK_SIZE, kv_blocks: int | None = None,
                 row_panels: bool = True, cpus: list[int] | None = None,
                 attn_type: str = "auto", shared_pools: bool = False):
        """`cpus`: pin compute thread i to cpus[i] (reame/topology.py); None: threads float.
        `attn_type`: the attention of prompt rows: "f32", or "bf16" on AMX-BF16 tiles
        (select.attn_prefill_spec; without AMX a warning is logged and attention stays f32), or
        "auto": bf16 where this ISA has AMX-BF16 and activations are q8 (int_dot), else f32;
        in every program a step's decode rows (Batch.n_decode: generated tokens and drafts,
        first) run attn_decode (f32) and its prompt rows attn_prefill, each kernel computing a
        row on its own, so a token's attention is computed the same way whatever shares its
        step (with matmul_q8's row panels its logits then do not depend on the batch:
        docs/speculation.md). "invariant": every row on attn_decode, prompts included
        (reame.engines.ATTN_TYPES). `shared_pools`: run on the process's pool of this many
        compute threads (codegen.runtime.shared_pool, for several models whose steps take turns)
        instead of a pool of its own."""
        self.model, self.config = model, model.config
        c = self.config
        self.isa = isa or detect()
        self.attn_type = attn_precision(attn_type, self.isa, int_dot)
        # decode rows on attn_decode and prompt rows on attn_prefill in every program
        self.split_attention = _has_op("attn_prefill") and self.attn_type != "invariant"
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
        self.row_panels = row_panels   # repack the type table's row_panel types (matmul_q8k_rp)
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
        q8 = lambda k: np.zeros((T, q8a.row_stride(k)), np.uint8) if k % 32 == 0 else None  # noqa
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
        if c.n_expert:                               # mixture of experts (see _moe)
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
        self.qbuf = {}                               # Q8A copies of activations, by source
        for name, k in (("h", c.n_embd), ("att", c.n_head * c.head_dim_v), ("g", F)):
            self.qbuf[name] = q8(k)
        self.qbuf["ho"] = (np.zeros((L, q8a.row_stride(c.n_embd)), np.uint8)
                           if c.n_embd % 32 == 0 else None)
        self.kbuf = {}                               # Q8K copies (K-quant weights), by source
        for name, k, rows in (("h", c.n_embd, T), ("att", c.n_head * c.head_dim_v, T),
                              ("g", F, T), ("ho", c.n_embd, L)):
            self.kbuf[name] = (np.zeros((rows, q8k.row_stride(k)), np.uint8)
                               if self.q8k_min_tokens is not None and k % 256 == 0 else None)
        self.rope_cs = {}                            # cos/sin tables: global layers, windowed ones
        for swa in {c.is_swa(il) for il in range(c.n_layer)}:
            cos, sin = rope_angles(c.rope_config(swa), np.arange(self.n_ctx),
                                   self.model.rope_factors(self.n_ctx))
            self.rope_cs[swa] = np.ascontiguousarray(np.stack([cos, sin], axis=-1), np.float32)
        self.small = {}                              # norms and biases as float32
        for name, t in self.model.tensors.items():
            if len(t.shape) == 1:
                self.small[name] = np.ascontiguousarray(t.dequantize(), np.float32)

    # ------------------------------------------------------------------ the forward pass
    def _build(self, bucket: int) -> StepProgram:
        """The program for steps of up to `bucket` tokens (op sites named `<site>@<bucket>`)."""
        c, isa, m = self.config, self.isa, self.model
        lo = max([b for b in self.buckets if b < bucket], default=0) + 1
        head = min(bucket, self.max_seqs)          # rows needing logits: ~ one per sequence
        P = ProgramBuilder(self.table, self.kernels, str(bucket), isa,
                           ranges={"n": (lo, bucket), "m": (1, min(bucket, self.max_logits)),
                                   "d": (1, bucket), "p": (1, bucket)})
        W = lambda name: m.tensor(name).data         # noqa: E731  raw GGUF bytes (mmap)
        S = self.small

        def linear(site, x, xname, y, n, quantized: set, acc=0, bucket=bucket):
            """y (+)= x @ W^T for the weight `site`, run as select.matmul_site decides; an
            8-bit copy of x is made once per producer and format (`quantized` names those
            already made)."""
            t = m.tensor(site)
            K, Mo = t.shape[0], t.n_rows
            plan = matmul_site(t.type.name, Mo, K, bucket, isa, acc, int_dot=self.int_dot,
                               q8k_min_tokens=self.q8k_min_tokens,
                               q8a_ok=self.qbuf.get(xname) is not None,
                               q8k_ok=(self.kbuf.get(xname) is not None
                                       and xname in self.q8k_sources),
                               row_panel=self.row_panels)
            w = self._repacked(t) if plan.layout == "row_panel" else W(site)
            if plan.act is None:
                P.op(site, plan.spec, w=w, x=x, y=y, n=n)
                return
            xq = (self.kbuf if plan.act == "q8k" else self.qbuf)[xname]
            key = xname + (":q8k" if plan.act == "q8k" else "")
            if key not in quantized:
                qop = ACT_COPIES[plan.act][0]
                P.op(f"{'quantize' if plan.act == 'q8a' else qop}.{site}",
                     choose(qop, "F32", isa, bucket, K=K), x=x, xq=xq, n=n)
                quantized.add(key)
            P.op(site, plan.spec, w=w, xq=xq, y=y, n=n)

        def spec(op, **dims):
            return choose(op, "F32", isa, bucket, **dims)

        def post_norm(name):
            """x += RMSNorm(o) with the weight `name` (Gemma's norm of a block's output)."""
            P.op(name, spec("rms_norm", K=c.n_embd, eps=c.rms_eps), x=self.o,
                 w=S[name + ".weight"], y=self.o, n=N)
            P.op(name + ".add", spec("add", K=c.n_embd, bcast=0), a=self.x, b=self.o, y=self.x,
                 n=N)

        hd, hdv, H, Hkv = c.head_dim, c.head_dim_v, c.n_head, c.n_head_kv
        BS = self.kv.block_size
        C = self.kv.table_ctx
        attn_dims = dict(H=H, Hkv=Hkv, D=hd, Dv=hdv, C=C, BS=BS, kv=self.kv_dtype,
                         scale=float(c.kq_scale))
        if c.attn_softcap:                           # Gemma 2 (absent otherwise: same kernels)
            attn_dims["softcap"] = float(c.attn_softcap)
        # the one-token program has no prompt-row attention: a one-token step with a prompt row
        # runs the next program (forward), so decode alone pays no empty op per layer
        split = self.split_attention and bucket > 1
        emb = m.tensor("token_embd.weight")
        moe = []                                     # (router blocks, expert ops) per layer

        # x = token_embd[tokens]
        embd_scale = {"scale": c.embd_scale} if c.embd_scale != 1.0 else {}   # Gemma: sqrt(n_embd)
        P.op("token_embd", choose("get_rows", emb.type.name, isa, bucket, K=c.n_embd,
                                  **embd_scale),
             w=W("token_embd.weight"), ids=self.tokens, y=self.x, n=N)
        act = {"act": c.ffn_act} if c.ffn_act != "silu" else {}                # Gemma: GeGLU
        for il in range(c.n_layer):
            b = f"blk.{il}."
            fresh: set = set()                          # Q8A / Q8K buffers made this block
            # ---- attention: h = RMSNorm(x); q, k, v = h Wq, h Wk, h Wv
            P.op(b + "attn_norm", spec("rms_norm", K=c.n_embd, eps=c.rms_eps),
                 x=self.x, w=S[b + "attn_norm.weight"], y=self.h, n=N)
            linear(b + "attn_q.weight", self.h, "h", self.q, N, fresh)
            P.no_barrier_before_next()
            linear(b + "attn_k.weight", self.h, "h", self.k, N, fresh)
            P.no_barrier_before_next()
            linear(b + "attn_v.weight", self.h, "h", self.v, N, fresh)
            if c.qkv_bias:                                       # Qwen2: + biases
                for name, buf, width in (("q", self.q, H * hd), ("k", self.k, Hkv * hd),
                                         ("v", self.v, Hkv * hdv)):
                    P.op(f"{b}attn_{name}.bias", spec("add", K=width, bcast=1),
                         a=buf, b=S[f"{b}attn_{name}.bias"], y=buf, n=N, barrier=False)
                P.barrier_after_last()
            if c.qk_norm:                                        # Qwen3: per-head RMSNorm
                P.op(b + "attn_q_norm", spec("rms_norm", K=hd, eps=c.rms_eps),
                     x=self.q, w=S[b + "attn_q_norm.weight"], y=self.q, n=N * H, barrier=False)
                P.op(b + "attn_k_norm", spec("rms_norm", K=hd, eps=c.rms_eps),
                     x=self.k, w=S[b + "attn_k_norm.weight"], y=self.k, n=N * Hkv)
            # ---- RoPE on q and k, then k, v into the cache
            rope = dict(D=hd, R=c.rope_dim, neox=int(c.rope_neox))
            cs = self.rope_cs[c.is_swa(il)]
            P.op(b + "rope_q", spec("rope", H=H, **rope), x=self.q, pos=self.pos,
                 cs=cs, n=N, barrier=False)
            P.op(b + "rope_k", spec("rope", H=Hkv, **rope), x=self.k, pos=self.pos,
                 cs=cs, n=N)
            kc, vc, bt = self.kv.k[il], self.kv.v[il], self.kv.tables
            P.op(b + "store_kv", spec("store_kv", Hkv=Hkv, D=hd, Dv=hdv, C=C, BS=BS,
                                      kv=self.kv_dtype),
                 k=self.k, v=self.v, kc=kc, vc=vc, pos=self.pos, seq=self.seq, bt=bt, n=N)
            # ---- attention over each token's prefix (through the block table); x += att Wo
            window = {"swa": c.swa} if c.is_swa(il) else {}   # sliding-window layer (Gemma)
            P.op(b + "attn", spec("attn_decode", **attn_dims, **window), q=self.q, kc=kc,
                 vc=vc, out=self.att, pos=self.pos, seq=self.seq, bt=bt, n=D if split else N)
            if split:      # prompt rows (after the decode rows): the prompt kernel, every program
                P.no_barrier_before_next()
                rows = {a: Dyn("d", arr.strides[0], arr)
                        for a, arr in (("q", self.q), ("out", self.att), ("pos", self.pos),
                                       ("seq", self.seq))}
                P.op(b + "attn_prompt", attn_prefill_spec(self.attn_type, isa,
                                                          max(bucket, PROMPT_STEP), **attn_dims,
                                                          **window),
                     kc=kc, vc=vc, bt=bt, n=PROMPT_ROWS, **rows)
            if c.post_norms:                         # Gemma: x += RMSNorm(att Wo)
                linear(b + "attn_output.weight", self.att, "att", self.o, N, fresh)
                post_norm(b + "post_attention_norm")
            else:
                linear(b + "attn_output.weight", self.att, "att", self.x, N, fresh, acc=1)
            # ---- feed-forward: x += (silu(h Wg) * (h Wu)) Wd, h = RMSNorm(x)
            P.op(b + "ffn_norm", spec("rms_norm", K=c.n_embd, eps=c.rms_eps),
                 x=self.x, w=S[b + "ffn_norm.weight"], y=self.h, n=N)
            fresh.difference_update(("h", "h:q8k"))
            if c.n_expert:
                moe.append(self._moe(P, b, bucket, linear, spec, fresh))
                continue
            linear(b + "ffn_gate.weight", self.h, "h", self.g, N, fresh)
            P.no_barrier_before_next()
            linear(b + "ffn_up.weight", self.h, "h", self.u, N, fresh)
            P.op(b + "ffn_swiglu", spec("swiglu", F=c.n_ff, **act), g=self.g, u=self.u, y=self.g,
                 n=N)
            if c.post_norms:                         # Gemma: x += RMSNorm(g Wd)
                linear(b + "ffn_down.weight", self.g, "g", self.o, N, fresh)
                post_norm(b + "post_ffw_norm")
            else:
                linear(b + "ffn_down.weight", self.g, "g", self.x, N, fresh, acc=1)
        # ---- output head over the rows that need logits
        P.op("output_rows", choose("get_rows", "F32", isa, head, K=c.n_embd),
             w=self.x, ids=self.rows, y=self.xo, n=M)
        P.op("output_norm", spec("rms_norm", K=c.n_embd, eps=c.rms_eps),
             x=self.xo, w=S["output_norm.weight"], y=self.ho, n=M)
        out_name = "token_embd.weight" if c.tied_embeddings else "output.weight"
        linear(out_name, self.ho, "ho", self.logits, M, set(), bucket=head)
        if c.final_softcap:                          # Gemma 2: logits = c tanh(logits / c)
            P.op("output_softcap", choose("softcap", "F32", isa, head, K=c.n_vocab,
                                          cap=float(c.final_softcap)),
                 x=self.logits, y=self.logits, n=M)
        prog = P.finish()
        for blocks, ops in moe:       # each router writes its experts' argument words
            blocks[...] = [[prog.arg_addrs[i] for i in trio] for trio in ops]
        return prog

    def _moe(self, P, b, bucket, linear, spec, fresh):
        """A mixture-of-experts FFN: router logits and their softmax, moe_route (top-k, the
        FFN inputs gathered by expert, and each expert's matmul arguments: its rows, its output
        rows and its token count, written at run time), every expert's gate and up matmuls
        (n = 0 for the experts no token picked: they return at once, so decode reads only the
        picked experts' weights), SwiGLU over all (token, expert) pairs, the down matmuls, and
        moe_combine (x += the weighted outputs, plus Qwen2-MoE's gated shared expert).
        Returns (the router's blocks array, [(gate, up, down) op indices per expert])."""
        c, isa, m = self.config, self.isa, self.model
        E, NU, FE = c.n_expert, c.n_expert_used, c.n_ff_exp
        linear(b + "ffn_gate_inp.weight", self.h, "h", self.router, N, fresh)
        P.op(b + "ffn_router_softmax", spec("softmax", K=E), x=self.router, n=N)
        per_expert = max(1, bucket * NU // E)      # tokens an expert sees in such a step
        tg, tu, td = (m.tensor(f"{b}ffn_{name}_exps.weight") for name in ("gate", "up", "down"))
        sg, su, sd = (matmul_site(t.type.name, M_, K_, bucket, isa, int_dot=self.int_dot,
                                  q8k_min_tokens=self.q8k_min_tokens, row_panel=False,
                                  tile_tokens=per_expert)
                      for t, M_, K_ in ((tg, FE, c.n_embd), (tu, FE, c.n_embd),
                                        (td, c.n_embd, FE)))
        if sg.act != su.act:                   # gate and up read one copy of the inputs
            sg, su = (matmul_site(t.type.name, FE, c.n_embd, bucket, isa, int_dot=False,
                                  tile_tokens=per_expert) for t in (tg, tu))
        row_bytes = lambda act, k: ACT_COPIES[act][1](k) if act else 4 * k   # noqa: E731
        blocks = np.zeros((E, 3), np.int64)
        outs = np.array([self.eg.ctypes.data, self.eu.ctypes.data, self.ed.ctypes.data,
                         (self.xgq if sg.act else self.xg).ctypes.data,
                         (self.egq if sd.act else self.eg).ctypes.data], np.int64)
        P.op(b + "ffn_route", spec("moe_route", E=E, NU=NU, K=c.n_embd, F=FE,
                                   norm=int(c.moe_norm), XS=row_bytes(sg.act, c.n_embd),
                                   DS=row_bytes(sd.act, FE)),
             probs=self.router, h=self.h, xg=self.xg, pos=self.epos, wgt=self.ewgt,
             blocks=blocks, outs=outs, n=N)
        if sg.act:
            P.op(b + "ffn_exps_quantize", choose(ACT_COPIES[sg.act][0], "F32", isa, bucket,
                                                 K=c.n_embd), x=self.xg, xq=self.xgq, n=N * NU)
        ops = [[0, 0, 0] for _ in range(E)]
        for j, (name, t, site, M_) in enumerate((("gate", tg, sg, FE), ("up", tu, su, FE),
                                                  ("down", td, sd, c.n_embd))):
            size = M_ * t.row_bytes
            xname = "xq" if site.act else "x"
            for e in range(E):       # x, y and n are written by moe_route before every step
                ops[e][j] = P.op(f"{b}ffn_{name}_exps.{e}", site.spec, barrier=False,
                                 w=t.data[e * size:(e + 1) * size], y=0, n=0, **{xname: 0})
            if name != "gate":
                P.barrier_after_last()
            if name == "up":
                P.op(b + "ffn_exps_swiglu", spec("swiglu", F=FE), g=self.eg, u=self.eu,
                     y=self.eg, n=N * NU)
                if sd.act:
                    P.op(b + "ffn_exps_quantize_down", choose(ACT_COPIES[sd.act][0], "F32", isa,
                                                              bucket, K=FE),
                         x=self.eg, xq=self.egq, n=N * NU)
        if c.n_ff_shexp:
            linear(b + "ffn_gate_shexp.weight", self.h, "h", self.g, N, fresh)
            P.no_barrier_before_next()
            linear(b + "ffn_up_shexp.weight", self.h, "h", self.u, N, fresh)
            P.op(b + "ffn_shexp_swiglu", spec("swiglu", F=c.n_ff_shexp), g=self.g, u=self.u,
                 y=self.g, n=N)
            linear(b + "ffn_down_shexp.weight", self.g, "g", self.ys, N, fresh)
            P.op(b + "ffn_gate_inp_shexp", choose("matmul", "F32", isa, bucket, M=1,
                                                  K=c.n_embd, acc=0),
                 w=self.small[b + "ffn_gate_inp_shexp.weight"], x=self.h, y=self.sg, n=N)
        P.op(b + "ffn_moe_combine", spec("moe_combine", K=c.n_embd, NU=NU,
                                         shexp=int(bool(c.n_ff_shexp))),
             x=self.x, d=self.ed, pos=self.epos, wgt=self.ewgt, ys=self.ys, sg=self.sg, n=N)
        return blocks, ops


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
        w = self.small["output_norm.weight"]
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.config.rms_eps)
                * w).astype(np.float32)

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
    def _repacked(self, t) -> np.ndarray:
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
