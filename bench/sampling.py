"""Plain temperature sampling of a step's rows: the sample_temp kernel against the numpy path.

    python -m bench.sampling [--rows 16] [--vocab 151936 49152] [--rounds 15] [--json PATH]

For each vocabulary size: `rows` rows of logits (normal, sd 3, a few hot tokens), temperatures
0.6-1.4. First checks that the kernel draws the numpy reference's tokens (sampling._plain_token:
weights + draw) wherever u * total is clear of a CDF boundary, then times, interleaved round by
round (the machine is shared), per row: numpy on the calling thread, numpy with half the rows on
a second thread (sample_rows before the kernel), and the kernel (sampling.draw_rows, the tuned
family at this CPU's level, and the portable one) on 1 and 2 threads. Prints medians in us per
row; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from reame import sampling
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op


def make_rows(n: int, v: int, rng) -> tuple[np.ndarray, list[float]]:
    x = (rng.standard_normal((n, v)) * 3).astype(np.float32)
    x[:, rng.integers(0, v, 8)] += 8.0
    return x, [float(t) for t in rng.uniform(0.6, 1.4, n)]


def validate(x, temps) -> int:
    """Kernel tokens == the numpy reference's for u clear of a boundary; the rows compared."""
    rng = np.random.default_rng(1)
    u = rng.random(len(x))
    got = sampling.draw_rows(list(x), [1.0 / t for t in temps], list(u))
    compared = 0
    for r, (row, t) in enumerate(zip(x, temps)):
        w = sampling._weights(row, t).astype(np.float64)
        cdf = np.cumsum(w)
        target = u[r] * cdf[-1]
        i = int(np.searchsorted(cdf, target, side="right"))
        if min(target - (cdf[i - 1] if i else 0.0), cdf[i] - target) > 1e-5 * cdf[-1]:
            assert got[r] == sampling.draw(sampling._weights(row, t), u[r]), (r, got[r])
            compared += 1
    assert compared >= len(x) // 2, compared
    return compared


def run(n: int, vocabs: list[int], rounds: int) -> dict:
    isa = detect()
    pool = ThreadPoolExecutor(1)
    out = {"cpu": isa.host_cpu, "level": isa.level, "rows": n, "rounds": rounds, "results": {}}
    for v in vocabs:
        rng = np.random.default_rng(v)
        x, temps = make_rows(n, v, rng)
        compared = validate(x, temps)
        samplers = [sampling.Sampler(sampling.SamplingParams(temperature=t, seed=i))
                    for i, t in enumerate(temps)]

        def numpy_rows(lo, hi):
            buf = np.empty(v, np.float32)
            for i in range(lo, hi):
                sampling._plain_token(samplers[i], x[i], buf)

        def numpy2():
            f = pool.submit(numpy_rows, n // 2, n)
            numpy_rows(0, n // 2)
            f.result()

        inv = [1.0 / t for t in temps]
        rows = list(x)
        specs = get_op("sample_temp").specs("F32", isa, K=v, B=sampling.CDF_BLOCK)
        kernels = {"tuned": build(specs[-1], isa)}
        generic = [s for s in specs if s.family == "generic"]
        if generic and generic[-1] != specs[-1]:
            kernels["generic"] = build(generic[-1], isa)

        def kernel_run(k, threads):
            def f():
                u = [s.rng.random() for s in samplers]
                sampling._KERNELS[(v, isa.level)] = k
                sampling.draw_rows(rows, inv, u, threads)
            return f

        cases = {"numpy, 1 thread": lambda: numpy_rows(0, n), "numpy, 2 threads": numpy2}
        for name, k in kernels.items():
            cases[f"kernel ({name} {k.spec.family} vl={k.spec.p['vl']}), 1 thread"] = \
                kernel_run(k, 1)
            cases[f"kernel ({name} {k.spec.family} vl={k.spec.p['vl']}), 2 threads"] = \
                kernel_run(k, 2)
        times = {c: [] for c in cases}
        for f in cases.values():
            f()                                            # warm
        for _ in range(rounds):
            for c, f in cases.items():
                t = time.perf_counter()
                f()
                times[c].append(time.perf_counter() - t)
        sampling._KERNELS.pop((v, isa.level), None)
        res = {c: float(np.median(ts)) / n * 1e6 for c, ts in times.items()}
        out["results"][v] = res
        print(f"vocabulary {v}, {n} rows ({compared} checked against the reference): us per row, "
              f"median of {rounds}")
        for c, us in res.items():
            print(f"  {c:48s} {us:7.1f}")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--vocab", type=int, nargs="+", default=[151936, 49152])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    out = run(a.rows, a.vocab, a.rounds)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
