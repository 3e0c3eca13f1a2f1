"""Architectures beyond Llama/Qwen, checked against llama.cpp's own greedy tokens.

tests/golden/llama_cpp_greedy.json holds what llama-server produced for synthetic models that
bench/synth.py writes deterministically (the file names the llama.cpp build and request). Each
model is rewritten here and both engines must reproduce llama.cpp's 24 greedy tokens exactly
(float weights and activations: no quantisation noise, and the recorded top-2 gaps are clear).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.synth import synth_model
from reame.batch import Batch
from reame.jit.engine import JITEngine
from reame.model import load_model
from reame.reference import ReferenceEngine
from conftest import shared_path

GOLDEN = json.loads((Path(__file__).parent / "golden" / "llama_cpp_greedy.json").read_text())


def greedy(engine, prompt, n):
    """n greedy tokens, and the log-probabilities of the first one's distribution."""
    out, pos = [], len(prompt)
    logits = engine.forward(Batch.prefill(prompt, 0, 0))[0].astype(np.float64)
    logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    tok = int(logits.argmax())
    for _ in range(n):
        out.append(tok)
        tok = int(engine.forward(Batch.decode([tok], [pos], [0]))[0].argmax())
        pos += 1
    return out, logp


def check(engine, prompt, golden):
    """llama.cpp's tokens exactly; where recorded, its top-5 log-probabilities of the first
    token within 0.01 (ours differ by < 0.002: llama.cpp's GELU is an f16 table)."""
    toks, logp = greedy(engine, prompt, len(golden["tokens"]))
    assert toks == golden["tokens"]
    for tid, want in golden.get("first_top_logprobs", ()):
        assert abs(logp[tid] - want) < 0.01, (tid, logp[tid], want)


FLOAT = sorted(k for k, v in GOLDEN["models"].items() if "gaps" not in v)
QUANTISED = sorted(k for k, v in GOLDEN["models"].items() if "gaps" in v)
# llama.cpp's top-2 log-probability gap above which a quantised model's token must agree: our
# engines' gaps differ from llama.cpp's by up to 0.17 on these files (median 0.03; the float
# reference as much as the integer kernels: llama.cpp rounds activations to 8 bits)
NOISE = 0.2


def _model(tmp_path_factory, name):
    spec = dict(GOLDEN["models"][name]["write_model"])
    vocab = spec.pop("vocab")
    shared_path("models/stories260K.gguf" if vocab == "stories"     # the model's vocabulary
                else f"testdata/vocab/ggml-vocab-{vocab}.gguf")
    return load_model(synth_model(tmp_path_factory, spec.pop("shape"), spec.pop("mix"), vocab,
                                  **spec))


@pytest.mark.parametrize("name", QUANTISED)
def test_quantised_types_agree_with_llama_cpp(tmp_path_factory, name):
    """Q2_K, Q3_K_M (Q3_K with Q4_K/Q5_K/Q6_K), IQ4_XS (IQ4_NL fallbacks), IQ4_NL and Q4_K_M
    files: fed llama.cpp's 24 greedy tokens after the prompt (one prompt step; the JIT's
    integer kernels at their prompt-chunk rule), both engines' argmax equals llama.cpp's token
    at every position where llama.cpp's top-2 gap exceeds NOISE (at least 8 of them). Catches
    a dequantisation or integer kernel off by a scale, a sign or a level table (measured: any
    such error moves most tokens)."""
    model = _model(tmp_path_factory, name)
    g, prompt = GOLDEN["models"][name], GOLDEN["prompt"]
    tokens = prompt + g["tokens"][:-1]
    rows = list(range(len(prompt) - 1, len(tokens)))
    clear = [j for j, gap in enumerate(g["gaps"]) if gap is not None and gap > NOISE]
    assert len(clear) >= 8, clear
    batch = Batch.build(tokens, list(range(len(tokens))), [0] * len(tokens), rows)
    ref = ReferenceEngine(model, n_ctx=GOLDEN["n_ctx"], max_seqs=1)
    jit = JITEngine(model, n_ctx=GOLDEN["n_ctx"], max_seqs=1, threads=2, max_logits=32)
    try:
        for eng in (ref, jit):
            top = eng.forward(batch).argmax(axis=1)
            wrong = [(j, int(top[j]), g["tokens"][j], g["gaps"][j]) for j in clear
                     if top[j] != g["tokens"][j]]
            assert not wrong, f"{eng.name}: (position, ours, llama.cpp's, gap) {wrong}"
    finally:
        jit.close()


@pytest.mark.parametrize("name", FLOAT)
def test_greedy_tokens_match_llama_cpp(tmp_path_factory, name):
    """Phi-3 (fused attn_qkv and ffn_up read through row views, NeoX RoPE) and Phi-3 LongRoPE
    (long factors chosen because the 512 context exceeds the 256 original one, cos/sin scaled
    by rope.scaling.attn_factor): catches gate and up halves swapped, q/k/v rows split at the
    wrong offsets, the short factors used past the original context, attn_factor ignored.
    Mixture of experts: Qwen3-MoE (top 2 of 8, weights renormalised), Qwen2-MoE (not
    renormalised, a shared expert gated by a sigmoid), Mixtral (llama + 4 experts): catches a
    top-k that takes the wrong experts, weights renormalised where llama.cpp does not (or the
    other way), the shared expert ungated, and expert matmuls fed another expert's rows.
    Gemma 2 (window of 8 on layer 0, scores capped at 2, logits at 3, GeGLU, post norms,
    embeddings * 16) and Gemma 3 (5 windowed layers with RoPE base 1e4 unscaled, a global one
    with base 1e6 and linear x8, q/k norms): each of window ignored, score cap ignored, the
    27B score scale, embeddings unscaled, the global RoPE base or scaling on windowed layers
    changes the tokens; logits not soft-capped keeps them (monotonic) but moves the first
    token's log-probabilities by 1.3."""
    model = _model(tmp_path_factory, name)
    prompt, n_ctx = GOLDEN["prompt"], GOLDEN["n_ctx"]
    check(ReferenceEngine(model, n_ctx=n_ctx, max_seqs=1), prompt, GOLDEN["models"][name])
    eng = JITEngine(model, n_ctx=n_ctx, max_seqs=1, threads=2, int_dot=False)
    try:
        check(eng, prompt, GOLDEN["models"][name])
    finally:
        eng.close()


@pytest.mark.parametrize("name", [n for n in FLOAT if n.startswith("gemma")])
def test_gemma_prompt_chunk_matches_reference(tmp_path_factory, name):
    """A 40-token prompt (the JIT's prompt-chunk program and its attn_prefill kernel, which
    the 15-token golden prompt never reaches) and a mixed step of 3 sequences: the JIT's logits
    equal the reference's. Catches the window or the score cap not reaching the prompt program
    (the golden test alone passes then) and a windowed layer given the global RoPE table."""
    model = _model(tmp_path_factory, name)
    rng = np.random.default_rng(5)
    prompt = [1] + rng.integers(3, model.config.n_vocab, 39).tolist()
    ref = ReferenceEngine(model, n_ctx=128, max_seqs=3)
    jit = JITEngine(model, n_ctx=128, max_seqs=3, threads=2, int_dot=False, max_logits=64)
    try:
        for eng in (ref, jit):
            eng.logits_a = eng.forward(Batch.prefill(prompt, 0, 0, all_logits=True))
            eng.forward(Batch.prefill(prompt[:20], 0, 1))
            # a mixed step: a decode token of slot 0, 21 more prompt tokens of slot 1, a new slot 2
            tokens = [7] + prompt[20:] + prompt[:5]
            pos = [40] + list(range(20, 40)) + list(range(5))
            seq = [0] + [1] * 20 + [2] * 5
            eng.logits_b = eng.forward(Batch.build(tokens, pos, seq))
        for a in ("logits_a", "logits_b"):
            np.testing.assert_allclose(getattr(jit, a), getattr(ref, a), atol=2e-4, rtol=1e-4)
    finally:
        jit.close()
