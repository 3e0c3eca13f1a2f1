"""Kernel benchmark: bandwidth ceiling, matrix-vector and matrix-matrix throughput of every
matmul-like op, type and variant, and compile/cache-load times.

    python -m bench.kernels [--quick] [--json PATH] [--types Q8_0,Q4_K] [--ops matmul]

1. Streaming-read bandwidth of this machine, measured in the same run: the `read_bw` kernel over
   a buffer much larger than the caches, 1 thread and all cores.
2. For every registered matmul-like op (`matmul`, and `matmul_q8a` + `quantize_q8a` when present),
   every tensor type and every variant x tile at this machine's level: the kernel is validated
   (Op.check) before it is timed, then
   - matrix-vector (n = 1) throughput in GB/s of weight bytes, 1 thread and all cores, for the
     Qwen2.5-0.5B ffn_down shape (M = 896, K = 4864), cycling through enough weight matrices
     that the working set (256 MiB, --quick 128 MiB) is far larger than the caches; shown beside
     the bandwidth and as a percentage of it;
   - matrix-matrix GFLOP/s (n = 512 tokens, --quick 128) on the same shape, beside numpy's
     matmul (OpenBLAS) on the same float32 shape, 1 thread and all cores.
3. Compile time per kernel cold (a fresh cache directory) and warm (loaded from that cache by a
   new compiler), and the time to build a whole Qwen2.5-0.5B kernel set cold and warm (the
   distinct (op, dtype, M, K) of its layers, Q8_0 and Q4_K_M mixes). Target: warm < 1 s.

Timing uses the native step runtime (codegen/runtime.py): persistent threads, one program per
measurement whose ops are the calls, with no barrier between them (one at the end of the step),
so each thread streams its own rows of every matrix back to back; the minimum over repetitions
(the machine is shared). Results: Markdown on stdout, JSON in
bench/results/kernels.json (or --json).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from reame.codegen.compiler import Compiler
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops.matmul import ALL_TYPES, random_weights
from reame.codegen.registry import ops
from reame.codegen.runtime import NativePool, Program, default_threads
from reame.codegen.spec import KernelSpec, render
from reame.tensor_types import TENSOR_TYPES

from .synth import FALLBACK

MV_SHAPE = (896, 4864)                       # Qwen2.5-0.5B ffn_down: M rows of K
QWEN05 = {"hidden": 896, "ffn": 4864, "kv": 128, "vocab": 151936}


# ---- harness ---------------------------------------------------------------------------------

class Runner:
    """Runs a list of calls of one kernel as one step of the native runtime on nth threads."""

    def __init__(self, nth_all: int):
        self.pools = {1: NativePool(1)}
        if nth_all > 1:
            self.pools[nth_all] = NativePool(nth_all)
        self.table = np.zeros(2, np.int64)          # [2 copies][1 slot]
        self.active = np.zeros(1, np.int64)

    def time(self, address: int, blocks: list[np.ndarray], nth: int, reps: int) -> float:
        """Seconds of the fastest of `reps` steps that call the kernel once per block (wall
        clock); self.cpu holds the fastest (process CPU time / nth) of the same steps: time the
        threads actually ran (another process holding a core does not count; the spin at the
        step's final barrier does, so it is conservative)."""
        self.table[:] = address
        # no barrier between the calls (one at the end of the step): each thread streams its
        # own rows of every matrix back to back - throughput, not per-op synchronisation (which
        # costs microseconds to milliseconds here when another process holds a core)
        prog = Program(self.table.ctypes.data, self.active.ctypes.data, 1,
                       [(0, b.ctypes.data, False) for b in blocks])
        pool = self.pools[nth]
        pool.run(prog.words, nth)                   # warm-up: page-in, code in the i-cache
        best = self.cpu = float("inf")
        for _ in range(reps):
            c = time.process_time()
            t = time.perf_counter()
            pool.run(prog.words, nth)
            best = min(best, time.perf_counter() - t)
            self.cpu = min(self.cpu, (time.process_time() - c) / nth)
        return best

    def close(self):
        for p in self.pools.values():
            p.close()


def _blas_threads():
    """(get, set) of the OpenBLAS thread count numpy uses, or (None, None)."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return None, None
    for lib in sorted({ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.lower()}):
        try:
            L = ctypes.CDLL(lib)
        except OSError:
            continue
        for suffix in ("scipy_openblas_%s_num_threads64_", "openblas_%s_num_threads64_",
                       "openblas_%s_num_threads"):
            if hasattr(L, suffix % "set"):
                return getattr(L, suffix % "get"), getattr(L, suffix % "set")
    return None, None


def numpy_gflops(n, M, K, nth, reps) -> float | None:
    get, set_ = _blas_threads()
    if set_ is None and nth != (os.cpu_count() or 1):
        return None
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, K)).astype(np.float32)
    W = rng.standard_normal((M, K)).astype(np.float32)
    old = get() if get else None
    if set_:
        set_(nth)
    try:
        x @ W.T
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            x @ W.T
            best = min(best, time.perf_counter() - t)
    finally:
        if set_ and old:
            set_(old)
    return 2 * n * M * K / best / 1e9


# ---- pieces ----------------------------------------------------------------------------------

def measure_bandwidth(isa, compiler, runner, nths, nbytes, reps) -> dict:
    op = ops()["read_bw"]
    spec = op.specs("F32", isa)[-1]
    k = build(spec, isa, compiler)
    ok, _ = op.check(k)
    assert ok, "read_bw disagrees with its reference"
    buf = np.ones(nbytes // 8, np.int64)
    out = np.zeros(1, np.int64)
    args = op.pack({"buf": buf, "out": out}, n=buf.size)
    res = {"kernel": spec.label(), "bytes": int(buf.nbytes)}
    for nth in nths:
        t = runner.time(k.address, [args], nth, reps)
        res[str(nth)] = buf.nbytes / t / 1e9
        res[f"cpu_{nth}"] = buf.nbytes / runner.cpu / 1e9
    return res


def dims_for(op, M, K):
    d = dict(op.example_dims)
    d.update({k: v for k, v in (("M", M), ("K", K), ("acc", 0)) if k in op.dims})
    return d


def arg_blocks(op, spec, n, weights, rng):
    """One argument block per weight matrix (the op's own random case, its "w" word swapped).
    Returns (blocks, case) - keep the case alive while the blocks are used."""
    case = op.make_case(spec, rng, n)
    base = np.array(case.args, dtype=np.int64)
    if "w" not in op.args or not weights:
        return [base], case
    wi = op.args.index("w")
    blocks = []
    for w in weights:
        b = base.copy()
        b[wi] = w.ctypes.data
        blocks.append(b)
    return blocks, case


def weight_set(dtype, M, K, total_bytes, rng):
    one = TENSOR_TYPES[dtype].row_bytes(K) * M
    count = max(2, -(-total_bytes // one))
    return [random_weights(dtype, M, K, rng) for _ in range(count)]


def matmul_like_ops() -> list:
    found = [o for o in ops().values() if "w" in o.args and {"M", "K"} <= set(o.dims)]
    order = {"matmul": 0, "matmul_q8a": 1}
    return sorted(found, key=lambda o: (order.get(o.name, 2), o.name))


# ---- model kernel set ------------------------------------------------------------------------

def model_specs(isa, mix: str) -> list[KernelSpec]:
    """The kernels a Qwen2.5-0.5B forward pass needs from the matmul path: per distinct
    (dtype, M, K, acc) one decode and one prefill variant of every matmul-like op that runs the
    type, plus get_rows, quantize_q8a and rms_norm at the model's sizes."""
    h, f, kv, vocab = QWEN05["hidden"], QWEN05["ffn"], QWEN05["kv"], QWEN05["vocab"]

    def fit(dtype, K):                     # llama.cpp's fallback for rows that are not whole blocks
        return dtype if K % TENSOR_TYPES[dtype].block_size == 0 else FALLBACK[dtype]

    if mix == "Q8_0":
        layers = [("Q8_0", h, h, 0), ("Q8_0", kv, h, 0), ("Q8_0", h, h, 1), ("Q8_0", f, h, 0),
                  ("Q8_0", h, f, 1), ("Q8_0", vocab, h, 0)]
        embd = "Q8_0"
    else:       # Q4_K_M: Q4_K, Q6_K for about half of attn_v/ffn_down, Q8_0 tied output (K=896)
        layers = [(fit(d, K), M, K, acc) for d, M, K, acc in (
            ("Q4_K", h, h, 0), ("Q4_K", kv, h, 0), ("Q6_K", kv, h, 0), ("Q4_K", h, h, 1),
            ("Q4_K", f, h, 0), ("Q4_K", h, f, 1), ("Q6_K", h, f, 1), ("Q8_0", vocab, h, 0))]
        embd = "Q8_0"
    layers = list(dict.fromkeys(layers))
    specs = []
    for op in matmul_like_ops():
        for dtype, M, K, acc in layers:
            d = dims_for(op, M, K)
            if "acc" in d:
                d["acc"] = acc
            cands = op.specs(dtype, isa, **d)
            if not cands:
                continue
            by_family = {}
            for s in cands:
                by_family.setdefault(s.family, s)
            if op.name == "matmul":
                decode = next((by_family[f] for f in ("avx512", "avx2", "generic") if f in by_family))
                prefill = by_family.get("gemm", decode)
                specs += [decode] + ([prefill] if prefill != decode else [])
            else:
                specs += list(by_family.values())[-2:]
    all_ops = ops()
    extra = [("get_rows", embd, {"K": h})]
    if "quantize_q8a" in all_ops:
        extra += [("quantize_q8a", "F32", {"K": h}), ("quantize_q8a", "F32", {"K": f})]
    if "rms_norm" in all_ops:
        extra += [("rms_norm", "F32", {"K": h, "eps": 1e-6})]
    for name, dtype, d in extra:
        op = all_ops.get(name)
        if op is None:
            continue
        d = {**op.example_dims, **d}
        cands = op.specs(dtype, isa, **d)
        if cands:
            specs.append(cands[-1])
    return list(dict.fromkeys(specs))


def time_build_set(isa, specs, cache_dir) -> float:
    """Seconds to render and compile (or load) every spec with a new compiler on cache_dir."""
    comp = Compiler(isa, cache_dir=cache_dir)
    t = time.perf_counter()
    for s in specs:
        sym, ir = render(s, isa)
        comp.compile(ir, [sym])
    return time.perf_counter() - t


# ---- main ------------------------------------------------------------------------------------

def run(quick: bool, types: list[str] | None, only_ops: list[str] | None) -> dict:
    isa = detect()
    nth_all = default_threads()
    nths = [1] + ([nth_all] if nth_all > 1 else [])
    cache = tempfile.mkdtemp(prefix="reame-bench-cache-")
    cold = Compiler(isa, cache_dir=cache)
    runner = Runner(nth_all)
    rng = np.random.default_rng(0)
    ws_bytes = (128 if quick else 256) << 20
    n_mm = 128 if quick else 512
    reps = 3 if quick else 5
    M, K = MV_SHAPE
    out = {"machine": {**isa.describe(), "threads": nth_all, "python": platform.python_version(),
                       "loadavg_start": os.getloadavg()},
           "settings": {"quick": quick, "matvec_shape": [M, K], "working_set_bytes": ws_bytes,
                        "gemm_tokens": n_mm, "reps": reps}}
    t_start = time.perf_counter()

    # the ceiling everything is compared with: best of many runs, at the start and at the end
    bw = measure_bandwidth(isa, cold, runner, nths, max(ws_bytes, 512 << 20), 4 * reps)
    out["bandwidth_GBps"] = bw
    print(f"bandwidth (read_bw, {bw['bytes'] >> 20} MiB): "
          + ", ".join(f"{nth} thread{'s' if nth > 1 else ''} {bw[str(nth)]:.1f} GB/s "
                      f"(cpu-time {bw[f'cpu_{nth}']:.1f})" for nth in nths), flush=True)

    out["numpy_gflops"] = {str(nth): numpy_gflops(n_mm, M, K, nth, reps) for nth in nths}

    rows, specs_built = [], []
    mm_ops = [o for o in matmul_like_ops() if not only_ops or o.name in only_ops]
    for dtype in types or ALL_TYPES:
        runs_type = [o for o in mm_ops if dtype in o.dtypes()]
        if not runs_type:
            continue
        weights = weight_set(dtype, M, K, ws_bytes, rng)
        wbytes = sum(w.nbytes for w in weights)
        for op in runs_type:
            for spec in op.specs(dtype, isa, **dims_for(op, M, K)):
                kernel = build(spec, isa, cold)
                compile_s = cold.stats.log[-1][2] if cold.stats.log[-1][0] == kernel.symbol else None
                specs_built.append((spec, compile_s))
                ok, worst = op.check(kernel)
                row = {"op": op.name, "dtype": dtype, "family": spec.family,
                       "tile": {k: v for k, v in spec.params if k not in op.dims},
                       "label": spec.label(), "valid": ok, "worst_vs_tol": worst,
                       "compile_ms": None if compile_s is None else compile_s * 1e3}
                if not ok:
                    print(f"  INVALID {spec.label()}: {worst:.3g}x tolerance - not timed", flush=True)
                    rows.append(row)
                    continue
                blocks, case = arg_blocks(op, spec, 1, weights, rng)
                for nth in nths:
                    t = runner.time(kernel.address, blocks, nth, reps)
                    row[f"mv_GBps_{nth}"] = wbytes / t / 1e9
                    row[f"mv_pct_bw_{nth}"] = 100 * row[f"mv_GBps_{nth}"] / bw[str(nth)]
                    row[f"mv_cpu_GBps_{nth}"] = wbytes / runner.cpu / 1e9
                blocks, case = arg_blocks(op, spec, n_mm, weights[:1], rng)
                t1 = runner.time(kernel.address, blocks, 1, 1)
                r = 2 if t1 > 0.3 else reps
                for nth in nths:
                    t = runner.time(kernel.address, blocks, nth, r)
                    row[f"mm_GFLOPs_{nth}"] = 2 * n_mm * M * K / t / 1e9
                    row[f"mm_cpu_GFLOPs_{nth}"] = 2 * n_mm * M * K / runner.cpu / 1e9
                del blocks, case
                rows.append(row)
                print(f"  {spec.label():72s} mv " + "  ".join(
                    f"{row[f'mv_GBps_{nth}']:5.1f} GB/s ({row[f'mv_pct_bw_{nth}']:3.0f}%)" for nth in nths)
                    + "   mm " + "  ".join(f"{row[f'mm_GFLOPs_{nth}']:6.1f}" for nth in nths)
                    + " GFLOP/s", flush=True)
        del weights
    out["matmul"] = rows

    again = measure_bandwidth(isa, cold, runner, nths, max(ws_bytes, 512 << 20), 4 * reps)
    for key, v in again.items():
        if key[0].isdigit() or key.startswith("cpu_"):
            bw[key] = max(bw[key], v)
    for row in rows:
        for nth in nths:
            if f"mv_GBps_{nth}" in row:
                row[f"mv_pct_bw_{nth}"] = 100 * row[f"mv_GBps_{nth}"] / bw[str(nth)]
    print("bandwidth (best of start and end): " + ", ".join(
        f"{nth}t {bw[str(nth)]:.1f} GB/s" for nth in nths), flush=True)

    # activation quantisation (the integer path's other half), when it exists
    q = ops().get("quantize_q8a")
    if q is not None and (not only_ops or "quantize_q8a" in only_ops):
        qrows = []
        for spec in q.specs("F32", isa, **{**q.example_dims, "K": K}):
            kernel = build(spec, isa, cold)
            specs_built.append((spec, cold.stats.log[-1][2]))
            ok, worst = q.check(kernel)
            row = {"op": "quantize_q8a", "label": spec.label(), "valid": ok}
            if ok:
                for n in (1, n_mm):
                    blocks, case = arg_blocks(q, spec, n, None, rng)
                    for nth in nths:
                        t = runner.time(kernel.address, blocks * 64, nth, reps) / 64
                        row[f"us_n{n}_{nth}"] = t * 1e6
                        row[f"GBps_n{n}_{nth}"] = n * K * 4 / t / 1e9
            qrows.append(row)
            print(f"  {spec.label():72s} " + "  ".join(
                f"n={n}: " + " ".join(f"{row.get(f'us_n{n}_{nth}', float('nan')):.1f}us" for nth in nths)
                for n in (1, n_mm)), flush=True)
        out["quantize_q8a"] = qrows

    # compile cold (measured above, fresh cache) vs warm (a new compiler loading that cache)
    comp = []
    warm = Compiler(isa, cache_dir=cache)
    for spec, cold_s in specs_built:
        t = time.perf_counter()
        sym, ir = render(spec, isa)
        warm.compile(ir, [sym])
        comp.append({"label": spec.label(), "op": spec.op, "dtype": spec.dtype,
                     "cold_ms": None if cold_s is None else cold_s * 1e3,
                     "warm_ms": (time.perf_counter() - t) * 1e3})
    out["compile"] = comp

    model = {}
    for mix in ("Q8_0", "Q4_K_M"):
        specs = model_specs(isa, mix)
        fresh = tempfile.mkdtemp(prefix="reame-bench-model-")
        c = time_build_set(isa, specs, fresh)
        w = time_build_set(isa, specs, fresh)
        model[mix] = {"kernels": len(specs), "cold_s": c, "warm_s": w,
                      "ops": sorted({s.op for s in specs})}
        print(f"model kernel set Qwen2.5-0.5B {mix}: {len(specs)} kernels, cold {c:.2f} s, "
              f"warm {w:.3f} s", flush=True)
    out["model_kernel_set"] = model
    out["machine"]["loadavg_end"] = os.getloadavg()
    out["seconds"] = time.perf_counter() - t_start
    runner.close()
    return out


def markdown(res: dict) -> str:
    nths = [k for k in res["bandwidth_GBps"] if k.isdigit()]
    bw = res["bandwidth_GBps"]
    M, K = res["settings"]["matvec_shape"]
    n_mm = res["settings"]["gemm_tokens"]
    L = [f"# Kernel benchmark ({res['machine']['model']}, {res['machine']['host_cpu']}, "
         f"level {res['machine']['level']}, {res['machine']['threads']} threads)", "",
         f"Load average at start/end: {', '.join(f'{x:.1f}' for x in res['machine']['loadavg_start'])}"
         f" / {', '.join(f'{x:.1f}' for x in res['machine']['loadavg_end'])} (shared machine).", "",
         "Throughput is the fastest of several runs by wall clock; *cpu* figures divide the same "
         "work by the CPU time the threads actually got (the machine is shared: with another "
         "process on a core, wall-clock multi-thread figures say more about the neighbours). "
         "For several threads the cpu figures are upper bounds (a thread that waits descheduled "
         "is not counted, and for memory-bound kernels the other thread gets its bandwidth).", "",
         "## Streaming-read bandwidth", "", "| threads | GB/s | GB/s cpu |", "|---|---|---|"]
    L += [f"| {n} | {bw[n]:.1f} | {bw[f'cpu_{n}']:.1f} |" for n in nths]
    L += ["", f"## Matrix-vector (n = 1), M = {M}, K = {K}, weights cycled through "
          f"{res['settings']['working_set_bytes'] >> 20} MiB; matrix-matrix n = {n_mm}", "",
          "| op | type | variant | tile | " + " | ".join(f"GB/s {n}t | % bw {n}t" for n in nths)
          + " | " + " | ".join(f"GFLOP/s {n}t" for n in nths) + " | compile ms |",
          "|" + "---|" * (5 + 3 * len(nths))]
    for r in res["matmul"]:
        tile = ",".join(f"{k}={v}" for k, v in r["tile"].items())
        if not r["valid"]:
            L.append(f"| {r['op']} | {r['dtype']} | {r['family']} | {tile} | INVALID |")
            continue
        cm = "" if r["compile_ms"] is None else f"{r['compile_ms']:.0f}"
        L.append(f"| {r['op']} | {r['dtype']} | {r['family']} | {tile} | "
                 + " | ".join(f"{r[f'mv_GBps_{n}']:.1f} | {r[f'mv_pct_bw_{n}']:.0f}%" for n in nths)
                 + " | " + " | ".join(f"{r[f'mm_GFLOPs_{n}']:.1f}" for n in nths) + f" | {cm} |")
    npg = res["numpy_gflops"]
    L += ["", f"numpy (OpenBLAS) float32 matmul, same shape, n = {n_mm}: "
          + ", ".join(f"{n} thread{'s' if n != '1' else ''} {npg[n]:.1f} GFLOP/s"
                      for n in nths if npg.get(n)), ""]
    best = {}
    for r in res["matmul"]:
        if r["valid"]:
            key = (r["op"], r["dtype"])
            b = best.setdefault(key, {})
            for n in nths:
                for tag, key in (("mv", "mv_GBps_"), ("mm", "mm_GFLOPs_"),
                                 ("mvc", "mv_cpu_GBps_"), ("mmc", "mm_cpu_GFLOPs_")):
                    b[f"{tag}{n}"] = max(b.get(f"{tag}{n}", 0), r[f"{key}{n}"])
    L += ["### Best variant per op and type (matvec GB/s vs bandwidth; matmul GFLOP/s vs numpy)", "",
          "| op | type | " + " | ".join(f"GB/s {n}t (% bw) | cpu" for n in nths) + " | "
          + " | ".join(f"GFLOP/s {n}t (% numpy) | cpu" for n in nths) + " |",
          "|" + "---|" * (2 + 4 * len(nths))]
    for (op, dt), b in best.items():
        L.append(f"| {op} | {dt} | " + " | ".join(
            f"{b[f'mv{n}']:.1f} ({100 * b[f'mv{n}'] / bw[n]:.0f}%) | {b[f'mvc{n}']:.1f}"
            for n in nths) + " | " + " | ".join(
            f"{b[f'mm{n}']:.1f}" + (f" ({100 * b[f'mm{n}'] / npg[n]:.0f}%)" if npg.get(n) else "")
            + f" | {b[f'mmc{n}']:.1f}" for n in nths) + " |")
    if res.get("quantize_q8a"):
        L += ["", "## quantize_q8a (f32 -> Q8A activations), K = " + str(K), "",
              "| variant | " + " | ".join(f"n=1 us {n}t" for n in nths) + " | "
              + " | ".join(f"n={n_mm} us {n}t" for n in nths) + " |",
              "|" + "---|" * (1 + 2 * len(nths))]
        for r in res["quantize_q8a"]:
            L.append(f"| {r['label']} | " + " | ".join(
                f"{r.get(f'us_n1_{n}', float('nan')):.1f}" for n in nths) + " | " + " | ".join(
                f"{r.get(f'us_n{n_mm}_{n}', float('nan')):.1f}" for n in nths) + " |")
    by = {}
    for c in res["compile"]:
        s = by.setdefault((c["op"], c["dtype"]), [0, 0.0, 0.0])
        s[0] += 1
        s[1] += c["cold_ms"] or 0.0
        s[2] += c["warm_ms"]
    L += ["", "## Compile time per kernel (cold: fresh cache; warm: render + load from the cache)",
          "", "| op | type | kernels | cold ms (mean) | warm ms (mean) |", "|---|---|---|---|---|"]
    for (op, dt), (k, c, w) in by.items():
        L.append(f"| {op} | {dt} | {k} | {c / k:.0f} | {w / k:.1f} |")
    L += ["", "## Whole model kernel set (Qwen2.5-0.5B shapes)", "",
          "| mix | kernels | cold s | warm s |", "|---|---|---|---|"]
    for mix, m in res["model_kernel_set"].items():
        L.append(f"| {mix} | {m['kernels']} | {m['cold_s']:.2f} | {m['warm_s']:.3f} |")
    L += ["", f"Total bench time {res['seconds']:.0f} s."]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller working set, n = 128, fewer reps")
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "kernels.json"))
    ap.add_argument("--types", help="comma-separated tensor types (default: all 11)")
    ap.add_argument("--ops", help="comma-separated ops (default: every matmul-like op)")
    a = ap.parse_args(argv)
    res = run(a.quick, a.types.split(",") if a.types else None, a.ops.split(",") if a.ops else None)
    md = markdown(res)
    print()
    print(md)
    path = Path(a.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1, default=float))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
