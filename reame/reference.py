"""The numpy reference engine: the oracle every faster engine is checked against.

Plain float32 math on weights dequantised once with `gguf.quants.dequantize`. `forward` runs the
model's step as reame/graph.py builds it (the same nodes the JIT compiles), one small method per
graph op; the per-op numerics (rms_norm, rotate, softcap, softmax, silu, gelu) are the op files'
(codegen/ops/*), which check the kernels with the same functions in float64. Attention is each
token's loop over its own cached prefix."""

from __future__ import annotations

import numpy as np

from . import graph as graph_
from .batch import Batch
from .codegen import q8a, q8k
from .codegen.ops.moe_route import route
from .codegen.ops.rms_norm import rms_norm
from .codegen.ops.rope import rope_angles, rotate as apply_rope
from .codegen.ops.softcap import softcap
from .codegen.ops.softmax import softmax
from .codegen.ops.swiglu import gelu, silu
from .kv_cache import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_CTX, PagedKVCache
from .model import Model
from .tensor_types import PROMPT_STEP


class ReferenceEngine:
    """Forward passes in numpy over a paged KV cache: `max_seqs` slots of up to `n_ctx` tokens
    in a pool of `kv_blocks` blocks (default: a whole context per slot)."""

    name = "reference"
    kernel_plan = None              # numpy: no kernels to tune (reame/kernel_plan.py)
    max_tokens = max_logits = None  # any step size (reame/engine_api.py)
    attn_type = "f32"

    def __init__(self, model: Model, n_ctx: int | None = None, max_seqs: int = 4,
                 kv_dtype: str = "f32", act_quant: bool = False,
                 q8k_min_tokens: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 kv_blocks: int | None = None, graph: list | None = None, isa=None):
        self.model, self.config = model, model.config
        self.graph = graph if graph is not None else graph_.build(model.config)
        c = self.config
        self.kv = PagedKVCache(c.n_layer, max_seqs, c.n_head_kv,
                               n_ctx or min(c.n_ctx_train, DEFAULT_MAX_CTX), c.head_dim,
                               c.head_dim_v, kv_dtype, block_size, kv_blocks)
        self.n_ctx = self.kv.n_ctx
        w = {name: t.dequantize() for name, t in model.tensors.items()}
        self.w = w
        self.out_name = "token_embd.weight" if c.tied_embeddings else "output.weight"
        self.freq_factors = model.rope_factors(self.n_ctx)
        # act_quant: round the input of every quantised-weight product through Q8A, as the JIT's
        # integer-dot kernels (and llama.cpp's) do; the oracle for that path
        self.act_quant = {name for name, t in model.tensors.items()
                          if act_quant and t.type.int_dot and t.shape[0] % 32 == 0}
        # ... and through Q8K instead (one scale per 256 values) for K-quant weights in steps of
        # >= q8k_min_tokens tokens, as the JIT engine does with the same setting (matmul_q8k)
        self.q8k_min_tokens = q8k_min_tokens
        self.act_q8k = {name for name, t in model.tensors.items()
                        if act_quant and t.type.act_format == "q8k" and t.shape[0] % 256 == 0}
        # ... in prompt chunks too where codegen/ops/matmul_q8k.prompt_q8k says so at `isa`'s
        # level (default: this machine's, the level a JIT engine takes by default)
        if self.act_q8k:
            from .codegen.isa import detect
            from .codegen.ops.matmul_q8k import prompt_q8k
            isa = isa or detect()
            self.prompt_q8k = {name for name in self.act_q8k
                               if prompt_q8k(model.tensors[name].type.name, isa)}
        else:
            self.prompt_q8k = set()
        self._step_tokens = 0

    def act_format(self, name: str) -> str | None:
        """How the JIT rounds the activations that meet weight `name`: "q8k", "q8a" or None
        (prompt chunks: by codegen/ops/matmul_q8k.prompt_q8k at the engine's `isa` level, as a
        JIT engine at that level decides)."""
        if (name in self.act_q8k and self.q8k_min_tokens is not None
                and self._step_tokens >= self.q8k_min_tokens
                and (self._step_tokens < PROMPT_STEP or name in self.prompt_q8k)):
            return "q8k"
        return "q8a" if name in self.act_quant else None

    @staticmethod
    def rounded(x: np.ndarray, fmt: str | None) -> np.ndarray:
        if fmt == "q8k":
            return q8k.dequantize_rows(q8k.quantize_rows(x), x.shape[1])
        if fmt == "q8a":
            return q8a.dequantize_rows(q8a.quantize_rows(x), x.shape[1])
        return x

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """x @ W^T for the weight `name` (x [n, K] -> [n, rows of W])."""
        return self.rounded(x, self.act_format(name)) @ self.w[name].T

    def forward(self, batch: Batch) -> np.ndarray:
        """Logits [len(batch.logits_rows), n_vocab] for a batch of tokens (see Batch): the
        model's graph (reame/graph.py), node by node, each op below in numpy."""
        c = self.config
        self._step_tokens = len(batch)             # the JIT picks Q8A or Q8K by step size
        self.kv.check(batch.positions, batch.seq_ids)
        self._angles = {swa: rope_angles(c.rope_config(swa), batch.positions, self.freq_factors)
                        for swa in {c.is_swa(il) for il in range(c.n_layer)}}
        env = {"tokens": batch.tokens, "pos": batch.positions}
        for node in self.graph:
            env[node.out] = getattr(self, "op_" + node.op)(node, env, batch)
        self._last_x = env["x"]                                       # for final_hidden()
        return env["logits"]                                          # [m, n_vocab]

    # ---- the graph's ops (reame/graph.OPS); activations are [tokens, width] float32

    def op_embed(self, node, env, batch):
        x = self.w[node.weight][env["tokens"]]                        # [n, n_embd]
        scale = node.attr("scale")                                    # Gemma: * sqrt(n_embd)
        return x * np.float32(scale) if scale else x

    def op_rms_norm(self, node, env, batch):
        x = env[node.ins[0]]
        n, width, heads = *x.shape, node.attr("heads")               # Qwen3's q/k: per head
        y = rms_norm(x.reshape(n, heads, width // heads), self.w[node.weight], node.attr("eps"))
        return y.reshape(n, width)

    def op_linear(self, node, env, batch):
        y = self.linear(env[node.ins[0]], node.weight)
        return env[node.out] + y if node.attr("acc") else y

    def op_add(self, node, env, batch):
        a = env[node.ins[0]]
        return a + (self.w[node.weight] if node.weight else env[node.ins[1]])

    def op_rope(self, node, env, batch):
        c, x = self.config, env[node.ins[0]]
        (n, width), heads = x.shape, node.attr("heads")
        cos, sin = self._angles[node.attr("swa")]
        y = apply_rope(x.reshape(n, heads, width // heads), cos, sin, c.rope_dim, c.rope_neox)
        return y.reshape(n, width)

    def op_store_kv(self, node, env, batch):
        c, n = self.config, len(batch)
        k = env["k"].reshape(n, c.n_head_kv, c.head_dim)
        v = env["v"].reshape(n, c.n_head_kv, c.head_dim_v)
        self.kv.store(node.layer, batch.seq_ids, batch.positions, k, v)   # cache first: causal
        return None

    def op_attention(self, node, env, batch):
        """Each token over its own prefix; grouped-query heads share a KV head; a sliding
        window keeps the last `window` positions."""
        c, n = self.config, len(batch)
        pos, seq, window = batch.positions, batch.seq_ids, node.attr("window")
        q = env["q"].reshape(n, c.n_head, c.head_dim)
        att = np.empty((n, c.n_head, c.head_dim_v), dtype=np.float32)
        for i in range(n):
            keys, vals = self.kv.prefix(node.layer, seq[i], pos[i] + 1)   # [n_head_kv, T, d]
            if window:
                keys, vals = keys[:, -window:], vals[:, -window:]
            for hq in range(c.n_head):
                hk = hq // c.n_gqa
                s = softcap(keys[hk] @ q[i, hq] * c.kq_scale, c.attn_softcap)   # [T]
                s = np.exp(s - s.max())
                att[i, hq] = (s / s.sum()) @ vals[hk]
        return att.reshape(n, -1)

    def op_glu(self, node, env, batch):
        return (gelu if node.attr("act") == "gelu" else silu)(env["g"]) * env["u"]

    def op_moe(self, node, env, batch):
        return env["x"] + self.moe(env["h"], f"blk.{node.layer}.")

    def op_rows(self, node, env, batch):
        return env[node.ins[0]][batch.logits_rows]

    def op_softcap(self, node, env, batch):
        return softcap(env[node.ins[0]], node.attr("cap"))

    def moe(self, h: np.ndarray, p: str) -> np.ndarray:
        """Mixture-of-experts FFN: each token's n_expert_used experts by the softmax of the
        router logits (weights renormalised to sum 1 where the architecture does), their SwiGLU
        outputs summed with those weights; plus the shared expert gated by a sigmoid (Qwen2-MoE).
        Expert inputs are rounded as the JIT's expert kernels read them (gate and up alike:
        unrounded when their two weights' formats differ)."""
        c, w = self.config, self.w
        probs = softmax(self.linear(h, p + "ffn_gate_inp.weight"))          # [n, E]
        top, wts = route(probs, c.n_expert_used, c.moe_norm)                # [n, k] each
        out = np.zeros_like(h)
        names = [p + f"ffn_{m}_exps.weight" for m in ("gate", "up", "down")]
        gate, up, down = (w[name] for name in names)
        fg, fu, fd = (self.act_format(name) for name in names)
        hx = self.rounded(h, fg if fg == fu else None)
        for e in np.unique(top):
            t, j = np.nonzero(top == e)
            g = silu(hx[t] @ gate[e].T) * (hx[t] @ up[e].T)
            out[t] += (self.rounded(g, fd) @ down[e].T) * wts[t, j][:, None]
        if c.n_ff_shexp:
            g = silu(self.linear(h, p + "ffn_gate_shexp.weight")) * \
                self.linear(h, p + "ffn_up_shexp.weight")
            s = self.linear(g, p + "ffn_down_shexp.weight")
            out = out + s / (1 + np.exp(-(h @ w[p + "ffn_gate_inp_shexp.weight"])))[:, None]
        return out

    def close(self) -> None:
        """Nothing to release: no threads of its own."""

    def final_hidden(self, lo: int, hi: int) -> np.ndarray:
        """The final hidden states (after the output norm) of tokens lo..hi-1 of the last
        forward's batch: what embeddings pool."""
        return rms_norm(self._last_x[lo:hi], self.w["output_norm.weight"], self.config.rms_eps)
