"""Numerical agreement with the f32 reference: Reame's two matmul paths beside llama.cpp.

    python -m bench.accuracy [--llama-python PATH] [--only LABEL] [--json PATH]
                             [--markdown docs/benchmarks.md]

For every quantised model of the tests (the tiny llama / qwen2 / qwen3 synthetic shapes in every
quantised mix, random weights, 256 random tokens) and stories260K requantised to the legacy
types (a trained model on 256 tokens of its own text), the logits at every position from:
- the numpy reference engine in float32 (weights dequantised by gguf): the oracle;
- Reame's JIT with `--act-type q8` (activations rounded to 8 bits, integer dot products: the
  default, llama.cpp's numerics) and `--act-type f32` (float activations), both with f32
  attention; where the CPU has AMX-BF16, also `--act-type q8 --attn-type bf16` (prompt attention
  on AMX-BF16 tiles): the default there (`--attn-type auto`);
- llama.cpp through llama-cpp-python on the same file (when it imports here, or in
  `--llama-python` / $REAME_LLAMA_PYTHON), f32 KV cache, all 256 positions in one batch.
Per engine and file: the share of positions whose top-1 token is the reference's, and the
minimum cosine similarity of the logits. Results as JSON (default bench/results/accuracy.json)
and a Markdown table in docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.engine import REPO, bench_dir, llama_python, write_markdown

N_POS = 256
SHAPES = ("tiny-llama", "tiny-qwen2", "tiny-qwen3")
STORIES_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
MARKS = ("<!-- bench.accuracy:begin -->", "<!-- bench.accuracy:end -->")
ENGINES = ("reame q8", "reame f32", "reame q8 bf16-attn", "llama.cpp")
BF16 = "reame q8 bf16-attn"        # `--attn-type bf16`: the default on CPUs with AMX-BF16


def models(where: Path, only: str | None = None) -> list[tuple[str, Path, list[int]]]:
    """(label, file, tokens) of every model measured (only: those whose label contains it)."""
    from bench.synth import MIXES, requantize, shared_dir, synth_model
    from reame.model import load_model
    out = []
    for shape in SHAPES:
        for mix in MIXES:
            if mix in ("F32", "F16", "BF16") or (only and only not in f"{shape} {mix}"):
                continue
            path = synth_model(where, shape, mix)
            n_vocab = load_model(path).config.n_vocab
            toks = np.random.default_rng(7).integers(0, n_vocab, N_POS)
            out.append((f"{shape} {mix}", path, [int(t) for t in toks]))
    stories = shared_dir() / "models" / "stories260K.gguf"
    expected = shared_dir() / "testdata" / "stories260K.expected.json"
    if only and "stories260K" not in only:
        pass
    elif stories.exists() and expected.exists():
        cases = json.loads(expected.read_text())["cases"]
        text = [t for c in cases for t in c["prompt_tokens"] + c["greedy_tokens"]][:N_POS]
        for qtype in STORIES_TYPES:
            if only and only not in f"stories260K {qtype}":
                continue
            dst = where / f"stories260K-{qtype}.gguf"
            if not dst.exists():
                requantize(stories, dst, qtype)
            out.append((f"stories260K {qtype}", dst, text))
    else:
        print(f"(stories260K not found under {shared_dir()}: synthetic models only)", file=sys.stderr)
    return out


def reame_logits(path: Path, toks: list[int], threads: int,
                 bf16: bool = False) -> dict[str, np.ndarray]:
    from reame.batch import Batch
    from reame.engines import create_engine
    from reame.model import load_model
    model = load_model(path)
    out = {}
    runs = [("reference", "reference", "f32"), ("reame q8", "jit", "q8"),
            ("reame f32", "jit", "f32")] + ([(BF16, "jit", "q8")] if bf16 else [])
    for label, engine, act in runs:
        if engine == "jit":
            from reame.jit.engine import JITEngine
            eng = JITEngine(model, n_ctx=N_POS, max_seqs=1, threads=threads,
                            int_dot=act == "q8", max_logits=N_POS,
                            attn_type="bf16" if label == BF16 else "f32")
            assert eng.attn_type == ("bf16" if label == BF16 else "f32")
        else:
            eng = create_engine(model, engine, n_ctx=N_POS, max_seqs=1, act_type=act)
        out[label] = eng.forward(Batch.prefill(toks, 0, 0, all_logits=True))
        getattr(eng, "close", lambda: None)()
    return out


def worker_llama(jobs: list[dict], threads: int) -> None:
    """In llama-cpp-python's interpreter: all-position logits of each job, saved as .npy."""
    from llama_cpp import Llama
    for job in jobs:
        llm = Llama(model_path=job["model"], n_ctx=N_POS, n_batch=N_POS, n_ubatch=N_POS,
                    logits_all=True, type_k=0, type_v=0, flash_attn=False, verbose=False,
                    n_threads=threads, n_threads_batch=threads)
        llm.eval(job["tokens"])
        np.save(job["out"], np.asarray(llm.scores[:len(job["tokens"])], dtype=np.float32))
        del llm


def llama_logits(python: str, jobs: list[dict], threads: int) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
    cmd = [python, "-m", "bench.accuracy", "--worker", f.name, "--threads", str(threads)]
    r = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode != 0:
        raise RuntimeError(f"llama.cpp worker failed:\n{r.stderr[-3000:]}")


def agreement(ref: np.ndarray, got: np.ndarray) -> dict:
    cos = (ref * got).sum(-1) / np.linalg.norm(ref, axis=-1) / np.linalg.norm(got, axis=-1)
    return {"top1": float((ref.argmax(-1) == got.argmax(-1)).mean()),
            "min_cos": float(cos.min())}


def markdown(rows: list[dict], when: str, have_llama: bool) -> str:
    engines = [e for e in ENGINES if (have_llama or e != "llama.cpp")
               and (e != BF16 or any(BF16 in r for r in rows))]
    head = " | ".join(f"{e} top-1 / min cosine" for e in engines)
    lines = [f"Measured {when} by `python -m bench.accuracy`: the share of {N_POS} positions "
             "whose top-1 token is the f32 reference engine's, and the lowest cosine similarity "
             "of the logits. `reame q8` is `--act-type q8 --attn-type f32` (8-bit activations, "
             "integer dot products, as llama.cpp; f32 attention: the default on CPUs without "
             "AMX-BF16); `reame f32` is `--act-type f32 --attn-type f32`"
             + ("; `reame q8 bf16-attn` is `--act-type q8 --attn-type bf16` (prompt attention "
                "on AMX-BF16 tiles: the default on CPUs with AMX-BF16, this one)"
                if any(BF16 in r for r in rows) else "")
             + ".", "",
             f"| model | {head} |", "|---|" + "---|" * len(engines)]
    for r in rows:
        cells = []
        for e in engines:
            a = r.get(e)
            cells.append("-" if a is None else f"{a['top1'] * 100:.1f}% / {a['min_cos']:.5f}")
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    summary = []
    for e in engines:
        vals = [r[e]["top1"] for r in rows if r.get(e)]
        if vals:
            summary.append(f"{e}: {min(vals) * 100:.1f}-{max(vals) * 100:.1f}% "
                           f"(mean {np.mean(vals) * 100:.1f}%)")
    lines += ["", "Top-1 agreement over all files: " + "; ".join(summary) + "."]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--llama-python", default=None, help="a python that can import llama_cpp")
    p.add_argument("--json", default=str(REPO / "bench" / "results" / "accuracy.json"))
    p.add_argument("--markdown", default=str(REPO / "docs" / "benchmarks.md"))
    p.add_argument("--only", default=None, help="only the models whose label contains this")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker_llama(json.loads(Path(a.worker).read_text()), a.threads)
        return 0
    where = bench_dir() / "accuracy"
    where.mkdir(parents=True, exist_ok=True)
    todo = models(where, a.only)
    py = llama_python(a)
    if py is None:
        print("(llama-cpp-python not found: Reame only; see --llama-python)", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="reame-accuracy-"))
    jobs = [{"model": str(path), "tokens": toks, "out": str(tmp / f"{i}.npy")}
            for i, (_, path, toks) in enumerate(todo)]
    if py:
        llama_logits(py, jobs, a.threads)
    from reame.codegen.isa import detect
    from reame.jit.select import bf16_attention
    bf16 = bf16_attention(detect())             # the default's attention here: measure it too
    rows = []
    for (label, path, toks), job in zip(todo, jobs):
        got = reame_logits(path, toks, a.threads, bf16)
        ref = got.pop("reference")
        row = {"model": label, "file": path.name}
        for name, logits in got.items():
            row[name] = agreement(ref, logits)
        if py:
            row["llama.cpp"] = agreement(ref, np.load(job["out"]))
        rows.append(row)
        print(label, {k: v for k, v in row.items() if k in ENGINES}, flush=True)
    when = time.strftime("%Y-%m-%d")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"date": when, "n_positions": N_POS, "rows": rows}, indent=2))
    table = markdown(rows, when, py is not None)
    print("\n" + table)
    if a.markdown:
        write_markdown(Path(a.markdown), table, "Accuracy (bench/accuracy.py)", MARKS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
