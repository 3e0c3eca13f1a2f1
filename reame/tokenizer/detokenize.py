"""Token ids back to text.

`piece_bytes` gives each token's bytes: a normal SPM piece with "▁" turned back into spaces, a
byte-level BPE piece mapped back through the GPT-2 byte alphabet, a byte token `<0xNN>` as that
byte, a control or unknown token as its text (or nothing when special tokens are skipped), a
user-defined token as its text. Unused tokens decode to nothing (llama.cpp's rule).

Text is produced from the concatenated bytes; bytes that are not valid UTF-8 become U+FFFD, one
per maximal invalid subsequence (Python's "replace" handler, the Unicode-recommended practice).

`IncrementalDecoder` does the same one token at a time for streaming: it emits only complete
characters and holds back the bytes of a character that is still being spelled (a multi-byte
character split over several byte tokens), so the concatenation of everything it returns,
including `flush()`, equals `Tokenizer.decode` of the same ids (with `strip_space_prefix` equal).
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

from .pretokenize import CHAR_TO_BYTE
from .vocab import ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED

if TYPE_CHECKING:
    from .tokenizer import Tokenizer


# byte-level character -> latin-1 character of the same byte, for str.translate
_BYTELEVEL_TO_LATIN1: dict[int, int | str] = {ord(c): b for c, b in CHAR_TO_BYTE.items()}
for _c in range(256):                     # latin-1 characters outside the alphabet: force the slow
    _BYTELEVEL_TO_LATIN1.setdefault(_c, "\U0010FFFF")   # path (they are not single bytes here)


def piece_bytes(text: str, attr: int, byte_level: bool) -> bytes:
    """The bytes token `text` (with attributes `attr`) stands for, special tokens spelled out."""
    if attr & (ATTR_CONTROL | ATTR_UNKNOWN | ATTR_USER_DEFINED):
        return _utf8(text)
    if attr & ATTR_NORMAL:
        if not byte_level:
            return _utf8(text.replace("▁", " "))
        latin = text.translate(_BYTELEVEL_TO_LATIN1)
        try:
            return latin.encode("latin-1")
        except UnicodeEncodeError:               # a character outside the byte alphabet
            return b"".join(bytes([CHAR_TO_BYTE[c]]) if c in CHAR_TO_BYTE else _utf8(c)
                            for c in text)
    if attr & ATTR_BYTE:
        try:
            return bytes([int(text[3:5], 16)])
        except ValueError:
            return _utf8(text)
    return b""                                   # unused / undefined: nothing, as llama.cpp


def _utf8(text: str) -> bytes:
    # GGUF strings that were not valid UTF-8 were read with surrogateescape: give the bytes back
    return text.encode("utf-8", "surrogateescape")


class IncrementalDecoder:
    """Streaming detokenizer: `push(id)` returns the text that is now complete (possibly ""),
    `flush()` returns what is left (an unfinished character becomes U+FFFD, never dropped).

    `skip_special=True` drops control tokens (what a chat client should see);
    `strip_space_prefix=True` removes the space an SPM tokenizer put in front of the first word,
    for a stream that starts a text rather than continuing a prompt."""

    def __init__(self, tok: "Tokenizer", skip_special: bool = True,
                 strip_space_prefix: bool = False):
        self.tok = tok
        self.skip_special = skip_special
        self._strip = strip_space_prefix and tok.add_space_prefix
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        b = self.tok.token_bytes(token_id, self.skip_special)
        if self._strip and b:
            self._strip = False
            if b[:1] == b" ":
                b = b[1:]
        return self._dec.decode(b) if b else ""

    def flush(self) -> str:
        out = self._dec.decode(b"", final=True)
        self._dec.reset()
        return out
