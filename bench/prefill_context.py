"""A prompt chunk after a long cached context, one sequence alone, f32 vs bf16 (vs invariant)
attention.

What the multi-turn trace's tenth turn does without the server around it: `--new` new tokens
(one prefill step) at positions `--cached` .. `--cached + new - 1` of one sequence whose first
`--cached` positions are already in the KV cache, against the same chunk at position 0 (the
first turn). The JIT engine over the trace benchmark's model (bench/synth.py shape:mix, default
the Qwen2.5-0.5B-shaped Q8_0 file bench/trace.py serves), with each `--attn-type`; time of the
chunk's forward step, best of `--rounds`, and of that step the thread-seconds spent in each op
site's kernels (the dispatch table's per-slot timings: where the cached context's cost goes).

    python -m bench.prefill_context [--new 310] [--cached 0,2800] [--attn-type f32,bf16,invariant]
                                    [--threads 2] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.engine import bench_dir, prompt_tokens
from bench.synth import synth_model
from reame.batch import Batch
from reame.jit.engine import JITEngine
from reame.model import load_model


def op_seconds(stats: list[dict]) -> dict:
    """Thread-seconds inside the kernels per op site (`attn`, `ffn_up.weight`, ...: the slot's
    name without its layer and program), summed over layers."""
    out: dict[str, float] = {}
    for s in stats:
        if s["calls"]:
            parts = s["slot"].split("@")[0].split(".")        # blk.3.ffn_up.weight@512
            if parts[0] == "blk":
                parts = parts[2:]
            site = ".".join(parts)
            out[site] = out.get(site, 0.0) + s["seconds"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run(model, attn_type: str, new: int, cached: list[int], threads: int, rounds: int,
        chunk: int = 512) -> dict:
    n_ctx = max(cached) + new + 64
    eng = JITEngine(model, n_ctx=n_ctx, max_seqs=1, threads=threads, attn_type=attn_type,
                    max_batch_tokens=max(chunk, new))
    try:
        kinds = sorted({f"{s.kernel.spec.op}/{s.kernel.spec.family}/{s.kernel.spec.dtype}"
                        for s in eng.table.slots
                        if s.name.endswith(f".attn@{eng.buckets[-1]}")})
        toks = prompt_tokens(model.config.n_vocab, max(cached) + new, seed=1)
        out = {"attn_type": eng.attn_type, "prompt_attention": kinds, "seconds": {},
               "op_seconds": {}}
        eng.forward(Batch.prefill(toks[:new], 0, 0))        # warm-up (first-call costs)
        for c in cached:
            for s in range(0, c, chunk):                    # the cached context, in chunks
                eng.forward(Batch.prefill(toks[s:min(c, s + chunk)], s, 0))
            best = float("inf")
            eng.sample_every = 1                            # per-op timings of every step
            for _ in range(rounds):                         # the same chunk again: same work
                eng.table.reset_stats()
                t = time.perf_counter()
                eng.forward(Batch.prefill(toks[c:c + new], c, 0))
                dt = time.perf_counter() - t
                if dt < best:
                    best, ops = dt, op_seconds(eng.table.slot_stats())
            eng.sample_every = 0
            out["seconds"][c] = best
            out["op_seconds"][c] = ops
        return out
    finally:
        eng.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.prefill_context",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0", help="bench/synth.py shape:mix")
    ap.add_argument("--new", type=int, default=310, help="tokens of the timed chunk")
    ap.add_argument("--cached", default="0,2800", help="comma list of cached positions before it")
    ap.add_argument("--attn-type", default="f32,bf16", help="comma list: f32, bf16, invariant")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    shape, mix = a.model.split(":")
    path = synth_model(bench_dir(), shape, mix)
    model = load_model(path)
    cached = [int(x) for x in a.cached.split(",")]
    results = []
    for at in a.attn_type.split(","):
        r = run(model, at, a.new, cached, a.threads, a.rounds)
        results.append(r)
        secs = r["seconds"]
        base = secs[cached[0]]
        print(f"attn-type {at} (prompt attention {', '.join(r['prompt_attention'])}): "
              + ", ".join(f"{a.new} new after {c} cached {secs[c]:.3f} s"
                          + (f" ({secs[c] / base:.2f}x)" if c != cached[0] else "")
                          for c in cached), flush=True)
        for c in cached:
            ops = r["op_seconds"][c]
            top = ", ".join(f"{k} {v:.3f}" for k, v in list(ops.items())[:4])
            print(f"    after {c} cached, thread-seconds in kernels: {top}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M"), "model": str(path), "new": a.new,
             "cached": cached, "threads": a.threads, "rounds": a.rounds, "results": results},
            indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
