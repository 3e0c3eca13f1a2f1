"""The JIT's plans (`reame plan`) for a few models at two forced ISA levels, against files in
tests/golden/plans/: every op site's starting kernel, in order, and where threads wait. A change
of the graph, the planning pass, the op files' declarations or select.py that moves any of them
shows here as a diff to read (intended: regenerate with
`REAME_UPDATE_GOLDEN=1 python -m pytest tests/test_plan_golden.py`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bench.synth import synth_model
from reame.codegen.isa import detect
from reame.jit.engine import JITEngine
from reame.model import load_model

GOLDEN = Path(__file__).resolve().parent / "golden" / "plans"
UPDATE = os.environ.get("REAME_UPDATE_GOLDEN") == "1"
MODELS = {"llama-Q4_K_M": ("tiny-llama", "Q4_K_M"), "qwen2-Q8_0": ("tiny-qwen2", "Q8_0"),
          "gemma2-Q5_K": ("tiny-gemma2", "Q5_K"), "qwen2moe-Q4_0": ("tiny-qwen2moe", "Q4_0")}
LEVELS = ("avx2", "avx512_vnni")


def plan_text(path, level: str) -> str:
    eng = JITEngine(load_model(path), n_ctx=128, max_seqs=4, threads=1, isa=detect(level))
    try:
        out = []
        for bucket, plan in eng.plans.items():
            out.append(f"# steps of up to {bucket} tokens: {len(plan.ops)} ops")
            out += plan.describe()
        return "\n".join(out) + "\n"
    finally:
        eng.close()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(MODELS))
def test_plans_are_unchanged(tmp_path_factory, name, level):
    # catches: a refactor of the graph, the plan or the kernel choice that moves a site's
    # kernel, tile or activation format, drops or duplicates an 8-bit copy or a wait
    if level not in detect().levels:
        pytest.skip(f"this CPU has no {level} level")
    text = plan_text(synth_model(tmp_path_factory, *MODELS[name]), level)
    path = GOLDEN / f"{name}-{level}.txt"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            pytest.skip(f"REAME_UPDATE_GOLDEN=1: wrote {path.name}")
        return
    assert path.exists(), f"{path} is missing: REAME_UPDATE_GOLDEN=1 python -m pytest {__file__}"
    want = path.read_text().splitlines()
    got = text.splitlines()
    diff = [(i, w, g) for i, (w, g) in enumerate(zip(want, got)) if w != g]
    assert len(want) == len(got) and not diff, (len(want), len(got), diff[:5])


def test_the_output_head_is_tiled_for_the_logits_rows_a_step_may_return(tmp_path_factory):
    # catches: the head's tile chosen for one logits row per sequence (max_seqs), which with
    # --max-seqs 1 ran a 16-row speculation verify step's head as 16 one-token passes (17.6 of
    # its 41 thread-ms on SmolLM2-135M; 3.4 on the 16-token tile)
    path = synth_model(tmp_path_factory, *MODELS["qwen2-Q8_0"])
    eng = JITEngine(load_model(path), n_ctx=128, max_seqs=1, threads=1)
    try:
        for bucket, plan in eng.plans.items():
            head = [line for line in plan.describe() if line.startswith("output.weight ")
                    or line.startswith("token_embd.weight matmul")]
            assert len(head) == 1, (bucket, head)
            nt = re.search(r"nt=(\d+)", head[0])
            assert nt, head[0]
            want = min(bucket, eng.max_logits)
            # (8: the widest pass some record types take for 16 rows, two of them)
            assert int(nt.group(1)) >= min(want, 8), (bucket, head[0])
    finally:
        eng.close()
