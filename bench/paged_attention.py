"""What reading K/V through a block table costs: paged vs contiguous attention, side by side.

For each case the engine's own kernel choice (`reame.jit.select.choose`) is built for the
contiguous layout (BS = 0: one whole context per slot, the layout before the paged cache) and
for paged pools of 16-, 32- and 64-position blocks scattered at random over the pool (as in a
pool that has been running a while), validated against the numpy reference, then timed in
alternation (rounds in shuffled order) with 2 threads on caches spread over enough
"layers" that the keys come from DRAM. Cases (Qwen2.5-0.5B attention: 14 heads, 2 KV heads, 64
dims): one decode token at position ctx - 1; 8 sequences decoding at ctx - 1; a prompt chunk of
512 tokens ending at ctx.

    python -m bench.paged_attention [--ctx 2048] [--kv f32,f16] [--rounds 25]

Prints paged / contiguous time ratios (1.00 = no cost; the median over rounds of each round's
ratio) and writes
bench/results/paged_attention.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np

from bench.bench_attention import time_kernel, validate
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops.attn_decode import make_attention_case
from reame.codegen.registry import get_op
from reame.jit.select import choose

REPO = Path(__file__).resolve().parent.parent


def cases(ctx: int):
    """(name, op, n_tokens, positions, slots, number of slots)."""
    yield "decode 1 seq", "attn_decode", [ctx - 1], [0], 1
    yield "decode 8 seqs", "attn_decode", [ctx - 1] * 8, list(range(8)), 8
    yield f"prefill 512 to {ctx}", "attn_prefill", list(range(ctx - 512, ctx)), [0] * 512, 1


def layer_cases(op, spec, rng, pos, seq, slots, budget=96 << 20):
    """Argument blocks over several independent caches (~budget bytes in all)."""
    out = [make_attention_case(op, spec, rng, len(pos), seqs=slots, positions=pos, seq_ids=seq)]
    per = out[0].buffers["kc"].nbytes + out[0].buffers["vc"].nbytes
    for _ in range(max(0, budget // per - 1)):
        out.append(make_attention_case(op, spec, rng, len(pos), seqs=slots, positions=pos,
                                       seq_ids=seq))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--kv", default="f32,f16")
    ap.add_argument("--block-sizes", default="16,32,64")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "paged_attention.json"))
    a = ap.parse_args(argv)
    isa = detect()
    H, Hkv, D = 14, 2, 64
    rows = []
    print(f"# attention at {a.ctx} context, H={H} Hkv={Hkv} D={D}, {a.threads} threads, "
          f"{isa.level}; time ratio paged / contiguous, median of {a.rounds} alternating rounds")
    for kv in a.kv.split(","):
        dims = dict(H=H, Hkv=Hkv, D=D, Dv=D, C=a.ctx, kv=kv, scale=1 / math.sqrt(D))
        for name, op_name, pos, seq, slots in cases(a.ctx):
            op = get_op(op_name)
            layouts = [0] + [int(b) for b in a.block_sizes.split(",")]
            kernels, blocks, keep = {}, {}, []
            for bs in layouts:
                spec = choose(op_name, "F32", isa, len(pos), BS=bs, **dims)
                k = kernels[bs] = build(spec, isa)
                rng = np.random.default_rng(bs)
                small = spec.with_params(C=128)
                validate(op, build(small, isa), make_attention_case(
                    op, small, rng, min(len(pos), 40), seqs=2,
                    positions=[127 - i % 40 for i in range(min(len(pos), 40))],
                    seq_ids=[i % 2 for i in range(min(len(pos), 40))]))
                keep.append(layer_cases(op, k.spec, rng, pos, seq, slots))   # owns the buffers
                blocks[bs] = [c.args for c in keep[-1]]
            times = {bs: [] for bs in layouts}
            order = list(layouts)
            for r in range(a.rounds):
                random.Random(r).shuffle(order)     # no layout always runs first
                for bs in order:
                    times[bs].append(time_kernel(kernels[bs], blocks[bs], a.threads,
                                                 budget=0.08))
            base = min(times[0])
            row = {"kv": kv, "case": name, "contiguous_us": round(base * 1e6, 1),
                   "contiguous_tiles": tiles(kernels[0].spec)}
            line = f"{kv}  {name:<22} contiguous {base * 1e6:8.1f} us"
            for bs in layouts[1:]:
                # each round's ratio to the contiguous time of the same round (the machine
                # drifts between rounds), the median of those
                ratio = float(np.median(np.array(times[bs]) / np.array(times[0])))
                row[f"paged{bs}_us"] = round(min(times[bs]) * 1e6, 1)
                row[f"paged{bs}_ratio"] = round(ratio, 3)
                line += f"   BS={bs}: {ratio:5.3f}"
            rows.append(row)
            print(line, flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "ctx": a.ctx, "threads": a.threads,
           "isa": isa.level, "rounds": a.rounds, "rows": rows}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


def tiles(spec) -> str:
    keep = ("vl", "kb", "pf_loc", "rb", "bk", "nmv")
    return ",".join(f"{k}={v}" for k, v in spec.params if k in keep)


if __name__ == "__main__":
    raise SystemExit(main())
