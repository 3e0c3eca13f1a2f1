"""Embeddings through the scheduler (Scheduler.submit_embeddings): the prompt is computed like
any other (batched beside generating sequences, in chunks, preemptible) and its final hidden
states, after the output norm, are pooled ("mean" over every token, or the "last" one) and
scaled to unit length. The oracle: the reference engine's hidden states of the whole prompt
computed in one step, pooled in numpy."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reame.engines import create_engine
from reame.generate import Generation
from reame.planner import SchedulerParams
from reame.sampling import SamplingParams
from reame.scheduler import DONE, Scheduler
from reame.tokenizer import Tokenizer
from reame.batch import Batch

PROMPTS = [[1, 403, 407, 300, 12, 99, 250, 31, 77, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
            17, 18, 19, 20, 21],
           [1, 403, 407, 300, 12, 99, 250, 31, 77, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
            17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34],
           [1, 42, 43]]


def oracle(model, prompt, pooling):
    eng = create_engine(model, "reference", n_ctx=128, max_seqs=1)
    eng.forward(Batch.prefill(prompt, 0, 0))
    h = eng.final_hidden(0, len(prompt)).astype(np.float64)
    v = h.mean(0) if pooling == "mean" else h[-1]
    return v / np.linalg.norm(v)


def drive(sched, reqs, limit=20_000):
    """Step the scheduler (no engine thread) until every request is done."""
    for _ in range(limit):
        if all(r.finished for r in reqs):
            return
        sched.step(time.monotonic())
    raise AssertionError("the scheduler did not finish")


def embed(sched, prompts, pooling, others=()):
    req = sched.submit_embeddings(prompts, pooling)
    drive(sched, [req, *others])
    out = {}
    while (ev := req.out.get_nowait()) is not DONE:
        assert ev.error is None, ev.error
        assert ev.finish_reason == "stop" and ev.step is None
        out[ev.index] = ev.embedding
    return [out[i] for i in range(len(prompts))], req


@pytest.mark.parametrize("engine_name", ["jit", "reference"])
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_pooled_hidden_states_match_the_oracle(stories_model, engine_name, pooling):
    """Prompt chunks of 8 tokens beside generating sequences, on a pool small enough to
    preempt: the vectors equal the whole-prompt oracle (chunk sums are not lost, a preempted
    sequence starts its sums again) and have unit length. Driven step by step (with an engine
    thread, whether the embeddings met the generations, and so preemption, hung on timing)."""
    tok = Tokenizer.from_metadata(stories_model.metadata)
    want = [oracle(stories_model, p, pooling) for p in PROMPTS]
    kw = {"act_type": "f32"} if engine_name == "jit" else {}
    eng = create_engine(stories_model, engine_name, n_ctx=128, max_seqs=4, block_size=16,
                        kv_blocks=10, **kw)
    s = Scheduler(eng, SchedulerParams(max_batch=4, token_budget=12, prefill_chunk=8))
    try:
        gens = [s.submit([p], [[Generation(tok, p, SamplingParams(temperature=0),
                                           max_tokens=60, ignore_eos=True, n_ctx=128)]])
                for p in PROMPTS[:2]]
        got, _ = embed(s, PROMPTS, pooling, gens)
        for v, w in zip(got, want):
            assert v.dtype == np.float32 and abs(np.linalg.norm(v) - 1) < 1e-5
            np.testing.assert_allclose(v, w, atol=2e-5)
        assert s.planner.preemptions > 0
        # the same prompts again: "last" may take its prefix from the cache, "mean" may not
        # (the cached tokens' hidden states would be missing from the mean)
        again, req = embed(s, PROMPTS[:2], pooling)
        for v, w in zip(again, want):
            np.testing.assert_allclose(v, w, atol=2e-5)
        assert (req.cached_tokens > 0) == (pooling == "last")
        p = s.planner
        p.check()
        assert p.pool.used == 0 and not p.running and not p.waiting
    finally:
        s.stop()


def test_bad_pooling_and_empty_prompt(stories_model):
    eng = create_engine(stories_model, "reference", n_ctx=64, max_seqs=2)
    s = Scheduler(eng)
    with pytest.raises(ValueError, match="mean or last"):
        s.submit_embeddings([[1, 2]], "cls")
    with pytest.raises(ValueError, match="empty"):
        s.submit_embeddings([[]])
