"""The numpy reference engine: llama.cpp's greedy outputs on stories260K, batching and chunking
invariance, the f16 KV cache, and RoPE (normal, NeoX, linear scaling) against direct formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.synth import synth_model
from conftest import shared_path
from reame.batch import Batch
from reame.config import RopeScaling
from reame.model import load_model
from reame.codegen.ops.rope import rope_angles
from reame.codegen.ops.rope import rotate as apply_rope
from reame.reference import ReferenceEngine


def greedy(engine: ReferenceEngine, prompt: list[int], n: int, slot: int = 0):
    """Prefill the prompt, then n greedy tokens; returns (tokens, logits after the prompt)."""
    logits = engine.forward(Batch.prefill(prompt, 0, slot))[0]
    first, out, pos = logits, [], len(prompt)
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        if len(out) == n:
            break
        logits = engine.forward(Batch.decode([out[-1]], [pos], [slot]))[0]
        pos += 1
    return out, first


# ---- llama.cpp's outputs on stories260K ----------------------------------------------------

@pytest.mark.parametrize("case", range(5))
def test_stories_matches_llama_cpp(stories_model, stories_expected, case):
    exp = stories_expected["cases"][case]
    engine = ReferenceEngine(stories_model, n_ctx=128, max_seqs=1)
    tokens, first = greedy(engine, exp["prompt_tokens"], len(exp["greedy_tokens"]))
    ref = np.asarray(exp["first_step_logits"], dtype=np.float32)
    assert first.shape == ref.shape == (512,)
    assert np.max(np.abs(first - ref)) < 2e-3
    assert len(tokens) == 64
    assert tokens == exp["greedy_tokens"]


# ---- batching and chunking invariance ------------------------------------------------------

# float32 matmuls sum in a different order for different batch sizes (BLAS gemm vs gemv): logits
# near 18 in magnitude then differ by a few ulp (~1e-5), so the tolerance is 1e-5 + 1e-6 * |x|.
SAME = dict(rtol=1e-6, atol=1e-5)

PROMPTS = [[1, 403, 407], [1, 261, 378, 432, 383, 286], [1, 13, 438, 310, 439, 419, 357, 336, 401]]


def _prefill_all(engine, prompts):
    """Prefill each prompt into slot i; returns each one's greedy next token."""
    return [int(np.argmax(engine.forward(Batch.prefill(p, 0, i))[0]))
            for i, p in enumerate(prompts)]


def test_batched_decode_equals_single(stories_model):
    together = ReferenceEngine(stories_model, n_ctx=64, max_seqs=3)
    alone = ReferenceEngine(stories_model, n_ctx=64, max_seqs=3)
    nxt = _prefill_all(together, PROMPTS)
    assert _prefill_all(alone, PROMPTS) == nxt
    positions = [len(p) for p in PROMPTS]                         # 3, 6, 9: all different
    for _ in range(3):                                            # three decode steps
        batched = together.forward(Batch.decode(nxt, positions, [0, 1, 2]))
        single = np.stack([alone.forward(Batch.decode([t], [pos], [i]))[0]
                           for i, (t, pos) in enumerate(zip(nxt, positions))])
        assert batched.shape == (3, 512)
        np.testing.assert_allclose(batched, single, **SAME)
        nxt = [int(t) for t in batched.argmax(axis=1)]
        positions = [pos + 1 for pos in positions]


def test_mixed_prefill_and_decode_batch(stories_model):
    """One Batch holding a decode token of one sequence and a prefill chunk of another."""
    mixed = ReferenceEngine(stories_model, n_ctx=64, max_seqs=2)
    alone = ReferenceEngine(stories_model, n_ctx=64, max_seqs=2)
    a, b = PROMPTS[1], PROMPTS[2]
    for e in (mixed, alone):
        e.forward(Batch.prefill(a, 0, 0))
    tok = 432
    batch = Batch.build([tok] + b, [len(a)] + list(range(len(b))), [0] + [1] * len(b),
                        logits_rows=[0, len(b)])
    got = mixed.forward(batch)
    want = np.stack([alone.forward(Batch.decode([tok], [len(a)], [0]))[0],
                     alone.forward(Batch.prefill(b, 0, 1))[0]])
    np.testing.assert_allclose(got, want, **SAME)


@pytest.mark.parametrize("split", [1, 5, 11])
def test_chunked_prefill_equals_one_chunk(stories_model, split):
    prompt = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315]
    one = ReferenceEngine(stories_model, n_ctx=64, max_seqs=1)
    two = ReferenceEngine(stories_model, n_ctx=64, max_seqs=1)
    want = one.forward(Batch.prefill(prompt, 0, 0))
    two.forward(Batch.prefill(prompt[:split], 0, 0))
    got = two.forward(Batch.prefill(prompt[split:], split, 0))
    np.testing.assert_allclose(got, want, **SAME)
    # and the caches agree: the next decode step gives the same logits
    tok = int(np.argmax(want[0]))
    np.testing.assert_allclose(two.forward(Batch.decode([tok], [len(prompt)], [0])),
                               one.forward(Batch.decode([tok], [len(prompt)], [0])),
                               **SAME)


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-qwen3"])
def test_chunked_prefill_synthetic(tmp_path_factory, shape):
    shared_path("models/stories260K.gguf")
    model = load_model(synth_model(tmp_path_factory, shape, "Q8_0"))
    prompt = [1, 40, 300, 7, 99, 12, 250, 3, 77]
    one = ReferenceEngine(model, n_ctx=32, max_seqs=1)
    two = ReferenceEngine(model, n_ctx=32, max_seqs=1)
    want = one.forward(Batch.prefill(prompt, 0, 0))
    two.forward(Batch.prefill(prompt[:4], 0, 0))
    np.testing.assert_allclose(two.forward(Batch.prefill(prompt[4:], 4, 0)), want,
                               **SAME)


def test_f16_kv_cache_stays_close(stories_model, stories_expected):
    """Teacher-forced on llama.cpp's greedy tokens: f16 K/V moves logits little, and the argmax
    only where llama.cpp itself saw a near tie."""
    exp = stories_expected["cases"][0]
    f32 = ReferenceEngine(stories_model, n_ctx=128, max_seqs=1)
    f16 = ReferenceEngine(stories_model, n_ctx=128, max_seqs=1, kv_dtype="f16")
    assert f16.kv.k[0].dtype == np.float16
    seq = exp["prompt_tokens"] + exp["greedy_tokens"]
    n0 = len(exp["prompt_tokens"])
    a = f32.forward(Batch.prefill(seq[:n0], 0, 0))
    b = f16.forward(Batch.prefill(seq[:n0], 0, 0))
    worst = float(np.max(np.abs(a - b)))
    for step in range(32):
        pos = n0 + step
        gap = exp["greedy_top2_gaps"][step]
        if gap > 0.05:
            assert np.argmax(b[0]) == exp["greedy_tokens"][step], step
        a = f32.forward(Batch.decode([seq[pos]], [pos], [0]))
        b = f16.forward(Batch.decode([seq[pos]], [pos], [0]))
        worst = max(worst, float(np.max(np.abs(a - b))))
    assert 0 < worst < 0.05, worst


# ---- RoPE against direct formulas ----------------------------------------------------------

def rope_direct(x: np.ndarray, pos: int, theta: float, n_rot: int, neox: bool, factor: float = 1.0):
    """llama.cpp's rope for one token, element by element: x [heads, head_dim] (float64).
    normal: rotate pairs (2i, 2i+1); NeoX: pairs (i, i + n_rot/2); linear scaling divides pos."""
    out = x.astype(np.float64).copy()
    for h in range(x.shape[0]):
        for i in range(n_rot // 2):
            angle = (pos / factor) * theta ** (-2.0 * i / n_rot)
            a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
            x0, x1 = float(x[h, a]), float(x[h, b])
            out[h, a] = x0 * math.cos(angle) - x1 * math.sin(angle)
            out[h, b] = x0 * math.sin(angle) + x1 * math.cos(angle)
    return out


ROPE_CASES = {                   # name: (shape, overrides, neox, factor)
    "llama-normal": ("tiny-llama", {}, False, 1.0),
    "llama-linear4": ("tiny-llama", {"rope_scaling": "linear", "rope_scaling_factor": 4.0},
                      False, 4.0),
    "qwen2-neox": ("tiny-qwen2", {}, True, 1.0),
    "qwen3-neox-linear2": ("tiny-qwen3", {"rope_scaling": "linear", "rope_scaling_factor": 2.0},
                           True, 2.0),
}


@pytest.fixture(scope="module")
def rope_models(tmp_path_factory):
    return {name: load_model(synth_model(tmp_path_factory, shape, "F32", vocab="none", n_vocab=256,
                                         n_layer=1, **ov))
            for name, (shape, ov, _, _) in ROPE_CASES.items()}


@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_config(rope_models, case):
    _, _, neox, factor = ROPE_CASES[case]
    c = rope_models[case].config
    assert c.rope_neox == neox
    assert c.rope_scaling == (RopeScaling("linear", factor) if factor > 1 else RopeScaling())


@pytest.mark.parametrize("pos", [0, 1, 37, 1000])
@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_matches_formula(rope_models, case, pos):
    c = rope_models[case].config
    _, _, neox, factor = ROPE_CASES[case]
    x = np.random.default_rng(pos).standard_normal((1, c.n_head, c.head_dim)).astype(np.float32)
    cos, sin = rope_angles(c, np.array([pos]))
    got = apply_rope(x, cos, sin, c.rope_dim, c.rope_neox)[0]
    want = rope_direct(x[0], pos, c.rope_theta, c.rope_dim, neox, factor)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    if pos > 0:                  # the two styles really differ: the test can tell them apart
        other = rope_direct(x[0], pos, c.rope_theta, c.rope_dim, not neox, factor)
        assert np.max(np.abs(other - want)) > 1e-2


def forward_direct(model, tokens: list[int]) -> np.ndarray:
    """Logits of the last token, written out independently of reame.reference (float64, one
    token and one head at a time, rope_direct for the rotation)."""
    c = model.config
    w = {n: t.dequantize().astype(np.float64) for n, t in model.tensors.items()}
    factor = c.rope_scaling.factor if c.rope_scaling.type == "linear" else 1.0

    def norm(v, g):
        return v / np.sqrt(np.mean(v * v) + c.rms_eps) * g

    x = [w["token_embd.weight"][t].copy() for t in tokens]
    for il in range(c.n_layer):
        p = f"blk.{il}."
        ks, vs, outs = [], [], []
        for pos, xt in enumerate(x):
            h = norm(xt, w[p + "attn_norm.weight"])
            q, k, v = (w[p + f"attn_{n}.weight"] @ h for n in "qkv")
            if c.qkv_bias:
                q, k, v = (q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"],
                           v + w[p + "attn_v.bias"])
            q, k = q.reshape(c.n_head, c.head_dim), k.reshape(c.n_head_kv, c.head_dim)
            if c.qk_norm:
                q = np.stack([norm(r, w[p + "attn_q_norm.weight"]) for r in q])
                k = np.stack([norm(r, w[p + "attn_k_norm.weight"]) for r in k])
            q = rope_direct(q, pos, c.rope_theta, c.rope_dim, c.rope_neox, factor)
            k = rope_direct(k, pos, c.rope_theta, c.rope_dim, c.rope_neox, factor)
            ks.append(k)
            vs.append(v.reshape(c.n_head_kv, c.head_dim_v))
            heads = []
            for hq in range(c.n_head):
                hk = hq * c.n_head_kv // c.n_head
                s = np.array([q[hq] @ ks[j][hk] for j in range(pos + 1)]) / math.sqrt(c.head_dim)
                pr = np.exp(s - s.max())
                pr /= pr.sum()
                heads.append(sum(pr[j] * vs[j][hk] for j in range(pos + 1)))
            outs.append(w[p + "attn_output.weight"] @ np.concatenate(heads))
        x = [xt + o for xt, o in zip(x, outs)]
        for i, xt in enumerate(x):
            h = norm(xt, w[p + "ffn_norm.weight"])
            g = w[p + "ffn_gate.weight"] @ h
            u = w[p + "ffn_up.weight"] @ h
            x[i] = xt + w[p + "ffn_down.weight"] @ (g / (1 + np.exp(-g)) * u)
    head = w["token_embd.weight"] if c.tied_embeddings else w["output.weight"]
    return head @ norm(x[-1], w["output_norm.weight"])


@pytest.mark.parametrize("case", ROPE_CASES)
def test_forward_matches_direct(rope_models, case):
    model = rope_models[case]
    tokens = [1, 17, 200, 33, 5, 128, 64, 9]
    got = ReferenceEngine(model, n_ctx=16, max_seqs=1).forward(Batch.prefill(tokens, 0, 0))[0]
    want = forward_direct(model, tokens)
    assert want.std() > 0.3
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(want).max())


# ---- llama.cpp on synthetic models -----------------------------------------------------------

# Recorded with llama-cpp-python 0.3.36 (CPU, f32 K/V, no flash attention) on the files that
# synth_model(..., shape, "F32") writes (seed 0, stories vocabulary), after eval of TOKENS:
# per-row argmax and max, and the first 8 logits of the last row. If synth's weights change
# (SYNTH_VERSION bump, a numpy RNG stream change), record them again:
#   Llama(path, n_ctx=64, logits_all=True, type_k=0, type_v=0, flash_attn=False).eval(TOKENS)
TOKENS = [1, 45, 300, 7, 99, 12]
LLAMA_CPP = {
    "tiny-llama": {"argmax": [489, 224, 124, 124, 86, 258],
                   "max": [3.1389, 3.1258, 3.2167, 3.5845, 2.9414, 2.7456],
                   "last8": [2.7153, -0.2041, 0.4108, -0.6993, -0.7901, -0.6224, -0.689, 0.0363]},
    "tiny-qwen2": {"argmax": [276, 339, 146, 339, 224, 316],
                   "max": [3.2209, 3.0623, 2.8336, 3.3172, 2.7487, 3.5755],
                   "last8": [0.6858, 0.5469, 0.3774, -0.3024, -0.2703, -1.1116, 0.1038, 0.2672]},
    "tiny-qwen3": {"argmax": [120, 191, 127, 252, 25, 154],
                   "max": [2.7243, 2.7419, 2.9179, 2.4811, 3.3777, 2.9677],
                   "last8": [0.6372, 0.5647, -0.9546, -0.3648, 0.3489, -1.3339, -0.6732, -0.6812]},
}


@pytest.mark.parametrize("shape", LLAMA_CPP)
def test_synthetic_matches_llama_cpp(tmp_path_factory, shape):
    """Llama (normal RoPE), Qwen2 (NeoX, q/k/v biases) and Qwen3 (q/k norm, head_dim 128 !=
    n_embd/n_head) read from synth files agree with llama.cpp to float32 rounding."""
    shared_path("models/stories260K.gguf")
    model = load_model(synth_model(tmp_path_factory, shape, "F32"))
    logits = ReferenceEngine(model, n_ctx=16, max_seqs=1).forward(
        Batch.prefill(TOKENS, 0, 0, all_logits=True))
    exp = LLAMA_CPP[shape]
    np.testing.assert_allclose(logits[-1, :8], exp["last8"], rtol=0, atol=2e-4)
    np.testing.assert_allclose(logits.max(axis=1), exp["max"], rtol=0, atol=2e-4)
    assert logits.argmax(axis=1).tolist() == exp["argmax"]
