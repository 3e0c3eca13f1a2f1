"""Record llama.cpp's greedy tokens for synthetic models (tests/golden/llama_cpp_greedy.json).

For each model spec already in the golden file (or given with --add NAME=SHAPE:MIX:VOCAB), write
the model with bench/synth.py, start `llama-server -m FILE -t 2 -c N_CTX -np 1`, POST
/completion with the golden prompt as token ids (n_predict 24, temperature 0, ignore_eos,
n_probs 5), and store the tokens, the first token's top-5 log-probabilities and, per position,
the gap between llama.cpp's top two log-probabilities (quantised models are compared only
where it exceeds the quantisation noise). Needs a
llama-server binary (see docs/benchmarks.md for building it); not part of the test suite.

    python -m bench.llama_golden --server /path/to/llama-server --only gemma2 gemma3 \\
        --add gemma2=tiny-gemma2:F32:llama-spm --add gemma3=tiny-gemma3:F32:llama-spm
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from .synth import write_model

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "llama_cpp_greedy.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def record(server: str, path: Path, prompt: list[int], n_ctx: int, n: int = 24) -> dict:
    port = _free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(server).parent))
    proc = subprocess.Popen([server, "-m", str(path), "-t", "2", "-c", str(n_ctx), "-np", "1",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        out = _post(base + "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0,
                                           "ignore_eos": True, "n_probs": 5,
                                           "cache_prompt": False, "return_tokens": True})
        probs = out["completion_probabilities"]
        # llama-server merges the entries of tokens that end inside a UTF-8 character: an
        # entry is the last token of its group, so align entries to tokens by id, in order
        gaps, i = [None] * len(out["tokens"]), 0
        for e in probs:
            while out["tokens"][i] != e["id"]:
                i += 1
            top = e["top_logprobs"]
            gaps[i] = round(top[0]["logprob"] - top[1]["logprob"], 4)
            i += 1
        return {"tokens": out["tokens"],
                "first_top_logprobs": [[t["id"], t["logprob"]] for t in probs[0]["top_logprobs"]],
                "gaps": gaps}   # per position: llama.cpp's top-1 minus top-2 log-probability
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--only", nargs="*", help="record only these golden models")
    ap.add_argument("--add", action="append", default=[], metavar="NAME=SHAPE:MIX:VOCAB")
    ap.add_argument("--source", help="the _source line (llama.cpp build and date)")
    args = ap.parse_args(argv)
    golden = json.loads(GOLDEN.read_text())
    for item in args.add:
        name, spec = item.split("=", 1)
        shape, mix, vocab = spec.split(":")
        golden["models"][name] = {"write_model": {"shape": shape, "mix": mix, "vocab": vocab}}
    names = args.only or sorted(golden["models"])
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            spec = dict(golden["models"][name]["write_model"])
            path = write_model(Path(d) / f"{name}.gguf", spec.pop("shape"), spec.pop("mix"),
                               spec.pop("vocab"), **spec)
            got = record(args.server, path, golden["prompt"], golden["n_ctx"])
            golden["models"][name].update(got)
            print(name, got["tokens"])
    if args.source:
        golden["_source"] = args.source
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
