"""llama.cpp's tokenizer test vectors (tests/test-tokenizer-0): every input of every vocabulary
must tokenize to exactly the expected ids (no BOS, special-token parsing off).

The .inp file holds the inputs separated by "\\n__ggml_vocab_test__\\n" (llama.cpp's own split:
the text between separators, with no further stripping; nothing after the final separator); the
.out file has one line of space-separated ids per input, in the same order.
"""

from __future__ import annotations

import pytest
from conftest import shared_path

from reame.gguf_file import GGUFFile
from reame.tokenizer import Tokenizer

VOCABS = ["deepseek-coder", "falcon", "gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2",
          "starcoder"]
SEP = "\n__ggml_vocab_test__\n"


def read_vectors(path) -> list[tuple[str, list[int]]]:
    raw = path.with_name(path.name + ".inp").read_bytes().decode("utf-8")
    inputs, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = path.with_name(path.name + ".out").read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(inputs) == len(lines), f"{path.name}: {len(inputs)} inputs, {len(lines)} outputs"
    return [(s, [int(x) for x in line.split()]) for s, line in zip(inputs, lines)]


@pytest.fixture(scope="module", params=VOCABS)
def vocab_case(request):
    path = shared_path(f"testdata/vocab/ggml-vocab-{request.param}.gguf")
    return request.param, Tokenizer.from_metadata(GGUFFile(path).metadata), read_vectors(path)


def test_vectors(vocab_case):
    name, tok, cases = vocab_case
    assert len(cases) == 46
    failures = []
    for text, expected in cases:
        got = tok.encode(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append(f"{text!r}: got {got}, expected {expected}")
    assert not failures, f"{name}: {len(failures)}/{len(cases)} mismatches:\n" + "\n".join(failures)


def test_vectors_decode_back(vocab_case):
    """The expected ids decode back to the input (byte-level BPE exactly; SPM minus the prefix
    space it adds, which decode removes)."""
    name, tok, cases = vocab_case
    for text, expected in cases:
        assert tok.decode(expected) == text, (name, text)


def test_split_rule_matches_llamacpp(tmp_path):
    """Empty inputs between separators are tests; the text after the last separator is not."""
    p = tmp_path / "v.gguf"
    (tmp_path / "v.gguf.inp").write_text("a\n__ggml_vocab_test__\n\n__ggml_vocab_test__\n\n\n"
                                         "__ggml_vocab_test__\n")
    (tmp_path / "v.gguf.out").write_text("1\n\n2\n")
    assert read_vectors(p) == [("a", [1]), ("", []), ("\n", [2])]
