"""What constrained decoding costs per token: the same requests free and under a JSON schema,
side by side, at batch 1 and batch 8.

The engine and scheduler of `reame serve` run in-process on a synthetic model (default the
Qwen2.5-0.5B-shaped Q8_0 file, 152k-token vocabulary); each request generates exactly
`--tokens` tokens (end-of-generation ignored; the schemas, arrays of at least 10,000 items,
cannot complete sooner), so every run computes the same number of steps. Two schemas: an
array of small integers (few tokens allowed at each step) and an array of records with a free
string (almost every token allowed inside it: the widest masks). The numbers' outputs are
checked to be valid prefixes of their JSON before anything is reported. Rounds alternate free
and constrained; the best of each is kept.

    python -m bench.structured [--model shape:mix] [--tokens 64] [--batches 1,8] [--rounds 3]

Writes bench/results/structured.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# two schemas that cannot complete within the run: a narrow one (few tokens allowed at each
# step) and a wide one (inside a free string almost every token is allowed)
SCHEMAS = {
    "numbers": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999},
                "minItems": 10000},
    "records": {"type": "array", "minItems": 10000, "items": {
        "type": "object", "properties": {"name": {"type": "string"}, "id": {"type": "integer"}},
        "required": ["name", "id"], "additionalProperties": False}},
}


def valid_prefix(text: str) -> bool:
    """Whether text starts the schema's JSON: closing it (after dropping a trailing separator)
    gives a list of integers 0..999."""
    try:
        value = json.loads(re.sub(r",\s*$", "", text) + "]")
    except ValueError:
        return False
    return isinstance(value, list) and all(isinstance(v, int) and 0 <= v <= 999 for v in value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "structured.json"))
    a = ap.parse_args(argv)

    from bench.engine import bench_dir
    from bench.synth import synth_model
    from reame import structured as S
    from reame.engines import create_engine
    from reame.generate import Generation
    from reame.model import load_model
    from reame.planner import SchedulerParams
    from reame.sampling import SamplingParams
    from reame.scheduler import DONE, Scheduler
    from reame.tokenizer import Tokenizer

    shape, mix = a.model.split(":")
    model = load_model(synth_model(bench_dir(), shape, mix))
    tok = Tokenizer.from_metadata(model.metadata)
    batches = [int(b) for b in a.batches.split(",")]
    eng = create_engine(model, "jit", n_ctx=1024, max_seqs=max(batches), threads=a.threads)
    sched = Scheduler(eng, SchedulerParams(max_batch=max(batches))).start()
    t0 = time.perf_counter()
    grammars = {k: S.compile_grammar(S.json_schema(v), tok, "json_schema")
                for k, v in SCHEMAS.items()}
    setup = time.perf_counter() - t0
    prompt = tok.encode("A list of numbers:", add_special=True)

    def run(batch: int, schema: str | None) -> float:
        gens = [Generation(tok, prompt, SamplingParams(temperature=1.0, seed=i),
                           max_tokens=a.tokens, n_ctx=1024, ignore_eos=True,
                           constraint=S.Constraint(grammars[schema], tok) if schema else None)
                for i in range(batch)]
        t = time.perf_counter()
        reqs = [sched.submit([prompt], [[g]]) for g in gens]
        for r in reqs:
            while (ev := r.out.get(timeout=600)) is not DONE:
                if ev.error is not None:
                    raise SystemExit(f"generation failed: {ev.error}")
        wall = time.perf_counter() - t
        for g in gens:                          # validate before reporting anything
            assert len(g.output_ids) == a.tokens, len(g.output_ids)
            if schema == "numbers":
                assert valid_prefix(g.text), g.text
            elif schema == "records":
                assert g.text.startswith('[{"name": "'), g.text
        return wall / a.tokens                  # seconds per step (one token per sequence)

    rows = []
    try:
        run(1, "records")                        # warm up: kernels, tokenizer tables
        kinds = [None, *SCHEMAS]
        for batch in batches:
            best = {k: float("inf") for k in kinds}
            for _ in range(a.rounds):
                for k in kinds:
                    best[k] = min(best[k], run(batch, k))
            row = {"batch": batch, "free_ms_per_step": round(best[None] * 1e3, 2)}
            line = f"batch {batch}: free {best[None] * 1e3:.2f} ms/step"
            for k in SCHEMAS:
                row[f"{k}_ms_per_step"] = round(best[k] * 1e3, 2)
                row[f"{k}_ratio"] = round(best[k] / best[None], 3)
                line += f", {k} {best[k] * 1e3:.2f} ({best[k] / best[None]:.3f}x)"
            rows.append(row)
            print(line, flush=True)
    finally:
        sched.stop()
        eng.close()
    out = {"date": time.strftime("%Y-%m-%d"), "model": a.model, "tokens": a.tokens,
           "threads": a.threads, "grammar_setup_s": round(setup, 3), "rows": rows}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=2))
    print(f"grammar compiled and checked in {setup * 1e3:.0f} ms (tokenizer tables included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
