"""What a verify step costs by its rows: one sequence at a context, steps of R consecutive rows.

    python -m bench.verify_step [--gguf PATH] [--ctx 800] [--rows 1,2,3,4,5,8,9,12,16]
                                [--threads 2] [--rounds 3] [--as-prompt] [--kv-type f32]
                                [--json PATH]

A speculating sequence's step computes its last token and R - 1 drafted ones (docs/
speculation.md); the controller reads the live step-cost curve, this bench shows where that
curve comes from: the JIT engine (the server's defaults: Q8A activations, attn_type auto) with
the sequence's first --ctx positions in the cache, the median of 8 steps of R rows per round, the
least over --rounds rounds (the machine is shared and noisy), relative to a 1-row step; then, for
1, 4 and 16 rows, each op's thread-time per step (the dispatch table's cycle counters on every
call, summed over threads): attention, matrix products and the rest. The steps rewrite the same
positions (their K/V), as a rejected draft's would be.

The rows are decode rows (Batch.n_decode = R: attn_decode, f32, as the server runs a verify
step) and, with --as-prompt, also prompt rows (n_decode = 0: attn_prefill, the amx bf16 family
under attn_type auto on AMX): what the step would cost if every row ran the prompt kernel.
--kv-type bf16 (the AMX tile layout) runs every row on the amx family, reading the cache in
place; a comma list (f32,bf16) measures each in turn, side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GGUF = REPO.parent / "shared" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def op_group(label: str) -> str:
    """A kernel label's share: attention, matmul (every matrix-product op) or other."""
    op = label.split("/")[0]
    if op.startswith("attn_"):
        return "attention"
    if op.startswith("matmul"):
        return "matmul"
    return "other"


def measure(gguf: str, ctx: int, rows: list[int], threads: int, rounds: int,
            as_prompt: bool = False, kv_type: str = "f32") -> dict:
    import numpy as np

    from reame.batch import Batch
    from reame.engines import kv_type_for
    from reame.jit.engine import JITEngine
    from reame.model import load_model

    model = load_model(gguf)
    R = max(rows)
    kv_type = kv_type_for(model.config, kv_type)     # "bf16" / "auto": the layout this CPU keeps
    eng = JITEngine(model, n_ctx=max(1024, ctx + R + 64), max_seqs=1, threads=threads,
                    kv_dtype=kv_type, max_logits=max(16, R))
    try:
        rng = np.random.default_rng(0)
        toks = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, ctx + R)]
        for s in range(0, ctx, eng.max_tokens):
            eng.forward(Batch.prefill(toks[s:min(ctx, s + eng.max_tokens)], s, 0))

        def batch(r, kind):
            return Batch.build(toks[ctx:ctx + r], list(range(ctx, ctx + r)), [0] * r,
                               logits_rows=list(range(r)), n_decode=r if kind == "decode" else 0)
        kinds = ("decode", "prompt") if as_prompt else ("decode",)
        best: dict[tuple, float] = {}
        for _ in range(rounds):
            for kind in kinds:
                for r in rows:
                    b = batch(r, kind)
                    eng.forward(b)
                    ts = []
                    for _ in range(8):
                        t = time.perf_counter()
                        eng.forward(b)
                        ts.append(time.perf_counter() - t)
                    best[kind, r] = min(best.get((kind, r), float("inf")), statistics.median(ts))
        split = {}
        for kind in kinds:
            for r in sorted({1, 4, 16} & set(rows)):
                eng.table.reset_stats()
                eng.sample_every = 1
                b = batch(r, kind)
                for _ in range(10):
                    eng.forward(b)
                eng.sample_every = 0
                groups, attn = Counter(), Counter()
                for s in eng.table.slot_stats():
                    groups[op_group(s["kernel"])] += s["seconds"] / 10
                    if op_group(s["kernel"]) == "attention":
                        attn[s["kernel"].split("/")[0]] += s["seconds"]
                split[kind, r] = {g: groups[g] * 1e3 for g in ("attention", "matmul", "other")}
                # the attention op that took the time (the other one is called with no rows)
                split[kind, r]["attention_op"] = attn.most_common(1)[0][0] if attn else None
    finally:
        eng.close()
    one = best["decode", min(rows)]
    return {"rows": [{"as": kind, "rows": r, "ms": best[kind, r] * 1e3,
                      "ratio": best[kind, r] / one, "thread_ms": split.get((kind, r))}
                     for kind in kinds for r in rows],
            "isa": eng.isa.level, "attn_type": eng.attn_type, "kv_type": kv_type}


def table(res: dict) -> list[str]:
    """Markdown rows; the ratio is to a 1-row decode step."""
    out = ["| rows as | rows | step ms | / 1 decode row | attention thread-ms | matmul thread-ms "
           "| other |", "|---|---|---|---|---|---|---|"]
    for row in res["rows"]:
        s = row["thread_ms"]
        parts = [f"{s[g]:.1f}" for g in ("attention", "matmul", "other")] if s else ["", "", ""]
        out.append(f"| {row['as']} | {row['rows']} | {row['ms']:.2f} | {row['ratio']:.2f}x | "
                   + " | ".join(parts) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=str(DEFAULT_GGUF))
    ap.add_argument("--ctx", type=int, default=800, help="positions already in the cache")
    ap.add_argument("--rows", default="1,2,3,4,5,8,9,12,16", help="comma list of step rows")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--as-prompt", action="store_true",
                    help="also the same rows as prompt rows (the prompt attention kernel)")
    ap.add_argument("--kv-type", default="f32",
                    help="KV cache type(s), a comma list measured in turn (f32, f16, bf16, auto)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    rows = sorted({int(x) for x in a.rows.split(",")})
    if not rows or rows[0] < 1:
        ap.error("--rows: positive row counts")
    out = []
    for kv in a.kv_type.split(","):
        res = measure(a.gguf, a.ctx, rows, a.threads, a.rounds, a.as_prompt, kv)
        res.update(date=time.strftime("%Y-%m-%d %H:%M"), gguf=a.gguf, ctx=a.ctx,
                   threads=a.threads)
        print(f"# {Path(a.gguf).name}, ctx {a.ctx}, {a.threads} threads, {res['isa']}, "
              f"KV cache {res['kv_type']}, attention {res['attn_type']}")
        print("\n".join(table(res)))
        out.append(res)
    if a.json:
        Path(a.json).write_text(json.dumps(out[0] if len(out) == 1 else out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
