"""Pre-tokenizers: split text into words before BPE merges, as `tokenizer.ggml.pre` selects.

Each pre-tokenizer is a sequence of steps applied in turn, the way llama.cpp's
`unicode_regex_split` (and Hugging Face's `Sequence` of `Split(behavior="isolated")`) does: every
step splits each piece produced so far into its matches *and* the text between them, so no
character is ever dropped and a later step never sees across an earlier boundary. A step is a
regex, or (AFMoE's and Tiny Aya's digit grouping) a small function.

Every name llama.cpp's `llama-vocab.cpp` maps is here, and each splits text exactly as llama.cpp
splits it (checked against llama.cpp's own `unicode_regex_split`, see tests/test_tokenizer_pre.py).
That is not always what the Hugging Face pattern in the model's `tokenizer.json` would do,
because llama.cpp runs those patterns on an engine that sees less:

- Its `std::regex` engine reads `\\p{Lu}`, `\\p{Ll}`, `\\p{Lt}`, `\\p{Lm}`, `\\p{Lo}` all as "a
  letter" (ASCII A-Z and a-z included), so the GPT-4o / Tekken / Tiny Aya / Youtu patterns, which
  separate upper- and lowercase runs, separate them only for ASCII letters (llama.cpp's
  `(?=\\p{L})[^a-z]` rewrite), or not at all (patterns it runs as written). Here:
  `[^\\P{L}a-z]` (a letter other than a-z), `[^\\P{L}A-Z]`, or `[\\p{L}\\p{M}]` for the case
  classes it folds.
- Outside `\\p{..}` patterns it replaces every non-ASCII whitespace character by U+000B before
  matching, so a literal character range never matches U+3000 and the other Unicode spaces
  (`_ranges` leaves them out).
- Its hand-written splitters (Kimi-K2's, AFMoE's digits) are what they are: Kimi-K2 does not
  separate case runs and does not join combining marks to letters; the digit splitter joins the
  text before a run of digits to the run's first group (which later steps usually split again).

Patterns run on the `regex` module: `\\p{L}`, `\\p{N}`, `\\p{P}`, `\\p{S}`, `\\p{M}` are the
Unicode general categories llama.cpp's tables use and `\\s` is Unicode White_Space, the set
llama.cpp uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import regex

# -- building blocks -----------------------------------------------------------------------------

# Unicode White_Space (the same 25 code points as llama.cpp's table, and the `regex` module's \s)
_WHITESPACE = (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
               0x2028, 0x2029, 0x202F, 0x205F, 0x3000)


def _ranges(*spans: tuple[int, int]) -> str:
    """A character-class body for code-point ranges (inclusive), without the whitespace
    characters they contain: llama.cpp turns non-ASCII whitespace into U+000B before matching a
    pattern without \\p{..}, so a range never matches it."""
    out = []
    for lo, hi in spans:
        start = lo
        for w in _WHITESPACE:
            if lo <= w <= hi:
                if start < w:
                    out.append((start, w - 1))
                start = w + 1
        if start <= hi:
            out.append((start, hi))
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in out)


_C = r"'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"    # contractions, ASCII case

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?[\p{{L}}\p{{M}}]+|\p{{N}}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MINICPM5 = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}+"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Jais-2: Llama-3, with runs of spaces before a word cut into power-of-two lengths
JAIS2 = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n]*"
         r"|\s*[\r\n]+|" + "|".join(rf"\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4))
         + r"|\s{1,2}(?!\S)|\s")
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
SEED_CODER = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}"
              r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+")
EXAONE_MOE = (rf"(?:{_C})|[^\r\n\p{{L}}\p{{N}}]?(?:\p{{L}}\p{{M}}*(?: \p{{L}}\p{{M}}*)*)+|\p{{N}}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")


def _cased(upper: str | None, lower: str, contractions: bool, digits: str) -> str:
    """The GPT-4o-style pattern: an optional non-letter, then upper-then-lower letter runs
    (upper None: one class for both, a single run)."""
    c = f"(?:{_C})?" if contractions else ""
    lead = r"[^\r\n\p{L}\p{N}]?"
    words = (f"{lead}{lower}+{c}" if upper is None
             else f"{lead}{upper}*{lower}+{c}|{lead}{upper}+{lower}*{c}")
    return words + f"|{digits}" + r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"


_UP, _LOW = r"[^\P{L}a-z]", r"[^\P{L}A-Z]"              # a letter other than a-z / other than A-Z
GPT4O = _cased(_UP, _LOW, True, r"\p{N}{1,3}")
TEKKEN = _cased(_UP, _LOW, False, r"\p{N}")
GRANITE_EMB_MULTI = _cased(r"(?:(?![a-z])[\p{L}\p{M}])", r"(?:(?![A-Z])[\p{L}\p{M}])", True,
                           r"\p{N}{1,3}")
# Youtu and Tiny Aya keep Hugging Face's \p{Lu}.../\p{Ll}... classes, which llama.cpp reads as
# letters of any case: "[LM]*[LM]+" and "[LM]+[LM]*" are both one run of letters and marks
YOUTU = _cased(None, r"[\p{L}\p{M}]", True, r"\p{N}")
TINY_AYA = _cased(None, r"[\p{L}\p{M}]", True, r"\p{N}{1,3}")

# Kimi-K2: llama.cpp's hand-written splitter: Han runs, runs of other letters (no case, no marks)
_HAN = _ranges((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2EBEF),
               (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
KIMI_K2 = (rf"[{_HAN}]+|[^\r\n\p{{L}}\p{{N}}]?[^\P{{L}}{_HAN}]+(?:{_C})?|\p{{N}}{{1,3}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# DeepSeek-V3 family: ASCII punctuation + ASCII word, letters with marks, punctuation/symbols
_DSV3 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
         r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPARK = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
          r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
_CJK_KANA = f"[{_ranges((0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF))}]+"
# CJK, then U+0800..U+4E00 (a wide range that llama.cpp's table carries as written), Hangul
_CJK_DS = f"[{_ranges((0x4E00, 0x9FA5), (0x0800, 0x4E00), (0xAC00, 0xD7FF))}]+"
# AFMoE's scripts without spaces between words; "U+8C48" is what llama.cpp's source holds where
# the compatibility ideograph U+F900 was meant (its NFC form), so the range starts there
_AFMOE_SCRIPTS = "[" + _ranges(
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x8C48, 0xFAFF), (0x3040, 0x309F), (0x30A0, 0x30FF),
    (0xFF65, 0xFF9F), (0x2F00, 0x2FDF), (0x0E40, 0x0E7F), (0x0E80, 0x0EFF), (0x1780, 0x17FF),
    (0x1000, 0x109F), (0xAA60, 0xAA7F), (0xA9E0, 0xA9FF), (0xAC00, 0xD7AF), (0x1100, 0x11FF)) + "]+"
_YOUTU_SCRIPTS = "|".join((
    "[" + _ranges((0xAC00, 0xD7A3), (0x3131, 0x318E)) + "]+",                      # Hangul
    "[" + _ranges((0xFF01, 0xFF01), (0x2026, 0x2026), (0x201C, 0x201D), (0x2018, 0x2019),
                  (0x2014, 0x2014), (0xFF1A, 0xFF1B), (0xFF0C, 0xFF0C), (0x3001, 0x303F),
                  (0xFE30, 0xFE4F)) + "]+",                                  # CJK punctuation
    "[" + _ranges((0x3105, 0x312F)) + "]+",                                        # Bopomofo
    _CJK_KANA))
# DeepSeek-LLM: a fixed list of cased letters (Latin, Greek, Cyrillic, Armenian, Georgian,
# Cherokee, ..., Adlam), then ASCII and full-width punctuation
_DS_LLM_LETTERS = _ranges(*((int(a, 16), int(b or a, 16))
                            for a, _, b in (s.partition("-") for s in (
    "41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376-377 37B-37D 37F 386 "
    "388-38A 38C 38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA "
    "1CBD-1CBF 1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 "
    "1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB "
    "1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 212A-212D "
    "212F-2134 2139 213C-213F 2145-2149 214E 2183-2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2-2CF3 "
    "A640-A66D A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A "
    "FF41-FF5A 10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF "
    "1E900-1E943").split())))
_DS_LLM_PUNCT = _ranges((0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E),
                        (0x2018, 0x201F), (0x3000, 0x3002))
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
NEWLINES = r"[^\n]+|\n+"


def afmoe_digits(piece: str) -> list[str]:
    """llama.cpp's AFMoE (and Tiny Aya) digit splitter: each run of \\p{N} characters is cut into
    groups of three from the right (1234567 -> 1 234 567). The text before a run is not a piece
    of its own: it goes with the run's first group ("ab1234" -> "ab1" "234"), as llama.cpp does;
    the steps after this one split it off again."""
    out: list[str] = []
    prev = pos = 0
    n = len(piece)
    while pos < n:
        if not _NUMBER.match(piece, pos):
            pos += 1
            continue
        start = pos
        pos = _NUMBER_RUN.match(piece, pos).end()
        cut = start + (pos - start) % 3
        if cut == start:
            cut += 3
        while cut <= pos:
            out.append(piece[prev:cut])
            prev = cut
            cut += 3
    if prev < n:
        out.append(piece[prev:])
    return out


_NUMBER = regex.compile(r"\p{N}")
_NUMBER_RUN = regex.compile(r"\p{N}+")


def trailing_space(piece: str) -> list[str]:
    """DeepSeek-LLM's `\\s+\\Z` step: the piece's trailing run of whitespace split off. As a
    regex split it tries the pattern at every position of a whitespace run and scans the run to
    its end each time (quadratic: 32,000 spaces before a digit took 0.65 s); searched from the
    end it is one scan of the run."""
    m = _TRAILING_SPACE.search(piece)
    return [piece] if m is None or m.start() == 0 else [piece[:m.start()], piece[m.start():]]


def thousands(piece: str) -> list[str]:
    """SuperBPE's `(?=(?:[0-9]{3})+(?![0-9]))` step: a cut before each group of three ASCII
    digits, counted from the end of each run of them. The lookahead scans to the run's end at
    every position (quadratic: 32,000 digits took 21 s); here each run is found once."""
    cuts = [c for m in _ASCII_DIGITS.finditer(piece)
            for c in range(m.end() - 3 * ((m.end() - m.start()) // 3), m.end(), 3) if c > 0]
    return [piece[a:b] for a, b in zip([0] + cuts, cuts + [len(piece)])]


_TRAILING_SPACE = regex.compile(r"(?r)\s+\Z")
_ASCII_DIGITS = regex.compile("[0-9]+")

Step = Union[str, Callable[[str], list]]

# tokenizer.ggml.pre -> steps and flags (llama.cpp's `llama_vocab::impl::load` and
# `llm_tokenizer_bpe`):
#   ignore_merges   a word that is itself a token is emitted whole (tiktoken-converted vocabularies)
#   add_bos         the add-BOS default when the GGUF has no tokenizer.ggml.add_bos_token
#   force_bos       BOS is added even when the GGUF says not to (llama.cpp's Gemma 4 workaround)
#   no_bos          there is no default BOS id (the GGUF must name one)
#   byte_encode     False: merges work on the UTF-8 text itself, not on GPT-2's byte alphabet,
#                   and bytes without a token fall back to <0xNN> tokens
#   escape_spaces   spaces become "▁" before splitting, and "▁" decodes to a space (SPM-style BPE)
#   newline_tokens  a word of newlines that is itself a token is emitted whole (Gemma 4)
#   merges_optional the GGUF may lack tokenizer.ggml.merges (Kimi-K2)
_SEQUENCES: dict[str, tuple[tuple[Step, ...], dict]] = {}


def _register(names: str, steps: tuple[Step, ...], **flags):
    for name in names.split():
        assert name not in _SEQUENCES, name
        _SEQUENCES[name] = (steps, flags)


_register("default", (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_register("gpt-2 phi-2 mpt olmo jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code "
          "roberta-bpe gigachat exaone4 a.x-4.0 mellum modern-bert trillion granite-docling jais",
          (GPT2,))
_register("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
          (LLAMA3,), ignore_merges=True, add_bos=True)
_register("dbrx smaug-bpe", (LLAMA3,))
_register("chatglm-bpe", (LLAMA3,), no_bos=True)
_register("glm4 glm5", (LLAMA3,), no_bos=True, ignore_merges=True)
_register("jais-2", (JAIS2,))
_register("qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 megrez hunyuan solar-open grok-2",
          (QWEN2,))
_register("qwen35", (QWEN35,))
_register("minicpm5", (r"\p{N}{1,3}", MINICPM5), ignore_merges=True)
_register("deepseek-coder", ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_DS, r"\p{N}"))
_register("deepseek-llm", ("[\r\n]", rf"\s?[{_DS_LLM_LETTERS}]+", rf"\s?[{_DS_LLM_PUNCT}]+",
                           trailing_space, _CJK_DS, r"\p{N}+"))
_register("deepseek-v3 hunyuan-dense joyai-llm hy_v4", (r"\p{N}{1,3}", _CJK_KANA, _DSV3))
_register("spark2_5", (r"\p{N}{1,3}", _CJK_KANA, _SPARK, r"\p{N}"))
_register("afmoe", (afmoe_digits, _AFMOE_SCRIPTS, _DSV3))
_register("youtu", (_YOUTU_SCRIPTS, YOUTU), ignore_merges=True)
_register("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))
_register("starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
          (r"\p{N}", GPT2))
_register("gpt-4o llama4 kanana2 talkie minimax-m2", (GPT4O,))
_register("granite-embed-multi-97m", (GRANITE_EMB_MULTI,), ignore_merges=True)
_register("tiny_aya cohere2moe", (afmoe_digits, TINY_AYA))
_register("tekken", (TEKKEN,), ignore_merges=True, add_bos=True)
_register("bloom gpt3-finnish poro-chat", (BLOOM,))
_register("viking", (BLOOM, r"\p{N}"))
_register("chameleon", ("<sentinel:[0-9]+>", "IMGIMG[A-I]{1,4}Z", "[\t\n]|    |  ", r"\p{N}",
                        r"[\p{P}\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e]", GPT2), add_bos=True)
_register("superbpe", (r"\p{N}+", thousands))
_register("bailingmoe bailingmoe2 llada-moe", (BAILINGMOE,))
_register("seed-coder", (SEED_CODER,))
_register("exaone-moe", (EXAONE_MOE,))
_register("ufakzeka", (UFAKZEKA,))
_register("kimi-k2", (KIMI_K2,), merges_optional=True)
_register("laguna", (NEWLINES, QWEN2))
_register("gemma4 granite-embed-multi-311m", (NEWLINES,), byte_encode=False, escape_spaces=True,
          force_bos=True, newline_tokens=True)
_register("sarvam-moe", (NEWLINES,), byte_encode=False, escape_spaces=True)
_register("whitespace", (r"\S+",), byte_encode=False)

SUPPORTED = tuple(sorted(_SEQUENCES))


@dataclass(frozen=True)
class PreTokenizer:
    """A compiled step sequence. `split(text)` returns the words, in order, covering `text`."""
    name: str
    steps: tuple                       # compiled regexes and splitter functions
    ignore_merges: bool = False
    add_bos: bool = False
    force_bos: bool = False
    no_bos: bool = False
    byte_encode: bool = True
    escape_spaces: bool = False
    newline_tokens: bool = False
    merges_optional: bool = False

    def split(self, text: str) -> list[str]:
        steps = self.steps
        if len(steps) == 1 and not callable(steps[0]):
            # most vocabularies: one pattern that matches every character -> findall suffices
            words = steps[0].findall(text)
            if sum(map(len, words)) == len(text):
                return words
        pieces = [text]
        for step in steps:
            out: list[str] = []
            if callable(step):
                for piece in pieces:
                    out.extend(step(piece))
            else:
                for piece in pieces:
                    pos = 0
                    for m in step.finditer(piece):
                        s, e = m.span()
                        if e == s:               # a zero-width match only marks a boundary
                            if s > pos:
                                out.append(piece[pos:s])
                                pos = s
                            continue
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
    steps, flags = spec
    compiled = tuple(s if callable(s) else regex.compile(s) for s in steps)
    _CACHE[name] = PreTokenizer(name, compiled, **flags)
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
