"""How much faster could an adaptive runtime make this machine? The static alternatives it can
choose among, timed offline against the defaults (`--adaptive off`).

    python -m bench.adaptive_headroom [--model qwen2-0.5b:Q8_0] [--threads 2]
                                      [--levels 8,16,32,64] [--context 300]
                                      [--document 1400] [--chunks 128,256,512]
                                      [--classes 4] [--pairs 6] [--json PATH]

The adaptive runtime (docs/adaptive.md) moves three things: the running batch, the kernel
variant of each hot class of op sites, and the scheduler's prompt chunk. Each is measured here
in-process on the JIT engine, one lever at a time, on the step shapes of bench/adaptive.py's
phases, so the gain it could find at best is known before a long serving run is spent looking:

- **batch** (chat: decode-bound): the forward time per decode token at each `--levels` batch,
  sequences at position `--context`, the median of 9 rounds over the levels; against the
  default batch (16);
- **prompt chunk** (documents: prefill-bound): a `--document`-token prompt computed in chunks of
  each `--chunks` size, best of 3 rounds over the sizes, time per prompt token; against the
  default chunk (512);
- **kernels**: for the `--classes` hottest classes of the default decode program (batch 16) and
  of the prompt program, every candidate the online tuner would try (the op's other families and
  tiles for the same type and shape, checked numerically first), put live on the whole class
  and alternated with the default in `--pairs` pairs of steps (half as many for the prompt
  program, whose steps are long); per pair, the class's own time (its slots' sampled cycles,
  spread over the threads) saved or lost as a share of the default step's time, the median
  over pairs (a step's wall time alone scatters more than the gains sought). The best candidate of each class, summed over classes, bounds what kernel
  choice can give a step.

The per-phase bound is the product of the levers' best ratios (they act on the same steps, so
the product is optimistic). Printed as a table; JSON to --json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench.engine import bench_dir, prompt_tokens
from bench.synth import synth_model
from reame.adaptive.tuner import KernelTuner
from reame.batch import Batch
from reame.codegen.kernels import build
from reame.codegen.runtime import cycle_hz
from reame.dispatch import VariantRejected
from reame.jit.engine import JITEngine
from reame.model import load_model

DEFAULT_BATCH, DEFAULT_CHUNK = 16, 512


def decode_batch(n_vocab: int, b: int, context: int, seed: int = 0) -> Batch:
    toks = prompt_tokens(n_vocab, b, seed=seed)
    return Batch.build(toks, [context] * b, list(range(b)))


def step_time(eng, batch: Batch) -> float:
    t = time.perf_counter()
    eng.forward(batch)
    return time.perf_counter() - t


def batch_lever(eng, n_vocab, levels, context, rounds: int = 9) -> dict:
    """Rounds over the levels (one step of each per round, so that the machine's drift hits
    every level alike); the median step of each level."""
    batches = {b: decode_batch(n_vocab, b, context, seed=b) for b in levels}
    for batch in batches.values():
        eng.forward(batch)                                   # first-call costs
    times = {b: [] for b in levels}
    for _ in range(rounds):
        for b, batch in batches.items():
            times[b].append(step_time(eng, batch))
    out = {b: statistics.median(ts) for b, ts in times.items()}
    for b in levels:
        print(f"  batch {b:3d}: step {1e3 * out[b]:7.1f} ms, "
              f"{1e3 * out[b] / b:6.2f} ms per decode token", flush=True)
    return {"step_s": out, "per_token_ms": {b: 1e3 * t / b for b, t in out.items()}}


def chunk_lever(eng, n_vocab, document, chunks) -> dict:
    toks = prompt_tokens(n_vocab, document, seed=7)
    out = {c: float("inf") for c in chunks}
    for _ in range(3):                                       # rounds over the sizes: drift
        for c in chunks:                                     # hits each alike
            t = time.perf_counter()
            for s in range(0, document, c):
                eng.forward(Batch.prefill(toks[s:s + c], s, 0))
            out[c] = min(out[c], time.perf_counter() - t)
    for c in chunks:
        best = out[c]
        print(f"  chunk {c:4d}: {document}-token prompt {best:6.2f} s, "
              f"{1e3 * best / document:5.2f} ms per token", flush=True)
    return {"prompt_s": out, "per_token_ms": {c: 1e3 * t / document for c, t in out.items()}}


def kernel_lever(eng, tuner, batch: Batch, classes: int, pairs: int) -> dict:
    """The hottest classes of the program serving `batch`; each candidate's step-time ratio."""
    program = str(eng.program_of(len(batch.tokens)))
    eng.table.reset_stats()
    eng.sample_every = 1                                     # every step timed per slot
    try:
        return _kernel_lever(eng, tuner, batch, program, classes, pairs)
    finally:
        eng.sample_every = 0


def _kernel_lever(eng, tuner, batch, program, classes, pairs) -> dict:
    for _ in range(3):
        eng.forward(batch)
    hot = [c for c in tuner.hot() if c.program == program][:classes]
    total = sum(c.seconds for c in tuner.classes.values() if c.program == program) or 1.0
    hz = cycle_hz()
    out = []
    for cls in hot:
        live = eng.table.live(cls.slots[0])
        row = {"class": cls.key, "share": cls.seconds / total, "live": live.spec.label(),
               "candidates": []}
        for spec in cls.candidates:
            try:
                k = eng.kernels.get(spec) or build(spec, eng.isa)
                eng.table.verify(cls.slots[0], k)
            except (VariantRejected, ValueError, RuntimeError) as e:
                row["candidates"].append({"kernel": spec.label(), "refused": str(e)[:120]})
                continue
            ratios = []
            for i in range(pairs):
                ts, cyc = {}, {}
                for arm in ((k, live) if i % 2 else (live, k)):
                    for s in cls.slots:                      # live at the next step boundary
                        eng.table.stage(s, arm, verify=False, record=False)
                    before = float(eng.table.stats[cls.slots, 1].sum())
                    t = time.perf_counter()
                    eng.forward(batch)
                    ts[arm is k] = time.perf_counter() - t
                    cyc[arm is k] = float(eng.table.stats[cls.slots, 1].sum()) - before
                # the class's own time (its slots' cycles, over the threads) changes the step
                # by that difference; a step's wall time alone scatters more than the gain
                saved = (cyc[False] - cyc[True]) / hz / eng.threads
                ratios.append(1 - saved / ts[False])
            for s in cls.slots:
                eng.table.stage(s, live, verify=False, record=False)
            row["candidates"].append({"kernel": spec.label(),
                                      "step_ratio": statistics.median(ratios)})
        timed = [c for c in row["candidates"] if "step_ratio" in c]
        row["best"] = min(timed, key=lambda c: c["step_ratio"]) if timed else None
        best = row["best"]
        print(f"  {cls.key} ({100 * row['share']:.0f}% of the program's kernel time): "
              f"{len(timed)} candidates timed, {len(row['candidates']) - len(timed)} refused; "
              + (f"best {best['kernel']} {best['step_ratio']:.3f}x the step" if best else
                 "none"), flush=True)
        out.append(row)
    gain = sum(1 - min(1.0, r["best"]["step_ratio"]) for r in out if r["best"])
    return {"program": program, "classes": out, "step_ratio_bound": 1 - gain}


def best_setting(lever: dict, default) -> tuple:
    """The setting with the lowest time per token, and the default's time over its time."""
    pt = lever["per_token_ms"]
    best = min(pt, key=pt.get)
    return best, pt[default] / pt[best]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.adaptive_headroom",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0", help="bench/synth.py shape:mix")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="8,16,32,64")
    ap.add_argument("--context", type=int, default=300, help="decode position (chat phase)")
    ap.add_argument("--document", type=int, default=1400, help="prompt tokens (documents)")
    ap.add_argument("--chunks", default="128,256,512")
    ap.add_argument("--classes", type=int, default=4, help="hottest classes per program")
    ap.add_argument("--pairs", type=int, default=6, help="paired steps per candidate")
    ap.add_argument("--parts", default="batch,chunk,decode,prompt",
                    help="levers to measure (comma list)")
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" /
                                          "adaptive_headroom.json"))
    a = ap.parse_args(argv)
    levels = [int(x) for x in a.levels.split(",")]
    if DEFAULT_BATCH not in levels or DEFAULT_CHUNK not in [int(x) for x in a.chunks.split(",")]:
        ap.error(f"--levels must include {DEFAULT_BATCH} and --chunks {DEFAULT_CHUNK} (the "
                 "defaults the others are compared with)")
    chunks = [int(x) for x in a.chunks.split(",")]
    parts = set(a.parts.split(","))
    shape, mix = a.model.split(":")
    path = synth_model(bench_dir(), shape, mix)
    model = load_model(path)
    n_vocab = model.config.n_vocab
    eng = JITEngine(model, n_ctx=max(a.document, a.context + 1) + 16, max_seqs=max(levels),
                    threads=a.threads, max_batch_tokens=max(chunks + levels))
    try:
        tuner = KernelTuner(eng)
        batch = chunk = kdec = kpre = None
        if "batch" in parts:
            print("batch (decode steps):", flush=True)
            batch = batch_lever(eng, n_vocab, levels, a.context)
        if "chunk" in parts:
            print("prompt chunk (a document):", flush=True)
            chunk = chunk_lever(eng, n_vocab, a.document, chunks)
        if "decode" in parts:
            print(f"kernels, decode program (batch {DEFAULT_BATCH}):", flush=True)
            kdec = kernel_lever(eng, tuner, decode_batch(n_vocab, DEFAULT_BATCH, a.context),
                                a.classes, a.pairs)
        if "prompt" in parts:
            print(f"kernels, prompt program ({DEFAULT_CHUNK} tokens):", flush=True)
            toks = prompt_tokens(n_vocab, DEFAULT_CHUNK, seed=3)
            kpre = kernel_lever(eng, tuner, Batch.prefill(toks, 0, 0), a.classes,
                                max(2, a.pairs // 2))
    finally:
        eng.close()
    best_b = best_c = None
    phases = {"chat (decode)": {}, "documents (prefill)": {}}
    if batch:
        best_b, phases["chat (decode)"]["batch"] = best_setting(batch, DEFAULT_BATCH)
    if kdec:
        phases["chat (decode)"]["kernels"] = 1 / kdec["step_ratio_bound"]
    if chunk:
        best_c, phases["documents (prefill)"]["chunk"] = best_setting(chunk, DEFAULT_CHUNK)
    if kpre:
        phases["documents (prefill)"]["kernels"] = 1 / kpre["step_ratio_bound"]
    print("\n| phase | lever | best | throughput bound vs default |\n|---|---|---|---|")
    for ph, levers in phases.items():
        total = 1.0
        for lever, g in levers.items():
            best = {"batch": f"batch {best_b}", "chunk": f"chunk {best_c}",
                    "kernels": "best candidate per hot class"}[lever]
            print(f"| {ph} | {lever} | {best} | {g:.3f}x |")
            total *= g
        levers["product"] = total
        print(f"| {ph} | all (product) | | **{total:.3f}x** |")
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "model": str(path), "threads": a.threads,
           "batch": batch, "chunk": chunk, "kernels_decode": kdec, "kernels_prompt": kpre,
           "phases": phases}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
