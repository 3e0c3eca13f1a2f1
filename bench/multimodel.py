"""Several models in one `reame serve` (issue 32's acceptance).

    python -m bench.multimodel [--only same,budget,load] [--second PATH] [--cold]

1. `same`: stories260K, SmolLM2-135M-Instruct Q4_1 and the same SmolLM2 file with
   `pooling=mean` (an embedding model), each served alone, then all three by one process: the
   greedy completions, chats and embeddings of a fixed set of inputs, interleaved, must be
   equal (embeddings: the largest difference is printed).
2. `budget`: the three in one process under a --memory-budget-mb that fits two: the inputs
   again in turn (each request's model is the coldest: it is reloaded, another unloaded), then
   from three concurrent clients; every request must succeed and answer as alone. Loads and
   unloads are counted from /v1/models and the log.
3. `load`: SmolLM2 streaming chats at full speed (two streams of 500 tokens), alone and then
   while a second model (the synthetic Qwen2.5-0.5B-shaped Q8_0 file of bench/synth.py by
   default, a realistic load: weights read and repacked, kernels compiled or read from the
   cache; --cold compiles them) is loaded by its first request: the streams' time per output
   token over the load window against alone, before and after (target <= 1.3), and the second
   model's first answer against its load time. This server runs --adaptive off (static: no
   speculation drafting the repeated streams from the first run, no tuning between runs).

Results go to bench/results/multimodel.json; a markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

from bench.hostile import SHARED, Server, request

REPO = Path(__file__).resolve().parent.parent
STORIES = SHARED / "models" / "stories260K.gguf"
SMOL = SHARED / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SECOND = Path.home() / ".cache" / "reame" / "bench" / "qwen2-0.5b-Q8_0-default-s0-v1.gguf"
COMMON = ["--kv-cache-mb", "64", "--max-seqs", "4"]
STREAM = 500                # tokens of each chat stream in `load` (~4 s at full speed)

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went", "One day, a bird"]
CHATS = ["What is the capital of France?", "Name a color.", "Say hello.", "Count to five."]
TEXTS = ["hello world", "a cat sat on the mat", "the weather is nice", "reame serves models"]


def ask(host: str, kind: str, model: str | None, x, max_tokens: int = 24):
    """One request's answer (text or vector) and its status."""
    m = {"model": model} if model else {}
    if kind == "completion":
        st, body = request("POST", host, "/v1/completions", {
            **m, "prompt": x, "max_tokens": max_tokens, "temperature": 0}, timeout=600)
        return st, json.loads(body)["choices"][0]["text"] if st == 200 else body[:300]
    if kind == "chat":
        st, body = request("POST", host, "/v1/chat/completions", {
            **m, "messages": [{"role": "user", "content": x}], "max_tokens": max_tokens,
            "temperature": 0}, timeout=600)
        return st, (json.loads(body)["choices"][0]["message"]["content"] if st == 200
                    else body[:300])
    st, body = request("POST", host, "/v1/embeddings", {**m, "input": x}, timeout=600)
    return st, json.loads(body)["data"][0]["embedding"] if st == 200 else body[:300]


WORK = [("completion", "stories", PROMPTS), ("chat", "smol", CHATS),
        ("embedding", "embed", TEXTS)]


def multi_args(budget_mb: int | None = None) -> list[str]:
    args = ["--model", f"smol={SMOL}", "--model", f"embed={SMOL},pooling=mean",
            "--alias", "stories", *COMMON]
    return args + (["--memory-budget-mb", str(budget_mb)] if budget_mb else [])


def compare(got: dict, want: dict) -> dict:
    """Per model: answers that differ; for vectors the largest absolute difference."""
    out = {}
    for name in want:
        a, b = got[name], want[name]
        if name == "embed":
            diff = max(max(abs(x - y) for x, y in zip(u, v)) for u, v in zip(a, b))
            out[name] = {"max_abs_diff": diff, "differ": sum(u != v for u, v in zip(a, b))}
        else:
            out[name] = {"differ": sum(u != v for u, v in zip(a, b)), "of": len(b)}
    return out


def alone(adaptive_dir: str) -> dict:
    want = {}
    for (kind, name, xs), (path, extra) in zip(WORK, [(STORIES, []), (SMOL, []),
                                                       (SMOL, ["--pooling", "mean"])]):
        s = Server(path, [*COMMON, *extra, "--adaptive-dir", adaptive_dir])
        try:
            want[name] = [ask(s.url, kind, None, x)[1] for x in xs]
        finally:
            s.stop()
    return want


def needs(budget_probe: Server) -> dict:
    st, body = request("GET", budget_probe.url, "/v1/models")
    return {m["id"]: m["memory_bytes"] for m in json.loads(body)["data"]}


def bench_same(want: dict, adaptive_dir: str) -> dict:
    s = Server(STORIES, [*multi_args(), "--adaptive-dir", adaptive_dir])
    try:
        got = {name: [] for _, name, _ in WORK}
        statuses = []
        for i in range(len(PROMPTS)):                   # interleaved: one of each in turn
            for kind, name, xs in WORK:
                st, ans = ask(s.url, kind, name, xs[i])
                statuses.append(st)
                got[name].append(ans)
        mem = needs(s)
        return {"statuses_not_200": sum(st != 200 for st in statuses),
                "compare": compare(got, want), "memory_bytes": mem, "rss_mb": s.rss_mb()}
    finally:
        s.stop()


def bench_budget(want: dict, mem: dict, adaptive_dir: str) -> dict:
    big = sorted(mem.values())
    budget = (big[-1] + big[-2] + big[0] // 2) // 2**20 + 1       # fits two, never three
    s = Server(STORIES, [*multi_args(budget), "--adaptive-dir", adaptive_dir])
    try:
        got = {name: [] for _, name, _ in WORK}
        statuses = []
        rss = []
        t0 = time.monotonic()
        for i in range(len(PROMPTS)):
            for kind, name, xs in WORK:
                st, ans = ask(s.url, kind, name, xs[i])
                statuses.append(st)
                got[name].append(ans)
                rss.append(s.rss_mb())
        t_turns = time.monotonic() - t0
        ok_turns = compare(got, want)
        conc = {name: [] for _, name, _ in WORK}

        def client(kind, name, xs):
            for _ in range(2):
                for x in xs:
                    st, ans = ask(s.url, kind, name, x)
                    statuses.append(st)
                    conc[name].append(ans)
        threads = [threading.Thread(target=client, args=w) for w in WORK]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(1200)
        t_conc = time.monotonic() - t0
        log = s.log.read_text()
        _, body = request("GET", s.url, "/v1/models")
        states = {m["id"]: m["state"] for m in json.loads(body)["data"]}
        return {"budget_mb": budget, "statuses_not_200": sum(st != 200 for st in statuses),
                "requests": len(statuses), "in_turn": ok_turns, "in_turn_s": round(t_turns, 2),
                "concurrent": compare(conc, {k: v * 2 for k, v in want.items()}),
                "concurrent_s": round(t_conc, 2),
                "unloads": len(re.findall(r"unloading model", log)),
                "loads": len(re.findall(r"model \S+ ready in", log)),
                "tracebacks": log.count("Traceback"), "states_at_end": states,
                "rss_mb_max": round(max(rss), 1), "rss_mb_min": round(min(rss), 1)}
    finally:
        s.stop()


# ---- load: a stream's speed while another model loads ----

def stream(host: str, model: str, content: str, max_tokens: int, out: list) -> None:
    """A streaming chat; appends the arrival time of each token-bearing event to `out`."""
    h, p = host.split(":")
    conn = HTTPConnection(h, int(p), timeout=600)
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "messages": [{"role": "user", "content": content}]}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    for line in r:
        if line.startswith(b"data: {") and b'"content"' in line:
            out.append(time.monotonic())
    conn.close()


def pcts(xs: list[float]) -> list[float]:
    xs = sorted(xs) or [float("nan")]
    return [xs[len(xs) // 2], xs[min(len(xs) - 1, int(0.95 * len(xs)))], xs[-1]]


def gaps(times: list[float], t0: float, t1: float) -> list[float]:
    return [b - a for a, b in zip(times, times[1:]) if a >= t0 and b <= t1]


def run_streams(host: str, n: int, tokens: int, during=None) -> tuple[list[list[float]], dict]:
    outs = [[] for _ in range(n)]
    threads = [threading.Thread(target=stream, args=(host, "smol", CHATS[i % len(CHATS)],
                                                     tokens, outs[i])) for i in range(n)]
    for t in threads:
        t.start()
    extra = during() if during else {}
    for t in threads:
        t.join(900)
    return outs, extra


def bench_load(second: Path, cold: bool, adaptive_dir: str) -> dict:
    env_cache = tempfile.mkdtemp(prefix="reame-kernels-") if cold else None
    # static (--adaptive off: no speculation, no tuning) so that the runs alone and during
    # the load differ by the load only: speculation would draft the repeated streams from
    # the first run's text
    args = ["--model", f"second={second}", *COMMON, "--adaptive", "off"]
    if env_cache:
        os.environ["REAME_CACHE_DIR"] = env_cache
    try:
        s = Server(SMOL, ["--alias", "smol", *args])
    finally:
        os.environ.pop("REAME_CACHE_DIR", None)
    try:
        ask(s.url, "chat", "smol", "warm up", 8)
        outs, _ = run_streams(s.url, 2, STREAM)                           # alone
        alone_gaps = [g for o in outs for g in gaps(o, o[0], o[-1])]
        info = {}

        def load_second():
            time.sleep(1.0)                               # the streams are under way
            t0 = time.monotonic()
            st, ans = ask(s.url, "completion", "second", "Once upon a time", 8)
            t1 = time.monotonic()
            _, body = request("GET", s.url, "/v1/models")
            card = next(m for m in json.loads(body)["data"] if m["id"] == "second")
            info.update(status=st, t0=t0, answered_s=round(t1 - t0, 3),
                        load_s=card.get("load_seconds"))
            return info
        outs, info = run_streams(s.url, 2, STREAM, load_second)
        t0, t1 = info["t0"], info["t0"] + (info["load_s"] or 0)
        during = [g for o in outs for g in gaps(o, t0, t1)]
        # while the second model answers its first request: the two models take turns
        serving = [g for o in outs for g in gaps(o, t1, info["t0"] + info["answered_s"])]
        again, _ = run_streams(s.url, 2, STREAM)       # alone again (the second idle, loaded)
        alone_gaps += [g for o in again for g in gaps(o, o[0], o[-1])]
        mean = lambda xs: statistics.fmean(xs) if xs else float("nan")   # noqa: E731
        return {"cold_cache": cold, "second": second.name, "second_status": info["status"],
                "second_load_s": info["load_s"], "second_answered_s": info["answered_s"],
                "tpot_alone_ms": round(1e3 * mean(alone_gaps), 2),
                "tpot_during_load_ms": round(1e3 * mean(during), 2),
                "tpot_ratio": round(mean(during) / mean(alone_gaps), 3),
                "tokens_during_load": len(during),
                "during_load_p50_p95_max_ms": [round(1e3 * x, 1) for x in pcts(during)],
                "alone_p50_p95_max_ms": [round(1e3 * x, 1) for x in pcts(alone_gaps)],
                "tpot_while_second_answers_ms": round(1e3 * mean(serving), 2)}
    finally:
        s.stop()


def table(res: dict) -> str:
    lines = ["| check | figure | target |", "|---|---|---|"]
    if "same" in res:
        r = res["same"]
        c = r["compare"]
        lines.append(f"| three in one process vs three alone | differ: stories "
                     f"{c['stories']['differ']}/{c['stories']['of']}, smol "
                     f"{c['smol']['differ']}/{c['smol']['of']}, embed max diff "
                     f"{c['embed']['max_abs_diff']:.2g}; non-200 {r['statuses_not_200']} "
                     "| 0 differ, 0 failed |")
    if "budget" in res:
        r = res["budget"]
        lines.append(f"| budget {r['budget_mb']} MiB (fits two) | {r['requests']} requests, "
                     f"non-200 {r['statuses_not_200']}, {r['loads']} loads / "
                     f"{r['unloads']} unloads, in turn differ "
                     f"{sum(v['differ'] for v in r['in_turn'].values())}, concurrent differ "
                     f"{sum(v['differ'] for v in r['concurrent'].values())}; RSS "
                     f"{r['rss_mb_min']}-{r['rss_mb_max']} MB | no request failing |")
    for key in ("load", "load_cold"):
        if key in res:
            r = res[key]
            lines.append(f"| chat TPOT while {r['second']} loads "
                         f"({'cold' if r['cold_cache'] else 'warm'} kernel cache) | "
                         f"{r['tpot_during_load_ms']} vs {r['tpot_alone_ms']} ms alone: "
                         f"**{r['tpot_ratio']}x** ({r['tokens_during_load']} tokens); "
                         f"load {r['second_load_s']} s, first answer {r['second_answered_s']} s "
                         f"(chat TPOT meanwhile {r['tpot_while_second_answers_ms']} ms) "
                         "| <= 1.3x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="same,budget,load")
    ap.add_argument("--second", type=Path, default=SECOND)
    ap.add_argument("--cold", action="store_true", help="also the load with a cold kernel cache")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "multimodel.json")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    for p in (STORIES, SMOL):
        if not p.exists():
            raise SystemExit(f"{p} is missing (set REAME_SHARED)")
    adaptive_dir = tempfile.mkdtemp(prefix="reame-mm-adaptive-")
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "argv": sys.argv[1:],
           "cpus": os.cpu_count()}
    if only & {"same", "budget"}:
        want = alone(adaptive_dir)
        same = bench_same(want, adaptive_dir)
        if "same" in only:
            res["same"] = same
        if "budget" in only:
            res["budget"] = bench_budget(want, same["memory_bytes"], adaptive_dir)
    if "load" in only:
        if not a.second.exists():
            raise SystemExit(f"{a.second} is missing: python -m bench.synth makes it")
        res["load"] = bench_load(a.second, False, adaptive_dir)
        if a.cold:
            res["load_cold"] = bench_load(a.second, True, adaptive_dir)
    print(json.dumps(res, indent=1, default=str))
    print(table(res))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
