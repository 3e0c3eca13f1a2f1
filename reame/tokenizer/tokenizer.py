"""`Tokenizer`: text <-> token ids for a GGUF model, built from its `tokenizer.*` metadata.

Encoding follows llama.cpp's `llama_vocab::impl::tokenize`:

1. Special-token partition. The text is cut around occurrences of special tokens, longest token
   text first. User-defined tokens are always matched (they are part of the vocabulary's text,
   as in Hugging Face tokenizers); control and unknown tokens only with `parse_special=True`, so
   user text that spells `<|im_end|>` stays plain text unless the caller asks otherwise.
   Tokens flagged lstrip/rstrip swallow adjacent ASCII whitespace.
2. Each text fragment goes to the model: SPM gets a leading space when it starts the text or
   follows a special token (the "add space prefix" rule; `space_prefix=False` drops it for text
   that continues earlier text, as a grammar's forced bytes do), spaces escaped to "▁"; BPE gets
   the pre-tokenizer named by `tokenizer.ggml.pre` (Gemma 4-style BPE with its spaces escaped to
   "▁").
3. BOS/EOS are added as the GGUF's add_bos/add_eos flags say (llama.cpp's defaults when absent).

Python strings may hold lone surrogates (U+D800..U+DFFF), which are not encodable text: they are
replaced by U+FFFD before tokenizing, the same character llama.cpp substitutes for invalid UTF-8.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import regex

from ..errors import TokenizerError
from ..pace import checkpoint
from .bpe import BPE
from .detokenize import piece_bytes
from .merge import TokenLimit
from .pretokenize import SUPPORTED, pre_tokenizer
from .spm import SPM
from .vocab import (ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, BPE_MODELS, Vocab,
                    load_vocab)

_SURROGATES = regex.compile("[\ud800-\udfff]")
_ASCII_SPACE = " \t\n\v\f\r"


class Tokenizer:
    """Tokenizer of one GGUF vocabulary. Build with `Tokenizer.from_metadata(gguf.metadata)`."""

    def __init__(self, vocab: Vocab, model):
        self.vocab = vocab
        self._model = model
        self._bpe = isinstance(model, BPE)
        # SPM-style BPE (Gemma 4) escapes spaces as "▁" and decodes like SentencePiece; every
        # other BPE vocabulary decodes through the GPT-2 byte alphabet (as llama.cpp does)
        self._escape_spaces = self._bpe and model.pre.escape_spaces
        self._byte_level = self._bpe and not self._escape_spaces
        self._bytes: list[bytes | None] = [None] * vocab.n_vocab
        self._special_texts = [(vocab.tokens[i], i) for i in vocab.special_cache]
        # a token spells at most `width` characters of the text, except that a special token
        # flagged lstrip/rstrip swallows the ASCII whitespace next to it
        self.width = model.width
        self._strips = any(vocab.attrs[i] & (ATTR_LSTRIP | ATTR_RSTRIP)
                           for i in vocab.special_cache)

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> "Tokenizer":
        """Tokenizer from GGUF metadata; TokenizerError when fields are missing/inconsistent."""
        model = metadata.get("tokenizer.ggml.model")
        if model in BPE_MODELS:
            # llama.cpp: the "gemma4" tokenizer model is BPE with the "gemma4" pre-tokenizer
            pre_name = ("gemma4" if model == "gemma4"
                        else str(metadata.get("tokenizer.ggml.pre") or "default"))
            pre = pre_tokenizer(pre_name)
            if pre is None:
                raise TokenizerError(f"unknown pre-tokenizer tokenizer.ggml.pre = {pre_name!r} "
                                     f"(supported: {', '.join(SUPPORTED)})")
            merges = metadata.get("tokenizer.ggml.merges")
            if merges is None:
                if not pre.merges_optional:
                    raise TokenizerError("BPE vocabulary without tokenizer.ggml.merges")
                merges = []
            checkpoint()                    # a model loading beside others: let them step
            vocab = load_vocab(metadata, default_flags=(pre.add_bos, False),
                               force_bos=pre.force_bos, no_bos=pre.no_bos)
            checkpoint()
            return cls(vocab, BPE(vocab, pre, merges))
        checkpoint()
        vocab = load_vocab(metadata)
        checkpoint()
        return cls(vocab, SPM(vocab))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Tokenizer":
        from ..gguf_file import GGUFFile
        return cls.from_metadata(GGUFFile(path).metadata)

    # -- properties -----------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos_id(self) -> int | None:
        return self.vocab.special["bos"]

    @property
    def eos_id(self) -> int | None:
        return self.vocab.special["eos"]

    @property
    def eot_id(self) -> int | None:
        return self.vocab.special["eot"]

    @property
    def eog_ids(self) -> set[int]:
        """Ids that end generation: EOS, EOT, EOM and the `<|im_end|>`-style tokens llama.cpp
        recognises by their text."""
        return self.vocab.eog_ids

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    @property
    def add_space_prefix(self) -> bool:
        return self.vocab.model == "llama" and self.vocab.add_space_prefix

    @property
    def kind(self) -> str:
        """"spm" or "bpe"."""
        return "bpe" if self._bpe else "spm"

    @property
    def pre(self) -> str:
        return self.vocab.pre

    def is_special(self, token_id: int) -> bool:
        """True for control tokens (and the unknown token): the ones `skip_special` drops."""
        return bool(self.vocab.attrs[token_id] & (ATTR_CONTROL | ATTR_UNKNOWN))

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.vocab.eog_ids

    def piece(self, token_id: int) -> str:
        """The token's text as stored in the GGUF (e.g. "▁Hello", "ĠHello", "<0x0A>")."""
        return self.vocab.tokens[token_id]

    def token_to_id(self, text: str) -> int | None:
        """Id of the token whose stored text is `text`, or None."""
        return self.vocab.token_to_id.get(text)

    # -- encoding -------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool | None = None,
               parse_special: bool = False, space_prefix: bool = True,
               limit: int | None = None) -> list[int]:
        """Token ids of `text`.

        add_special: None or True -> BOS/EOS as the GGUF flags say; False -> neither.
        parse_special: match control tokens written in the text (as chat templates write
        them); off by default so user text cannot produce control tokens.
        space_prefix: False for text that continues earlier text (a grammar's forced bytes):
        SentencePiece's "add space prefix" rule puts no space anywhere, so the ids' bytes are
        the text's own (no effect on vocabularies without the rule).
        limit: raise TokenLimit (reame.tokenizer) once the text is known to have more tokens:
        at once when it has more characters than `limit` tokens can spell, else within a word
        of the limit (the work is bounded by the limit, not by the text).
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        return self.encode_segments([(text, parse_special)], add_special, space_prefix, limit)

    def encode_segments(self, segments: list[tuple[str, bool]],
                        add_special: bool | None = None,
                        space_prefix: bool = True, limit: int | None = None) -> list[int]:
        """Token ids of the concatenation of `segments`, each `(text, parse_special)`: special
        tokens are matched only inside segments that allow it, and never across a segment
        boundary; plain text is tokenized as one run, exactly as `encode` of the whole would.
        (Used for chat prompts: template text parsed, message contents not.) `limit`: as
        `encode`'s."""
        v = self.vocab
        add = add_special is None or add_special
        if limit is not None:
            self._check_length(segments, limit)
        out: list[int] = []
        if add and v.add_bos:
            out.append(v.special["bos"])
        fragments: list[str | int] = []
        for text, parse_special in segments:
            if not text:
                continue
            if _SURROGATES.search(text):
                text = _SURROGATES.sub("\ufffd", text)
            for frag in self._partition(text, parse_special):
                if isinstance(frag, str) and fragments and isinstance(fragments[-1], str):
                    fragments[-1] += frag
                else:
                    fragments.append(frag)
        model = self._model
        if self._bpe:
            escape = self._escape_spaces
            for frag in fragments:
                if isinstance(frag, str):
                    model.encode(frag.replace(" ", "▁") if escape else frag, out, limit)
                else:
                    out.append(frag)
        else:
            prefix = v.add_space_prefix and space_prefix
            prev_special = True
            for frag in fragments:
                if isinstance(frag, str):
                    if prefix and prev_special:
                        frag = " " + frag
                    model.encode(frag.replace(" ", "▁"), out, limit)
                    prev_special = False
                else:
                    out.append(frag)
                    prev_special = True
        if add and v.add_eos:
            out.append(v.special["eos"])
        if limit is not None and len(out) > limit:
            raise TokenLimit(limit, len(out))
        return out

    def _check_length(self, segments: list[tuple[str, bool]], limit: int) -> None:
        """TokenLimit before any work when the segments have more characters than `limit`
        tokens can spell (ASCII whitespace not counted where a special token may strip it)."""
        n = sum(len(t) for t, _ in segments)
        if self._strips:
            n -= sum(t.count(c) for t, _ in segments for c in _ASCII_SPACE)
        if n // self.width > limit:
            raise TokenLimit(limit, n // self.width)

    def clear_cache(self) -> None:
        """Forget the cached tokenization of words (benchmarks; memory)."""
        self._model.cache.clear()

    def has_special_text(self, text: str) -> bool:
        """True when `text` spells a control/unknown token (what parse_special would match)."""
        attrs = self.vocab.attrs
        return any(t in text for t, i in self._special_texts
                   if attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN))

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Split `text` into plain-text fragments and special token ids (llama.cpp's
        tokenizer_st_partition): each special token, longest first, cuts every text fragment
        that contains it."""
        attrs = self.vocab.attrs
        frags: list[str | int] = [text]
        for tok_text, tid in self._special_texts:
            a = attrs[tid]
            if not parse_special and a & (ATTR_CONTROL | ATTR_UNKNOWN):
                continue    # a user-defined token that is also control (an EOG) is not matched
            if not any(isinstance(f, str) and tok_text in f for f in frags):
                continue
            new: list[str | int] = []
            for f in frags:
                if not isinstance(f, str) or tok_text not in f:
                    new.append(f)
                    continue
                parts = f.split(tok_text)
                for k, part in enumerate(parts):
                    if k > 0:
                        new.append(tid)
                        if a & ATTR_RSTRIP:
                            part = part.lstrip(_ASCII_SPACE)
                    if k < len(parts) - 1 and a & ATTR_LSTRIP:
                        part = part.rstrip(_ASCII_SPACE)
                    if part:
                        new.append(part)
            frags = new
        return frags

    # -- decoding -------------------------------------------------------------------------

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes a token stands for ("" for a control token when skip_special)."""
        if skip_special and self.vocab.attrs[token_id] & (ATTR_CONTROL | ATTR_UNKNOWN):
            return b""
        b = self._bytes[token_id]
        if b is None:
            if token_id < 0:
                raise IndexError(token_id)
            b = piece_bytes(self.vocab.tokens[token_id], self.vocab.attrs[token_id],
                            self._byte_level)
            self._bytes[token_id] = b
        return b

    def decode(self, ids: Iterable[int], skip_special: bool = False,
               strip_space_prefix: bool = True) -> str:
        """Text of `ids`. Invalid UTF-8 becomes U+FFFD (one per maximal invalid subsequence).

        skip_special: drop control tokens (BOS, <|im_end|>, ...) instead of spelling them.
        strip_space_prefix: for SPM vocabularies, remove the one space the tokenizer put in
        front of the text from the first non-empty piece, so decode(encode(s)) == s.
        """
        parts = []
        strip = strip_space_prefix and self.add_space_prefix
        n = self.vocab.n_vocab
        for tid in ids:
            tid = int(tid)
            if not 0 <= tid < n:
                raise TokenizerError(f"token id {tid} is out of range (vocabulary has {n})")
            b = self.token_bytes(tid, skip_special)
            if strip and b:
                strip = False
                if b[:1] == b" ":
                    b = b[1:]
            parts.append(b)
        return b"".join(parts).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return (f"Tokenizer({self.kind}, pre={self.pre!r}, n_vocab={self.n_vocab}, "
                f"bos={self.bos_id}, eos={self.eos_id}, add_bos={self.add_bos})")
