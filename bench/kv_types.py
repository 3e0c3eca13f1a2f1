"""What the KV cache type costs a whole forward pass: a prompt in chunks, then decode steps at
its end, each type side by side in one run.

    python -m bench.kv_types [--gguf PATH] [--kv-types f32,bf16] [--prompt 2048] [--chunk 512]
                             [--decode 32] [--threads 2] [--rounds 2] [--json PATH]

The JIT engine as the server runs it (Q8A activations, attn_type auto), one sequence: the
prompt's --prompt random tokens in --chunk-token steps, timed whole, then --decode one-token
steps at its end (their median). Rounds alternate the types (ABAB: the machine is shared and
noisy) and each type's least time over the rounds is reported, with its ratio to the first
type's. `bf16` is kept in the layout this CPU's bf16 attention reads (the AMX tile layout, or
the pair layout with AVX512_BF16: reame/jit/select.py bf16_cache_layout); the table names it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GGUF = REPO.parent / "shared" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run_once(model, kv_type: str, prompt: list[int], chunk: int, decode: int,
             threads: int) -> dict:
    from reame.batch import Batch
    from reame.engines import create_engine

    n = len(prompt)
    eng = create_engine(model, "jit", n_ctx=n + decode + 1, max_seqs=1, threads=threads,
                        kv_type=kv_type)
    try:
        t0 = time.perf_counter()
        for s in range(0, n, chunk):
            eng.forward(Batch.prefill(prompt[s:s + chunk], s, 0))
        prefill = time.perf_counter() - t0
        steps = []
        for j in range(decode):
            t0 = time.perf_counter()
            eng.forward(Batch.decode([prompt[j]], [n + j], [0]))
            steps.append(time.perf_counter() - t0)
        return {"layout": eng.kv.kv_type, "prefill_s": prefill,
                "decode_s": statistics.median(steps)}
    finally:
        eng.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", default=str(DEFAULT_GGUF))
    ap.add_argument("--kv-types", default="f32,bf16", help="comma list (the first: the base)")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import numpy as np

    from reame.codegen.isa import detect
    from reame.model import load_model

    model = load_model(args.gguf)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, args.prompt)]
    types = args.kv_types.split(",")
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for kv in types:
            r = run_once(model, kv, prompt, args.chunk, args.decode, args.threads)
            b = best.setdefault(kv, r)
            b["prefill_s"] = min(b["prefill_s"], r["prefill_s"])
            b["decode_s"] = min(b["decode_s"], r["decode_s"])
    base = best[types[0]]
    print(f"# {Path(args.gguf).name}, {args.prompt} prompt tokens in {args.chunk}-token chunks, "
          f"{args.decode} decode steps after them, {args.threads} threads, {detect().level}, "
          f"least of {args.rounds} alternating rounds")
    print("| --kv-type | layout | prompt s | vs first | decode step ms | vs first |")
    print("|---|---|---|---|---|---|")
    for kv in types:
        r = best[kv]
        print(f"| {kv} | {r['layout']} | {r['prefill_s']:.3f} | "
              f"{base['prefill_s'] / r['prefill_s']:.2f}x | {r['decode_s'] * 1e3:.2f} | "
              f"{base['decode_s'] / r['decode_s']:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"gguf": Path(args.gguf).name, "prompt": args.prompt, "chunk": args.chunk,
             "decode": args.decode, "threads": args.threads, "level": detect().level,
             "results": best}, indent=1))


if __name__ == "__main__":
    main()
