"""SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp runs it: the text
(spaces already escaped to U+2581 "▁") starts as one symbol per character; the adjacent pair whose
concatenation is the highest-scoring vocabulary piece merges first (leftmost on ties), until no
pair is a piece. Characters left over that are not pieces become byte tokens `<0xNN>` (byte
fallback), one per UTF-8 byte.

Control and unknown tokens never take part in merges (SentencePiece's own rule), so text that
spells `<s>` cannot turn into the BOS token.

Speed: when no vocabulary piece has "▁" after another character (true of Llama/Mistral/Phi-3
vocabularies; checked at load), no merge can cross the start of a "▁"-run, so the text is cut
into words there and each word is merged once and cached.
"""

from __future__ import annotations

import regex

from .merge import encode_words, merge_heap, merge_naive
from .vocab import ATTR_CONTROL, ATTR_UNKNOWN, Vocab

_NAIVE_MAX = 48
_WORDS = regex.compile("▁+[^▁]*|[^▁]+")


class SPM:
    def __init__(self, vocab: Vocab):
        scores = vocab.scores.tolist() if vocab.scores is not None else [0.0] * vocab.n_vocab
        attrs = vocab.attrs
        skip = ATTR_CONTROL | ATTR_UNKNOWN
        # piece text -> (rank, id), for the tokens merges may produce; rank 0 is the highest
        # score (equal scores, equal ranks: the leftmost pair merges first)
        rank = {x: r for r, x in enumerate(sorted(set(scores), reverse=True))}
        self.pieces: dict[str, tuple[int, int]] = {
            t: (rank[scores[i]], i) for i, t in enumerate(vocab.tokens) if not attrs[i] & skip}
        t2i = vocab.token_to_id
        unk = vocab.special.get("unk")
        self.byte_ids: list[int | None] = []
        for b in range(256):
            tid = t2i.get(f"<0x{b:02X}>")
            if tid is None and b < 128:
                tid = t2i.get(chr(b))
            self.byte_ids.append(tid)
        self.unk = unk
        inner = regex.compile("[^▁]▁")
        self.split_words = not any(inner.search(t) for t in vocab.tokens if "▁" in t[1:])
        self.cache: dict[str, list[int]] = {}
        self.width = max(map(len, vocab.tokens))     # the most characters one token spells

    def encode(self, text: str, out: list[int], limit: int | None = None) -> None:
        """Tokenize `text` (whitespace already escaped to ▁) and append the ids to `out`;
        TokenLimit past `limit` ids (encode_words)."""
        words = _WORDS.findall(text) if self.split_words else [text]
        encode_words(words, self.cache, self.encode_word, out, limit, self.width)

    def encode_word(self, word: str) -> list[int]:
        pieces = self.pieces
        syms = self._merge_naive(word) if len(word) <= _NAIVE_MAX else self._merge_heap(word)
        ids: list[int] = []
        for s in syms:
            p = pieces.get(s)
            if p is not None:
                ids.append(p[1])
            else:                        # byte fallback; <unk> per character without byte tokens
                for ch in s:
                    bids = [self.byte_ids[b] for b in ch.encode("utf-8")]
                    if None not in bids:
                        ids.extend(bids)
                    elif self.unk is not None:
                        ids.append(self.unk)
        return ids

    def _priority(self, a: str, b: str):
        p = self.pieces.get(a + b)
        return None if p is None else p[0]           # the highest score merges first

    def _merge_naive(self, word: str) -> list[str]:
        return merge_naive(list(word), self._priority)

    def _merge_heap(self, word: str) -> list[str]:
        return merge_heap(list(word), self._priority)
