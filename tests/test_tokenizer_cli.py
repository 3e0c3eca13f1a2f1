"""`reame tokenize`: the subcommand registered by reame.tokenizer.cli.add_tokenize_command."""

from __future__ import annotations

import argparse
import io
import json
import sys

import pytest
from conftest import shared_path

from reame.tokenizer.cli import add_tokenize_command


def run(argv, stdin: bytes | None = None, monkeypatch=None, capsys=None):
    parser = argparse.ArgumentParser(prog="reame")
    add_tokenize_command(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["tokenize", *argv])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    rc = args.func(args)
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def qwen_path():
    return str(shared_path("testdata/vocab/ggml-vocab-qwen2.gguf"))


def test_json_output(qwen_path, capsys, monkeypatch):
    rc, out = run([qwen_path, "Hello world", "--json"], capsys=capsys)
    assert rc == 0
    assert json.loads(out) == {"ids": [9707, 1879], "pieces": ["Hello", "Ġworld"]}


def test_plain_output_lists_ids_and_pieces(qwen_path, capsys):
    rc, out = run([qwen_path, "Hello world"], capsys=capsys)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 2
    assert lines[0].split() == ["9707", '"Hello"'] and lines[1].split() == ["1879", '"Ġworld"']


def test_stdin_is_read_exactly(qwen_path, capsys, monkeypatch):
    rc, out = run([qwen_path, "-", "--ids-only"], stdin="Hello world\n\n".encode(),
                  monkeypatch=monkeypatch, capsys=capsys)
    from reame.gguf_file import GGUFFile
    from reame.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(GGUFFile(qwen_path).metadata)
    assert out.split() == [str(i) for i in tok.encode("Hello world\n\n")]


def test_special_parsing_and_bos_are_opt_in(capsys):
    path = str(shared_path("testdata/vocab/ggml-vocab-llama-bpe.gguf"))
    _, out = run([path, "<|eot_id|>", "--ids-only"], capsys=capsys)
    assert "128009" not in out.split() and "128000" not in out.split()
    _, out = run([path, "<|eot_id|>", "--ids-only", "--parse-special", "--add-special"],
                 capsys=capsys)
    assert out.split() == ["128000", "128009"]


def test_main_integration(qwen_path, capsys):
    """Through `reame` itself when the CLI registers the command."""
    from reame import cli
    rc = cli.main(["tokenize", qwen_path, "Hi", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["ids"] == [13048]
