"""Serving benchmark: `reame serve` under gunicorn, driven by the official openai client.

    python -m bench.server [--model shape:mix | --gguf PATH] [--concurrency 1,4] [--max-tokens 64]

Starts `reame serve` on a free loopback port with the model (a synthetic GGUF from bench/synth.py
by default), checks one greedy completion comes back, then for each concurrency level streams
2 x concurrency chat completions (temperature 0.7) from that many client threads and prints the
aggregate generated tokens per second and each request's latency. JSON goes to
bench/results/server.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0", help="bench/synth.py shape:mix")
    ap.add_argument("--gguf", default=None, help="serve this file instead")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-seqs", type=int, default=4)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "server.json"))
    a = ap.parse_args(argv)
    from openai import OpenAI

    if a.gguf:
        path = Path(a.gguf)
    else:
        from bench.engine import bench_dir
        from bench.synth import synth_model
        shape, mix = a.model.split(":")
        path = synth_model(bench_dir(), shape, mix)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "reame", "serve", str(path), "--port", str(port),
                             "--max-seqs", str(a.max_seqs)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0)
    try:
        t0 = time.time()
        while True:
            try:
                model = client.models.list().data[0].id
                r = client.completions.create(model=model, prompt="Hello", max_tokens=4,
                                              temperature=0)
                break
            except Exception:
                if proc.poll() is not None or time.time() - t0 > 120:
                    raise SystemExit(f"server did not start: {proc.stderr.read()[-2000:]}")
                time.sleep(0.5)
        assert r.choices[0].finish_reason in ("length", "stop"), r   # validated before timing
        print(f"serving {path.name} on :{port} (ready in {time.time() - t0:.1f} s)")

        def one(i):
            t, n = time.time(), 0
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"Tell me story number {i}"}],
                max_tokens=a.max_tokens, temperature=0.7, seed=i, stream=True,
                stream_options={"include_usage": True})
            for chunk in stream:
                if chunk.usage:
                    n = chunk.usage.completion_tokens
            return n, time.time() - t

        results = []
        for conc in (int(c) for c in a.concurrency.split(",")):
            t = time.time()
            with cf.ThreadPoolExecutor(conc) as ex:
                runs = list(ex.map(one, range(2 * conc)))
            wall = time.time() - t
            tokens = sum(n for n, _ in runs)
            row = {"concurrency": conc, "requests": len(runs), "tokens": tokens,
                   "aggregate_tok_s": tokens / wall,
                   "latency_s": sorted(round(s, 3) for _, s in runs)}
            results.append(row)
            print(f"concurrency {conc}: {len(runs)} streamed requests of {a.max_tokens} tokens, "
                  f"aggregate {row['aggregate_tok_s']:.1f} tok/s, latency "
                  f"{min(row['latency_s']):.2f}-{max(row['latency_s']):.2f} s")
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"model": str(path), "max_seqs": a.max_seqs,
                                            "results": results}, indent=2))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
