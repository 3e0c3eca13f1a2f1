"""BPE (`tokenizer.ggml.model = "gpt2"`, and "gemma4"): pre-tokenize, spell each word's UTF-8
bytes in the GPT-2 byte alphabet (or, for SentencePiece-style vocabularies, keep the text with its
spaces as "▁"), then apply merges lowest rank first, leftmost first on ties -- the order
llama.cpp's bigram queue produces. Results are cached per word, so text that repeats its words
(most text) costs a dict lookup per word.
"""

from __future__ import annotations

from ..errors import TokenizerError
from .pretokenize import PreTokenizer, byte_encode
from .merge import encode_words, merge_heap, merge_naive
from .vocab import Vocab

_NAIVE_MAX = 48          # words up to this many symbols use the O(n^2) scan, longer ones a heap


class BPE:
    def __init__(self, vocab: Vocab, pre: PreTokenizer, merges: list[str]):
        self.t2i = vocab.token_to_id
        self.pre = pre
        self.ignore_merges = pre.ignore_merges
        # byte_encode=False (Gemma 4-style vocabularies): merges work on the text itself and a
        # byte without a token becomes its <0xNN> token
        self.spell = byte_encode if pre.byte_encode else None
        self.newline_tokens = pre.newline_tokens
        if not isinstance(merges, list):
            raise TokenizerError("tokenizer.ggml.merges must be an array of strings")
        # rank lookup keyed by "left<sep>right". Byte-level tokens never contain a space, so the
        # merge strings themselves are the keys; otherwise split at the first space after the
        # first character (llama.cpp's rule) and re-join with a separator no token contains.
        n = len(merges)
        if "\n".join(merges).count(" ") == n and not any(m[:1] == " " for m in merges):
            self.sep = " "
            keys = merges
        else:
            self.sep = "\x00"
            keys = []
            for m in merges:
                p = m.find(" ", 1)
                keys.append(m[:p] + "\x00" + m[p + 1:] if p > 0 else m + "\x00")
        self.ranks: dict[str, int] = dict(zip(keys, range(n)))
        if len(self.ranks) != n:     # duplicate merges: the first one wins, as in llama.cpp
            self.ranks = {}
            for i, k in enumerate(keys):
                self.ranks.setdefault(k, i)
        self.cache: dict[str, list[int]] = {}
        # the most characters one token spells (its text: one character per byte, or the text)
        self.width = max(map(len, vocab.tokens))

    def encode(self, text: str, out: list[int], limit: int | None = None) -> None:
        """Append the ids of `text` to `out`; TokenLimit past `limit` ids (encode_words)."""
        encode_words(self.pre.split(text), self.cache, self.encode_word, out, limit, self.width)

    def encode_word(self, word: str) -> list[int]:
        enc = self.spell(word) if self.spell else word
        t2i = self.t2i
        if (len(enc) == 1 or self.ignore_merges
                or (self.newline_tokens and not enc.strip("\n"))):
            tid = t2i.get(enc)
            if tid is not None:
                return [tid]
        syms = self._merge_naive(enc) if len(enc) <= _NAIVE_MAX else self._merge_heap(enc)
        ids = []
        for s in syms:
            tid = t2i.get(s)
            if tid is not None:
                ids.append(tid)
            elif self.spell:                 # not in the vocabulary: one token per byte symbol
                ids.extend(t2i[c] for c in s if c in t2i)
            else:                            # raw text: one <0xNN> token per UTF-8 byte
                for b in s.encode("utf-8", "surrogatepass"):
                    tid = t2i.get(f"<0x{b:02X}>")
                    if tid is not None:
                        ids.append(tid)
        return ids

    def _priority(self, a: str, b: str):
        return self.ranks.get(a + self.sep + b)

    def _merge_naive(self, enc: str) -> list[str]:
        return merge_naive(list(enc), self._priority)

    def _merge_heap(self, enc: str) -> list[str]:
        """Same result as `_merge_naive` in O(n log n) (reame/tokenizer/merge.py)."""
        return merge_heap(list(enc), self._priority)
