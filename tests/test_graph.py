"""The step as a graph (reame/graph.py) and its one planning pass (reame/jit/plan.py)."""

import numpy as np
import pytest

from bench.synth import synth_model
from reame import graph
from reame.batch import Batch
from reame.jit.engine import JITEngine
from reame.jit.plan import PlannedOp, place_barriers
from reame.model import load_model
from reame.reference import ReferenceEngine

SHAPES = ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3",
          "tiny-qwen2moe")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {s: load_model(synth_model(tmp_path_factory, s, "Q8_0" if s != "tiny-llama" else "F32"))
            for s in SHAPES}


def test_traits_decide_the_nodes(models):
    # catches: a builder that ignores a trait (Qwen2's biases, Qwen3's per-head norms, Gemma's
    # post-norms, windows and soft-caps, experts) or adds its nodes to every model
    ops = {s: graph.build(m.config) for s, m in models.items()}
    sites = {s: {n.site for n in g} for s, g in ops.items()}
    assert "blk.0.attn_q.bias" in sites["tiny-qwen2"] and "blk.0.attn_q.bias" not in sites["tiny-llama"]
    norms = [n for n in ops["tiny-qwen3"] if n.site == "blk.1.attn_q_norm"]
    assert len(norms) == 1 and norms[0].attr("heads") == models["tiny-qwen3"].config.n_head
    assert "blk.0.attn_q_norm" not in sites["tiny-qwen2"]
    assert "output_softcap" in sites["tiny-gemma2"] and "output_softcap" not in sites["tiny-llama"]
    assert "blk.0.post_ffw_norm.add" in sites["tiny-gemma2"]
    assert not any(n.op == "moe" for n in ops["tiny-llama"])
    assert [n.layer for n in ops["tiny-qwen2moe"] if n.op == "moe"] == [0, 1]
    c = models["tiny-gemma3"].config
    windows = [n.attr("window") for n in ops["tiny-gemma3"] if n.op == "attention"]
    assert windows == [c.swa if c.is_swa(il) else 0 for il in range(c.n_layer)]
    assert 0 in windows and c.swa in windows
    for g in ops.values():                  # every buffer is written before it is read
        written = {"tokens", "pos"}
        for n in g:
            assert set(n.ins) <= written, (n.site, n.ins)
            written.add(n.out)


def op(reads, writes, barrier=None):
    return PlannedOp("s", None, {}, frozenset(reads), frozenset(writes), barrier)


def test_barriers_come_from_reads_and_writes():
    # catches: a rule that ignores a read-after-write, a write-after-read or a write-after-write
    # (threads racing), or that never leaves one out (every op waits)
    ops = [op({"h"}, {"q"}), op({"h"}, {"k"}),        # independent: no wait between them
           op({"q"}, {"q"}),                           # reads q, written since: wait before it
           op({"x"}, {"h"}),                           # writes h, read before the last wait
           op({"k"}, {"o"}),                           # reads k, written before the last wait
           op({"o"}, {"k"}, barrier=False),            # reads o: wait before; its own: kept
           op({"y"}, {"o"}),                           # (would wait: writes o, read since)
           op({"z"}, {"w"})]                           # the last op always waits
    place_barriers(ops)
    assert [o.barrier for o in ops] == [False, True, False, False, True, False, False, True]
    ops = [op({"a"}, {"b"}), op({"c"}, {"a"}), op({"d"}, {"a"})]   # write-after-read, -write
    place_barriers(ops)
    assert [o.barrier for o in ops] == [True, True, True]


@pytest.mark.parametrize("shape,mix", [("tiny-llama", "Q4_K_M"), ("tiny-qwen2moe", "Q8_0"),
                                       ("tiny-gemma2", "Q8_0")])
def test_plan_makes_each_activation_copy_once_and_never_reads_a_stale_one(tmp_path_factory,
                                                                         shape, mix):
    # catches: a quantize op per product (the q, k and v products each quantizing h), a copy
    # reused after its source was written again (a stale 8-bit h in the FFN), or a product
    # reading a copy no op made
    model = load_model(synth_model(tmp_path_factory, shape, mix))
    eng = JITEngine(model, n_ctx=64, max_seqs=2, threads=1)
    try:
        for bucket, plan in eng.plans.items():
            valid, made, readers = set(), 0, {}
            for o in plan.ops:
                for r in o.reads:
                    if ":" in r:
                        assert r in valid, (bucket, o.site, r)
                        readers[r] = readers.get(r, 0) + 1
                if o.spec.op.startswith("quantize") and any(":" in w for w in o.writes):
                    (copy,) = o.writes
                    assert copy not in valid, (bucket, o.site)      # made twice while valid
                    valid.add(copy)
                    made += 1
                    readers[copy] = 0
                valid -= {c for c in valid if c.split(":")[0] in o.writes}
            assert made and all(readers.values()), (bucket, readers)
        if shape == "tiny-llama":      # a copy of h for q, k, v; of att; of h for gate, up; of g
            per_layer = [o.site for o in eng.plans[1].ops
                         if o.spec.op.startswith("quantize") and "blk.0." in o.site]
            assert len(per_layer) == 4, per_layer
    finally:
        eng.close()


def attention_softcap(g: list, cap: float) -> list:
    """The worked example of docs/design.md: a made-up trait, the attention output soft-capped
    before its projection, as one edit of the graph."""
    out = []
    for n in g:
        out.append(n)
        if n.op == "attention":
            out.append(graph.Node("softcap", f"blk.{n.layer}.attn_out_softcap", ("att",), "att",
                                  layer=n.layer, attrs={"cap": cap}))
    return out


def test_one_graph_edit_changes_both_engines_alike(models):
    # catches: an engine that runs its own forward pass instead of the graph (the edit would not
    # change its logits), or a lowering that runs a node other than the reference does
    model = models["tiny-llama"]
    edited = attention_softcap(graph.build(model.config), 0.05)
    toks = np.random.default_rng(3).integers(0, model.config.n_vocab, 24)
    logits = {}
    for name, g in (("plain", None), ("edited", edited)):
        ref = ReferenceEngine(model, n_ctx=64, max_seqs=1, graph=g)
        jit = JITEngine(model, n_ctx=64, max_seqs=1, threads=1, attn_type="f32", graph=g,
                        max_logits=24)
        try:
            for eng in (ref, jit):
                a = eng.forward(Batch.prefill(toks[:20], 0, 0, all_logits=True))
                b = eng.forward(Batch.build(toks[20:], np.arange(20, 24), 0))
                logits[name, eng.name] = np.concatenate([a, b])
        finally:
            jit.close()
        assert any(s.name.startswith("blk.0.attn_out_softcap") for s in jit.table.slots) == \
            (g is not None)
    for name in ("plain", "edited"):
        r, j = logits[name, "reference"], logits[name, "jit"]
        assert np.abs(r - j).max() <= 1e-3 * np.abs(r).max()
    moved = np.abs(logits["edited", "reference"] - logits["plain", "reference"]).max()
    assert moved > 0.05 * np.abs(logits["plain", "reference"]).max()


def test_the_op_files_family_policies_decide_the_starting_kernels():
    # catches: select.choose ignoring an op's declared policy (Op.prefers): a float prompt chunk
    # on the streaming tiles, matmul_q8a decode off the panels (a token's logits would then
    # depend on its step's size), matmul_q8k's panels in decode or short-row batches
    from reame.jit.select import choose
    from test_codegen_golden import golden_isa          # a fixed AVX-512 VNNI machine: no
    isa = golden_isa("avx512_vnni")                     # kernel is built, so any CPU decides
    fam = lambda op, dtype, n, K: choose(op, dtype, isa, n, M=256, K=K, acc=0).family  # noqa
    assert fam("matmul", "F32", 1, 256) != "gemm" and fam("matmul", "F32", 64, 256) == "gemm"
    assert fam("matmul_q8a", "Q8_0", 1, 256) == "panel"
    assert fam("matmul_q8a", "Q8_0", 8, 256) == "panel"
    assert fam("matmul_q8k", "Q4_K", 1, 4096) != "panel"
    assert fam("matmul_q8k", "Q4_K", 8, 256) != "panel"
    assert fam("matmul_q8k", "Q4_K", 8, 4096) == "panel"
    assert fam("matmul_q8k", "Q4_K", 16, 256) != "panel"
