"""The typed model configuration read from GGUF metadata, and the tensors each architecture needs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import ModelError

# How each supported architecture differs from plain Llama.
#   rope_neox: rotate the two halves of a head (NeoX) instead of adjacent pairs (GPT-J / "normal")
#   qkv_bias:  attn_q/k/v carry a bias ("required", "optional" or "none")
#   qk_norm:   per-head RMSNorm of q and k before RoPE (Qwen3)
#   fused_ffn: one ffn_up [n_embd, 2 n_ff] holds gate (first half) and up (Phi-3); its q/k/v may
#              be one attn_qkv [n_embd, q + k + v] too. Reame reads both through row views
#              (model.unfuse), so the forward pass is Llama's.
#   gemma:     Gemma 2 / 3: embeddings scaled by sqrt(n_embd), RMSNorm after attention and after
#              the FFN too (post_attention_norm, post_ffw_norm), GeGLU (tanh GELU) instead of
#              SwiGLU, sliding-window attention on some layers (swa_pattern: of every n layers,
#              the last is global), Gemma 2's soft-capped attention scores and logits
ARCHITECTURES = {
    "llama": dict(rope_neox=False, qkv_bias="optional", qk_norm=False),
    "qwen2": dict(rope_neox=True, qkv_bias="required", qk_norm=False),
    "qwen3": dict(rope_neox=True, qkv_bias="none", qk_norm=True),
    "phi3": dict(rope_neox=True, qkv_bias="none", qk_norm=False, fused_ffn=True),
    # mixture of experts (moe_norm: the selected experts' weights are renormalised to sum 1;
    # Mixtral is `llama` with an expert_count)
    "qwen2moe": dict(rope_neox=True, qkv_bias="required", qk_norm=False, moe_norm=False),
    "qwen3moe": dict(rope_neox=True, qkv_bias="none", qk_norm=True, moe_norm=True),
    "gemma2": dict(rope_neox=True, qkv_bias="none", qk_norm=False, gemma=True, swa_pattern=2,
                   swa_default=4096, attn_softcap=50.0, final_softcap=30.0, swa_rope_scaled=True,
                   big_layers=46),
    "gemma3": dict(rope_neox=True, qkv_bias="none", qk_norm=True, gemma=True, swa_pattern=6,
                   swa_default=0, attn_softcap=0.0, final_softcap=0.0, swa_rope_scaled=False,
                   big_layers=62),
}


@dataclass(frozen=True)
class RopeScaling:
    type: str = "none"            # none | linear | yarn
    factor: float = 1.0
    orig_ctx: int = 0             # context length the model was trained with (yarn)
    ext_factor: float = 0.0       # yarn: mix of extrapolation (1.0 for yarn)
    attn_factor: float = 1.0      # magnitude scale of cos/sin (yarn: times 1 + 0.1 ln factor)
    beta_fast: float = 32.0
    beta_slow: float = 1.0


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    name: str
    n_vocab: int
    n_embd: int                   # hidden size
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int                 # per-head size of q and k
    head_dim_v: int               # per-head size of v
    n_ff: int                     # feed-forward (SwiGLU) inner size
    n_ctx_train: int              # context length the model was trained for
    rms_eps: float
    rope_neox: bool
    rope_dim: int                 # leading dims of each head that RoPE rotates
    rope_theta: float
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    has_rope_freqs: bool = False  # rope_freqs.weight divides the frequencies (Llama 3.1)
    qkv_bias: bool = False
    qk_norm: bool = False
    tied_embeddings: bool = False  # no output.weight: the head reuses token_embd.weight
    fused_qkv: bool = False       # the file has attn_qkv instead of attn_q/k/v (Phi-3)
    fused_ffn: bool = False       # the file's ffn_up holds gate and up (Phi-3)
    rope_long_short: bool = False  # rope_factors_long/short.weight (Phi-3 LongRoPE)
    n_expert: int = 0             # mixture of experts: experts per layer (0: a dense FFN)
    n_expert_used: int = 0        # experts each token is routed to (top-k of the softmax)
    n_ff_exp: int = 0             # inner size of one expert
    n_ff_shexp: int = 0           # inner size of the shared expert (Qwen2-MoE; 0: none)
    moe_norm: bool = False        # renormalise the selected experts' weights to sum 1
    # Gemma 2 / 3
    embd_scale: float = 1.0       # the embeddings are multiplied by this (Gemma: sqrt(n_embd))
    post_norms: bool = False      # RMSNorm of the attention and FFN outputs before the residual
    ffn_act: str = "silu"         # gated FFN activation: silu (SwiGLU) or gelu (GeGLU, tanh form)
    attn_scale: float = 0.0       # score scale (0: 1/sqrt(head_dim))
    attn_softcap: float = 0.0     # scores become c * tanh(s / c) (0: none)
    final_softcap: float = 0.0    # logits become c * tanh(x / c) (0: none)
    swa: int = 0                  # sliding window: a token sees the last `swa` positions
    swa_layers: tuple[bool, ...] = ()   # per layer: does it use the window
    swa_rope_theta: float = 0.0   # RoPE base of the windowed layers (0: rope_theta)
    swa_rope_scaled: bool = True  # whether rope_scaling applies to the windowed layers too

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv

    @property
    def kq_scale(self) -> float:
        return self.attn_scale or 1.0 / math.sqrt(self.head_dim)

    def is_swa(self, il: int) -> bool:
        return bool(self.swa_layers) and self.swa_layers[il]

    def rope_config(self, swa: bool) -> "ModelConfig":
        """The config whose rope_theta / rope_scaling a layer's RoPE uses (windowed layers may
        have their own base and no scaling: Gemma 3)."""
        if not swa:
            return self
        return replace(self, rope_theta=self.swa_rope_theta or self.rope_theta,
                       rope_scaling=self.rope_scaling if self.swa_rope_scaled else RopeScaling())


def config_from_gguf(gf) -> ModelConfig:
    """Build and check the config of an opened GGUFFile. Raises ModelError with the problem."""
    md, path = gf.metadata, gf.path
    arch = md.get("general.architecture")
    if arch is None:
        raise ModelError(path, "missing general.architecture in the GGUF metadata")
    if arch not in ARCHITECTURES:
        raise ModelError(path, f"unsupported architecture {arch!r} (supported: "
                               f"{', '.join(ARCHITECTURES)})")
    traits = ARCHITECTURES[arch]

    def typed(key: str, v, kind):
        """v as kind (int, float; None: as stored), or a ModelError naming the key."""
        if kind is None:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                kind is int and not isinstance(v, int)):
            raise ModelError(path, f"metadata key {arch}.{key} is {v!r:.40}, expected "
                                   f"{'an integer' if kind is int else 'a number'}")
        return kind(v)

    def req(key: str, kind=int):
        v = md.get(f"{arch}.{key}")
        if v is None:
            raise ModelError(path, f"missing metadata key {arch}.{key}")
        return typed(key, v, kind)

    def opt(key: str, default, kind=int):
        v = md.get(f"{arch}.{key}")
        return default if v is None else typed(key, v, kind)

    def positive(key: str, v: int) -> int:
        """v, or a ModelError when it is below 1 (a size or count that shapes buffers)."""
        if v < 1:
            raise ModelError(path, f"metadata key {arch}.{key} is {v}, expected at least 1")
        return v

    n_expert, n_expert_used = opt("expert_count", 0), opt("expert_used_count", 0)
    if n_expert and not 0 < n_expert_used <= n_expert:
        raise ModelError(path, f"expert_used_count {n_expert_used} does not fit expert_count "
                               f"{n_expert}")
    if n_expert and arch not in ("llama", "qwen2moe", "qwen3moe"):
        raise ModelError(path, f"mixture-of-experts {arch} models are not supported")
    if arch in ("qwen2moe", "qwen3moe") and not n_expert:
        raise ModelError(path, f"missing metadata key {arch}.expert_count")
    n_embd = positive("embedding_length", req("embedding_length"))
    n_head = req("attention.head_count")
    n_head_kv = opt("attention.head_count_kv", n_head, kind=None)
    if isinstance(n_head_kv, np.ndarray) and n_head_kv.dtype.kind in "iu":
        values = set(int(x) for x in n_head_kv)  # per-layer arrays: only uniform ones are supported
        if len(values) != 1:
            raise ModelError(path, "per-layer head counts are not supported")
        n_head_kv = values.pop()
    n_head_kv = typed("attention.head_count_kv", n_head_kv, int)
    if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv:
        raise ModelError(path, f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    head_dim = opt("attention.key_length", n_embd // n_head)
    if f"{arch}.attention.key_length" in md:
        positive("attention.key_length", head_dim)
    elif head_dim < 1:
        raise ModelError(path, f"head_count {n_head} is larger than embedding_length {n_embd}")
    head_dim_v = positive("attention.value_length", opt("attention.value_length", head_dim))
    rope_dim = opt("rope.dimension_count", head_dim)
    if not 0 < rope_dim <= head_dim or rope_dim % 2:
        raise ModelError(path, f"rope.dimension_count {rope_dim} does not fit head size {head_dim}")

    scaling = RopeScaling()
    stype = opt("rope.scaling.type", "none", kind=None)
    factor = opt("rope.scaling.factor", 0.0, kind=float)
    if stype in ("linear", "yarn") and factor > 1.0:
        if stype == "linear":
            scaling = RopeScaling("linear", factor)
        else:
            scaling = RopeScaling(
                "yarn", factor,
                orig_ctx=opt("rope.scaling.original_context_length", opt("context_length", 0)),
                ext_factor=1.0,
                attn_factor=opt("rope.scaling.attn_factor", 1.0, kind=float),
                beta_fast=opt("rope.scaling.yarn_beta_fast", 32.0, kind=float),
                beta_slow=opt("rope.scaling.yarn_beta_slow", 1.0, kind=float))
    elif stype not in ("none", "linear", "yarn"):
        raise ModelError(path, f"unsupported rope scaling type {stype!r}")
    elif f"{arch}.rope.scaling.attn_factor" in md:       # e.g. Phi-3 LongRoPE: cos/sin scale
        scaling = RopeScaling(attn_factor=opt("rope.scaling.attn_factor", 1.0, kind=float),
                              orig_ctx=opt("rope.scaling.original_context_length",
                                           opt("context_length", 0)))
    if "rope_factors_long.weight" in gf.tensors and not scaling.orig_ctx:
        scaling = replace(scaling, orig_ctx=opt("rope.scaling.original_context_length",
                                                opt("context_length", 0)))
    if scaling.type == "yarn" and scaling.orig_ctx < 1:
        raise ModelError(path, f"yarn rope scaling with an original context of {scaling.orig_ctx} "
                               f"({arch}.rope.scaling.original_context_length, else "
                               "context_length): expected at least 1")
    rope_theta = opt("rope.freq_base", 10000.0, kind=float)
    if not rope_theta > 0:
        raise ModelError(path, f"metadata key {arch}.rope.freq_base is {rope_theta}, expected a "
                               "positive number")

    # every per-layer table (tensor names, window flags, caches) is as long as block_count:
    # checked against the blocks the file has tensors for before anything is built from it
    n_layer = positive("block_count", req("block_count"))
    n_blocks = len({name.split(".", 2)[1] for name in gf.tensors if name.startswith("blk.")})
    if n_layer > n_blocks:
        raise ModelError(path, f"metadata key {arch}.block_count is {n_layer:,}, but the file "
                               f"has tensors for {n_blocks} blocks")
    n_ctx_train = positive("context_length", opt("context_length", 2048))
    gemma = {}
    if traits.get("gemma"):
        gemma = _gemma_traits(arch, traits, n_layer, n_embd, n_head, head_dim, opt, md, path)

    emb = gf.tensors.get("token_embd.weight")
    if emb is None:
        raise ModelError(path, "missing tensor token_embd.weight")
    if len(emb.shape) != 2:
        raise ModelError(path, f"tensor token_embd.weight has shape {list(emb.shape)}, expected "
                               "2 dimensions [n_embd, n_vocab]")
    n_vocab = emb.shape[1]
    tokens = md.get("tokenizer.ggml.tokens")
    n_tokens = len(tokens) if isinstance(tokens, (list, np.ndarray)) else 0
    if n_vocab < max(n_tokens, 1):         # a token id past the rows would index out of them
        raise ModelError(path, f"tensor token_embd.weight has {n_vocab:,} rows for a vocabulary "
                               f"of {n_tokens:,} tokens" if n_tokens else
                               "tensor token_embd.weight has no rows")
    return ModelConfig(
        arch=arch,
        name=str(md.get("general.name", arch)),
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=int(n_head_kv),
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        n_ff=opt("feed_forward_length", 0) if n_expert else positive(
            "feed_forward_length", req("feed_forward_length")),
        n_ctx_train=n_ctx_train,
        rms_eps=opt("attention.layer_norm_rms_epsilon", 1e-5, kind=float),
        rope_neox=traits["rope_neox"],
        rope_dim=rope_dim,
        rope_theta=rope_theta,
        rope_scaling=scaling,
        has_rope_freqs="rope_freqs.weight" in gf.tensors,
        qkv_bias=traits["qkv_bias"] == "required" or (
            traits["qkv_bias"] == "optional" and "blk.0.attn_q.bias" in gf.tensors),
        qk_norm=traits["qk_norm"],
        tied_embeddings="output.weight" not in gf.tensors,
        fused_qkv="blk.0.attn_qkv.weight" in gf.tensors,
        fused_ffn=traits.get("fused_ffn", False),
        rope_long_short="rope_factors_long.weight" in gf.tensors,
        n_expert=n_expert,
        n_expert_used=n_expert_used if n_expert else 0,
        n_ff_exp=(opt("expert_feed_forward_length", 0) or opt("feed_forward_length", 0))
        if n_expert else 0,
        n_ff_shexp=opt("expert_shared_feed_forward_length", 0) if n_expert else 0,
        moe_norm=traits.get("moe_norm", True) if n_expert else False,
        **gemma,
    )


def _gemma_traits(arch, traits, n_layer, n_embd, n_head, head_dim, opt, md, path) -> dict:
    """Gemma 2 / 3's config fields, read as llama.cpp reads them (src/models/gemma2.cpp,
    gemma3.cpp): the window (Gemma 2: 4096 unless given; Gemma 3: windowed layers only when
    attention.sliding_window is given), which layers use it (attention.sliding_window_pattern:
    a per-layer array, or n: of every n layers the last is global), Gemma 3's own RoPE base for
    windowed layers (rope.freq_base_swa, default 10000, unscaled), and the score scale
    (1/sqrt(n_embd / n_head) for the 27B models, recognised by depth, else 1/sqrt(head_dim))."""
    swa = opt("attention.sliding_window", traits["swa_default"])
    pattern = md.get(f"{arch}.attention.sliding_window_pattern", traits["swa_pattern"])
    if swa and swa < 0:
        raise ModelError(path, f"metadata key {arch}.attention.sliding_window is {swa}")
    if not swa:
        layers = ()
    elif isinstance(pattern, (list, tuple, np.ndarray)):
        if len(pattern) != n_layer:
            raise ModelError(path, f"{arch}.attention.sliding_window_pattern has {len(pattern)} "
                                   f"entries for {n_layer} layers")
        layers = tuple(bool(x) for x in pattern)
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 0:
        layers = tuple(pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer))
    else:
        raise ModelError(path, f"metadata key {arch}.attention.sliding_window_pattern is "
                               f"{pattern!r:.40}, expected an integer or a per-layer array")
    big = n_layer == traits["big_layers"]
    return dict(
        embd_scale=float(np.float32(math.sqrt(n_embd))), post_norms=True, ffn_act="gelu",
        attn_scale=1.0 / math.sqrt(n_embd // n_head if big else head_dim),
        attn_softcap=opt("attn_logit_softcapping", traits["attn_softcap"], kind=float),
        final_softcap=opt("final_logit_softcapping", traits["final_softcap"], kind=float),
        swa=swa if layers and any(layers) else 0, swa_layers=layers if any(layers) else (),
        swa_rope_theta=opt("rope.freq_base_swa", 0.0 if traits["swa_rope_scaled"] else 10000.0,
                           kind=float),
        swa_rope_scaled=traits["swa_rope_scaled"])


def expected_tensors(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward pass reads, with its GGUF shape (row length first)."""
    return dict(_expected(c))


def _expected(c: ModelConfig):
    """(name, GGUF shape) of every tensor the forward pass reads, a layer at a time (a check
    stops at the first missing one without building the whole table)."""
    q, kv, v = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_head_kv * c.head_dim_v
    t = {"token_embd.weight": (c.n_embd, c.n_vocab), "output_norm.weight": (c.n_embd,)}
    if not c.tied_embeddings:
        t["output.weight"] = (c.n_embd, c.n_vocab)
    if c.has_rope_freqs:
        t["rope_freqs.weight"] = (c.rope_dim // 2,)
    if c.rope_long_short:
        t["rope_factors_long.weight"] = t["rope_factors_short.weight"] = (c.rope_dim // 2,)
    yield from t.items()
    for i in range(c.n_layer):
        b = f"blk.{i}."
        t = {b + "attn_norm.weight": (c.n_embd,)}
        if c.fused_qkv:
            t[b + "attn_qkv.weight"] = (c.n_embd, q + kv + v)
        else:
            t[b + "attn_q.weight"] = (c.n_embd, q)
            t[b + "attn_k.weight"] = (c.n_embd, kv)
            t[b + "attn_v.weight"] = (c.n_embd, v)
        t[b + "attn_output.weight"] = (c.n_head * c.head_dim_v, c.n_embd)
        if c.qkv_bias:
            t[b + "attn_q.bias"], t[b + "attn_k.bias"], t[b + "attn_v.bias"] = (q,), (kv,), (v,)
        if c.qk_norm:
            t[b + "attn_q_norm.weight"] = (c.head_dim,)
            t[b + "attn_k_norm.weight"] = (c.head_dim,)
        if c.post_norms:
            t[b + "post_attention_norm.weight"] = (c.n_embd,)
            t[b + "post_ffw_norm.weight"] = (c.n_embd,)
        t[b + "ffn_norm.weight"] = (c.n_embd,)
        if c.n_expert:
            E, F = c.n_expert, c.n_ff_exp
            t[b + "ffn_gate_inp.weight"] = (c.n_embd, E)
            t[b + "ffn_gate_exps.weight"] = (c.n_embd, F, E)
            t[b + "ffn_up_exps.weight"] = (c.n_embd, F, E)
            t[b + "ffn_down_exps.weight"] = (F, c.n_embd, E)
            if c.n_ff_shexp:
                t[b + "ffn_gate_inp_shexp.weight"] = (c.n_embd,)
                t[b + "ffn_gate_shexp.weight"] = (c.n_embd, c.n_ff_shexp)
                t[b + "ffn_up_shexp.weight"] = (c.n_embd, c.n_ff_shexp)
                t[b + "ffn_down_shexp.weight"] = (c.n_ff_shexp, c.n_embd)
        elif c.fused_ffn:
            t[b + "ffn_up.weight"] = (c.n_embd, 2 * c.n_ff)
        else:
            t[b + "ffn_gate.weight"] = (c.n_embd, c.n_ff)
            t[b + "ffn_up.weight"] = (c.n_embd, c.n_ff)
        if not c.n_expert:
            t[b + "ffn_down.weight"] = (c.n_ff, c.n_embd)
        yield from t.items()


# Tensors that must stay float (they are read once per token, element-wise).
NORM_TENSOR_SUFFIXES = ("_norm.weight", ".bias", "rope_freqs.weight", "rope_factors_long.weight",
                        "rope_factors_short.weight", "ffn_gate_inp_shexp.weight")


def check_tensors(gf, c: ModelConfig) -> None:
    """Raise ModelError for the first missing or mis-shaped tensor."""
    for name, shape in _expected(c):
        t = gf.tensors.get(name)
        if t is None:
            raise ModelError(gf.path, f"missing tensor {name}")
        if tuple(t.shape) != shape:
            raise ModelError(gf.path, f"tensor {name} has shape {list(t.shape)}, expected "
                                      f"{list(shape)} for this {c.arch} configuration")
        if name.endswith(NORM_TENSOR_SUFFIXES) and t.type.name not in ("F32", "F16", "BF16"):
            raise ModelError(gf.path, f"tensor {name} is {t.type.name}; norms and biases "
                                      "must be F32, F16 or BF16")
