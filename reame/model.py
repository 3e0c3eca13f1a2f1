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
            "vocab_size": c.n_vocab,
            "rope": {"style": "neox" if c.rope_neox else "normal", "theta": c.rope_theta,
                     "dims": c.rope_dim, "scaling": c.rope_scaling.type,
                     "scaling_factor": c.rope_scaling.factor},
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
    return Model(str(path), gf, config)
