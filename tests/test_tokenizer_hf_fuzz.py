"""Differential fuzz against Hugging Face `tokenizers` (optional: skipped when it is not
installed). A HF BPE model is built from the same GGUF vocabulary and merges with the
pre-tokenizer regex of the model's tokenizer.json; random strings over a nasty alphabet (mixed
scripts, emoji with ZWJ, combining marks, Unicode spaces, control characters) must give the same
ids. The GGUF test vectors were generated with these tokenizers too."""

from __future__ import annotations

import random

import pytest
from conftest import shared_path

from reame.gguf_file import GGUFFile
from reame.tokenizer import Tokenizer

hf = pytest.importorskip("tokenizers")

HF_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt-2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
}
ALPHABET = ("abcXYZ '\"\n\r\t  0123456789.,!?-_()[]{}<>@#$%^&*~`|\\/:;éüßñ我想在工作天 кириллица"
            "🦙🚀😶‍🌫️✅\u0301\u0308\u00a0\u2003\u3000\x0b\x0c\x85ـمرحباनमस्ते\x00\x01\x1b\x7f")


@pytest.mark.parametrize("name", sorted(HF_REGEX))
def test_matches_hf_tokenizers(name):
    md = GGUFFile(shared_path(f"testdata/vocab/ggml-vocab-{name}.gguf")).metadata
    ours = Tokenizer.from_metadata(md)
    toks, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(toks) if types[i] == 1}
    merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
    ref = hf.Tokenizer(hf.models.BPE(vocab, merges, ignore_merges=name == "llama-bpe"))
    ref.pre_tokenizer = hf.pre_tokenizers.Sequence([
        hf.pre_tokenizers.Split(hf.Regex(HF_REGEX[name]), "isolated"),
        hf.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    rng = random.Random(1234)
    bad = []
    for _ in range(600):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
        a = ours.encode(s, add_special=False)
        b = ref.encode(s, add_special_tokens=False).ids
        if a != b:
            bad.append(f"{s!r}: {a} != {b}")
    assert not bad, "\n".join(bad[:10])
