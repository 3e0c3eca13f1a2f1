"""Benchmark the attention kernels (and the element-wise ops) of the forward pass.

Every kernel is validated against its numpy reference before it is timed. Timing:
- 1 thread: the minimum over many single calls (the machine is shared and noisy);
- nth threads: each of nth Python threads runs its own slice `reps` times back to back (the
  slices are independent, so no barrier is needed); time = wall time / reps of the slowest,
  minimum over trials. This is the kernel's critical path with all threads busy, without the
  cost of a Python-level barrier per call.

    python -m bench.bench_attention [--ctx 4096] [--prefill 512] [--cached 0] [--kv f32,f16]
                                    [--skip-decode] [--verify-rows 16]

Decode: one token at position ctx - 1 of one sequence, every attn_decode variant (the f32 ones,
and with `--kv bf16p`, the pair-layout bf16 cache of AVX512_BF16 CPUs, the bf16dp family); then
--verify-rows consecutive tokens of one sequence, as a verify step's rows of a drafted
sequence. The same two cases on every attn_prefill family (f32 and amx), with whether each
row's output bits are the same computed alone as in the run ("invariant"): a kernel that both
decode and verify rows could run without changing a greedy token (docs/speculation.md).

Prefill: a chunk of --prefill tokens at positions --cached .. --cached + prefill - 1 of one
sequence (the first --cached positions already in the cache), every attn_prefill family: the
f32 ones (dtype F32) and, where the CPU has AMX, the reduced-precision `amx` (dtype BF16,
`--attn-type bf16`; validated against its bf16 reference).
"""

from __future__ import annotations

import argparse
import math
import threading
import time

import numpy as np

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops.attn_decode import make_attention_case
from reame.codegen.registry import get_op


def time_kernel(kernel, args, nth, budget=0.4, reps=None):
    """Seconds per call of `kernel` split over `nth` threads. `args` is one argument block or a
    list of them used in turn (e.g. one per layer, so that the data comes from DRAM, not L3)."""
    blocks = args if isinstance(args, list) else [args]
    ptrs = [a.ctypes.data for a in blocks]
    if nth == 1:
        best, t_end, i = float("inf"), time.perf_counter() + budget, 0
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            kernel.cfunc(ptrs[i % len(ptrs)], 0, 1)
            best = min(best, time.perf_counter() - t)
            i += 1
        return best
    t = time.perf_counter()
    kernel.run_threads(blocks[0], nth)
    one = time.perf_counter() - t
    reps = reps or max(len(ptrs), min(400, int(0.05 / max(one, 1e-6))))
    best, t_end = float("inf"), time.perf_counter() + budget
    while time.perf_counter() < t_end:
        start = threading.Barrier(nth)

        def work(ith):
            start.wait()
            for r in range(reps):
                kernel.cfunc(ptrs[r % len(ptrs)], ith, nth)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(1, nth)]
        for th in threads:
            th.start()
        start.wait()
        t = time.perf_counter()
        for r in range(reps):
            kernel.cfunc(ptrs[r % len(ptrs)], 0, nth)
        for th in threads:
            th.join()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def validate(op, kernel, case):
    want = op.reference(kernel.spec, case)
    kernel(case.args)
    rtol, atol = op.tolerance(kernel.spec.dtype)
    for name in case.outputs:
        got = case.buffers[name]
        err = np.abs(got - want[name]) / (atol + rtol * np.abs(want[name]))
        if not np.all(np.isfinite(got)) or err.max() > 1:
            raise AssertionError(f"{kernel.spec.label()} disagrees with the reference")


def attention(args):
    isa = detect()
    H, Hkv, D = args.heads, args.kv_heads, args.head_dim
    rows = []
    for kv in args.kv.split(","):
        dims = dict(H=H, Hkv=Hkv, D=D, Dv=D, BS=args.block_size, kv=kv, scale=1 / math.sqrt(D))
        # decode: one token at position ctx - 1
        op = get_op("attn_decode")
        C = args.ctx
        for spec in ([] if args.skip_decode else
                     op.specs("F32", isa, C=C, **dims) + op.specs("BF16", isa, C=C, **dims)):
            k = build(spec, isa)
            rng = np.random.default_rng(0)
            small = make_attention_case(op, spec.with_params(C=128), rng, 4)
            validate(op, build(spec.with_params(C=128), isa), small)
            # one cache per "layer", 128 MiB in all: each call reads its keys from DRAM
            case = make_attention_case(op, spec, rng, 1, positions=[C - 1], seq_ids=[0], seqs=1)
            kv_bytes = case.buffers["kc"].nbytes + case.buffers["vc"].nbytes
            layers = [case] + [make_attention_case(op, spec, rng, 1, positions=[C - 1],
                                                   seq_ids=[0], seqs=1)
                               for _ in range(max(0, (128 << 20) // kv_bytes - 1))]
            for nth in (1, 2):
                t = time_kernel(k, [c.args for c in layers], nth)
                rows.append(("decode", kv, f"ctx={C}", spec.family, tiles(spec), nth,
                             f"{t * 1e6:.0f} us", f"{kv_bytes / t / 1e9:.1f} GB/s"))
            # a verify step's rows: R consecutive tokens of one sequence (its keys read by each)
            R = args.verify_rows
            if R > 1:
                pos = list(range(C - R, C))
                layers = [make_attention_case(op, spec, rng, R, positions=pos, seq_ids=[0] * R,
                                              seqs=1) for _ in range(len(layers))]
                for nth in (1, 2):
                    t = time_kernel(k, [c.args for c in layers], nth)
                    rows.append(("verify", kv, f"{R} rows ctx={C}", spec.family, tiles(spec),
                                 nth, f"{t * 1e6:.0f} us", f"{t * 1e6 / R:.1f} us a row"))
        if not args.skip_decode and args.verify_rows > 1:
            rows += rows_on_prefill_kernels(args, isa, dims)
        # prefill: positions S..S+P-1 of one sequence (S = --cached)
        op = get_op("attn_prefill")
        P, S = args.prefill, args.cached
        bs = args.block_size or 1
        CP = -(-(S + P) // bs) * bs
        flops = 2 * H * (D + D) * (P * S + P * (P + 1) / 2)
        for spec in op.specs("F32", isa, C=CP, **dims) + op.specs("BF16", isa, C=CP, **dims):
            rng = np.random.default_rng(1)
            k = validated_prefill_kernel(op, spec, isa, rng, 40, 3)
            case = make_attention_case(op, spec, rng, P, positions=list(range(S, S + P)),
                                       seq_ids=[0] * P, seqs=1)
            if args.check_large:
                validate(op, k, case)
            for nth in (1, 2):
                t = time_kernel(k, case.args, nth, budget=1.0)
                rows.append(("prefill", kv, f"n={P}" + (f"@{S}" if S else ""), spec.family,
                             tiles(spec), nth,
                             f"{t * 1e3:.2f} ms", f"{flops / t / 1e9:.1f} GFLOP/s"))
    return rows


def validated_prefill_kernel(op, spec, isa, rng, n, start):
    """spec built, after its 128-position twin passed a run of n tokens from `start` (one
    sequence) against the numpy reference."""
    small = make_attention_case(op, spec.with_params(C=128), rng, n,
                                positions=list(range(start, start + n)), seq_ids=[0] * n)
    validate(op, build(spec.with_params(C=128), isa), small)
    return build(spec, isa)


def invariant(op, spec, isa, rng, R) -> bool:
    """Whether each of R consecutive rows of one sequence (beside two rows of other sequences)
    gets the same output bits computed alone (a one-token call on the same cache)."""
    kernel, C = build(spec, isa), spec.p["C"]
    pos = list(range(C - 2 * R, C - R)) + [C // 3, C - 1]
    case = make_attention_case(op, spec, rng, R + 2, positions=pos, seq_ids=[0] * R + [1, 2])
    b = case.buffers
    kernel(case.args)
    together = b["out"].copy()
    for i in range(R + 2):
        one = make_attention_case(op, spec, rng, 1, positions=[pos[i]], seq_ids=[b["seq"][i]])
        for name in ("kc", "vc", "bt"):
            one.buffers[name][...] = b[name]
        one.buffers["q"][0] = b["q"][i]
        kernel(one.args)
        if not np.array_equal(one.buffers["out"][0].view(np.uint32), together[i].view(np.uint32)):
            return False
    return True


def rows_on_prefill_kernels(args, isa, dims):
    """One decode row and a verify step's R rows (as in attention()) on every attn_prefill
    family: what running every row on a prompt kernel would cost."""
    op, C, R = get_op("attn_prefill"), args.ctx, args.verify_rows
    rows = []
    for spec in op.specs("F32", isa, C=C, **dims) + op.specs("BF16", isa, C=C, **dims):
        rng = np.random.default_rng(2)
        k = validated_prefill_kernel(op, spec, isa, rng, 20, 100)
        same = "invariant" if invariant(op, spec.with_params(C=256), isa, rng, R) else "varies"
        one = make_attention_case(op, spec, rng, 1, positions=[C - 1], seq_ids=[0], seqs=1)
        n_layers = max(1, (128 << 20) // (one.buffers["kc"].nbytes + one.buffers["vc"].nbytes))
        for label, n in (("decode", 1), ("verify", R)):
            pos = list(range(C - n, C))
            layers = [make_attention_case(op, spec, rng, n, positions=pos, seq_ids=[0] * n,
                                          seqs=1) for _ in range(n_layers)]
            t = time_kernel(k, [c.args for c in layers], 2)
            rows.append((f"{label}@prefill", dims["kv"],
                         f"{n} rows ctx={C}", spec.family, tiles(spec), 2,
                         f"{t * 1e6:.0f} us", f"{t * 1e6 / n:.1f} us a row", same))
    return rows


def tiles(spec):
    skip = {"H", "Hkv", "D", "Dv", "C", "BS", "kv", "scale", "K", "F", "bcast", "eps", "R", "neox"}
    return ",".join(f"{k}={v}" for k, v in spec.params if k not in skip)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, default=4096, help="decode context length")
    ap.add_argument("--prefill", type=int, default=512, help="prefill chunk length")
    ap.add_argument("--cached", type=int, default=0,
                    help="positions already in the cache before the prefill chunk")
    ap.add_argument("--skip-decode", action="store_true", help="prefill kernels only")
    ap.add_argument("--heads", type=int, default=14)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--verify-rows", type=int, default=16, help="decode rows of one sequence "
                    "timed together, as in a verify step (<= 1: not timed)")
    ap.add_argument("--kv", default="f32,f16")
    ap.add_argument("--block-size", type=int, default=64, help="KV block size (0: contiguous)")
    ap.add_argument("--check-large", action="store_true",
                    help="also validate the full-size prefill case (slow numpy reference)")
    args = ap.parse_args()
    print(f"# H={args.heads} Hkv={args.kv_heads} D={args.head_dim}, {detect().level}")
    for r in attention(args):
        print("  ".join(f"{c!s:<14}" for c in r))


if __name__ == "__main__":
    main()
