"""The `reame` command: info, generate, --version; every user error is one line
`reame: error: ...` on stderr, nothing on stdout, exit code 2.

Most runs call reame.cli.main in-process (fast); a few run `python -m reame` as a real
subprocess, to prove nothing else (a traceback, a warning) reaches the terminal."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from bench.synth import write_model
from reame import __version__
from reame.cli import main
from conftest import simd_base

PROMPT = "Once upon a time"


def cli(capsys, *argv):
    """(exit code, stdout, stderr) of `reame ARGV` run in this process."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:                       # argparse: --version, --help, usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, out, err) -> str:
    assert rc == 2, (rc, out, err)
    assert out == "", out
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("reame: error: "), err
    return err[len("reame: error: "):-1]


@pytest.fixture(scope="module")
def stories(stories_path):
    return str(stories_path)


@pytest.fixture(scope="module")
def first_case(stories_expected):
    case = stories_expected["cases"][0]
    assert case["prompt"] == PROMPT
    return case


# ---- info -----------------------------------------------------------------------------------

def test_info(capsys, stories):
    rc, out, err = cli(capsys, "info", stories)
    assert rc == 0 and err == ""
    fields = dict(line.split(":", 1) for line in out.splitlines())
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields["file"] == stories
    assert fields["architecture"] == "llama"
    assert fields["parameters"].startswith("292,800 ")
    assert fields["quant mix"] == "F32 48 tensors / 1.1 MiB"
    assert fields["context length"] == "2048"
    assert fields["tokenizer"] == "llama"
    assert fields["chat template"] == "absent"
    assert fields["vocabulary"] == "512" and fields["layers"] == "5"


def test_info_json(capsys, stories):
    rc, out, err = cli(capsys, "info", stories, "--json")
    assert rc == 0 and err == ""
    info = json.loads(out)
    assert info["architecture"] == "llama"
    assert info["parameters"] == 292_800
    assert info["quant_mix"] == {"F32": {"tensors": 48, "bytes": 292_800 * 4}}
    assert info["context_length"] == 2048
    assert info["tokenizer"] == "llama" and info["tokenizer_pre"] is None
    assert info["chat_template"] is False
    assert info["vocab_size"] == 512 and info["layers"] == 5 and info["file"] == stories


def test_info_of_a_mixture_of_experts(capsys, stories, tmp_path):
    """An MoE file's feed-forward line names its experts (a dense size of 0 told nothing)."""
    from bench.synth import write_model
    p = str(write_model(tmp_path / "moe.gguf", "tiny-qwen2moe", vocab="none"))
    rc, out, _ = cli(capsys, "info", p)
    assert rc == 0
    assert "8 experts, 2 per token, 128 wide, a shared one 256 wide" in out
    rc, out, _ = cli(capsys, "info", p, "--json")
    assert json.loads(out)["experts"] == {"count": 8, "used": 2, "length": 128,
                                          "shared_length": 256}
    rc, out, _ = cli(capsys, "info", stories, "--json")
    assert json.loads(out)["experts"] is None


# ---- malformed models -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    """kind -> (path, words the problem must contain)."""
    d = tmp_path_factory.mktemp("bad")
    valid = write_model(d / "valid.gguf", "tiny-llama", "Q8_0", vocab="none")
    (d / "text.gguf").write_text("hello, this is a text file\n")
    blob = valid.read_bytes()
    (d / "cut.gguf").write_bytes(blob[:len(blob) // 2])
    return {
        "not-gguf": (d / "text.gguf", "not a GGUF file"),
        "truncated": (d / "cut.gguf", "truncated"),
        "missing-tensor": (write_model(d / "notensor.gguf", "tiny-llama", "Q8_0", vocab="none",
                                       drop_tensors=["blk.1.ffn_up.weight"]),
                           "missing tensor blk.1.ffn_up.weight"),
        "unsupported-arch": (write_model(d / "gpt2.gguf", "tiny-llama", vocab="none",
                                         arch="gpt2"), "unsupported architecture 'gpt2'"),
        "unsupported-type": (write_model(d / "iq2.gguf", "tiny-llama", "Q8_0", vocab="none",
                                         type_overrides={"blk.0.attn_q.weight": "IQ2_XXS"}),
                             "IQ2_XXS"),
        "missing-file": (d / "nope.gguf", "No such file"),
    }


KINDS = ["not-gguf", "truncated", "missing-tensor", "unsupported-arch", "unsupported-type",
         "missing-file"]


@pytest.mark.parametrize("command", ["info", "generate"])
@pytest.mark.parametrize("kind", KINDS)
def test_malformed_model_is_one_line(capsys, bad_models, kind, command):
    path, problem = bad_models[kind]
    extra = ["--prompt", PROMPT] if command == "generate" else ["--json"]
    msg = one_line_error(*cli(capsys, command, path, *extra))
    assert msg.startswith(f"{path}: ") and problem in msg, msg


@pytest.mark.parametrize("kind,argv", [
    ("unsupported-type", ["info"]),
    ("truncated", ["generate", "--prompt", PROMPT, "--temperature", "0"]),
])
def test_malformed_model_subprocess(bad_models, kind, argv):
    path, problem = bad_models[kind]
    p = subprocess.run([sys.executable, "-m", "reame", argv[0], str(path), *argv[1:]],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"reame: error: {path}: ") and problem in p.stderr


# ---- generate -------------------------------------------------------------------------------

def test_generate_greedy_streams_the_expected_text(capsys, stories, first_case):
    rc, out, err = cli(capsys, "generate", stories, "--prompt", PROMPT, "--temperature", 0,
                       "--max-tokens", 64)
    assert rc == 0
    assert out == first_case["greedy_text"] + "\n"
    # the timing line, after progress lines while kernels compile (a cold kernel cache)
    lines = [x for x in err.splitlines() if not x.startswith("reame: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("[5 prompt tokens, 64 generated (length); ") and "engine jit]" in err


def test_generate_streams_token_by_token(monkeypatch, stories, first_case):
    class Recorder(io.StringIO):
        writes, flushes = [], 0

        def write(self, s):
            self.writes.append(s)
            return super().write(s)

        def flush(self):
            Recorder.flushes += 1

    rec = Recorder()
    monkeypatch.setattr(sys, "stdout", rec)
    assert main(["generate", stories, "-p", PROMPT, "--temperature", "0", "-n", "16", "-q"]) == 0
    assert len(rec.writes) == 16 + 1 and rec.flushes >= 16        # a write per token, then "\n"
    assert rec.getvalue() == "".join(rec.writes) and first_case["greedy_text"].startswith(
        rec.getvalue()[:-1])


def test_generate_reference_engine_same_text_quiet(capsys, stories, first_case):
    rc, out, err = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", 0, "-n", 40,
                       "--engine", "reference", "-q")
    rc2, out2, _ = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", 0, "-n", 40,
                       "--engine", "jit", "-q")
    assert rc == rc2 == 0 and err == ""
    assert out == out2
    assert first_case["greedy_text"].startswith(out[:-1]) and len(out) > 100


def test_generate_act_type(capsys, tmp_path):
    """On a quantised model, --act-type f32 runs the JIT's float path, which agrees with the f32
    reference engine token for token; q8 (the default) runs the integer path."""
    m = write_model(tmp_path / "q4.gguf", "tiny-llama", "Q4_0")
    args = ("generate", m, "-p", PROMPT, "--temperature", 0, "-n", 12, "-q", "--ignore-eos")
    rc, ref, _ = cli(capsys, *args, "--engine", "reference")
    rc2, f32, _ = cli(capsys, *args, "--act-type", "f32")
    rc3, q8, err = cli(capsys, *args, "--act-type", "q8")
    assert rc == rc2 == rc3 == 0 and err == ""
    assert f32 == ref and q8.strip()


def test_generate_seed_reproducible(capsys, stories):
    def sample(seed):
        rc, out, _ = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", 0.8,
                         "--seed", seed, "-n", 48, "-q")
        assert rc == 0 and out.endswith("\n")
        return out

    a = sample(7)
    assert sample(7) == a
    assert sample(8) != a


def test_generate_stop(capsys, stories, first_case):
    rc, out, err = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", 0,
                       "--stop", "park", "--stop", " Lily")
    text = first_case["greedy_text"]
    assert rc == 0 and out == text[:text.index(" Lily")] + "\n"
    assert "generated (stop)" in err


def test_generate_echo_and_ignore_eos(capsys, stories, first_case):
    rc, out, _ = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", 0, "-n", 10,
                     "--echo", "--ignore-eos", "-q")
    assert rc == 0 and out.startswith(PROMPT + first_case["greedy_text"][:20])


def test_generate_chat_uses_the_plain_fallback(capsys, stories, stories_model):
    """stories has no chat template and no <|im_start|>: docs/tokenizers.md's plain format
    `{system}\\n\\nUser: {user}\\n\\nAssistant:` is used, BOS added."""
    from reame.engines import create_engine
    from reame.generate import Generation, generate_stream
    from reame.sampling import SamplingParams
    from reame.tokenizer import Tokenizer

    tok = Tokenizer.from_metadata(stories_model.metadata)
    eng = create_engine(stories_model, "reference", n_ctx=128, max_seqs=1)
    for system, text in [(None, f"User: {PROMPT}\n\nAssistant:"),
                         ("Be brief", f"Be brief\n\nUser: {PROMPT}\n\nAssistant:")]:
        gen = Generation(tok, tok.encode(text), SamplingParams(temperature=0.0), max_tokens=24)
        want = "".join(s.text for s in generate_stream(eng, gen))
        argv = ["generate", stories, "-p", PROMPT, "--chat", "--temperature", 0, "-n", 24, "-q"]
        rc, out, err = cli(capsys, *argv, *(["--system", system] if system else []))
        assert rc == 0 and err == ""
        assert out == want + "\n" and want


def test_generate_chat_template_file(capsys, stories, first_case, tmp_path):
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    rc, out, _ = cli(capsys, "generate", stories, "-p", PROMPT, "--chat", "--chat-template-file",
                     tpl, "--temperature", 0, "-n", 64, "-q")
    assert rc == 0 and out == first_case["greedy_text"] + "\n"      # BOS + the bare prompt
    msg = one_line_error(*cli(capsys, "generate", stories, "-p", PROMPT, "--chat",
                              "--chat-template-file", tmp_path / "none.jinja"))
    assert "cannot read chat template file" in msg


BAD_FLAGS = [
    (["--temperature", "-1"], "temperature"),
    (["--temperature", "101"], "temperature"),
    (["--top-p", "0"], "top_p"),
    (["--top-p", "1.5"], "top_p"),
    (["--top-k", "-1"], "top_k"),
    (["--min-p", "2"], "min_p"),
    (["--repeat-penalty", "0"], "repetition_penalty"),
    (["--seed", "-1"], "seed"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--max-tokens", "-3"], "--max-tokens"),
    (["--ctx-size", "-5"], "--ctx-size"),
    (["--ctx-size", "3"], "the prompt has 5 tokens; the context holds 3"),
    (["--temperature", "abc"], "--temperature"),
    (["--engine", "cuda"], "--engine"),
    (["--kv-type", "q8"], "--kv-type"),
    (["--act-type", "q4"], "--act-type"),
    (["--attn-type", "fp8"], "--attn-type"),
    (["--no-such-flag"], "--no-such-flag"),
]


@pytest.mark.parametrize("flags,named", BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_generate_bad_flag_values(capsys, monkeypatch, stories, flags, named):
    """Each refused in one line before an engine is built (compiling its kernels would print
    progress lines first where that takes a while, and waste the time: the emulated run's
    failure for --ctx-size 3, checked only after the JIT engine was built)."""
    from reame.jit.engine import JITEngine
    from reame.reference import ReferenceEngine

    def built(*a, **k):
        raise AssertionError("an engine was built before the flags were checked")
    for cls in (JITEngine, ReferenceEngine):
        monkeypatch.setattr(cls, "__init__", built)
    msg = one_line_error(*cli(capsys, "generate", stories, "-p", PROMPT, *flags))
    assert named in msg, msg


def test_empty_prompt_is_one_line(capsys, tmp_path):
    # a vocabulary that adds no BOS: an empty prompt is no tokens at all
    m = write_model(tmp_path / "nobos.gguf", "tiny-llama", "Q8_0",
                    metadata={"tokenizer.ggml.add_bos_token": False})
    msg = one_line_error(*cli(capsys, "generate", m, "-p", "", "--engine", "reference"))
    assert "prompt is empty" in msg


def test_missing_arguments_are_one_line(capsys, stories):
    assert "--prompt" in one_line_error(*cli(capsys, "generate", stories))
    one_line_error(*cli(capsys, "info"))
    one_line_error(*cli(capsys))


def test_version(capsys):
    rc, out, err = cli(capsys, "--version")
    assert rc == 0 and out == f"reame {__version__}\n" and err == ""


@pytest.mark.parametrize("level", ["generic", simd_base()])
def test_generate_isa_flag_builds_lower_level_kernels(capsys, monkeypatch, stories, first_case,
                                                      level):
    import os

    from reame.codegen.isa import detect
    if level not in detect().levels:
        pytest.skip(f"this CPU has no {level} level")
    monkeypatch.delenv("REAME_ISA", raising=False)
    rc, out, _ = cli(capsys, "generate", stories, "-p", PROMPT, "--temperature", "0", "-n", "64",
                     "-q", "--isa", level)
    try:
        assert rc == 0 and out.rstrip("\n") == first_case["greedy_text"]
        assert os.environ["REAME_ISA"] == level
    finally:
        os.environ.pop("REAME_ISA", None)
        detect.cache_clear()


def test_generate_isa_flag_unknown_level(capsys, stories):
    assert "ISA level" in one_line_error(*cli(capsys, "generate", stories, "-p", PROMPT,
                                              "--isa", "avx9"))


def test_plan_prints_every_site_of_the_chosen_program(capsys, stories):
    # catches: a plan command that prints another program than the one N-token steps run, drops
    # sites (e.g. the inserted 8-bit copies or the head), or takes a bad --tokens silently
    from reame import graph
    from reame.model import load_model
    rc, out, err = cli(capsys, "plan", stories, "--tokens", 3)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"# steps of up to 4 tokens: {len(lines) - 1} ops"
    sites = [line.split()[0] for line in lines[1:]]
    nodes = graph.build(load_model(stories).config)
    want = [n.site + ("_prompt" if n.op == "attention" and i else "")
            for n in nodes for i in range(2 if n.op == "attention" else 1)]
    assert sites == want
    assert all("/" in line.split()[1] for line in lines[1:])      # op/dtype/family@level[...]
    rc, out, err = cli(capsys, "plan", stories)
    assert rc == 0 and out.count("# steps of up to") == 7      # 1, 2, 4, 8, 12, 16, 512
    assert "at most" in one_line_error(*cli(capsys, "plan", stories, "--tokens", 100000))
    assert ">= 1" in one_line_error(*cli(capsys, "plan", stories, "--tokens", 0))
