"""End-to-end engine benchmark: Reame's JIT engine beside llama.cpp on the same GGUF and threads.

    python -m bench.engine [--models qwen2-0.5b:Q8_0,tinyllama-1.1b:Q4_K_M] [--threads 2]
                           [--prompt 512] [--gen 128] [--batches 1,2,4,8,16] [--rounds 2]
                           [--llama-python PATH | --llama-bench PATH]
                           [--llama-batched-bench PATH] [--json PATH]
                           [--markdown docs/benchmarks.md]

Per model (a synthetic GGUF from bench/synth.py, written once and cached):
- Reame in fresh processes: cold start (empty kernel cache) and warm start (the cache filled by
  the cold run), prefill tok/s of a `--prompt`-token prompt, decode tok/s over `--gen` tokens,
  aggregate decode tok/s at each batch size and from them the cost of a k-token step relative
  to a 1-token step (k / aggregate(k) over 1 / aggregate(1): what batching and speculation's
  verify steps pay), the fraction of the streaming-read roofline decode reaches (the weight
  bytes a token reads x decode tok/s over the read_bw kernel's bandwidth on the same threads,
  measured in the same worker), the share of a decode step's thread-time spent
  outside kernels (Python, ctypes, launch and waits between ops: 1 - the kernel time summed over
  threads, sampled by the dispatch table, / (threads x wall time)), and peak RSS;
- llama.cpp through llama-cpp-python (in this interpreter if it imports, else in
  `--llama-python` / $REAME_LLAMA_PYTHON), or else through a llama-bench executable
  (`--llama-bench` / $REAME_LLAMA_BENCH): prefill and decode tok/s on the same file, prompt
  and thread count; with llama-batched-bench (`--llama-batched-bench` / $REAME_LLAMA_BATCHED_BENCH,
  or beside the llama-bench executable) its aggregate decode at the same batch sizes
  (`-npp 128 -ntg N -npl 1,2,...`), hence its k-token step costs beside Reame's.
Measurements alternate between the two engines for `--rounds` rounds and keep each one's best,
because this machine is shared and noisy; ratios are computed within one run. Before timing,
each Reame worker checks its first-step logits against the numpy reference engine.
Results: JSON (default bench/results/engine.json) and a Markdown table written into
docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = "qwen2-0.5b:Q8_0,tinyllama-1.1b:Q4_K_M"
MARK_BEGIN, MARK_END = "<!-- bench.engine:begin -->", "<!-- bench.engine:end -->"


def bench_dir() -> Path:
    d = Path(os.environ.get("REAME_BENCH_DIR") or Path.home() / ".cache" / "reame" / "bench")
    d.mkdir(parents=True, exist_ok=True)
    return d


def prompt_tokens(n_vocab: int, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(100, n_vocab - 1, n)]


# ---------------------------------------------------------------------------------- workers
def worker_reame(a) -> dict:
    t0 = time.perf_counter()
    from reame.batch import Batch
    from reame.jit.engine import JITEngine
    from reame.model import load_model

    model = load_model(a.model)
    t_load = time.perf_counter()
    n_ctx = a.prompt + a.gen + 64          # + the steps of the out-of-kernel measurement
    max_seqs = max(a.batches)
    eng = JITEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, threads=a.threads,
                    int_dot=a.act_type == "q8")
    t_ready = time.perf_counter()
    c = model.config
    toks = prompt_tokens(c.n_vocab, a.prompt)
    out = {"engine": "reame", "threads": eng.threads, "load_s": t_load - t0,
           "build_s": t_ready - t_load, "start_s": t_ready - t0, "kernels": len(eng.kernels),
           "isa": eng.isa.level, "cpu": eng.isa.describe().get("model", ""),
           "kv_bytes": eng.kv.nbytes,
           "file_bytes": os.path.getsize(a.model)}
    if a.validate:
        from reame.reference import ReferenceEngine
        ref = ReferenceEngine(model, n_ctx=64, max_seqs=1)
        want = ref.forward(Batch.prefill(toks[:8], 0, 0))[0]
        del ref
        got = eng.forward(Batch.prefill(toks[:8], 0, 0))[0]
        cos = float(want @ got / np.linalg.norm(want) / np.linalg.norm(got))
        out["validate_cos"] = cos
        if cos < 0.999:
            raise SystemExit(f"validation failed: cosine {cos:.6f} between JIT and reference")

    # prefill: the prompt in chunks of the engine's step size, then decode greedily
    def prefill(slot, tokens):
        logits = None
        for s in range(0, len(tokens), eng.max_tokens):
            logits = eng.forward(Batch.prefill(tokens[s:s + eng.max_tokens], s, slot))
        return logits

    best_pf = best_dec = 0.0
    for _ in range(a.rounds):
        t = time.perf_counter()
        logits = prefill(0, toks)
        best_pf = max(best_pf, len(toks) / (time.perf_counter() - t))
        tok, pos = int(logits[0].argmax()), len(toks)
        t = time.perf_counter()
        for _ in range(a.gen):
            logits = eng.forward(Batch.decode([tok], [pos], [0]))
            tok, pos = int(logits[0].argmax()), pos + 1
        best_dec = max(best_dec, a.gen / (time.perf_counter() - t))
    out["prefill_tps"], out["decode_tps"] = best_pf, best_dec

    # share of a decode step outside kernels (thread 0's kernel time sampled on every step)
    eng.table.reset_stats()
    eng.sample_every = 1
    n_steps, wall = 32, 0.0
    for _ in range(n_steps):
        t = time.perf_counter()
        logits = eng.forward(Batch.decode([tok], [pos], [0]))
        wall += time.perf_counter() - t
        tok, pos = int(logits[0].argmax()), pos + 1
    eng.sample_every = 0
    in_kernels = sum(s["seconds"] for s in eng.table.slot_stats() if s["slot"].endswith("@1"))
    out["decode_step_ms"] = wall / n_steps * 1e3
    # thread-time of the step not spent inside kernels: Python, ctypes, launch, waits
    out["out_of_kernel_share"] = max(0.0, 1.0 - in_kernels / (wall * eng.threads))

    # aggregate decode throughput at each batch size (short prompts, then B tokens a step)
    agg = {}
    for B in a.batches:
        short = toks[:128]
        for s in range(B):
            prefill(s, short)
        cur = [int(x) for x in prompt_tokens(c.n_vocab, B, seed=B)]
        agg[str(B)] = decode_rate(eng, cur, len(short), max(8, a.gen // 4))
    out["batch_decode_tps"] = agg
    out["weight_bytes_per_token"] = decode_bytes(model)
    eng.close()
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["bandwidth_GBps"] = stream_bandwidth(out["threads"])   # (its buffer after the RSS)
    return out


def decode_bytes(model) -> int:
    """Weight bytes one decode token reads: every matrix once, the embedding table one row (all
    of it when it is also the output head), of a mixture of experts' tables the share of the
    experts a token picks (n_expert_used of n_expert)."""
    c, total = model.config, 0
    for name, t in model.tensors.items():
        if name == "token_embd.weight" and not c.tied_embeddings:
            total += t.data.nbytes // max(1, c.n_vocab)
        elif "_exps." in name:
            total += t.data.nbytes * c.n_expert_used // c.n_expert
        else:
            total += t.data.nbytes
    return total


def stream_bandwidth(nth: int, nbytes: int = 512 << 20, reps: int = 8) -> float:
    """GB/s of the read_bw kernel (a streaming read, checked against its reference) on nth
    threads: the roofline a bandwidth-bound decode step is held to."""
    from bench.kernels import Runner, measure_bandwidth
    from reame.codegen.compiler import Compiler
    from reame.codegen.isa import detect
    isa, runner = detect(), Runner(nth)
    try:
        return measure_bandwidth(isa, Compiler(isa), runner, [nth], nbytes, reps)[str(nth)]
    finally:
        runner.close()


def step_costs(agg: dict) -> dict:
    """{k: the time of a k-token step over a 1-token step}, from aggregate tok/s by batch."""
    b1 = agg.get("1")
    return {str(k): (int(k) / v) / (1 / b1) for k, v in agg.items() if v} if b1 else {}


def llama_batched_bench_binary(a) -> str | None:
    cand = a.llama_batched_bench or os.environ.get("REAME_LLAMA_BATCHED_BENCH")
    if not cand and llama_bench_binary(a):
        cand = str(Path(llama_bench_binary(a)).with_name("llama-batched-bench"))
    return cand if cand and os.access(cand, os.X_OK) else None


def run_llama_batched(binary: str, model: Path, a) -> dict:
    """llama.cpp's aggregate decode tok/s ({batch: speed_tg}) at a's batch sizes, after prompts
    of 128 tokens, as Reame's worker measures its own."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(binary).parent)}
    gen = max(8, a.gen // 4)
    r = subprocess.run([binary, "-m", str(model), "-c", str((128 + gen) * max(a.batches)),
                        "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", str(gen),
                        "-npl", ",".join(map(str, a.batches)), "-t", str(a.threads),
                        "--output-format", "jsonl"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-batched-bench failed:\n{r.stderr[-3000:]}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return {str(x["pl"]): x["speed_tg"] for x in rows}


def worker_llama(a) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads,
                n_ctx=a.prompt + a.gen + 16, n_batch=512, n_ubatch=512, verbose=False)
    t_ready = time.perf_counter()
    toks = prompt_tokens(llm.n_vocab(), a.prompt)
    n_vocab = llm.n_vocab()

    def last_logits():
        # llama-cpp-python keeps no logits without logits_all: read the context's last row
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
    best_pf = best_dec = 0.0
    for _ in range(a.rounds):
        llm.reset()
        t = time.perf_counter()
        llm.eval(toks)
        best_pf = max(best_pf, len(toks) / (time.perf_counter() - t))
        tok = int(np.argmax(last_logits()))
        t = time.perf_counter()
        for _ in range(a.gen):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
        best_dec = max(best_dec, a.gen / (time.perf_counter() - t))
    return {"engine": "llama.cpp", "version": llama_cpp.__version__, "threads": a.threads,
            "start_s": t_ready - t0, "prefill_tps": best_pf, "decode_tps": best_dec,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


# ---------------------------------------------------------------------------------- driver
def decode_rate(eng, tokens: list[int], position: int, steps: int) -> float:
    """Aggregate tok/s of len(tokens) sequences (slots 0..B-1, filled up to `position`)
    decoding `steps` steps, each token the argmax of its row (sampled in Python)."""
    from reame.batch import Batch
    B = len(tokens)
    cur, pos = list(tokens), [position] * B
    t = time.perf_counter()
    for _ in range(steps):
        logits = eng.forward(Batch.decode(cur, pos, list(range(B))))
        cur = [int(r.argmax()) for r in logits]
        pos = [p + 1 for p in pos]
    return B * steps / (time.perf_counter() - t)


def run_worker(python: str, kind: str, model: Path, a, env_extra: dict | None = None,
               validate: bool = False) -> dict:
    cmd = [python, "-m", "bench.engine", "--worker", kind, "--model", str(model),
           "--threads", str(a.threads), "--prompt", str(a.prompt), "--gen", str(a.gen),
           "--rounds", "1", "--batches", ",".join(map(str, a.batches)), "--act-type", a.act_type]
    if validate:
        cmd.append("--validate")
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def llama_python(a) -> str | None:
    try:
        import llama_cpp  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    cand = a.llama_python or os.environ.get("REAME_LLAMA_PYTHON")
    if cand and subprocess.run([cand, "-c", "import llama_cpp"], capture_output=True).returncode == 0:
        return cand
    return None


def llama_bench_binary(a) -> str | None:
    """A llama-bench executable (--llama-bench / $REAME_LLAMA_BENCH), used when llama-cpp-python
    is not importable (both are llama.cpp; llama-bench is what its own figures are made with)."""
    cand = a.llama_bench or os.environ.get("REAME_LLAMA_BENCH")
    return cand if cand and os.access(cand, os.X_OK) else None


def run_llama_bench(binary: str, model: Path, a) -> dict:
    """prefill and decode tok/s of one llama-bench run (-p prompt, -n gen, -r 1) on the file."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(binary).parent)}
    t0 = time.perf_counter()
    r = subprocess.run([binary, "-m", str(model), "-p", str(a.prompt), "-n", str(a.gen),
                        "-t", str(a.threads), "-r", "1", "-o", "json"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench failed:\n{r.stderr[-3000:]}")
    rows = json.loads(r.stdout)
    pf = next(x["avg_ts"] for x in rows if x["n_prompt"] and not x["n_gen"])
    dec = next(x["avg_ts"] for x in rows if x["n_gen"] and not x["n_prompt"])
    return {"engine": "llama.cpp", "version": f"llama-bench {rows[0].get('build_commit', '?')}",
            "threads": a.threads, "start_s": time.perf_counter() - t0, "prefill_tps": pf,
            "decode_tps": dec}


def best(runs: list[dict], key: str):
    vals = [r[key] for r in runs if key in r]
    return max(vals) if vals else None


def bench_model(spec: str, a) -> dict:
    from bench.synth import synth_model
    shape, mix = spec.split(":")
    t = time.perf_counter()
    path = synth_model(bench_dir(), shape, mix)
    print(f"== {shape} {mix}: {path} ({path.stat().st_size / 2**20:.0f} MiB, "
          f"ready in {time.perf_counter() - t:.1f} s)", flush=True)
    lpy = llama_python(a)
    lbench = None if lpy else llama_bench_binary(a)
    cache = tempfile.mkdtemp(prefix="reame-bench-cache-")
    env = {"REAME_CACHE_DIR": cache}
    cold = run_worker(sys.executable, "reame", path, a, env, validate=not a.no_validate)
    print(f"   reame cold start {cold['start_s']:.2f} s (kernels built {cold['build_s']:.2f} s)",
          flush=True)
    reame_runs, llama_runs, batched_runs = [cold], [], []
    lbatched = llama_batched_bench_binary(a)
    for r in range(a.rounds):
        reame_runs.append(run_worker(sys.executable, "reame", path, a, env))
        print(f"   round {r + 1}: reame prefill {reame_runs[-1]['prefill_tps']:.1f} decode "
              f"{reame_runs[-1]['decode_tps']:.1f} tok/s", flush=True)
        if lpy or lbench:
            llama_runs.append(run_worker(lpy, "llama", path, a) if lpy
                              else run_llama_bench(lbench, path, a))
            print(f"            llama.cpp prefill {llama_runs[-1]['prefill_tps']:.1f} decode "
                  f"{llama_runs[-1]['decode_tps']:.1f} tok/s", flush=True)
        if lbatched:
            batched_runs.append(run_llama_batched(lbatched, path, a))
            print("            llama.cpp batched decode " + ", ".join(
                f"{k}: {v:.1f}" for k, v in batched_runs[-1].items()) + " tok/s", flush=True)
    warm = reame_runs[1:]
    res = {"model": shape, "mix": mix, "file": str(path), "file_bytes": path.stat().st_size,
           "threads": cold["threads"], "isa": cold["isa"], "cpu": cold.get("cpu", ""),
           "prompt": a.prompt, "gen": a.gen,
           "act_type": a.act_type, "reame": {
               "prefill_tps": best(reame_runs, "prefill_tps"),
               "decode_tps": best(reame_runs, "decode_tps"),
               "batch_decode_tps": {B: max(r["batch_decode_tps"][B] for r in reame_runs)
                                    for B in reame_runs[0]["batch_decode_tps"]},
               "out_of_kernel_share": min(r["out_of_kernel_share"] for r in reame_runs),
               "decode_step_ms": min(r["decode_step_ms"] for r in reame_runs),
               "cold_start_s": cold["start_s"],
               "warm_start_s": min(r["start_s"] for r in warm) if warm else None,
               "kernels": cold["kernels"],
               # the cold run also holds the reference engine's f32 weights (validation)
               "peak_rss_bytes": max(r["peak_rss_bytes"] for r in (warm or reame_runs)),
               "kv_bytes": cold["kv_bytes"],
               "weight_bytes_per_token": cold["weight_bytes_per_token"],
               "bandwidth_GBps": max(r["bandwidth_GBps"] for r in reame_runs),
               "validate_cos": cold.get("validate_cos")},
           "llama.cpp": None}
    if llama_runs:
        res["llama.cpp"] = {"version": llama_runs[0]["version"],
                            "prefill_tps": best(llama_runs, "prefill_tps"),
                            "decode_tps": best(llama_runs, "decode_tps"),
                            "start_s": min(r["start_s"] for r in llama_runs)}
    rm = res["reame"]
    agg = rm["batch_decode_tps"]
    b1 = agg.get("1")
    rm["batch_scaling"] = {B: v / b1 for B, v in agg.items()} if b1 else {}
    rm["step_cost"] = step_costs(agg)
    rm["roofline"] = rm["decode_tps"] * rm["weight_bytes_per_token"] / (rm["bandwidth_GBps"] * 1e9)
    rm["rss_budget_bytes"] = res["file_bytes"] + rm["kv_bytes"] + 300 * 2**20
    if batched_runs:
        res["llama.cpp"] = res["llama.cpp"] or {"version": "llama-batched-bench"}
        res["llama.cpp"]["batch_decode_tps"] = {k: max(r[k] for r in batched_runs)
                                                for k in batched_runs[0]}
        res["llama.cpp"]["step_cost"] = step_costs(res["llama.cpp"]["batch_decode_tps"])
    if res["llama.cpp"] and "prefill_tps" in res["llama.cpp"]:
        lc = res["llama.cpp"]
        res["ratio"] = {"prefill": rm["prefill_tps"] / lc["prefill_tps"],
                        "decode": rm["decode_tps"] / lc["decode_tps"]}
    return res


def markdown(results: list[dict], when: str) -> str:
    act = results[0].get("act_type", "q8")
    lines = [f"Measured {when} by `python -m bench.engine"
             f"{' --act-type ' + act if act != 'q8' else ''}` on this machine"
             + (f", a {results[0]['cpu']}" if results[0].get("cpu") else "") + " "
             f"({results[0]['threads']} threads, ISA level {results[0]['isa']}, Reame "
             f"--act-type {act}); prompt "
             f"{results[0]['prompt']} tokens, decode {results[0]['gen']} tokens, best of the "
             "rounds; llama.cpp (" + ", ".join(sorted({r["llama.cpp"]["version"] for r in results
                                                       if r["llama.cpp"]}) or ["not run"])
             + ") on the same file and threads.", "",
             "| model | Reame prefill tok/s | llama.cpp prefill | ratio | Reame decode tok/s | "
             "llama.cpp decode | ratio | decode, share of the read roofline | "
             "out-of-kernel share | cold / warm start s | peak RSS MiB (budget) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rm, lc = r["reame"], r["llama.cpp"] or {}
        agg = rm["batch_decode_tps"]
        f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        lines.append(
            f"| {r['model']} {r['mix']} ({r['file_bytes'] / 2**20:.0f} MiB) | "
            f"{f(rm['prefill_tps'])} | {f(lc.get('prefill_tps'))} | "
            f"{f(r.get('ratio', {}).get('prefill'), 2)} | {f(rm['decode_tps'])} | "
            f"{f(lc.get('decode_tps'))} | {f(r.get('ratio', {}).get('decode'), 2)} | "
            f"{rm['roofline'] * 100:.0f}% of {rm['bandwidth_GBps']:.1f} GB/s | "
            f"{rm['out_of_kernel_share'] * 100:.1f}% | "
            f"{f(rm['cold_start_s'], 2)} / {f(rm['warm_start_s'], 2)} | "
            f"{rm['peak_rss_bytes'] / 2**20:.0f} ({rm['rss_budget_bytes'] / 2**20:.0f}) |")
    return "\n".join(lines + [""] + step_table(results))


def step_table(results: list[dict]) -> list[str]:
    """Multi-token steps: aggregate decode tok/s at each batch and the time of a k-token step
    over a 1-token step (what batching and speculation's verify steps pay), Reame beside
    llama.cpp's batched-bench."""
    ks = sorted({int(k) for r in results for k in r["reame"]["batch_decode_tps"]})
    lines = ["Multi-token steps (k sequences decoding, 128-token prompts): aggregate tok/s, and in "
             "brackets the time of a k-token step over a 1-token step.", "",
             "| model | engine | " + " | ".join(f"k = {k}" for k in ks) + " |",
             "|---|---|" + "---|" * len(ks)]
    for r in results:
        for name, side in (("Reame", r["reame"]), ("llama.cpp", r["llama.cpp"] or {})):
            agg, cost = side.get("batch_decode_tps"), side.get("step_cost", {})
            if not agg:
                continue
            cells = [f"{agg[str(k)]:.1f} ({cost.get(str(k), 0):.2f}x)" if str(k) in agg else "-"
                     for k in ks]
            lines.append(f"| {r['model']} {r['mix']} | {name} | " + " | ".join(cells) + " |")
    return lines


def write_markdown(path: Path, table: str, title: str = "Engine (bench/engine.py)",
                   marks: tuple[str, str] = (MARK_BEGIN, MARK_END)) -> None:
    """Put `## title` and the table between the marks in path (appended the first time)."""
    begin, end = marks
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{begin}\n## {title}\n\n{table}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=DEFAULT_MODELS, help="shape:mix,... (bench/synth.py names)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--batches", default="1,2,4,8,16")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--llama-python", default=None, help="a python that can import llama_cpp")
    p.add_argument("--llama-batched-bench", default=None,
                   help="llama.cpp's llama-batched-bench (default: $REAME_LLAMA_BATCHED_BENCH, or "
                        "beside --llama-bench)")
    p.add_argument("--llama-bench", default=None,
                   help="a llama-bench executable, used when llama_cpp is not importable")
    p.add_argument("--json", default=str(REPO / "bench" / "results" / "engine.json"))
    p.add_argument("--markdown", default=str(REPO / "docs" / "benchmarks.md"))
    p.add_argument("--no-validate", action="store_true")
    p.add_argument("--act-type", choices=("q8", "f32"), default="q8",
                   help="Reame's activations for quantised weights (reame --act-type)")
    p.add_argument("--worker", choices=("reame", "llama"), help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--validate", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.batches = [int(b) for b in a.batches.split(",")]
    if a.worker:
        if a.threads is None:
            from reame.codegen.runtime import default_threads
            a.threads = default_threads()
        out = worker_reame(a) if a.worker == "reame" else worker_llama(a)
        print(json.dumps(out))
        return 0
    if a.threads is None:
        from reame.codegen.runtime import default_threads
        a.threads = default_threads()
    results = [bench_model(m, a) for m in a.models.split(",")]
    when = time.strftime("%Y-%m-%d")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"date": when, "results": results}, indent=2))
    table = markdown(results, when)
    print("\n" + table)
    if a.markdown:
        write_markdown(Path(a.markdown), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
