"""Does Reame pick llama.cpp's greedy token on a given GGUF file, wherever llama.cpp is sure?

    python -m bench.llama_agree --gguf FILE --llama-server BIN [--prompt TEXT ...] [--n 24]
                                [--gap 0.25] [--act-type q8|f32] [--json PATH]

For each prompt: llama-server (`BIN`, started by bench.llama_golden.record) generates `--n`
greedy tokens and reports, per position, the gap between its two best log-probabilities; Reame's
JIT engine is then fed the prompt and llama.cpp's tokens (teacher-forced, so one disagreement
does not derail the rest) twice: as one prompt step (the prompt-chunk kernels) and token by
token (the decode kernels). A position *disagrees* when Reame's argmax is not llama.cpp's token;
it is *wrong* when it disagrees where llama.cpp's gap is at least `--gap`: quantisation and
summation order move the logits of both programs by a few hundredths (llama.cpp's AVX2 and
native builds of one IQ4_XS file differ by up to 0.12 in their gaps, and part ways at
near-ties), so near-ties may go either way, clear choices may not. Exit status 1 when any
position is wrong. Set REAME_ISA to check a lower ISA level's kernels (an AVX2-only CPU's)
beside llama.cpp's build for that level.

Issue 30 asked this of a llama-quantize'd IQ4_XS file on AVX2 (docs/benchmarks.md, "IQ4_XS
beside llama.cpp at the avx2 level").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):",
           "In a hole in the ground there lived")


def compare(logits: np.ndarray, tokens: list[int], gaps: list, threshold: float) -> dict:
    """Row j of `logits` predicts `tokens[j]` (llama.cpp's j-th generated token), whose
    top-2 gap there was `gaps[j]` (None where llama-server gave none)."""
    x = np.asarray(logits, np.float64)
    clear, disagree, wrong = 0, [], []
    for j, (tok, gap) in enumerate(zip(tokens, gaps)):
        if gap is None:
            continue
        clear += gap >= threshold
        if int(x[j].argmax()) != tok:
            # (position, llama.cpp's gap, our log-prob of its token minus our best: a
            # difference of log-probabilities is the difference of the logits)
            row = (j, round(gap, 4), round(float(x[j][tok] - x[j].max()), 4))
            disagree.append(row)
            if gap >= threshold:
                wrong.append(row)
    return {"clear": clear, "disagree": disagree, "wrong": wrong}


def reame_logits(engine, prompt: list[int], tokens: list[int], mode: str) -> np.ndarray:
    """Reame's logits at the positions that predict each of `tokens` after `prompt`."""
    from reame.batch import Batch
    if mode == "prompt":
        seq = prompt + tokens[:-1]
        rows = list(range(len(prompt) - 1, len(seq)))
        return engine.forward(Batch.build(seq, list(range(len(seq))), [0] * len(seq), rows))
    rows = [engine.forward(Batch.prefill(prompt, 0, 0))[0]]
    for j, t in enumerate(tokens[:-1]):
        rows.append(engine.forward(Batch.decode([t], [len(prompt) + j], [0]))[0])
    return np.stack(rows)


def check(engine, cases: list[dict], threshold: float, modes=("prompt", "decode")) -> list[dict]:
    """Each case: {"text", "prompt" (token ids), "tokens", "gaps"} (llama.cpp's); one result
    per case and mode."""
    out = []
    for case in cases:
        for mode in modes:
            got = compare(reame_logits(engine, case["prompt"], case["tokens"], mode),
                          case["tokens"], case["gaps"], threshold)
            out.append({"text": case["text"], "mode": mode, **got})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--prompt", action="append", help="a text prompt (default: four built-in)")
    ap.add_argument("--n", type=int, default=24, help="greedy tokens per prompt")
    ap.add_argument("--gap", type=float, default=0.25,
                    help="llama.cpp's top-2 log-prob gap from which Reame must agree")
    ap.add_argument("--act-type", choices=("q8", "f32"), default="q8")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from bench.llama_golden import record
    from reame.jit.engine import JITEngine
    from reame.model import load_model
    from reame.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(args.gguf)
    cases = []
    for text in args.prompt or PROMPTS:
        ids = [int(t) for t in tok.encode(text)]
        got = record(args.llama_server, Path(args.gguf), ids, args.n_ctx, n=args.n)
        cases.append({"text": text, "prompt": ids, "tokens": got["tokens"], "gaps": got["gaps"]})
    engine = JITEngine(load_model(args.gguf), n_ctx=args.n_ctx, max_seqs=1, threads=2,
                       max_logits=args.n + 1, int_dot=args.act_type == "q8")
    try:
        results = check(engine, cases, args.gap)
        level = engine.isa.level
    finally:
        engine.close()
    wrong = 0
    print(f"{args.gguf}: Reame at {level} ({args.act_type} activations) against {args.llama_server}, "
          f"{args.n} greedy tokens a prompt, wrong = disagrees where llama.cpp's gap >= {args.gap}")
    for r in results:
        wrong += len(r["wrong"])
        worst = max((g for _, g, _ in r["disagree"]), default=None)
        print(f"  {r['mode']:6} {r['text'][:40]!r:44} clear {r['clear']:2}  "
              f"disagree {len(r['disagree']):2} (largest llama.cpp gap among them "
              f"{worst})  wrong {r['wrong']}")
    print("wrong positions:", wrong)
    if args.json:
        args.json.write_text(json.dumps({"gguf": str(args.gguf), "server": args.llama_server,
                                         "gap": args.gap, "act_type": args.act_type,
                                         "level": level, "cases": cases, "results": results},
                                        indent=1) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
