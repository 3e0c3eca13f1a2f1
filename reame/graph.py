"""A model's step as data: the forward pass built once, as op nodes over named buffers.

`build(config)` lays out one step of every architecture Reame runs (Llama and its variations:
Qwen2's q/k/v biases, Qwen3's per-head q/k norms, Gemma's scaled embeddings, post-norms, GeGLU
and soft-caps, sliding-window layers, mixture-of-experts FFNs), the model's traits deciding in
this one place which nodes exist. Both engines run the same list: the reference engine
interprets it with numpy (reame/reference.py), the JIT engine plans a kernel for every node and
compiles it (reame/jit/plan.py). A new architecture or trait is an edit here (and its config
field in reame/config.py); docs/design.md shows one.

Buffers are named by what they hold, per token of the step unless said: `tokens` (ids), `x`
(the residual stream), `h` (a block's normed input), `q`, `k`, `v`, `att` (attention output, all
heads), `o` (a block's output before its post-norm), `g`, `u` (the FFN's gate and up; `g` then
holds act(g) * u), `kv.<layer>` (the layer's KV cache), and per logits row `xo` (the residual
rows that need logits), `ho` (their output norm) and `logits`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import ModelConfig

# what each node op does (the engines implement every one; attrs in brackets)
OPS = {
    "embed": "out = weight[tokens] (* scale)",
    "rms_norm": "out = RMSNorm(in) * weight, per head when heads > 1 [eps, heads]",
    "linear": "out (+)= in @ weight^T [acc]",
    "add": "out = in + weight (a bias) or in[0] + in[1] (a residual)",
    "rope": "rotate the first rope_dim dims of every head [heads, swa]",
    "store_kv": "k, v into the layer's cache at the tokens' positions",
    "attention": "each token over its cached prefix (grouped-query) [window]",
    "glu": "g = act(g) * u [act, width]",
    "moe": "out += the routed experts' FFNs (and a gated shared expert)",
    "rows": "out = in[the rows that need logits]",
    "softcap": "out = cap * tanh(in / cap) [cap]",
}


@dataclass(frozen=True)
class Node:
    op: str                          # one of OPS
    site: str                        # the op site, named like the GGUF tensor it reads
    ins: tuple[str, ...]             # buffers read
    out: str                         # buffer written
    weight: str | None = None        # the GGUF tensor it reads
    layer: int = -1
    rows: str = "n"                  # "n": one row per token of the step; "m": per logits row
    attrs: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"graph op {self.op!r}: not one of {sorted(OPS)}")

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)


def build(c: ModelConfig) -> list[Node]:
    """One step's nodes, in the order they run."""
    scale = {"scale": c.embd_scale} if c.embd_scale != 1.0 else {}       # Gemma: * sqrt(n_embd)
    g = [Node("embed", "token_embd", ("tokens",), "x", "token_embd.weight", attrs=scale)]
    for il in range(c.n_layer):
        g += attention_block(c, il)
        g += ffn_block(c, il)
    return g + head(c)


def rms_norm(c: ModelConfig, b: str, name: str, src: str, dst: str, il: int = -1,
             heads: int = 1, rows: str = "n") -> Node:
    return Node("rms_norm", b + name, (src,), dst, b + name + ".weight", il, rows,
                {"eps": c.rms_eps, "heads": heads})


def linear(b: str, name: str, src: str, dst: str, il: int = -1, acc: bool = False,
           rows: str = "n") -> Node:
    weight = b + name + ".weight"
    return Node("linear", weight, (src,) + ((dst,) if acc else ()), dst, weight, il, rows,
                {"acc": int(acc)})


def block_output(c: ModelConfig, b: str, name: str, src: str, il: int, post_norm: str) -> list:
    """x += src @ W (Gemma: x += RMSNorm(src @ W), the block's post-norm)."""
    if not c.post_norms:
        return [linear(b, name, src, "x", il, acc=True)]
    return [linear(b, name, src, "o", il),
            rms_norm(c, b, post_norm, "o", "o", il),
            Node("add", b + post_norm + ".add", ("x", "o"), "x", layer=il)]


def attention_block(c: ModelConfig, il: int) -> list[Node]:
    """h = RMSNorm(x); q, k, v = h Wq, h Wk, h Wv (+ biases; per-head norms); RoPE; k, v into
    the cache; attention over each token's prefix; x += att Wo."""
    b = f"blk.{il}."
    nodes = [rms_norm(c, b, "attn_norm", "x", "h", il)]
    nodes += [linear(b, f"attn_{m}", "h", m, il) for m in "qkv"]
    if c.qkv_bias:                                                       # Qwen2
        nodes += [Node("add", f"{b}attn_{m}.bias", (m,), m, f"{b}attn_{m}.bias", il)
                  for m in "qkv"]
    if c.qk_norm:                                                        # Qwen3: per head
        nodes += [rms_norm(c, b, f"attn_{m}_norm", m, m, il, heads=n)
                  for m, n in (("q", c.n_head), ("k", c.n_head_kv))]
    swa = c.is_swa(il)                                 # Gemma 3: windowed layers' own RoPE base
    nodes += [Node("rope", f"{b}rope_{m}", (m, "pos"), m, layer=il, attrs={"heads": n, "swa": swa})
              for m, n in (("q", c.n_head), ("k", c.n_head_kv))]
    nodes.append(Node("store_kv", b + "store_kv", ("k", "v", "pos"), f"kv.{il}", layer=il))
    nodes.append(Node("attention", b + "attn", ("q", f"kv.{il}", "pos"), "att", layer=il,
                      attrs={"window": c.swa if swa else 0}))
    return nodes + block_output(c, b, "attn_output", "att", il, "post_attention_norm")


def ffn_block(c: ModelConfig, il: int) -> list[Node]:
    """h = RMSNorm(x); x += (act(h Wg) * (h Wu)) Wd (SwiGLU; Gemma: GeGLU), or the experts'."""
    b = f"blk.{il}."
    nodes = [rms_norm(c, b, "ffn_norm", "x", "h", il)]
    if c.n_expert:
        return nodes + [Node("moe", b + "ffn_moe", ("h", "x"), "x", layer=il)]
    nodes += [linear(b, "ffn_gate", "h", "g", il), linear(b, "ffn_up", "h", "u", il),
              Node("glu", b + "ffn_swiglu", ("g", "u"), "g", layer=il,
                   attrs={"act": c.ffn_act, "width": c.n_ff})]
    return nodes + block_output(c, b, "ffn_down", "g", il, "post_ffw_norm")


def head(c: ModelConfig) -> list[Node]:
    """logits = RMSNorm(x[rows]) @ W_out^T (Gemma 2: soft-capped), for the rows that need them."""
    out = "token_embd" if c.tied_embeddings else "output"
    nodes = [Node("rows", "output_rows", ("x",), "xo", rows="m"),
             rms_norm(c, "", "output_norm", "xo", "ho", rows="m"),
             linear("", out, "ho", "logits", rows="m")]
    if c.final_softcap:
        nodes.append(Node("softcap", "output_softcap", ("logits",), "logits", rows="m",
                          attrs={"cap": c.final_softcap}))
    return nodes
