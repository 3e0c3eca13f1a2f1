"""Synthetic GGUF models: a named shape, a named quant mix, random weights and a real vocabulary.

    python -m bench.synth --shape qwen2-0.5b --mix Q8_0 --vocab qwen2 -o out.gguf

    from bench.synth import write_model, synth_model
    path = write_model(tmp_path / "m.gguf", shape="tiny-qwen2", mix="Q4_K_M", seed=1)

Files are written with `gguf.GGUFWriter` and follow gguf's own key and tensor spellings (the ones
llama.cpp reads). Weights are random but shaped like a real initialisation: 2-D matrices have
std 1/sqrt(row length) clipped to [0.02, 0.1], norms are near 1.0, biases small; every tensor is
drawn from its own generator seeded by (seed, tensor name), so a file is a pure function of its
parameters. Types gguf can quantise (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) go through
`gguf.quants.quantize`; K-quant blocks (which gguf cannot quantise) are random bytes whose f16
super-block scales are set so the dequantised weights are finite, near zero-mean and have the
target std. A tensor whose row length does not fit its type's block falls back the way
llama.cpp's quantiser does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16); fallbacks are
listed in the file under `reame.synth.fallbacks`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from gguf import (GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys,
                  LlamaFileType)
from gguf import quants

from reame.config import ARCHITECTURES, ModelConfig, expected_tensors
from reame.tensor_types import IQ4_LEVELS as TYPE_IQ4_LEVELS

SYNTH_VERSION = 1          # in the cache file names: bump when a call's output changes
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# Shapes: one row per named model shape
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    arch: str                     # general.architecture: llama | qwen2 | qwen3 | phi3 (others: errors)
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 2048             # {arch}.context_length
    head_dim: int | None = None   # attention.key_length = value_length; None: n_embd // n_head
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tied: bool = False            # no output.weight: the head reuses token_embd.weight
    qkv_bias: bool = False        # llama only: qwen2 always has q/k/v biases, qwen3 never
    rope_scaling: str = "none"    # none | linear | yarn
    rope_scaling_factor: float = 1.0
    vocab: str = "stories"        # vocabulary used when write_model gets vocab=None
    rope_long_short: bool = False  # Phi-3 LongRoPE: rope_factors_long/short.weight
    n_expert: int = 0             # mixture of experts (qwen2moe, qwen3moe; llama = Mixtral)
    n_expert_used: int = 0
    n_ff_exp: int = 0             # expert inner size (Mixtral: n_ff)
    n_ff_shexp: int = 0           # shared expert inner size (qwen2moe)
    name: str = ""                # general.name (default: the shape's name)
    swa: int = 0                  # gemma2/3: attention.sliding_window (0: the key is not written)
    attn_softcap: float = 0.0     # gemma2: attn_logit_softcapping (0: not written)
    final_softcap: float = 0.0    # gemma2: final_logit_softcapping (0: not written)

    @property
    def head_size(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


# Tiny shapes have n_embd 256 so that every K type fits the rows of q/k/v/o/gate/up and the head,
# and an n_ff that is a multiple of 32 but not of 256 (ragged row counts; ffn_down falls back
# from K types to Q5_0/Q5_1/Q8_0 as llama.cpp does). Override n_ff=512 for all-K files.
SHAPES: dict[str, Shape] = {
    "tiny-llama": Shape("llama", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=352, n_ctx=512),
    "tiny-qwen2": Shape("qwen2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=416, n_ctx=512,
                        rope_theta=1e6, rms_eps=1e-6, tied=True),
    "tiny-qwen3moe": Shape("qwen3moe", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=0,
                           n_ctx=512, head_dim=64, rope_theta=1e6, rms_eps=1e-6, n_expert=8,
                           n_expert_used=2, n_ff_exp=128),
    "tiny-qwen2moe": Shape("qwen2moe", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=0,
                           n_ctx=512, rope_theta=1e6, rms_eps=1e-6, n_expert=8, n_expert_used=2,
                           n_ff_exp=128, n_ff_shexp=256),
    "tiny-mixtral": Shape("llama", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=128,
                          n_ctx=512, n_expert=4, n_expert_used=2, n_ff_exp=128),
    "tiny-phi3": Shape("phi3", n_embd=256, n_layer=2, n_head=4, n_head_kv=4, n_ff=352, n_ctx=512,
                       vocab="phi-3"),
    "tiny-qwen3": Shape("qwen3", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=480, n_ctx=512,
                        head_dim=128, rope_theta=1e6, rms_eps=1e-6),
    # Qwen2.5-0.5B: 896 is not a multiple of 256, so K mixes fall back on most matrices (as in
    # the real Q4_K_M files, whose attention and ffn_gate/up tensors are Q5_0).
    "qwen2-0.5b": Shape("qwen2", n_embd=896, n_layer=24, n_head=14, n_head_kv=2, n_ff=4864,
                        n_ctx=32768, rope_theta=1e6, rms_eps=1e-6, tied=True, vocab="qwen2"),
    # Qwen3-30B-A3B with 4 of its 48 layers (128 experts, 8 per token, 768 wide): fits this
    # machine while a decode step reads what the real model reads per layer
    "qwen3-30b-a3b-4l": Shape("qwen3moe", n_embd=2048, n_layer=4, n_head=32, n_head_kv=4,
                              n_ff=0, n_ctx=32768, head_dim=128, rope_theta=1e6, rms_eps=1e-6,
                              n_expert=128, n_expert_used=8, n_ff_exp=768, vocab="qwen2"),
    # Gemma 2 / 3 with an 8-token window so that a short test sees it bite; Gemma 2 layer 0 is
    # windowed (of every 2 layers the last is global) and its scores soft-capped at 2 (real: 50)
    # so that the cap changes tokens; Gemma 3 has 6 layers (5 windowed: RoPE base 10000,
    # unscaled; 1 global: base 1e6, linear x8) and per-head q/k norms
    "tiny-gemma2": Shape("gemma2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=352,
                         n_ctx=512, rms_eps=1e-6, tied=True, vocab="llama-spm", swa=8,
                         attn_softcap=2.0, final_softcap=3.0),
    "tiny-gemma3": Shape("gemma3", n_embd=256, n_layer=6, n_head=4, n_head_kv=2, n_ff=352,
                         n_ctx=512, head_dim=64, rope_theta=1e6, rms_eps=1e-6, tied=True,
                         vocab="llama-spm", swa=8, rope_scaling="linear", rope_scaling_factor=8.0),
    # Gemma 3 1B (its 262k vocabulary replaced by Llama's 32k SentencePiece one): 1152 is not a
    # multiple of 256, so K mixes fall back as in the real files; windows of 512 on 5 of 6 layers
    "gemma3-1b": Shape("gemma3", n_embd=1152, n_layer=26, n_head=4, n_head_kv=1, n_ff=6912,
                       n_ctx=32768, head_dim=256, rope_theta=1e6, rms_eps=1e-6, tied=True,
                       vocab="llama-spm", swa=512),
    "tinyllama-1.1b": Shape("llama", n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632,
                            n_ctx=2048, rms_eps=1e-5, vocab="llama-spm"),
}


# --------------------------------------------------------------------------------------------
# Mixes: which type each tensor gets
# --------------------------------------------------------------------------------------------

SINGLE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")
MIXES: tuple[str, ...] = SINGLE_TYPES + ("Q4_K_M", "Q3_K_M")

FILE_TYPES = {
    "F32": LlamaFileType.ALL_F32, "F16": LlamaFileType.MOSTLY_F16,
    "BF16": LlamaFileType.MOSTLY_BF16,
    "Q8_0": LlamaFileType.MOSTLY_Q8_0, "Q4_0": LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": LlamaFileType.MOSTLY_Q4_1, "Q5_0": LlamaFileType.MOSTLY_Q5_0,
    "Q5_1": LlamaFileType.MOSTLY_Q5_1, "Q4_K": LlamaFileType.MOSTLY_Q4_K_S,
    "Q5_K": LlamaFileType.MOSTLY_Q5_K_S, "Q6_K": LlamaFileType.MOSTLY_Q6_K,
    "Q4_K_M": LlamaFileType.MOSTLY_Q4_K_M,
    "Q2_K": LlamaFileType.MOSTLY_Q2_K, "Q3_K": LlamaFileType.MOSTLY_Q3_K_S,
    "IQ4_NL": LlamaFileType.MOSTLY_IQ4_NL, "IQ4_XS": LlamaFileType.MOSTLY_IQ4_XS,
    "Q3_K_M": LlamaFileType.MOSTLY_Q3_K_M,
}

# llama.cpp (llama_tensor_get_type): a K type whose row length is not a multiple of 256
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0",
            "Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "IQ4_XS": "IQ4_NL"}
GGUF_QUANTIZABLE = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
K_TYPES = ("Q4_K", "Q5_K", "Q6_K")
LOW_BIT_TYPES = ("Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")     # random blocks (_low_bit_blocks)


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's rule for the layers whose attn_v/ffn_down get Q6_K in Q4_K_M (about half)."""
    return (i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8
            or (i_layer - n_layer // 8) % 3 == 2)


def _wanted_type(mix: str, name: str, row_len: int, tied: bool, n_layer: int) -> str:
    """The type the mix gives a 2-D weight, before the block-size fallback."""
    if mix in SINGLE_TYPES:
        return mix
    if mix not in ("Q4_K_M", "Q3_K_M"):
        raise ValueError(f"unknown mix {mix!r} (known: {', '.join(MIXES)})")
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return "Q8_0" if row_len % 256 else "Q6_K"       # llama.cpp's output rule
    if mix == "Q3_K_M":                  # llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q3_K_M
        if name.startswith("blk."):
            il = int(name.split(".")[1])
            if name.endswith("attn_v.weight"):
                return "Q5_K" if il < 2 else "Q4_K"
            if name.endswith("ffn_down.weight"):
                return "Q5_K" if il < n_layer // 16 else "Q4_K"
            if name.endswith("attn_output.weight"):
                return "Q4_K"
        return "Q3_K"
    if name.startswith("blk.") and name.endswith(("attn_v.weight", "ffn_down.weight")):
        return "Q6_K" if use_more_bits(int(name.split(".")[1]), n_layer) else "Q4_K"
    return "Q4_K"


def _fit(type_name: str, row_len: int) -> str:
    """type_name, or llama.cpp's fallback when row_len is not a multiple of its block."""
    block = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][0]
    if row_len % block == 0:
        return type_name
    fb = FALLBACK.get(type_name, "F16")
    if row_len % GGML_QUANT_SIZES[GGMLQuantizationType[fb]][0]:
        fb = "F16"
    return fb


# --------------------------------------------------------------------------------------------
# The plan: every tensor with its shape, type and value distribution
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]     # GGUF order: shape[0] is the row length
    type: str                  # GGUF type written
    wanted: str                # type the mix asked for (differs from `type` after a fallback)
    mean: float                # value distribution: mean and std
    std: float

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[self.type]]
        return self.n_elements // block * size

    @property
    def fallback(self) -> bool:
        return self.type != self.wanted


def _f32(x: float) -> float:
    return float(np.float32(x))           # what a float32 metadata value reads back as


def model_config(shape: Shape, n_vocab: int) -> ModelConfig:
    """The ModelConfig Reame should read back from a file written for `shape`."""
    traits = ARCHITECTURES.get(shape.arch, ARCHITECTURES["llama"])
    head_dim = shape.head_size
    return ModelConfig(
        arch=shape.arch, name=shape.name, n_vocab=n_vocab, n_embd=shape.n_embd,
        n_layer=shape.n_layer, n_head=shape.n_head, n_head_kv=shape.n_head_kv,
        head_dim=head_dim, head_dim_v=head_dim, n_ff=shape.n_ff, n_ctx_train=shape.n_ctx,
        rms_eps=_f32(shape.rms_eps), rope_neox=traits["rope_neox"], rope_dim=head_dim,
        rope_theta=_f32(shape.rope_theta),
        qkv_bias=traits["qkv_bias"] == "required" or (traits["qkv_bias"] == "optional"
                                                       and shape.qkv_bias),
        qk_norm=traits["qk_norm"], tied_embeddings=shape.tied,
        fused_qkv=traits.get("fused_ffn", False), fused_ffn=traits.get("fused_ffn", False),
        rope_long_short=shape.rope_long_short, n_expert=shape.n_expert,
        post_norms=bool(traits.get("gemma")),
        n_expert_used=shape.n_expert_used, n_ff_exp=shape.n_ff_exp, n_ff_shexp=shape.n_ff_shexp,
        moe_norm=traits.get("moe_norm", True) if shape.n_expert else False)


def plan_model(shape: Shape, mix: str, n_vocab: int, drop_tensors: Iterable[str] = (),
               shape_overrides: dict | None = None,
               type_overrides: dict | None = None) -> list[TensorPlan]:
    """Every tensor of the file in write order (token_embd, blocks, output_norm, output)."""
    c = model_config(shape, n_vocab)
    tensors = expected_tensors(c)
    order = (["token_embd.weight"] + [n for n in tensors if n.startswith("blk.")]
             + [n for n in tensors if not n.startswith("blk.") and n != "token_embd.weight"])
    drop = set(drop_tensors)
    shape_overrides, type_overrides = shape_overrides or {}, type_overrides or {}
    unknown = (drop | set(shape_overrides) | set(type_overrides)) - set(tensors)
    if unknown:
        raise ValueError(f"no such tensor in a {shape.arch} model: {sorted(unknown)}")
    plans = []
    for name in order:
        if name in drop:
            continue
        dims = tuple(int(d) for d in shape_overrides.get(name, tensors[name]))
        if len(tensors[name]) == 1:                       # norms and biases stay F32
            wanted = "F32"
            mean, std = (0.0, 0.02) if name.endswith(".bias") else (1.0, 0.05)
            if ".post_" in name:       # Gemma's block-output norms: large enough that the
                mean, std = 4.0, 0.2   # blocks, not the sqrt(n_embd)-scaled tied embedding, decide
        elif name.endswith("ffn_gate_inp.weight"):        # routers stay F32 (as llama.cpp)
            wanted = "F32"
            mean, std = 0.0, float(np.clip(1.0 / math.sqrt(dims[0]), 0.02, 0.1))
        else:
            wanted = _wanted_type(mix, name, dims[0], shape.tied, shape.n_layer)
            mean, std = 0.0, float(np.clip(1.0 / math.sqrt(dims[0]), 0.02, 0.1))
        if name in type_overrides:
            wanted = ttype = str(type_overrides[name]).upper()
            GGMLQuantizationType[ttype]                   # KeyError for a misspelt type
        else:
            ttype = _fit(wanted, dims[0])
        plans.append(TensorPlan(name, dims, ttype, wanted, mean, std))
    return plans


# --------------------------------------------------------------------------------------------
# Tensor data
# --------------------------------------------------------------------------------------------

CHUNK_ELEMENTS = 1 << 22          # values generated and quantised at a time (bounded memory)


def _rng(seed: int, name: str, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode()), salt])


def _k_blocks(rng: np.random.Generator, type_name: str, n_blocks: int, std: float) -> np.ndarray:
    """Random, valid K-quant blocks [n_blocks, type_size] whose values have about `std`.

    Quant bit fields (qs, qh) are random bytes. Q4_K/Q5_K: sub-block scales sc in [16, 63] and
    mins m ~= sc, with dmin = d * mean(q) so every sub-block is about zero-mean; Q6_K: int8 scales
    of magnitude [16, 127] and random sign. The f16 super-block scale d is positive, finite and
    sized for the target std (times a per-block factor in [0.75, 1.25])."""
    qtype = GGMLQuantizationType[type_name]
    size = GGML_QUANT_SIZES[qtype][1]
    b = np.frombuffer(rng.bytes(n_blocks * size), dtype=np.uint8).reshape(n_blocks, size).copy()
    jitter = rng.uniform(0.75, 1.25, n_blocks)
    if type_name == "Q6_K":                  # ql[128] qh[64] scales int8[16] d f16
        mag = rng.integers(16, 128, (n_blocks, 16))
        sc = mag * (rng.integers(0, 2, (n_blocks, 16)) * 2 - 1)
        q_std = math.sqrt((64 * 64 - 1) / 12)
        rms_sc = math.sqrt(np.mean(np.arange(16, 128) ** 2))
        d = (std / (q_std * rms_sc) * jitter).astype(np.float16)
        b[:, 192:208] = sc.astype(np.int8).view(np.uint8)
        b[:, 208:210] = d.view(np.uint8).reshape(n_blocks, 2)
        return b
    # Q4_K: d dmin f16, scales[12], qs[128]; Q5_K: d dmin f16, scales[12], qh[32], qs[128]
    levels = 16 if type_name == "Q4_K" else 32
    q_mean, q_std = (levels - 1) / 2, math.sqrt((levels * levels - 1) / 12)
    sc = rng.integers(16, 64, (n_blocks, 8))
    rms_sc = math.sqrt(np.mean(np.arange(16, 64) ** 2))
    d = (std / (q_std * rms_sc) * jitter).astype(np.float16)
    dmin = (d.astype(np.float32) * q_mean).astype(np.float16)
    ratio = (d.astype(np.float32) * q_mean / dmin.astype(np.float32))[:, None]
    m = np.clip(np.rint(sc * ratio), 0, 63).astype(np.uint8)
    sc = sc.astype(np.uint8)
    scales = np.empty((n_blocks, 12), dtype=np.uint8)   # 6-bit sc/m packing of get_scale_min
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    b[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
    b[:, 2:4] = dmin.view(np.uint8).reshape(n_blocks, 2)
    b[:, 4:16] = scales
    return b


IQ4_LEVELS = np.array(TYPE_IQ4_LEVELS, np.float64)


def _signed_6bit_scales(rng: np.random.Generator, shape) -> np.ndarray:
    """Sub-block scales of Q3_K / IQ4_XS as stored (value + 32, 0..63): magnitude [8, 31], random
    sign."""
    mag = rng.integers(8, 32, shape)
    return (mag * (rng.integers(0, 2, shape) * 2 - 1) + 32).astype(np.uint8)


def _low_bit_blocks(rng: np.random.Generator, type_name: str, n_blocks: int,
                    std: float) -> np.ndarray:
    """Random, valid Q2_K / Q3_K / IQ4_NL / IQ4_XS blocks whose values have about `std`: random
    quant bits, sub-block scales of sane magnitude, a positive f16 super-block scale d sized for
    the target std (times a per-block factor in [0.75, 1.25])."""
    size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][1]
    b = np.frombuffer(rng.bytes(n_blocks * size), dtype=np.uint8).reshape(n_blocks, size).copy()
    jitter = rng.uniform(0.75, 1.25, n_blocks)
    f16 = lambda x: x.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)   # noqa: E731
    rms_signed = math.sqrt(np.mean(np.arange(8, 32) ** 2))
    if type_name == "Q2_K":        # scales[16] (sc | m << 4) | qs[64] | d | dmin; q in 0..3
        sc = rng.integers(8, 16, (n_blocks, 16))
        d = (std / (math.sqrt(15 / 12) * math.sqrt(np.mean(np.arange(8, 16) ** 2))) * jitter)
        d = d.astype(np.float16)
        dmin = (d.astype(np.float32) * 1.5).astype(np.float16)        # zero-mean sub-blocks
        m = np.clip(np.rint(sc * (d.astype(np.float32) * 1.5 / dmin.astype(np.float32))[:, None]),
                    0, 15).astype(np.uint8)
        b[:, 0:16] = sc.astype(np.uint8) | (m << 4)
        b[:, 80:82], b[:, 82:84] = f16(d), f16(dmin)
    elif type_name == "Q3_K":      # hmask[32] | qs[64] | scales[12] | d; q in -4..3
        u = _signed_6bit_scales(rng, (n_blocks, 16))
        sc = np.zeros((n_blocks, 12), np.uint8)
        sc[:, 0:8] = (u[:, 0:8] & 15) | ((u[:, 8:16] & 15) << 4)
        for s in range(16):
            sc[:, 8 + s % 4] |= ((u[:, s] >> 4) & 3) << (2 * (s // 4))
        b[:, 96:108] = sc
        d = (std / (math.sqrt(63 / 12) * rms_signed) * jitter).astype(np.float16)
        b[:, 108:110] = f16(d)
    elif type_name == "IQ4_NL":    # d | qs[16]
        d = (std / math.sqrt(np.mean(IQ4_LEVELS ** 2)) * jitter).astype(np.float16)
        b[:, 0:2] = f16(d)
    elif type_name == "IQ4_XS":    # d | scales_h u16 | scales_l[4] | qs[128]
        u = _signed_6bit_scales(rng, (n_blocks, 8))
        b[:, 4:8] = (u[:, 0::2] & 15) | ((u[:, 1::2] & 15) << 4)
        h = np.zeros(n_blocks, np.uint16)
        for j in range(8):
            h |= ((u[:, j] >> 4) & 3).astype(np.uint16) << (2 * j)
        b[:, 2:4] = h.view(np.uint8).reshape(n_blocks, 2)
        d = (std / (math.sqrt(np.mean(IQ4_LEVELS ** 2)) * rms_signed) * jitter)
        b[:, 0:2] = f16(d.astype(np.float16))
    else:
        raise ValueError(type_name)
    return b


def tensor_data(p: TensorPlan, seed: int) -> np.ndarray:
    """The raw bytes (uint8, length p.nbytes) of one planned tensor."""
    rng = _rng(seed, p.name)
    row_len = p.shape[0]
    n_rows = p.n_elements // row_len
    qtype = GGMLQuantizationType[p.type]
    if row_len % GGML_QUANT_SIZES[qtype][0]:  # a type_overrides misfit (error tests): any bytes
        return np.frombuffer(rng.bytes(p.nbytes), dtype=np.uint8).copy()
    if p.type in K_TYPES:
        out = _k_blocks(rng, p.type, p.n_elements // 256, p.std).reshape(-1)
    elif p.type in LOW_BIT_TYPES:
        block = GGML_QUANT_SIZES[qtype][0]
        out = _low_bit_blocks(rng, p.type, p.n_elements // block, p.std).reshape(-1)
    elif p.type in GGUF_QUANTIZABLE:
        out = np.empty(p.nbytes, dtype=np.uint8)
        row_bytes = p.nbytes // n_rows
        step = max(1, CHUNK_ELEMENTS // row_len)
        for r0 in range(0, n_rows, step):
            r = min(step, n_rows - r0)
            x = rng.standard_normal((r, row_len), dtype=np.float32)
            x *= np.float32(p.std)
            if p.mean:
                x += np.float32(p.mean)
            q = quants.quantize(x, qtype)
            q = np.ascontiguousarray(q).view(np.uint8).reshape(-1)
            out[r0 * row_bytes:(r0 + r) * row_bytes] = q
    else:                                     # a type Reame does not run (error tests): any bytes
        out = np.frombuffer(rng.bytes(p.nbytes), dtype=np.uint8).copy()
    assert out.nbytes == p.nbytes, (p.name, out.nbytes, p.nbytes)
    return out


def check_data(p: TensorPlan, data: np.ndarray, rows: int = 64) -> None:
    """Dequantise the first rows of a tensor: finite and with a std near the planned one."""
    block = GGML_QUANT_SIZES[GGMLQuantizationType[p.type]][0]
    if p.type not in GGUF_QUANTIZABLE + K_TYPES + LOW_BIT_TYPES or p.shape[0] % block:
        return
    row_bytes = p.nbytes // (p.n_elements // p.shape[0])
    n = min(rows, p.n_elements // p.shape[0])
    x = quants.dequantize(data[:n * row_bytes].reshape(n, row_bytes), GGMLQuantizationType[p.type])
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise RuntimeError(f"synth: {p.name} ({p.type}) dequantises to non-finite values")
    if x.size >= 256 and not (0.5 * p.std < x.std() < 2.0 * p.std):
        raise RuntimeError(f"synth: {p.name} ({p.type}) has std {x.std():.4g}, "
                           f"planned {p.std:.4g}")


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------

# others: testdata/vocab/ggml-vocab-{name}.gguf
VOCAB_FILES = {"stories": "models/stories260K.gguf"}


def shared_dir() -> Path:
    return Path(os.environ.get("REAME_SHARED") or REPO.parent / "shared")


class MissingSharedData(FileNotFoundError):
    """A vocabulary file of the shared test data folder is absent (tests: skip locally, fail in CI)."""


def vocab_path(vocab: str) -> Path:
    """The GGUF a vocabulary name refers to: "stories" (512 tokens), "qwen2", "llama-spm", ...
    (ggml-vocab-*.gguf in shared/testdata/vocab), or a path to any GGUF with tokenizer keys."""
    rel = VOCAB_FILES.get(vocab, f"testdata/vocab/ggml-vocab-{vocab}.gguf")
    p = shared_dir() / rel
    if p.exists():
        return p
    if vocab.endswith(".gguf") and Path(vocab).exists():
        return Path(vocab)
    known = sorted(VOCAB_FILES) + sorted(
        f.name[len("ggml-vocab-"):-len(".gguf")]
        for f in (shared_dir() / "testdata/vocab").glob("ggml-vocab-*.gguf"))
    raise MissingSharedData(f"vocabulary {vocab!r} not found at {p} (known: {', '.join(known)}; "
                            "set REAME_SHARED to the shared folder)")


_NUMPY_GGUF = {np.dtype(k): v for k, v in {
    "u1": GGUFValueType.UINT8, "i1": GGUFValueType.INT8, "<u2": GGUFValueType.UINT16,
    "<i2": GGUFValueType.INT16, "<u4": GGUFValueType.UINT32, "<i4": GGUFValueType.INT32,
    "<u8": GGUFValueType.UINT64, "<i8": GGUFValueType.INT64, "<f4": GGUFValueType.FLOAT32,
    "<f8": GGUFValueType.FLOAT64, "?": GGUFValueType.BOOL}.items()}


def gguf_value(v: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """(value, type, array element type) for a metadata value as GGUFFile returns it: numpy arrays
    keep their element type; python ints (token ids) are uint32, floats float32."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], GGUFValueType):
        return v[0], v[1], None                          # explicit (value, type)
    if isinstance(v, (bool, np.bool_)):
        return bool(v), GGUFValueType.BOOL, None
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if 0 <= v < 2 ** 32:
            return v, GGUFValueType.UINT32, None
        return v, GGUFValueType.INT32 if -2 ** 31 <= v < 0 else GGUFValueType.INT64, None
    if isinstance(v, (float, np.floating)):
        return float(v), GGUFValueType.FLOAT32, None
    if isinstance(v, str):
        return v, GGUFValueType.STRING, None
    if isinstance(v, np.ndarray):
        return v, GGUFValueType.ARRAY, _NUMPY_GGUF[v.dtype]
    if isinstance(v, (list, tuple)) and v and all(isinstance(s, str) for s in v):
        return list(v), GGUFValueType.ARRAY, GGUFValueType.STRING
    if isinstance(v, (list, tuple)) and v:
        arr = np.asarray(v)
        return gguf_value(arr.astype(np.float32) if arr.dtype.kind == "f" else arr)
    raise TypeError(f"cannot write metadata value {v!r:.60}")


def tokenizer_metadata(vocab: str) -> dict[str, Any]:
    """Every tokenizer.* key of a vocabulary GGUF (values as GGUFFile reads them)."""
    from reame.gguf_file import GGUFFile
    md = GGUFFile(vocab_path(vocab)).metadata
    return {k: v for k, v in md.items() if k.startswith("tokenizer.")}


class _Writer(GGUFWriter):
    """GGUFWriter that packs numeric and string arrays in bulk: a 150k-token vocabulary takes
    milliseconds instead of the seconds of the per-element packing (same bytes)."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype != GGUFValueType.ARRAY or sub_type is None or len(val) == 0:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = self._pack("I", vtype) if add_vtype else b""
        head += self._pack("I", sub_type) + self._pack("Q", len(val))
        if sub_type == GGUFValueType.STRING:
            enc = [s.encode("utf-8", errors="surrogateescape") if isinstance(s, str) else s
                   for s in val]
            lens = np.array([len(e) for e in enc], dtype="<u8")
            parts = [None] * (2 * len(enc))
            parts[0::2] = [n.tobytes() for n in lens]
            parts[1::2] = enc
            return head + b"".join(parts)
        if sub_type in (GGUFValueType.ARRAY,):
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        dtype = {v: k for k, v in _NUMPY_GGUF.items()}[sub_type]
        return head + np.asarray(val, dtype=dtype).tobytes()


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def resolve_shape(shape: str | Shape, overrides: dict) -> Shape:
    if isinstance(shape, str) and shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
    base = SHAPES[shape] if isinstance(shape, str) else shape
    fields = {f.name for f in dataclasses.fields(Shape)}
    bad = set(overrides) - fields
    if bad:
        raise TypeError(f"unknown write_model overrides {sorted(bad)} (shape fields: "
                        f"{sorted(fields)}; also drop_tensors, shape_overrides, type_overrides, "
                        "metadata, n_vocab)")
    s = dataclasses.replace(base, **overrides)
    if not s.name:
        s = dataclasses.replace(s, name=shape if isinstance(shape, str) else s.arch)
    return s


def write_model(path: str | os.PathLike, shape: str | Shape = "tiny-llama", mix: str = "F32",
                vocab: str | None = None, seed: int = 0, *, drop_tensors: Iterable[str] = (),
                shape_overrides: dict | None = None, type_overrides: dict | None = None,
                metadata: dict | None = None, n_vocab: int | None = None, check: bool = True,
                **overrides) -> Path:
    """Write a synthetic GGUF model and return its path.

    shape: a SHAPES name (or a Shape); any Shape field can be overridden by keyword (n_embd=...,
        arch="gpt2", tied=False, rope_scaling="linear", rope_scaling_factor=4.0, ...).
    mix: one of MIXES: a single type for every 2-D weight, or "Q4_K_M" (llama.cpp's recipe).
    vocab: a vocabulary name (see vocab_path), None for the shape's own, "none" for no tokenizer
        metadata (then n_vocab, default 512). n_vocab overrides the token count.
    For malformed files: drop_tensors (names left out), shape_overrides {name: GGUF shape},
        type_overrides {name: any GGML type name, e.g. "Q2_K", "IQ4_NL" (random bytes)},
        metadata {key: value | None to delete | (value, GGUFValueType)}.
    """
    path = Path(path)
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r} (known: {', '.join(MIXES)})")
    s = resolve_shape(shape, overrides)
    vocab = s.vocab if vocab is None else vocab
    tok = {} if vocab == "none" else tokenizer_metadata(vocab)
    if n_vocab is None:
        n_vocab = len(tok["tokenizer.ggml.tokens"]) if tok else 512
    plans = plan_model(s, mix, n_vocab, drop_tensors, shape_overrides, type_overrides)

    a = s.arch
    kv: dict[str, Any] = {
        Keys.General.ARCHITECTURE: a,
        Keys.General.NAME: s.name,
        Keys.General.FILE_TYPE: int(FILE_TYPES[mix]),
        Keys.General.QUANTIZATION_VERSION: 2,
        Keys.LLM.VOCAB_SIZE.format(arch=a): n_vocab,
        Keys.LLM.CONTEXT_LENGTH.format(arch=a): s.n_ctx,
        Keys.LLM.EMBEDDING_LENGTH.format(arch=a): s.n_embd,
        Keys.LLM.BLOCK_COUNT.format(arch=a): s.n_layer,
        Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a): s.n_ff,
        Keys.Attention.HEAD_COUNT.format(arch=a): s.n_head,
        Keys.Attention.HEAD_COUNT_KV.format(arch=a): s.n_head_kv,
        Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a): s.rms_eps,
        Keys.Rope.FREQ_BASE.format(arch=a): s.rope_theta,
        Keys.Rope.DIMENSION_COUNT.format(arch=a): s.head_size,
    }
    if s.head_dim is not None or a == "qwen3":
        kv[Keys.Attention.KEY_LENGTH.format(arch=a)] = s.head_size
        kv[Keys.Attention.VALUE_LENGTH.format(arch=a)] = s.head_size
    if s.n_expert:
        kv[f"{a}.expert_count"] = s.n_expert
        kv[f"{a}.expert_used_count"] = s.n_expert_used
        if a != "llama":
            kv[f"{a}.expert_feed_forward_length"] = s.n_ff_exp
            del kv[Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a)]
        if s.n_ff_shexp:
            kv[f"{a}.expert_shared_feed_forward_length"] = s.n_ff_shexp
    for key, v in (("attention.sliding_window", s.swa), ("attn_logit_softcapping", s.attn_softcap),
                   ("final_logit_softcapping", s.final_softcap)):
        if v:
            kv[f"{a}.{key}"] = v
    if s.rope_scaling != "none":
        kv[Keys.Rope.SCALING_TYPE.format(arch=a)] = s.rope_scaling
        kv[Keys.Rope.SCALING_FACTOR.format(arch=a)] = s.rope_scaling_factor
    kv["reame.synth.shape"] = shape if isinstance(shape, str) else s.name
    kv["reame.synth.mix"] = mix
    kv["reame.synth.seed"] = seed
    fallbacks = [f"{p.name}:{p.wanted}->{p.type}" for p in plans if p.fallback]
    if fallbacks:
        kv["reame.synth.fallbacks"] = fallbacks
    kv.update(tok)
    for k, v in (metadata or {}).items():
        if v is None:
            kv.pop(k, None)
        else:
            kv[k] = v

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    w = _Writer(tmp, arch="")                          # arch "" adds no key: ours comes from kv
    try:
        for k, v in kv.items():
            val, vtype, sub = gguf_value(v)
            w.add_key_value(k, val, vtype, sub)
        for p in plans:
            w.add_tensor_info(p.name, tuple(reversed(p.shape)), np.dtype(np.float32), p.nbytes,
                              raw_dtype=GGMLQuantizationType[p.type])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for p in plans:
            data = tensor_data(p, seed)
            if check:
                check_data(p, data)
            w.write_tensor_data(data)
        w.close()
        os.replace(tmp, path)
    finally:
        w.close()
        tmp.unlink(missing_ok=True)
    return path


def synth_model(where=None, shape: str = "tiny-llama", mix: str = "F32", vocab: str | None = None,
                seed: int = 0, **overrides) -> Path:
    """write_model with a cache: reuse a file already written with the same parameters.

    where: a directory, a pytest TempPathFactory (files go under its base temp), or None for
    $REAME_SYNTH_CACHE (default ~/.cache/reame/synth)."""
    if where is None:
        d = Path(os.environ.get("REAME_SYNTH_CACHE") or Path.home() / ".cache/reame/synth")
    elif hasattr(where, "getbasetemp"):
        d = Path(where.getbasetemp()) / "synth"
    else:
        d = Path(where)
    name = f"{shape}-{mix}-{vocab or 'default'}-s{seed}"
    if overrides:
        name += "-" + hashlib.sha1(repr(sorted(overrides.items())).encode()).hexdigest()[:10]
    p = d / f"{name}-v{SYNTH_VERSION}.gguf"
    if not p.exists():
        write_model(p, shape, mix, vocab, seed, **overrides)
    return p


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def _parse_value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.synth", description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="tiny-llama", choices=sorted(SHAPES))
    ap.add_argument("--mix", default="F32", choices=MIXES)
    ap.add_argument("--vocab", default=None, help="vocabulary name (default: the shape's own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a shape field, e.g. --set n_layer=4")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        k, _, v = item.partition("=")
        overrides[k] = _parse_value(v)
    t0 = time.perf_counter()
    path = write_model(args.output, args.shape, args.mix, args.vocab, args.seed, **overrides)
    dt = time.perf_counter() - t0
    s = resolve_shape(args.shape, overrides)
    from reame.gguf_file import GGUFFile
    gf = GGUFFile(path)
    types = Counter(t.type.name for t in gf.tensors.values())
    fallbacks = gf.metadata.get("reame.synth.fallbacks", [])
    print(f"{path}: {s.arch} {args.shape} mix {args.mix}, {len(gf.tensors)} tensors "
          f"({', '.join(f'{n} {k}' for k, n in types.most_common())}), "
          f"{sum(t.n_elements for t in gf.tensors.values()):,} parameters, "
          f"{path.stat().st_size / 2**20:.1f} MiB, written in {dt:.1f} s")
    if fallbacks:
        print(f"  {len(fallbacks)} fallbacks (row length not a multiple of the block): "
              + ", ".join(sorted(Counter(f.split(':')[1] for f in fallbacks))))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def requantize(src: str | os.PathLike, dst: str | os.PathLike, type_name: str) -> Path:
    """Copy a GGUF model with its 2-D weights quantised to `type_name` by gguf.quants (types it
    can quantise: F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1). Rows whose length does not fit the
    block stay as they are; metadata (tokenizer included) is copied unchanged. Turns a real
    trained F32 model (stories260K) into a quantised one with realistic logit margins."""
    from reame.gguf_file import GGUFFile
    dst = Path(dst)
    gf = GGUFFile(src)
    target = GGMLQuantizationType[type_name]
    block = GGML_QUANT_SIZES[target][0]
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    w = _Writer(str(tmp), gf.metadata["general.architecture"])
    for k, v in gf.metadata.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        val, vtype, sub = gguf_value(v)
        w.add_key_value(k, val, vtype, sub_type=sub)
    for name, t in gf.tensors.items():
        data = t.dequantize()
        if len(t.shape) == 2 and t.shape[0] % block == 0:
            q = quants.quantize(data, target)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=target)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, dst)
    return dst
