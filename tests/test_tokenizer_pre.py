"""Every pre-tokenizer llama.cpp knows (`tokenizer.ggml.pre`), accepted and splitting text as
llama.cpp splits it.

LLAMA_CPP_PRE is the list of names `llama_vocab::impl::load` in llama.cpp's src/llama-vocab.cpp
maps, copied from commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01; the
ggml-org/llama.cpp snapshot 00ad355e read through the code index has the same names but "glm5").

SPLITS holds, per llama.cpp pre-tokenizer type, the words llama.cpp's `unicode_regex_split` (that
commit, built from source) cut three sample texts into, with the names mapped to that type. They
were recorded by running llama.cpp, not derived from Reame. The texts exercise what separates the
types: contractions, letter case (ASCII and not), combining marks, digit grouping, Han / kana /
Hangul / Bopomofo, Unicode spaces next to letters, runs of spaces and newlines, punctuation and
symbols, Chameleon's sentinel and image tokens. Full tokenization of 8 vocabularies is checked
against llama.cpp's own test vectors in tests/test_tokenizer_vectors.py.
"""

from __future__ import annotations

import pytest
from conftest import shared_path

from reame.errors import TokenizerError
from reame.gguf_file import GGUFFile
from reame.tokenizer import Tokenizer
from reame.tokenizer.pretokenize import BYTE_TO_CHAR, SUPPORTED, afmoe_digits, pre_tokenizer

LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
LLAMA_CPP_PRE = """
a.x-4.0 afmoe bailingmoe bailingmoe2 bloom chameleon chatglm-bpe codeshell cohere2moe command-r
dbrx deepseek-coder deepseek-llm deepseek-r1-qwen deepseek-v3 default exaone exaone-moe exaone4
f2llmv2 falcon falcon-h1 falcon3 gemma4 gigachat glm4 glm5 gpt-2 gpt-4o gpt3-finnish
granite-docling granite-embed-multi-311m granite-embed-multi-97m grok-2 hunyuan hunyuan-dense
hy_v4 jais jais-2 jina-de jina-es jina-v1-en jina-v2-code jina-v2-de jina-v2-es jina-v5-nano
joyai-llm kanana2 kimi-k2 kormo laguna lfm2 llada-moe llama-bpe llama-v3 llama3 llama4 megrez
mellum mellum2 midm-2.0 minerva-7b minicpm5 minimax-m2 modern-bert mpt olmo phi-2 pixtral
poro-chat qwen2 qwen35 refact roberta-bpe sarvam-moe seed-coder smaug-bpe smollm solar-open
spark2_5 stablelm2 starcoder superbpe talkie tekken tiny_aya trillion ufakzeka viking whitespace
youtu
""".split()

# llama.cpp's flags per name (llama_vocab::impl::load)
ADD_BOS = set("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano "
              "tekken chameleon".split())
FORCE_BOS = {"gemma4", "granite-embed-multi-311m"}        # BOS even when the GGUF says no
IGNORE_MERGES = set("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 "
                    "jina-v5-nano minicpm5 youtu glm4 glm5 tekken granite-embed-multi-97m".split())
NO_BOS_DEFAULT = {"chatglm-bpe", "glm4", "glm5"}
RAW_TEXT = {"gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"}   # no byte alphabet
ESCAPED_SPACES = {"gemma4", "granite-embed-multi-311m", "sarvam-moe"}

TEXTS = (
    "Hello World's DON'T stop: HelloWorld ÀBC àbc e\u0301t\u0301e 1234567 ١٢٣٤ x²  42",
    "中文字 ひらがな カタカナ 한국어 ㄅㄆ 。，、！ тест\u3000abc\u2028] tab\t\ttab",
    "  lead     five\n\n\n  trail \r\n<sentinel:12> IMGIMGABZ $+<=>^~|` a/b\n// x   ",
)

SPLITS = {
    'AFMOE': ('afmoe', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "234", "567", " ", "١", "٢٣٤", " x", "²", " ", " ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " ", "한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc",
         "\u2028", "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'BAILINGMOE': ('bailingmoe bailingmoe2 llada-moe', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'BLOOM': ('bloom', (
        ["Hello", " World's", " DON'T", " stop:", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " 1234567", " ١٢٣٤", " x²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、", "！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<sentinel:12>",
         " IMGIMGABZ", " $+<=>^~", "|", "`", " a/b", "\n", "//", " x", "   "],)),
    'CHAMELEON': ('chameleon', (
        ["Hello", " World", "'", "s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC",
         " àbc", " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ",
         "١", "٢", "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " ", "。", "，", "、", "！", " тест", "\u3000", "abc",
         "\u2028", "]", " tab", "\t", "\t", "tab"],
        ["  ", "lead", "    ", " five", "\n", "\n", "\n", "  ", "trail", " \r", "\n", "<",
         "sentinel", ":", "1", "2", ">", " ", "IMGIMGABZ", " ", "$", "+", "<", "=", ">", "^", "~",
         "|", "`", " a", "/", "b", "\n", "/", "/", " x", "  ", " "],)),
    'CHATGLM4': ('chatglm-bpe glm4 glm5', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'CODESHELL': ('codeshell', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'COMMAND_R': ('command-r', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'DBRX': ('dbrx', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'DEEPSEEK3_LLM': ('deepseek-v3', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028",
         "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'DEEPSEEK_CODER': ('deepseek-coder', (
        ["Hello", " World", "'", "s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC",
         " àbc", " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ",
         "١", "٢", "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " ", "한국어", " ", "ㄅㄆ", " ", "。", "，", "、", "！", " тест",
         "\u3000abc", "\u2028]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n", "\n", "\n", " ", " trail", " ", "\r", "\n", "<",
         "sentinel", ":", "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//",
         " x", "   "],)),
    'DEEPSEEK_LLM': ('deepseek-llm', (
        ["Hello", " World", "'", "s", " DON", "'", "T", " stop", ":", " HelloWorld", " À", "BC",
         " à", "bc", " e", "\u0301", "t", "\u0301", "e", " ", "1234567", " ", "١٢٣٤", " x", "²",
         "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " ", "한국어", " ", "ㄅㄆ", " ", "。", "，", "、", "！", " тест",
         "\u3000abc", "\u2028]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n", "\n", "\n", " ", " trail", " ", "\r", "\n", "<",
         "sentinel", ":", "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x",
         "   "],)),
    'DEFAULT': ('default', (
        ["Hello", " World", "'", "s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC",
         " àbc", " e", "\u0301", "t", "\u0301", "e", " ", "123", "456", "7", " ", "١٢٣٤", " x",
         "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " ", "。，、！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<", "sentinel", ":", "12",
         ">", " IMGIMGABZ", " ", "$+<=>^~|", "`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'EXAONE': ('exaone', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'EXAONE_MOE': ('exaone-moe', (
        ["Hello World", "'s", " DON", "'T", " stop", ":", " HelloWorld ÀBC àbc e\u0301t\u0301e",
         " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤", " x", "²", " ", " ", "4",
         "2"],
        ["中文字 ひらがな カタカナ 한국어 ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]", " tab", "\t",
         "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'FALCON': ('falcon', (
        ["Hello", " World", "'", "s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC",
         " àbc", " e", "\u0301", "t", "\u0301", "e", " ", "123", "456", "7", " ١٢٣٤", " x", "²",
         " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " ", "。，、！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<", "sentinel", ":", "12",
         ">", " IMGIMGABZ", " ", "$+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'GEMMA4': ('gemma4 granite-embed-multi-311m', (
        ["Hello World's DON'T stop: HelloWorld ÀBC àbc e\u0301t\u0301e 1234567 ١٢٣٤ x²  42"],
        ["中文字 ひらがな カタカナ 한국어 ㄅㄆ 。，、！ тест\u3000abc\u2028] tab\t\ttab"],
        ["  lead     five", "\n\n\n", "  trail \r", "\n", "<sentinel:12> IMGIMGABZ $+<=>^~|` a/b",
         "\n", "// x   "],)),
    'GPT2': ('a.x-4.0 exaone4 gigachat gpt-2 jina-de jina-es jina-v1-en jina-v2-code jina-v2-de '
             'jina-v2-es mellum modern-bert phi-2 roberta-bpe', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'GPT3_FINNISH': ('gpt3-finnish', (
        ["Hello", " World's", " DON'T", " stop:", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " 1234567", " ١٢٣٤", " x²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、", "！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<sentinel:12>",
         " IMGIMGABZ", " $+<=>^~", "|", "`", " a/b", "\n", "//", " x", "   "],)),
    'GPT4O': ('gpt-4o kanana2 llama4 talkie', (
        ["Hello", " World's", " DON'T", " stop", ":", " Hello", "World", " À", "BC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'GRANITE_DOCLING': ('granite-docling', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'GRANITE_EMB_MULTI': ('granite-embed-multi-97m', (
        ["Hello", " World's", " DON'T", " stop", ":", " Hello", "World", " À", "BC", " àbc",
         " e\u0301t\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'GROK_2': ('grok-2', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'HUNYUAN': ('hunyuan', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'HUNYUAN_DENSE': ('hunyuan-dense', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028",
         "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'HY_V4': ('hy_v4', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028",
         "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'JAIS': ('jais', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'JAIS2': ('jais-2', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "  ", " "],)),
    'JOYAI_LLM': ('joyai-llm', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028",
         "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'KIMI_K2': ('kimi-k2', (
        ["Hello", " World's", " DON'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'LAGUNA': ('laguna', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r", "\n", "<sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'LLAMA3': ('falcon-h1 falcon3 jina-v5-nano lfm2 llama-bpe llama-v3 llama3 midm-2.0 pixtral', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'MELLUM2': ('mellum2', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'MINERVA': ('minerva-7b', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'MINICPM5': ('minicpm5', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", "  ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'MINIMAX_M2': ('minimax-m2', (
        ["Hello", " World's", " DON'T", " stop", ":", " Hello", "World", " À", "BC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'MPT': ('mpt', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'OLMO': ('olmo', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'PORO': ('poro-chat', (
        ["Hello", " World's", " DON'T", " stop:", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " 1234567", " ١٢٣٤", " x²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、", "！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<sentinel:12>",
         " IMGIMGABZ", " $+<=>^~", "|", "`", " a/b", "\n", "//", " x", "   "],)),
    'QWEN2': ('deepseek-r1-qwen f2llmv2 kormo megrez qwen2', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'QWEN35': ('qwen35', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤", " x",
         "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'REFACT': ('refact', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'SARVAM_MOE': ('sarvam-moe', (
        ["Hello World's DON'T stop: HelloWorld ÀBC àbc e\u0301t\u0301e 1234567 ١٢٣٤ x²  42"],
        ["中文字 ひらがな カタカナ 한국어 ㄅㄆ 。，、！ тест\u3000abc\u2028] tab\t\ttab"],
        ["  lead     five", "\n\n\n", "  trail \r", "\n", "<sentinel:12> IMGIMGABZ $+<=>^~|` a/b",
         "\n", "// x   "],)),
    'SEED_CODER': ('seed-coder', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'SMAUG': ('smaug-bpe', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "123", "456", "7", " ", "١٢٣", "٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'SMOLLM': ('smollm', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'SOLAR_OPEN': ('solar-open', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'SPARK2_5': ('spark2_5', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤", " x",
         "²", "  ", "4", "2"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028",
         "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n", "\n", "\n", " ", " trail", " \r", "\n", "<sentinel",
         ":", "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'STABLELM2': ('stablelm2', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'STARCODER': ('starcoder', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", "  ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "1", "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'SUPERBPE': ('superbpe', (
        ["Hello World's DON'T stop: HelloWorld ÀBC àbc e\u0301t\u0301e ", "1", "234", "567", " ",
         "١٢٣٤", " x", "²", "  ", "42"],
        ["中文字 ひらがな カタカナ 한국어 ㄅㄆ 。，、！ тест\u3000abc\u2028] tab\t\ttab"],
        ["  lead     five\n\n\n  trail \r\n<sentinel:", "12",
         "> IMGIMGABZ $+<=>^~|` a/b\n// x   "],)),
    'TEKKEN': ('tekken', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " Hello", "World", " À", "BC",
         " àbc", " e", "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢",
         "٣", "٤", " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'TINY_AYA': ('cohere2moe tiny_aya', (
        ["Hello", " World's", " DON'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "234", "567", " ", "١", "٢٣٤", " x", "²", " ", " ", "42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "12",
         ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'TRILLION': ('trillion', (
        ["Hello", " World", "'s", " DON", "'", "T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e", "\u0301", "t", "\u0301", "e", " 1234567", " ١٢٣٤", " x", "²", " ", " 42"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000", "abc", "\u2028", "]",
         " tab", "\t", "\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r", "\n", "<", "sentinel", ":",
         "12", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/", "b", "\n", "//", " x", "   "],)),
    'UFAKZEKA': ('ufakzeka', (
        ["Hello", " World", "'s", " DON", "'T", " stop", ":", " HelloWorld", " ÀBC", " àbc", " e",
         "\u0301t", "\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤",
         " x", "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、！", " тест", "\u3000abc", "\u2028", "]",
         " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
    'VIKING': ('viking', (
        ["Hello", " World's", " DON'T", " stop:", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤", " x",
         "²", " ", " ", "4", "2"],
        ["中文字", " ひらがな", " カタカナ", " 한국어", " ㄅㄆ", " 。，、", "！", " тест", "\u3000", "abc", "\u2028",
         "]", " tab", "\t\t", "tab"],
        [" ", " lead", "    ", " five", "\n\n\n ", " trail", " \r\n", "<sentinel:", "1", "2", ">",
         " IMGIMGABZ", " $+<=>^~", "|", "`", " a/b", "\n", "//", " x", "   "],)),
    'WHITESPACE': ('whitespace', (
        ["Hello", " ", "World's", " ", "DON'T", " ", "stop:", " ", "HelloWorld", " ", "ÀBC", " ",
         "àbc", " ", "e\u0301t\u0301e", " ", "1234567", " ", "١٢٣٤", " ", "x²", "  ", "42"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " ", "한국어", " ", "ㄅㄆ", " ", "。，、！", " ", "тест",
         "\u3000", "abc", "\u2028", "]", " ", "tab", "\t\t", "tab"],
        ["  ", "lead", "     ", "five", "\n\n\n  ", "trail", " \r\n", "<sentinel:12>", " ",
         "IMGIMGABZ", " ", "$+<=>^~|`", " ", "a/b", "\n", "//", " ", "x", "   "],)),
    'YOUTU': ('youtu', (
        ["Hello", " World's", " DON'T", " stop", ":", " HelloWorld", " ÀBC", " àbc",
         " e\u0301t\u0301e", " ", "1", "2", "3", "4", "5", "6", "7", " ", "١", "٢", "٣", "٤", " x",
         "²", " ", " ", "4", "2"],
        ["中文字", " ", "ひらがな", " ", "カタカナ", " ", "한국어", " ", "ㄅㄆ", " ", "。，、！", " тест", "\u3000abc",
         "\u2028", "]", " tab", "\t", "\ttab"],
        [" ", " lead", "    ", " five", "\n\n\n", " ", " trail", " \r\n", "<sentinel", ":", "1",
         "2", ">", " IMGIMGABZ", " $+<=>^~|`", " a", "/b", "\n", "//", " x", "   "],)),
}


def test_supported_names_are_llamacpps():
    """Reame knows exactly the names llama.cpp knows: none refused, none invented."""
    assert len(LLAMA_CPP_PRE) == len(set(LLAMA_CPP_PRE)) == 91
    assert sorted(SUPPORTED) == sorted(LLAMA_CPP_PRE)
    assert sorted(n for _, (names, _) in SPLITS.items() for n in names.split()) \
        == sorted(LLAMA_CPP_PRE)


@pytest.mark.parametrize("kind", sorted(SPLITS))
def test_split_like_llamacpp(kind):
    names, expected = SPLITS[kind]
    for name in names.split():
        pre = pre_tokenizer(name)
        for text, want in zip(TEXTS, expected):
            assert "".join(want) == text
            assert pre.split(text) == want, (name, text)


def _tiny_metadata(name: str, **extra) -> dict:
    """A small vocabulary for pre-tokenizer `name`: every byte, "ab" (with no merge making it), and
    "cd" (made by the only merge, "c d")."""
    if name in RAW_TEXT:
        tokens = [f"<0x{b:02X}>" for b in range(256)] + ["a", "b", "c", "d", "▁", "ab", "cd"]
        types = [6] * 256 + [1] * 7
    else:
        tokens = list(BYTE_TO_CHAR) + ["ab", "cd"]
        types = [1] * 258
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": name,
          "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
          "tokenizer.ggml.merges": ["c d"]}
    md.update(extra)
    return md


@pytest.mark.parametrize("name", LLAMA_CPP_PRE)
def test_every_name_builds_a_tokenizer(name):
    """Accepted, with llama.cpp's add-BOS default, BOS id default and ignore_merges."""
    tok = Tokenizer.from_metadata(_tiny_metadata(name, **{"tokenizer.ggml.bos_token_id": 3}))
    assert tok.add_bos == (name in ADD_BOS or name in FORCE_BOS)
    assert tok.pre == name
    text = "ab cd ab\nxyz 123"
    ids = tok.encode(text, add_special=False)
    assert tok.decode(ids) == text
    t2i = tok.vocab.token_to_id
    assert tok.encode("ab", add_special=False) == (
        [t2i["ab"]] if name in IGNORE_MERGES else [t2i["a"], t2i["b"]])
    assert tok.encode("cd", add_special=False) == [t2i["cd"]]
    untold = Tokenizer.from_metadata(_tiny_metadata(name))
    assert (untold.bos_id is None) == (name in NO_BOS_DEFAULT)


def test_forced_bos_overrides_the_gguf():
    for name in LLAMA_CPP_PRE:
        md = _tiny_metadata(name, **{"tokenizer.ggml.add_bos_token": False,
                                     "tokenizer.ggml.bos_token_id": 3})
        assert Tokenizer.from_metadata(md).add_bos == (name in FORCE_BOS), name
    md = _tiny_metadata("gemma4", **{"tokenizer.ggml.add_bos_token": False})
    md["tokenizer.ggml.model"] = "gemma4"                # no default BOS id for this model
    with pytest.raises(TokenizerError, match="BOS"):
        Tokenizer.from_metadata(md)


def test_escaped_spaces_and_byte_fallback():
    """SPM-style BPE: spaces are "▁" before merging, bytes without a token are <0xNN>, and
    decoding turns "▁" back into spaces."""
    for name in sorted(RAW_TEXT):
        tok = Tokenizer.from_metadata(_tiny_metadata(name))
        t2i = tok.vocab.token_to_id
        ids = tok.encode("a é", add_special=False)
        space = [t2i["▁"]] if name in ESCAPED_SPACES else [t2i["<0x20>"]]
        assert ids == [t2i["a"]] + space + [t2i["<0xC3>"], t2i["<0xA9>"]], name
        assert tok.decode(ids) == "a é"


def test_merges_required_except_kimi_k2():
    md = _tiny_metadata("kimi-k2")
    del md["tokenizer.ggml.merges"]
    tok = Tokenizer.from_metadata(md)               # llama.cpp loads Kimi-K2 without merges
    assert tok.decode(tok.encode("ab cd")) == "ab cd"
    md = _tiny_metadata("qwen2")
    del md["tokenizer.ggml.merges"]
    with pytest.raises(TokenizerError, match="merges"):
        Tokenizer.from_metadata(md)


def test_unknown_name_is_refused():
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer.*'qwen9'.*supported: a.x-4.0"):
        Tokenizer.from_metadata(_tiny_metadata("qwen9"))


def test_afmoe_digits_keeps_llamacpps_grouping():
    assert afmoe_digits("1234567") == ["1", "234", "567"]
    assert afmoe_digits("123456") == ["123", "456"]
    assert afmoe_digits("ab12 x") == ["ab12", " x"]          # the text before goes with the run
    assert afmoe_digits("no digits") == ["no digits"]


def _spm_style_bpe(model: str, pre: str | None) -> dict:
    """A Gemma 4-style vocabulary made from llama.cpp's SentencePiece test vocabulary: its pieces,
    merges that rebuild every piece from two others (most frequent first), and two newline-run
    tokens."""
    md = dict(GGUFFile(shared_path("testdata/vocab/ggml-vocab-llama-spm.gguf")).metadata)
    toks = list(md["tokenizer.ggml.tokens"])
    types, scores = md["tokenizer.ggml.token_type"], md["tokenizer.ggml.scores"]
    t2i = {t: i for i, t in enumerate(toks)}
    merges = []
    for i in sorted((i for i in range(len(toks)) if types[i] == 1 and len(toks[i]) > 1),
                    key=lambda i: -scores[i]):
        t = toks[i]
        merges += [f"{t[:k]} {t[k:]}" for k in range(1, len(t)) if t[:k] in t2i and t[k:] in t2i]
    md.update({"tokenizer.ggml.model": model, "tokenizer.ggml.merges": merges,
               "tokenizer.ggml.tokens": toks + ["\n\n", "\n\n\n"],
               "tokenizer.ggml.token_type": list(types) + [1, 1],
               "tokenizer.ggml.scores": list(scores) + [0.0, 0.0]})
    if pre is None:
        del md["tokenizer.ggml.pre"]
        md["tokenizer.ggml.add_bos_token"] = False
    else:
        md["tokenizer.ggml.pre"] = pre
    return md


SPM_STYLE_TEXTS = ["Hello world", "  two  spaces\n\n\nthree newlines\n\n", "é中😀 ßẞ", "a\n\nb\n"]
# llama.cpp 0c1e570 (llama_tokenize, add_special=True) on these vocabularies written as GGUF files
SPM_STYLE_IDS = {
    "gemma4": [[1, 10994, 3186], [1, 29871, 1023, 29871, 8162, 32001, 17536, 716, 9012, 32000],
               [1, 29948, 30275, 243, 162, 155, 131, 29871, 30034, 228, 189, 161],
               [1, 29874, 32000, 29890, 13]],
    "sarvam-moe": [[1, 10994, 3186], [1, 29871, 1023, 29871, 8162, 13, 13, 13, 17536, 716, 9012,
                                      13, 13],
                   [1, 29948, 30275, 243, 162, 155, 131, 29871, 30034, 228, 189, 161],
                   [1, 29874, 13, 13, 29890, 13]],
}


@pytest.mark.parametrize("model,pre", [("gemma4", None), ("gpt2", "sarvam-moe")])
def test_spm_style_bpe_like_llamacpp(model, pre):
    """The "gemma4" tokenizer model (BOS forced although the file says no, a run of newlines
    that is a token kept whole) and "sarvam-moe" (newlines merged as pieces)."""
    tok = Tokenizer.from_metadata(_spm_style_bpe(model, pre))
    want = SPM_STYLE_IDS[pre or "gemma4"]
    assert [tok.encode(t) for t in SPM_STYLE_TEXTS] == want
    for text, ids in zip(SPM_STYLE_TEXTS, want):
        assert tok.decode(ids[1:]) == text
