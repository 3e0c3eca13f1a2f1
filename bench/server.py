"""Serving benchmark: `reame serve` under gunicorn, driven by the official openai client.

    python -m bench.server [--model shape:mix | --gguf PATH] [--concurrency 1,4] [--max-tokens 64]

Starts `reame serve` on a free loopback port with the model (a synthetic GGUF from bench/synth.py
by default), checks one greedy completion comes back, then for each concurrency level streams
2 x concurrency chat completions (temperature 0.7) from that many client threads and prints the
aggregate generated tokens per second, each request's latency and the *saturated decode rate*:
tokens received per second while every one of the first wave's streams is past its first token
and none has finished (all `concurrency` sequences decoding, no prompt in the steps), from the
client's arrival times. Then, with the server stopped, the engine alone (`--engine-baseline`,
on by default) decodes the same batch sizes at the same positions in a fresh process with the
server's thread count: its aggregate tok/s is what the server would deliver if serving cost
nothing; the ratio of the two is printed (issue 27's target: >= 0.9 at 16 clients).
JSON goes to bench/results/server.json.
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
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-seqs", type=int, default=None,
                    help="the server's --max-seqs (default: the largest concurrency)")
    ap.add_argument("--threads", type=int, default=None, help="engine threads (default: the "
                    "server's own choice)")
    ap.add_argument("--serve-args", default="", help="more `reame serve` arguments")
    ap.add_argument("--no-engine-baseline", dest="engine_baseline", action="store_false")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "server.json"))
    ap.add_argument("--worker-engine", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--positions", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker_engine:
        return engine_worker(a)
    from openai import OpenAI

    if a.gguf:
        path = Path(a.gguf)
    else:
        from bench.engine import bench_dir
        from bench.synth import synth_model
        shape, mix = a.model.split(":")
        path = synth_model(bench_dir(), shape, mix)
    port = free_port()
    if a.max_seqs is None:
        a.max_seqs = max(int(c) for c in a.concurrency.split(","))
    cmd = [sys.executable, "-m", "reame", "serve", str(path), "--port", str(port),
           "--max-seqs", str(a.max_seqs), *a.serve_args.split()]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
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

        prompt_len = []

        def one(i):
            t, n, times = time.time(), 0, []
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"Tell me story number {i}"}],
                max_tokens=a.max_tokens, temperature=0.7, seed=i, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content is not None:
                    times.append(time.time())
                if chunk.usage:
                    n = chunk.usage.completion_tokens
                    prompt_len.append(chunk.usage.prompt_tokens)
            return n, time.time() - t, times

        results = []
        for conc in (int(c) for c in a.concurrency.split(",")):
            t = time.time()
            with cf.ThreadPoolExecutor(conc) as ex:
                runs = list(ex.map(one, range(2 * conc)))
            wall = time.time() - t
            tokens = sum(n for n, _, _ in runs)
            row = {"concurrency": conc, "requests": len(runs), "tokens": tokens,
                   "aggregate_tok_s": tokens / wall,
                   "saturated_tok_s": saturated_rate([ts for _, _, ts in runs[:conc]]),
                   "latency_s": sorted(round(s, 3) for _, s, _ in runs)}
            results.append(row)
            print(f"concurrency {conc}: {len(runs)} streamed requests of {a.max_tokens} tokens, "
                  f"aggregate {row['aggregate_tok_s']:.1f} tok/s, saturated decode "
                  f"{row['saturated_tok_s']:.1f} tok/s, latency "
                  f"{min(row['latency_s']):.2f}-{max(row['latency_s']):.2f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if a.engine_baseline:
        # the engine alone at the same batches, positions from the middle of the served streams
        pos = int(sum(prompt_len) / max(1, len(prompt_len))) + a.max_tokens // 2
        batches = ",".join(str(r["concurrency"]) for r in results)
        cmd = [sys.executable, "-m", "bench.server", "--worker-engine", "--gguf", str(path),
               "--concurrency", batches, "--max-seqs", str(a.max_seqs),
               "--positions", str(pos), "--max-tokens", str(a.max_tokens)]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        r = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"engine baseline failed:\n{r.stderr[-3000:]}")
        engine = json.loads(r.stdout.strip().splitlines()[-1])
        for row in results:
            e = engine["batch_decode_tps"][str(row["concurrency"])]
            row["engine_tok_s"] = e
            row["server_vs_engine"] = row["saturated_tok_s"] / e
            print(f"concurrency {row['concurrency']}: engine alone {e:.1f} tok/s at batch "
                  f"{row['concurrency']} (position {pos}, {engine['threads']} threads); server "
                  f"saturated decode / engine = {row['server_vs_engine']:.2f}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"model": str(path), "max_seqs": a.max_seqs,
                                        "when": time.strftime("%Y-%m-%d %H:%M"),
                                        "results": results}, indent=2))
    return 0


def saturated_rate(streams: list[list[float]]) -> float:
    """Tokens per second received while every stream is past its first token and none has
    received its last: all of them decoding (0 when the streams never overlap so)."""
    streams = [ts for ts in streams if len(ts) > 2]
    if not streams:
        return 0.0
    t0 = max(ts[0] for ts in streams)
    t1 = min(ts[-1] for ts in streams)
    if t1 <= t0:
        return 0.0
    n = sum(1 for ts in streams for t in ts if t0 < t <= t1)
    return n / (t1 - t0)


def engine_worker(a) -> int:
    """The engine alone: B sequences decoding at `--positions`, sampled by argmax in Python
    (as bench/engine.py does), B x steps / wall time. Prints one JSON line."""
    import numpy as np

    from reame.batch import Batch
    from reame.engines import create_engine
    from reame.model import load_model

    model = load_model(a.gguf)
    pos0 = int(a.positions)
    batches = [int(c) for c in a.concurrency.split(",")]
    eng = create_engine(model, "jit", n_ctx=pos0 + a.max_tokens + 8, max_seqs=max(batches),
                        threads=a.threads)       # the server's engine, with its defaults
    rng = np.random.default_rng(0)
    out = {}
    for B in batches:
        prompt = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, pos0)]
        for s in range(B):
            for c in range(0, pos0, eng.max_tokens):
                eng.forward(Batch.prefill(prompt[c:c + eng.max_tokens], c, s))
        cur, pos = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, B)], [pos0] * B
        for _ in range(3):                                   # warm the batch's program
            eng.forward(Batch.decode(cur, pos, list(range(B))))
        steps = max(16, a.max_tokens // 2)
        t = time.perf_counter()
        for _ in range(steps):
            logits = eng.forward(Batch.decode(cur, pos, list(range(B))))
            cur = [int(r.argmax()) for r in logits]
            pos = [p + 1 for p in pos]
        out[str(B)] = B * steps / (time.perf_counter() - t)
    print(json.dumps({"threads": eng.threads, "batch_decode_tps": out}))
    eng.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
