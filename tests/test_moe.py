"""Mixture of experts in the JIT engine: the routing kernels against numpy, the engine against
the reference engine (quantised, batched), and a decode step that reads only the experts its
token picked. Agreement with llama.cpp itself: tests/test_architectures.py."""

from __future__ import annotations

import numpy as np
import pytest

from bench.synth import synth_model
from reame.batch import Batch
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from reame.jit.engine import Q8K_MIN_TOKENS, JITEngine
from reame.model import load_model
from reame.codegen.ops.moe_route import route
from reame.codegen.ops.softmax import softmax
from reame.reference import ReferenceEngine
from conftest import shared_path

ISA = detect()


@pytest.mark.parametrize("dims", [dict(E=8, NU=2, K=64, F=32, norm=1, XS=256, DS=128),
                                  dict(E=128, NU=8, K=256, F=96, norm=0, XS=292, DS=112),
                                  dict(E=4, NU=4, K=8, F=8, norm=1, XS=32, DS=40)])
def test_moe_route_kernel(dims):
    """Top-k with ties (lowest index first), weights (renormalised or not), the counting sort,
    the gathered rows and every expert matmul's x / y / n words, at 1-17 tokens and 1-2 threads.
    Catches a top-k that takes an expert twice or breaks ties the other way, offsets off by
    one expert, a down matmul pointed at u instead of g, x words in float rows where the experts
    read quantised ones (XS, DS), and a slice other than 0 also writing."""
    op = get_op("moe_route")
    k = build(op.specs("F32", ISA, **dims)[0], ISA)
    for n in (1, 2, 3, 17):
        for nth in (1, 2):
            ok, worst = op.check(k, np.random.default_rng(n), n=n, nth=nth)
            assert ok, (dims, n, nth, worst)


@pytest.mark.parametrize("dims", [dict(K=64, NU=2, shexp=0), dict(K=256, NU=8, shexp=1)])
def test_moe_combine_kernel(dims):
    op = get_op("moe_combine")
    k = build(op.specs("F32", ISA, **dims)[0], ISA)
    for n in (1, 3, 17):
        for nth in (1, 2, 3):
            ok, worst = op.check(k, np.random.default_rng(n), n=n, nth=nth)
            assert ok, (dims, n, nth, worst)


@pytest.fixture(scope="module")
def stories_vocab():
    shared_path("models/stories260K.gguf")        # the synthetic models' vocabulary


def _logits(engine, toks):
    half = len(toks) // 2
    a = engine.forward(Batch.prefill(toks[:half], 0, 0, all_logits=True))
    b = engine.forward(Batch.build(toks[half:], np.arange(half, len(toks)), 0))
    return np.concatenate([a, b])


def _cos(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("shape", ["tiny-qwen3moe", "tiny-qwen2moe", "tiny-mixtral"])
@pytest.mark.parametrize("mix", ["Q8_0", "Q4_K_M"])
def test_moe_models_agree_with_reference(tmp_path_factory, stories_vocab, shape, mix):
    """Quantised experts (float activations into the experts, Q8A/Q8K into the rest, as the
    reference emulates), 64 positions in a prompt chunk and a batched step. Catches expert
    outputs combined with another pair's weight or row (pos), or the shared expert dropped."""
    model = load_model(synth_model(tmp_path_factory, shape, mix))
    toks = np.random.default_rng(3).integers(0, 500, 64)
    ref = _logits(ReferenceEngine(model, n_ctx=128, max_seqs=1, act_quant=True,
                                  q8k_min_tokens=Q8K_MIN_TOKENS), toks)
    # f32 attention like the oracle's: with random weights, bf16 attention's rounding flips
    # expert choices (cosine down to 0.85); bf16 is checked against its own oracle per kernel
    eng = JITEngine(model, n_ctx=128, max_seqs=1, threads=2, max_logits=64, attn_type="f32")
    try:
        got = _logits(eng, toks)
    finally:
        eng.close()
    assert _cos(ref, got).min() >= 0.999
    assert (ref.argmax(-1) == got.argmax(-1)).mean() >= 0.95


def test_moe_batched_decode_equals_one_by_one(tmp_path_factory, stories_vocab):
    """Three sequences in one decode step route to different experts; each must get exactly
    what it gets alone (catches rows of one token sent to another token's experts)."""
    model = load_model(synth_model(tmp_path_factory, "tiny-qwen3moe", "F32"))
    eng = JITEngine(model, n_ctx=64, max_seqs=3, threads=2)
    try:
        prompts = [[1, 50, 60], [1, 300, 400, 450], [1, 33]]
        for s, p in enumerate(prompts):
            eng.forward(Batch.prefill(p, 0, s))
        toks, pos = [5, 6, 7], [len(p) for p in prompts]
        together = eng.forward(Batch.decode(toks, pos, [0, 1, 2]))
        for s in range(3):
            eng.forward(Batch.prefill(prompts[s], 0, s))
            alone = eng.forward(Batch.decode([toks[s]], [pos[s]], [s]))[0]
            np.testing.assert_allclose(together[s], alone, rtol=2e-5, atol=2e-5)
    finally:
        eng.close()


def test_decode_reads_only_the_picked_experts(tmp_path_factory, stories_vocab):
    """The experts a decode token did not pick get NaN weights: the logits stay finite and
    unchanged. Catches an implementation that runs every expert and multiplies the unpicked
    ones' outputs by zero (NaN * 0 is NaN), i.e. one that reads every expert's weights."""
    path = synth_model(tmp_path_factory, "tiny-qwen3moe", "F32")
    model = load_model(path)
    c = model.config
    prompt, tok = [1, 50, 60, 70], 123
    ref = ReferenceEngine(model, n_ctx=64, max_seqs=1)
    ref.forward(Batch.prefill(prompt, 0, 0))
    # the experts the decode token picks in each layer (the reference's routing)
    picked, orig_moe = {}, ReferenceEngine.moe

    def spy(self, h, p):
        probs = softmax(self.linear(h, p + "ffn_gate_inp.weight"))
        picked[p] = set(route(probs, c.n_expert_used, c.moe_norm)[0][-1].tolist())
        return orig_moe(self, h, p)
    ReferenceEngine.moe = spy
    try:
        want = ref.forward(Batch.decode([tok], [len(prompt)], [0]))[0]
    finally:
        ReferenceEngine.moe = orig_moe
    # a copy of the file with every unpicked expert's gate/up/down weights set to NaN
    data = bytearray(path.read_bytes())
    for p, keep in picked.items():
        for name in ("gate", "up", "down"):
            t = model.tensor(f"{p}ffn_{name}_exps.weight")
            size = t.data.nbytes // c.n_expert
            for e in set(range(c.n_expert)) - keep:
                start = t.offset + e * size
                data[start:start + size] = np.full(size // 4, np.nan, np.float32).tobytes()
    poisoned = tmp_path_factory.mktemp("nan") / "poisoned.gguf"
    poisoned.write_bytes(bytes(data))
    # the prompt's own steps would route to the poisoned experts: the poisoned engine gets the
    # prompt's KV cache from a clean one, then runs the decode step alone
    eng = JITEngine(load_model(poisoned), n_ctx=64, max_seqs=1, threads=2,
                    attn_type="f32")   # the reference's attention
    clean = JITEngine(model, n_ctx=64, max_seqs=1, threads=2,
                       attn_type="f32")
    try:
        clean.forward(Batch.prefill(prompt, 0, 0))
        eng.kv.tables[...] = clean.kv.tables
        for il in range(c.n_layer):
            eng.kv.k[il][...] = clean.kv.k[il]
            eng.kv.v[il][...] = clean.kv.v[il]
        got = eng.forward(Batch.decode([tok], [len(prompt)], [0]))[0]
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        eng.close()
        clean.close()
