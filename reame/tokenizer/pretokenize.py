"""Pre-tokenizers: split text into words before BPE merges, as `tokenizer.ggml.pre` selects.

Each pre-tokenizer is a sequence of regexes applied in turn, the way llama.cpp's
`unicode_regex_split` (and Hugging Face's `Sequence` of `Split(behavior="isolated")`) does: every
regex splits each piece produced so far into its matches *and* the text between them, so no
character is ever dropped and a later regex never sees across an earlier boundary.

The patterns are the ones Hugging Face's `tokenizer.json` files carry (llama.cpp rewrites some of
them for `std::regex`, which lacks `\\p{..}`; the `regex` module has them, and its `\\s` is the
Unicode White_Space set, the same set llama.cpp's unicode tables use).
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

# -- the patterns ------------------------------------------------------------------------------

_CONTRACTIONS = r"'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (rf"(?:{_CONTRACTIONS})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (rf"(?:{_CONTRACTIONS})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         rf"(?:{_CONTRACTIONS})?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         rf"(?:{_CONTRACTIONS})?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"

# tokenizer.ggml.pre -> (regex sequence, ignore_merges, add_bos default)
# ignore_merges: a word that is itself a token is emitted whole (llama.cpp's flag for tiktoken-
# converted vocabularies, whose merges do not always rebuild every token).
_SEQUENCES: dict[str, tuple[tuple[str, ...], bool, bool]] = {}


def _register(names: str, patterns: tuple[str, ...], ignore_merges=False, add_bos=False):
    for name in names.split():
        _SEQUENCES[name] = (patterns, ignore_merges, add_bos)


_register("default", (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_register("gpt-2 phi-2 mpt olmo jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code "
          "roberta-bpe gigachat exaone4 a.x-4.0 mellum modern-bert trillion granite-docling jais",
          (GPT2,))
_register("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2",
          (LLAMA3,), ignore_merges=True, add_bos=True)
_register("dbrx smaug-bpe chatglm-bpe glm4", (LLAMA3,))
_register("qwen2 deepseek-r1-qwen stablelm2 megrez hunyuan", (QWEN2,))
_register("deepseek-coder", ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"))
_register("deepseek-v3 hunyuan-dense",
          (r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
           r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
           r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"))
_register("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))
_register("starcoder refact command-r smollm codeshell exaone minerva-7b", (r"\p{N}", GPT2))
_register("gpt-4o llama4", (GPT4O,))
_register("tekken", (TEKKEN,), ignore_merges=True, add_bos=True)
_register("bloom gpt3-finnish poro-chat", (BLOOM,))
_register("viking", (BLOOM, r"\p{N}"))

SUPPORTED = tuple(sorted(_SEQUENCES))


@dataclass(frozen=True)
class PreTokenizer:
    """A compiled regex sequence. `split(text)` returns the words, in order, covering `text`."""
    name: str
    patterns: tuple[regex.Pattern, ...]
    ignore_merges: bool
    add_bos: bool
    # True when the single pattern matches every character (GPT-2 / Llama-3 style): findall suffices
    covers_all: bool

    def split(self, text: str) -> list[str]:
        if self.covers_all:
            return self.patterns[0].findall(text)
        pieces = [text]
        for pat in self.patterns:
            out: list[str] = []
            for piece in pieces:
                pos = 0
                for m in pat.finditer(piece):
                    s, e = m.span()
                    if s > pos:
                        out.append(piece[pos:s])
                    out.append(piece[s:e])
                    pos = e
                if pos < len(piece):
                    out.append(piece[pos:])
            pieces = out
        return pieces


_CACHE: dict[str, PreTokenizer] = {}


def pre_tokenizer(name: str) -> PreTokenizer | None:
    """The pre-tokenizer that `tokenizer.ggml.pre` = `name` selects, or None when unknown."""
    if name in _CACHE:
        return _CACHE[name]
    spec = _SEQUENCES.get(name)
    if spec is None:
        return None
    patterns, ignore_merges, add_bos = spec
    compiled = tuple(regex.compile(p) for p in patterns)
    covers = len(patterns) == 1 and patterns[0] in (GPT2, LLAMA3, QWEN2, GPT4O, TEKKEN)
    _CACHE[name] = PreTokenizer(name, compiled, ignore_merges, add_bos, covers)
    return _CACHE[name]


# -- GPT-2 byte-level alphabet -------------------------------------------------------------------

def _byte_alphabet() -> list[str]:
    """byte -> printable character, GPT-2's `bytes_to_unicode`: printable Latin-1 bytes map to
    themselves, the other 68 to U+0100 onwards in byte order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, n = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + n))
            n += 1
    return out


BYTE_TO_CHAR: list[str] = _byte_alphabet()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
# str.translate table: a latin-1 decoded byte string -> its byte-level spelling
_LATIN1_TO_BYTELEVEL = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def byte_encode(word: str) -> str:
    """UTF-8 bytes of `word` spelled in the byte-level alphabet (what BPE merges operate on)."""
    return word.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_BYTELEVEL)
