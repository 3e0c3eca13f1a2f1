"""bench/synth.py: every shape x mix loads, dequantises sanely and runs the reference engine."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from gguf import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, GGUFReader, GGUFValueType

from bench.synth import (MIXES, SHAPES, main, model_config, plan_model, synth_model,
                         use_more_bits, write_model)
from reame.batch import Batch
from reame.gguf_file import GGUFFile
from reame.model import load_model
from reame.reference import ReferenceEngine
from conftest import shared_path

TINY = ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-qwen3moe", "tiny-qwen2moe",
        "tiny-mixtral")


@pytest.fixture(scope="session")
def stories_vocab():
    shared_path("models/stories260K.gguf")       # skip (locally) or fail (CI) without shared data


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("shape", TINY)
def test_tiny_shape_and_mix(tmp_path_factory, stories_vocab, shape, mix):
    path = synth_model(tmp_path_factory, shape, mix)
    model = load_model(path)
    s = SHAPES[shape]

    # the config Reame reads back is the one the shape describes
    assert model.config == dataclasses.replace(model_config(s, model.config.n_vocab), name=shape)
    assert model.config.n_vocab == (512 if s.vocab == "stories" else model.config.n_vocab)
    assert model.metadata["general.file_type"] == {"F32": 0, "F16": 1, "Q4_K_M": 15}.get(
        mix, model.metadata["general.file_type"])

    # every tensor has its planned type and dequantises to finite values of the planned spread
    plans = {p.name: p for p in plan_model(s, mix, model.config.n_vocab)}
    # fused file tensors (Phi-3) are read as row views under Llama's names (model.unfuse)
    unfused = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_up": ("ffn_gate", "ffn_up")}
    plan_of = {}
    for name, p in plans.items():
        kind = name.split(".")[2] if name.startswith("blk.") else None
        if kind in unfused and (kind == "attn_qkv" or model.config.fused_ffn):
            for part in unfused[kind]:
                plan_of[name.replace(kind, part)] = p
        else:
            plan_of[name] = p
    assert set(plan_of) == set(model.tensors)
    for name, t in model.tensors.items():
        p = plan_of[name]
        assert t.type.name == p.type, name
        x = t.dequantize()
        assert np.all(np.isfinite(x)), name
        if x.ndim == 2:
            assert 0.7 * p.std < x.std() < 1.4 * p.std, (name, t.type.name, x.std(), p.std)
            assert abs(x.mean()) < 0.2 * p.std, (name, t.type.name, x.mean())
        elif name.endswith("norm.weight"):
            assert abs(x.mean() - 1.0) < 0.05 and 0.0 < x.std() < 0.2, name
    if mix in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        assert not any(p.fallback for p in plans.values())
        assert all(t.type.name in (mix, "F32") for t in model.tensors.values())
    fallbacks = model.metadata.get("reame.synth.fallbacks", [])
    assert sorted(fallbacks) == sorted(f"{p.name}:{p.wanted}->{p.type}"
                                       for p in plans.values() if p.fallback)

    # the reference engine gives finite, non-degenerate logits
    eng = ReferenceEngine(model, n_ctx=64, max_seqs=1)
    logits = eng.forward(Batch.prefill([1, 45, 300, 7, 99, 12], 0, 0, all_logits=True))
    assert logits.shape == (6, model.config.n_vocab)
    assert np.all(np.isfinite(logits))
    assert np.all(logits.std(axis=1) > 0.3)
    assert len(set(logits.argmax(axis=1).tolist())) > 1          # depends on the input


def test_k_mix_without_fallback(tmp_path, stories_vocab):
    """With n_ff a multiple of 256 every matrix of a K mix keeps its K type."""
    path = write_model(tmp_path / "k.gguf", "tiny-llama", "Q5_K", n_ff=512)
    model = load_model(path)
    assert "reame.synth.fallbacks" not in model.metadata
    assert {t.type.name for t in model.tensors.values()} == {"Q5_K", "F32"}
    assert model.config.n_ff == 512


def test_deterministic_from_seed(tmp_path, stories_vocab):
    a = write_model(tmp_path / "a.gguf", "tiny-qwen2", "Q4_K_M", seed=3)
    b = write_model(tmp_path / "b.gguf", "tiny-qwen2", "Q4_K_M", seed=3)
    c = write_model(tmp_path / "c.gguf", "tiny-qwen2", "Q4_K_M", seed=4)
    assert a.read_bytes() == b.read_bytes()
    ta, tc = GGUFFile(a).tensors, GGUFFile(c).tensors
    assert all(not np.array_equal(ta[n].data, tc[n].data)
               for n in ta if n.endswith("attn_q.weight"))


def test_cache_reuses_file(tmp_path, stories_vocab):
    p1 = synth_model(tmp_path, "tiny-llama", "Q4_0", n_layer=1)
    mtime = p1.stat().st_mtime_ns
    p2 = synth_model(tmp_path, "tiny-llama", "Q4_0", n_layer=1)
    p3 = synth_model(tmp_path, "tiny-llama", "Q4_0", n_layer=2)
    assert p1 == p2 and p2.stat().st_mtime_ns == mtime
    assert p3 != p1 and load_model(p3).config.n_layer == 2
    assert [f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")] == []


@pytest.mark.parametrize("shape", TINY)
def test_tensor_names_are_gguf_names(tmp_path, stories_vocab, shape):
    """Tensor names are the ones gguf (and so llama.cpp) lists for the architecture."""
    arch = SHAPES[shape].arch
    known = {TENSOR_NAMES[t] for a, name in MODEL_ARCH_NAMES.items() if name == arch
             for t in MODEL_TENSORS[a]}
    pattern = re.compile("|".join(re.escape(k).replace(r"\{bid\}", r"\d+") + r"\.(weight|bias)"
                                  for k in known))
    for p in plan_model(SHAPES[shape], "F32", 512):
        assert pattern.fullmatch(p.name), p.name


def test_q4_k_m_follows_llama_cpp():
    """The Q4_K_M recipe on the real shapes (plan only: nothing written)."""
    def count(plans, suffix, t):
        return sum(p.name.endswith(suffix) and p.type == t for p in plans)

    tl = {p.name: p for p in plan_model(SHAPES["tinyllama-1.1b"], "Q4_K_M", 32000)}
    assert sum(p.n_elements for p in tl.values()) == 1_100_048_384      # TinyLlama-1.1B
    assert tl["output.weight"].type == "Q6_K" and tl["token_embd.weight"].type == "Q4_K"
    for i in range(22):
        want = "Q6_K" if use_more_bits(i, 22) else "Q4_K"
        assert tl[f"blk.{i}.attn_v.weight"].type == want
        assert tl[f"blk.{i}.ffn_down.weight"].type == want
        assert tl[f"blk.{i}.attn_q.weight"].type == "Q4_K"
    assert count(tl.values(), "attn_v.weight", "Q6_K") == 10
    assert not any(p.fallback for p in tl.values())

    qw = list(plan_model(SHAPES["qwen2-0.5b"], "Q4_K_M", 151936))
    q = {p.name: p for p in qw}
    assert sum(p.n_elements for p in qw) == 494_032_768                # Qwen2.5-0.5B
    assert "output.weight" not in q                                     # tied embeddings
    assert q["token_embd.weight"].type == "Q8_0"            # 896 % 256: llama.cpp's output rule
    assert q["blk.0.attn_q.weight"].type == "Q5_0" and q["blk.0.attn_q.weight"].fallback
    assert q["blk.0.attn_q.bias"].type == "F32"
    assert count(qw, "ffn_down.weight", "Q6_K") == 12 and count(qw, "ffn_down.weight", "Q4_K") == 12
    assert count(qw, "attn_v.weight", "Q8_0") == 12 and count(qw, "attn_v.weight", "Q5_0") == 12


def test_tokenizer_metadata_types(tmp_path):
    """tokenizer.* keys are copied with the vocab file's GGUF types, n_vocab = token count."""
    vocab = shared_path("testdata/vocab/ggml-vocab-llama-spm.gguf")
    path = write_model(tmp_path / "spm.gguf", "tiny-llama", "Q8_0", vocab="llama-spm", n_layer=1)
    src, dst = GGUFReader(vocab), GGUFReader(path)
    keys = [k for k in src.fields if k.startswith("tokenizer.")]
    assert keys and set(keys) == {k for k in dst.fields if k.startswith("tokenizer.")}
    for k in keys:
        a, b = src.fields[k], dst.fields[k]
        assert a.types == b.types, k
        if a.types[0] == GGUFValueType.ARRAY and a.types[1] == GGUFValueType.STRING:
            assert a.contents() == b.contents(), k
        else:
            assert np.array_equal(np.asarray(a.contents()), np.asarray(b.contents())), k
    assert dst.fields["tokenizer.ggml.scores"].types == [GGUFValueType.ARRAY, GGUFValueType.FLOAT32]
    assert dst.fields["tokenizer.ggml.token_type"].types == [GGUFValueType.ARRAY,
                                                             GGUFValueType.INT32]
    assert dst.fields["tokenizer.ggml.bos_token_id"].types == [GGUFValueType.UINT32]
    assert dst.fields["tokenizer.ggml.add_bos_token"].types == [GGUFValueType.BOOL]
    assert load_model(path).config.n_vocab == 32000


def test_bpe_vocab_with_merges(tmp_path):
    """A 150k-token BPE vocabulary (tokens, merges, chat template) round-trips exactly."""
    vocab = shared_path("testdata/vocab/ggml-vocab-qwen2.gguf")
    path = write_model(tmp_path / "q.gguf", "tiny-qwen2", "Q4_0", vocab="qwen2", n_layer=1)
    src, dst = GGUFFile(vocab).metadata, GGUFFile(path).metadata
    for k, v in src.items():
        if k.startswith("tokenizer."):
            assert np.array_equal(v, dst[k]) if isinstance(v, np.ndarray) else v == dst[k], k
    assert load_model(path).config.n_vocab == len(src["tokenizer.ggml.tokens"]) == 151936


def test_no_vocab(tmp_path):
    path = write_model(tmp_path / "n.gguf", "tiny-qwen3", "F16", vocab="none", n_vocab=320)
    model = load_model(path)
    assert model.config.n_vocab == 320
    assert not any(k.startswith("tokenizer.") for k in model.metadata)


def test_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="unknown shape"):
        write_model(tmp_path / "x.gguf", "huge-llama", vocab="none")
    with pytest.raises(ValueError, match="unknown mix"):
        write_model(tmp_path / "x.gguf", "tiny-llama", "Q5_K_M", vocab="none")
    with pytest.raises(TypeError, match="unknown write_model overrides"):
        write_model(tmp_path / "x.gguf", "tiny-llama", vocab="none", n_embed=64)
    with pytest.raises(FileNotFoundError, match="vocabulary 'klingon' not found"):
        write_model(tmp_path / "x.gguf", "tiny-llama", vocab="klingon")
    assert not (tmp_path / "x.gguf").exists()


def test_command_line(tmp_path, stories_vocab, capsys):
    out = tmp_path / "cli.gguf"
    assert main(["--shape", "tiny-qwen3", "--mix", "Q6_K", "--set", "n_layer=1",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert str(out) in text and "Q6_K" in text and "fallbacks" in text
    assert load_model(out).config.n_layer == 1
