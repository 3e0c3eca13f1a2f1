"""Serving benchmark: `reame serve` under gunicorn, driven by the official openai client.

    python -m bench.server [--model shape:mix | --gguf PATH] [--concurrency 1,4] [--max-tokens 64]

Starts `reame serve` on a free loopback port with the model (a synthetic GGUF from bench/synth.py
by default), checks one greedy completion comes back, then for each concurrency level streams
2 x concurrency chat completions (temperature 0.7) from that many client threads and prints the
aggregate generated tokens per second, each request's latency and the *saturated decode rate*:
tokens received per second while every one of the first wave's streams is past its first token
and none has finished (all `concurrency` sequences decoding, no prompt in the steps), from the
client's arrival times. The engine alone (on by default; `--no-engine-baseline`) decodes the
same batch at the same positions in a process of its own with the server's thread count, right
after each wave while the server idles: what the server would deliver if serving cost nothing.
Waves and engine runs alternate for `--rounds` rounds (this machine is shared and noisy) and the
best of each is compared (issue 27's target: server / engine >= 0.9 at 16 clients). The server
is measured once its start-up benchmark (which runs in its idle time) has ended. The clients
run at nice 19 (`--client-nice`): on this 2-vCPU machine they share the server's cores, which a
deployment's remote clients do not.
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
    ap.add_argument("--client-nice", type=int, default=19, help="nice of the client threads "
                    "(0: compete with the server for the cores)")
    ap.add_argument("--rounds", type=int, default=3, help="server waves and engine runs "
                    "alternate this many times; the best of each is compared")
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
        boot = wait_startup_benchmark(port, 120.0)
        if boot:
            print(f"start-up benchmark {boot.get('state')} after {time.time() - t0:.1f} s "
                  f"(measured in steady state, not beside it)")

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

        concs = [int(c) for c in a.concurrency.split(",")]
        engine = None
        if a.engine_baseline:
            # the engine alone in its own process, idle while the server is measured and the
            # other way round; at the positions of the middle of the streams just served
            engine = EngineWorker(path, a, concs)
        if a.client_nice:
            # the clients (this process, after the server and the engine worker started) at a
            # lower priority: on a machine whose cores all compute the server's step, the
            # clients' own parsing of the streams would take a core from it, which a real
            # deployment's clients on other machines do not; they read what the socket holds
            # when a core is free, so the rates over a window stay what the server sent
            os.nice(a.client_nice)
        results = {c: [] for c in concs}
        for rnd in range(a.rounds):
            for conc in concs:
                t = time.time()
                with cf.ThreadPoolExecutor(conc) as ex:
                    runs = list(ex.map(one, range(2 * conc)))
                wall = time.time() - t
                tokens = sum(n for n, _, _ in runs)
                row = {"round": rnd, "concurrency": conc, "requests": len(runs),
                       "tokens": tokens, "aggregate_tok_s": tokens / wall,
                       "saturated_tok_s": saturated_rate([ts for _, _, ts in runs[:conc]]),
                       "latency_s": sorted(round(s, 3) for _, s, _ in runs)}
                if engine is not None:
                    pos = int(sum(prompt_len) / max(1, len(prompt_len))) + a.max_tokens // 2
                    row["engine_tok_s"] = engine.measure(conc, pos)
                    row["engine_position"] = pos
                results[conc].append(row)
                print(f"round {rnd + 1}, concurrency {conc}: {len(runs)} streamed requests of "
                      f"{a.max_tokens} tokens, aggregate {row['aggregate_tok_s']:.1f} tok/s, "
                      f"saturated decode {row['saturated_tok_s']:.1f} tok/s, latency "
                      f"{min(row['latency_s']):.2f}-{max(row['latency_s']):.2f} s"
                      + (f"; engine alone {row['engine_tok_s']:.1f} tok/s at batch {conc}, "
                         f"position {row['engine_position']}" if engine is not None else ""))
        if engine is not None:
            engine.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = []
    for conc, rows in results.items():
        best = {"concurrency": conc,
                "aggregate_tok_s": max(r["aggregate_tok_s"] for r in rows),
                "saturated_tok_s": max(r["saturated_tok_s"] for r in rows)}
        if a.engine_baseline:
            best["engine_tok_s"] = max(r["engine_tok_s"] for r in rows)
            best["server_vs_engine"] = best["saturated_tok_s"] / best["engine_tok_s"]
            print(f"concurrency {conc}: best of {len(rows)} rounds: server saturated decode "
                  f"{best['saturated_tok_s']:.1f} tok/s, engine alone "
                  f"{best['engine_tok_s']:.1f} tok/s: server / engine = "
                  f"{best['server_vs_engine']:.2f}")
        summary.append(best)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"model": str(path), "max_seqs": a.max_seqs,
                                        "when": time.strftime("%Y-%m-%d %H:%M"),
                                        "serve_args": a.serve_args, "summary": summary,
                                        "rounds": [r for rows in results.values()
                                                   for r in rows]}, indent=2))
    return 0


def wait_startup_benchmark(port: int, limit: float) -> dict:
    """Wait (at most `limit` s) for the adaptive runtime's start-up benchmark, which runs in
    the server's idle time, to end; its report entry (empty without one)."""
    import urllib.request
    end = time.time() + limit
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/adaptive", timeout=5) as r:
                boot = json.loads(r.read()).get("startup_benchmark") or {}
        except Exception:
            return {}
        if boot.get("state") in (None, "none", "done", "failed") or time.time() > end:
            return boot
        time.sleep(0.5)


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


class EngineWorker:
    """The engine alone in a process of its own (bench.server --worker-engine), asked for one
    measurement at a time over a pipe, so that it alternates with the server's rounds."""

    def __init__(self, path: Path, a, batches: list[int]):
        cmd = [sys.executable, "-m", "bench.server", "--worker-engine", "--gguf", str(path),
               "--concurrency", ",".join(map(str, batches)), "--max-tokens", str(a.max_tokens)]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def measure(self, batch: int, position: int) -> float:
        self.proc.stdin.write(f"{batch} {position}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the engine worker failed (its error is above)")
        return json.loads(line)["tok_s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def engine_worker(a) -> int:
    """The engine alone: for each "batch position" line on stdin, B sequences decoding from
    `position`, sampled by argmax in Python (as bench/engine.py does): B x steps / wall time,
    one JSON line out."""
    import numpy as np

    from bench.engine import decode_rate
    from reame.batch import Batch
    from reame.engines import create_engine
    from reame.model import load_model

    model = load_model(a.gguf)
    batches = [int(c) for c in a.concurrency.split(",")]
    n_ctx = 1024
    eng = create_engine(model, "jit", n_ctx=n_ctx, max_seqs=max(batches),
                        threads=a.threads)       # the server's engine, with its defaults
    rng = np.random.default_rng(0)
    for line in sys.stdin:
        B, pos0 = (int(x) for x in line.split())
        pos0 = min(pos0, n_ctx - a.max_tokens - 8)
        prompt = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, pos0)]
        for s in range(B):
            for c in range(0, pos0, eng.max_tokens):
                eng.forward(Batch.prefill(prompt[c:c + eng.max_tokens], c, s))
        cur = [int(t) for t in rng.integers(100, model.config.n_vocab - 1, B)]
        for _ in range(3):                                   # warm the batch's program
            eng.forward(Batch.decode(cur, [pos0] * B, list(range(B))))
        rate = decode_rate(eng, cur, pos0, max(16, a.max_tokens // 2))
        print(json.dumps({"threads": eng.threads, "tok_s": rate}), flush=True)
    eng.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
