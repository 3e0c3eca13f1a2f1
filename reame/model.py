"""A loaded GGUF model: its file (mmap), typed config and checked tensors."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from .config import ModelConfig, check_tensors, config_from_gguf
from .gguf_file import GGUFFile, Tensor


@dataclass
class Model:
    path: str
    file: GGUFFile
    config: ModelConfig

    @property
    def metadata(self) -> dict:
        return self.file.metadata

    @property
    def tensors(self) -> dict[str, Tensor]:
        return self.file.tensors

    def tensor(self, name: str) -> Tensor:
        return self.file.tensors[name]

    def rope_factors(self, n_ctx: int):
        """The RoPE frequency divisors (float32 [rope_dim/2]) for a context of n_ctx, or None:
        rope_freqs.weight (Llama 3.1), or Phi-3's LongRoPE factors, long when n_ctx exceeds the
        original training context (as llama.cpp chooses them), else short."""
        c = self.config
        if c.rope_long_short:
            which = "long" if n_ctx > c.rope_scaling.orig_ctx else "short"
            return self.tensor(f"rope_factors_{which}.weight").dequantize()
        t = self.tensors.get("rope_freqs.weight")
        return t.dequantize() if t is not None else None

    def output_tensor(self) -> Tensor:
        """The output head: output.weight, or token_embd.weight when embeddings are tied."""
        c = self.config
        return self.tensor("token_embd.weight" if c.tied_embeddings else "output.weight")

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors.values())

    def quant_mix(self) -> dict[str, tuple[int, int]]:
        """type name -> (tensor count, bytes)."""
        count, size = Counter(), Counter()
        for t in self.tensors.values():
            count[t.type.name] += 1
            size[t.type.name] += t.data.nbytes
        return {k: (count[k], size[k]) for k in sorted(count, key=lambda k: -size[k])}

    def info(self) -> dict:
        """What `reame info` prints."""
        c, md = self.config, self.metadata
        return {
            "file": self.path,
            "name": c.name,
            "architecture": c.arch,
            "parameters": self.n_params,
            "file_size": os.path.getsize(self.path),
            "quant_mix": {k: {"tensors": n, "bytes": b} for k, (n, b) in self.quant_mix().items()},
            "context_length": c.n_ctx_train,
            "layers": c.n_layer,
            "embedding_length": c.n_embd,
            "heads": c.n_head,
            "kv_heads": c.n_head_kv,
            "head_dim": c.head_dim,
            "feed_forward_length": c.n_ff,
            "experts": ({"count": c.n_expert, "used": c.n_expert_used, "length": c.n_ff_exp,
                         "shared_length": c.n_ff_shexp} if c.n_expert else None),
            "vocab_size": c.n_vocab,
            "rope": {"style": "neox" if c.rope_neox else "normal", "theta": c.rope_theta,
                     "dims": c.rope_dim, "scaling": c.rope_scaling.type,
                     "scaling_factor": c.rope_scaling.factor},
            "sliding_window": ({"window": c.swa, "layers": sum(c.swa_layers)} if c.swa else None),
            "softcap": ({"attention": c.attn_softcap, "logits": c.final_softcap}
                        if c.attn_softcap or c.final_softcap else None),
            "tied_embeddings": c.tied_embeddings,
            "tokenizer": md.get("tokenizer.ggml.model", "none"),
            "tokenizer_pre": md.get("tokenizer.ggml.pre"),
            "chat_template": "tokenizer.chat_template" in md,
        }


def load_model(path: str | os.PathLike) -> Model:
    """Open and check a GGUF model. Raises ModelError (one line naming file and problem).

    Progress (reame.progress; shown only when it takes a while): the header's entries read."""
    from . import progress
    with progress.task(f"loading {os.path.basename(str(path))}", unit="header entries") as task:
        gf = GGUFFile(path, on_progress=task.set)
        task.note("checking tensors")
        config = config_from_gguf(gf)
        check_tensors(gf, config)
        unfuse(gf, config)
    return Model(str(path), gf, config)


def _rows(t: Tensor, name: str, r0: int, r1: int) -> Tensor:
    """Rows [r0, r1) of a matrix as a tensor of its own (a view: no copy)."""
    rb = t.row_bytes
    return Tensor(name, t.type, (t.shape[0], r1 - r0), t.data[r0 * rb:r1 * rb], t.offset + r0 * rb)


def unfuse(gf, c: ModelConfig) -> None:
    """Replace fused matrices by row views under Llama's names, so every engine runs one forward
    pass: attn_qkv -> attn_q, attn_k, attn_v; a fused ffn_up -> ffn_gate (first n_ff rows),
    ffn_up (the rest), as llama.cpp's swiglu splits it."""
    q, kv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    for i in range(c.n_layer):
        b = f"blk.{i}."
        if c.fused_qkv:
            t = gf.tensors.pop(b + "attn_qkv.weight")
            for name, r0, r1 in (("attn_q", 0, q), ("attn_k", q, q + kv),
                                 ("attn_v", q + kv, t.n_rows)):
                gf.tensors[f"{b}{name}.weight"] = _rows(t, f"{b}{name}.weight", r0, r1)
        if c.fused_ffn:
            t = gf.tensors.pop(b + "ffn_up.weight")
            gf.tensors[b + "ffn_gate.weight"] = _rows(t, b + "ffn_gate.weight", 0, c.n_ff)
            gf.tensors[b + "ffn_up.weight"] = _rows(t, b + "ffn_up.weight", c.n_ff, 2 * c.n_ff)
