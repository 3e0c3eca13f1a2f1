"""Adaptive on vs off: one changing trace replayed twice against `reame serve`, same seed.

    python -m bench.adaptive [--model shape:mix | --gguf PATH] [--phase-seconds 300]
                             [--phases chat,documents,agentic,mixed] [--rates 2.5,0.45,5]
                             [--threads 2] [--window 30] [--restart] [--reame-args "..."]
                             [--json bench/results/adaptive.json] [--plot docs/img/adaptive.png]
                             [--markdown docs/benchmarks.md] [--quick]

The trace (generated from --seed, identical for both runs) is a sequence of phases of
--phase-seconds each, requests arriving as a Poisson process at the phase's rate (--rates, one
per phase, req/s; the defaults saturate an adaptive-off server on the Qwen2.5-0.5B-shaped Q8_0
model with 2 threads in every phase):
- chat: a unique 40-160 token prompt, 64 output tokens;
- documents: a unique 700-1400 token document and a question, 24 output tokens;
- agentic: bursts (a burst of 2-6 requests at each Poisson arrival) sharing one ~600-token tool
  prefix plus a unique 10-30 token task, 32 output tokens;
- mixed (not in the default list; 2 req/s): the long-document + chat mix, each arrival a document
  (as above) with probability 0.25, else a chat: chats decode while documents are computed,
  the steps where the prompt budget sets their time per output token (docs/adaptive.md, the
  token budget).
Requests are streamed /v1/completions (greedy, end-of-generation tokens banned), sent at their
arrival time with no client-side cap, never retried; one not finished when its phase ends is
abandoned (the client disconnects, the server cancels it: counted per phase), so a phase's
backlog does not run into the next one (it hid the agentic phase of the first run). The server runs once with `--adaptive off`
and once with `--adaptive on`, each with a fresh `--adaptive-dir` (nothing learned before);
--restart adds a third run, adaptive on, started from the strategy the second run saved.

Per run, in windows of --window seconds (by completion time): completion tokens/s and p95
latency per output token (TPOT: (latency - TTFT) / (tokens - 1)) of the requests finished in
the window; per phase, the steady state (its second half): tok/s, p95 TPOT, p95 latency and
the engine's work (prompt tokens computed plus tokens generated, a second: a mixed phase's
completion tok/s moves with which kinds of request finished in the window); the
first minute; after each change of phase, the time until the window tok/s stays within 10% of
the phase's steady state (re-convergence). The adaptive run's GET /v1/adaptive report is kept.
The adaptive runs' reports are also taken as each phase ends (what the token budget did there:
a line per phase under the table). The table is printed; JSON to --json; the plot (tok/s and p95 TPOT over time, both runs; needs
matplotlib, the `bench` extra) to --plot; --markdown puts a dated section between
<!-- adaptive:begin --> and <!-- adaptive:end -->.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.trace import (REPO, approx_tokens, complete, free_port, make_client, model_id,
                         percentile, sentence, serving, tool_prefix, user_task, warm_up,
                         write_section)

PHASES = {                     # name -> (default rate req/s, output tokens)
    "chat": (2.5, 64),
    "documents": (0.45, 24),
    "agentic": (5.0, 32),
    "mixed": (2.0, None),      # a document (24 tokens out) or a chat (64)
}
DOC_SHARE = 0.25               # of the mixed phase's arrivals
QUICK = dict(phase_seconds=20.0, window=5.0)


# ------------------------------------------------------------------------------ the trace
def _words(rng: random.Random, tokens: int) -> str:
    out, n = [], 0
    while n < tokens:
        s = sentence(rng, rng.randint(8, 16))
        out.append(s)
        n += approx_tokens(s)
    return " ".join(out)


def make_trace(phases: list[str], rates: list[float], seconds: float, seed: int) -> list[dict]:
    """Every request: its arrival offset (s), phase, prompt and output tokens."""
    rng = random.Random(seed)
    prefix = tool_prefix(seed)
    out, t0 = [], 0.0
    for k, (phase, rate) in enumerate(zip(phases, rates)):
        t = t0
        while True:
            t += rng.expovariate(rate if phase != "agentic" else rate / 4)
            if t >= t0 + seconds:
                break
            burst = rng.randint(2, 6) if phase == "agentic" else 1
            for _ in range(burst):
                i = len(out)
                kind = phase
                if phase == "mixed":
                    kind = "documents" if rng.random() < DOC_SHARE else "chat"
                if kind == "chat":
                    prompt = f"User {i}: " + _words(rng, rng.randint(40, 160)) + "\nAssistant:"
                elif kind == "documents":
                    prompt = ("Document:\n" + _words(rng, rng.randint(700, 1400))
                              + f"\nQuestion {i}: what is this document about?\nAnswer:")
                else:
                    prompt = prefix + user_task(rng, i)
                out.append({"i": i, "at": t, "phase": phase, "phase_index": k,
                            "prompt": prompt, "max_tokens": PHASES[kind][1]})
        t0 += seconds
    return out


async def replay(url: str, trace: list[dict], body: dict, seconds: float) -> list[dict]:
    """Send every request at its time; one not finished when its phase ends is abandoned (its
    client disconnects: the server cancels it), so that no phase's backlog runs into the
    next one and each phase measures its own mix."""
    async with make_client() as client:
        t0 = time.perf_counter()

        async def one(req):
            await asyncio.sleep(max(0.0, t0 + req["at"] - time.perf_counter()))
            sent = time.perf_counter()
            end = t0 + (req["phase_index"] + 1) * seconds
            try:
                rec = await asyncio.wait_for(
                    complete(client, url, {**body, "prompt": req["prompt"],
                                           "max_tokens": req["max_tokens"]}, t0),
                    timeout=max(0.001, end - sent))
            except asyncio.TimeoutError:
                rec = {"sent": sent - t0, "status": None, "outcome": "abandoned", "ttft": None,
                       "latency": time.perf_counter() - sent, "prompt_tokens": None,
                       "completion_tokens": None, "cached_tokens": None, "error": None}
            rec.pop("text", None)
            return {"i": req["i"], "at": req["at"], "phase": req["phase"],
                    "phase_index": req["phase_index"], **rec}
        return list(await asyncio.gather(*(one(r) for r in trace)))


def fetch_report(url: str) -> dict | None:
    from bench.trace import httpx
    try:
        return httpx.get(url + "/v1/adaptive", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return None


# ------------------------------------------------------------------------------ statistics
def tpot(r: dict) -> float | None:
    n = r.get("completion_tokens") or 0
    if r["outcome"] != "ok" or n < 2 or r["ttft"] is None:
        return None
    return (r["latency"] - r["ttft"]) / (n - 1)


def series(records: list[dict], window: float, end: float) -> list[dict]:
    """Per window of completion time: tok/s, p95 TPOT, p95 latency, requests done."""
    ok = [r for r in records if r["outcome"] == "ok"]
    out = []
    t = 0.0
    while t < end:
        done = [r for r in ok if t <= r["sent"] + r["latency"] < t + window]
        out.append({"t": t + window, "tok_s": sum(r["completion_tokens"] for r in done) / window,
                    "tpot_p95": percentile([tpot(r) for r in done], 95),
                    "latency_p95": percentile([r["latency"] for r in done], 95),
                    "done": len(done)})
        t += window
    return out


def summarize(records: list[dict], phases: list[str], seconds: float, window: float) -> dict:
    end = max((r["sent"] + r["latency"] for r in records), default=0.0)
    ser = series(records, window, end)
    ok = [r for r in records if r["outcome"] == "ok"]
    per_phase = []
    for k, name in enumerate(phases):
        lo, hi = k * seconds, (k + 1) * seconds
        # steady state: requests of this phase that finished in the second half of it
        steady = [r for r in ok if r["phase_index"] == k
                  and lo + seconds / 2 <= r["sent"] + r["latency"] < hi]
        wins = [w for w in ser if lo + seconds / 2 < w["t"] <= hi]
        tok_s = (sum(w["tok_s"] for w in wins) / len(wins)) if wins else 0.0
        # re-convergence: the first window after the change from which every window of the
        # phase stays within 10% of the steady tok/s
        conv = None
        phase_wins = [w for w in ser if lo < w["t"] <= hi]
        for j, w in enumerate(phase_wins):
            if tok_s and all(abs(x["tok_s"] - tok_s) <= 0.1 * tok_s for x in phase_wins[j:]):
                conv = w["t"] - lo
                break
        rec = [r for r in records if r["phase_index"] == k]
        per_phase.append({
            "phase": name, "requests": len(rec),
            "rejected": sum(r["outcome"].startswith("rejected") for r in rec),
            "abandoned": sum(r["outcome"] == "abandoned" for r in rec),
            "failed": sum(r["outcome"] == "failed" for r in rec),
            "steady_tok_s": tok_s,
            # the engine's work: prompt tokens computed (cache hits left out) and generated,
            # a second; unlike completion tok/s, it does not depend on which kinds of request
            # happened to finish in the window (a mixed phase's chats return 64 tokens for
            # ~100 prompt tokens, its documents 24 for ~1,500)
            "steady_work_tok_s": sum((r.get("prompt_tokens") or 0) - (r.get("cached_tokens") or 0)
                                     + (r.get("completion_tokens") or 0)
                                     for r in steady) / (seconds / 2),
            "steady_tpot_p95": percentile([tpot(r) for r in steady], 95),
            "steady_latency_p95": percentile([r["latency"] for r in steady], 95),
            "reconverged_s": conv})
    first = [w for w in ser if w["t"] <= 60.0]
    return {"series": ser, "phases": per_phase,
            "first_minute_tok_s": sum(w["tok_s"] for w in first) / len(first) if first else 0.0,
            "tok_s": sum(r["completion_tokens"] for r in ok) / end if end else 0.0,
            "requests": len(records), "ok": len(ok)}


def budget_line(run: dict, report: dict | None = None, label: str | None = None) -> str | None:
    """What the token budget did in a run (its GET /v1/adaptive report, or `report`: the one
    taken as a phase ended), for the table."""
    b = ((report if report is not None else run.get("report")) or {}).get("budget")
    if not b or not b.get("moving"):
        return None
    m = b.get("model") or {}
    fit = (f"step {m['step_ms']:.1f} ms + {m['per_decode_token_ms']:.2f} ms per decode token "
           f"+ {m['per_prompt_token_ms']:.2f} ms per prompt token" if m else "no fit")
    return (f"{label or run['label']}: token budget for a {b['tpot_limit_s']:g} s step: {fit} "
            f"(margin {b['margin']:.2f}); beside a full batch, {b['prompt_budget_at_max_batch']} "
            f"prompt tokens a step (configured {b['configured']['prefill_chunk']}); steps with "
            f"decode and prompt tokens: p95 {_f(b['mixed_step_p95_s'], '.3f')} s, median "
            f"{b['mixed_prompt_tokens_p50']} prompt tokens; {_f(b['shrunk_share'], '.0%')} of "
            f"decoding steps under the configured chunk")


def _ratio(x, y):
    return x / y if x is not None and y else None


def _f(v, fmt=".2f"):
    return "-" if v is None else format(v, fmt)


def table(runs: list[dict]) -> str:
    base = runs[0]["summary"]
    lines = ["| run | phase | steady tok/s | vs off | p95 TPOT s | vs off | p95 latency s | "
             "re-converged s | rejected | abandoned | prompt + generated tok/s | vs off |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s = run["summary"]
        for p, b in zip(s["phases"], base["phases"]):
            ratio = p["steady_tok_s"] / b["steady_tok_s"] if b["steady_tok_s"] else None
            tr = (p["steady_tpot_p95"] / b["steady_tpot_p95"]
                  if p["steady_tpot_p95"] and b["steady_tpot_p95"] else None)
            lines.append(f"| {run['label']} | {p['phase']} | {p['steady_tok_s']:.1f} | "
                         f"{_f(ratio)}x | {_f(p['steady_tpot_p95'], '.3f')} | {_f(tr)}x | "
                         f"{_f(p['steady_latency_p95'])} | {_f(p['reconverged_s'], '.0f')} | "
                         f"{p['rejected']} | {p.get('abandoned', 0)} | "
                         f"{_f(p.get('steady_work_tok_s'), '.1f')} | "
                         f"{_f(_ratio(p.get('steady_work_tok_s'), b.get('steady_work_tok_s')))}x |")
    lines.append("")
    lines.append("| run | whole trace tok/s | vs off | first minute tok/s | vs off |")
    lines.append("|---|---|---|---|---|")
    for run in runs:
        s = run["summary"]
        lines.append(f"| {run['label']} | {s['tok_s']:.1f} | "
                     f"{_f(s['tok_s'] / base['tok_s'] if base['tok_s'] else None)}x | "
                     f"{s['first_minute_tok_s']:.1f} | "
                     f"{_f(s['first_minute_tok_s'] / base['first_minute_tok_s'] if base['first_minute_tok_s'] else None)}x |")
    budgets = []
    for run in runs:
        phases = run.get("phase_reports") or []
        names = [p["phase"] for p in run["summary"]["phases"]]
        lines_ = ([budget_line(run, rep, f"{run['label']}, end of {name}")
                   for name, rep in zip(names, phases) if rep] if phases else [budget_line(run)])
        budgets += [x for x in lines_ if x]
    if budgets:
        lines += [""] + [f"- {x}" for x in budgets]
    return "\n".join(lines)


def plot(runs: list[dict], phases: list[str], seconds: float, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", flush=True)
        return False
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for run in runs:
        ser = run["summary"]["series"]
        ts = [w["t"] / 60 for w in ser]
        a1.plot(ts, [w["tok_s"] for w in ser], label=run["label"])
        a2.plot(ts, [w["tpot_p95"] for w in ser], label=run["label"])
    for k, name in enumerate(phases):
        for ax in (a1, a2):
            ax.axvline(k * seconds / 60, color="grey", lw=0.5)
        a1.text((k + 0.05) * seconds / 60, 0, name, fontsize=8, va="bottom")
    a1.set_ylabel("completion tok/s")
    a2.set_ylabel("p95 TPOT (s)")
    a2.set_xlabel("minutes")
    a1.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True


# ------------------------------------------------------------------------------ main
def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m bench.adaptive",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0", help="bench/synth.py shape:mix")
    ap.add_argument("--gguf", default=None, help="serve this file instead of a synthetic model")
    ap.add_argument("--phases", default="chat,documents,agentic")
    ap.add_argument("--rates", default=None, help="req/s per phase (comma list)")
    ap.add_argument("--phase-seconds", type=float, default=300.0)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--restart", action="store_true",
                    help="a third run: adaptive on, from the strategy the second one saved")
    ap.add_argument("--reame-args", default="", help="extra `reame serve` arguments")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "adaptive.json"))
    ap.add_argument("--plot", default=None, help="write the PNG plot here")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--quick", action="store_true", help="20 s phases (a smoke test)")
    a = ap.parse_args(argv)
    if a.quick:
        a.phase_seconds, a.window = QUICK["phase_seconds"], QUICK["window"]
    a.phases = [p.strip() for p in a.phases.split(",") if p.strip()]
    for p in a.phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p!r}: one of {', '.join(PHASES)}")
    a.rates = ([float(x) for x in a.rates.split(",")] if a.rates
               else [PHASES[p][0] for p in a.phases])
    if len(a.rates) != len(a.phases):
        ap.error("--rates needs one rate per phase")
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    if a.gguf:
        model = Path(a.gguf)
    else:
        from bench.engine import bench_dir
        from bench.synth import synth_model
        shape, mix = a.model.split(":")
        model = synth_model(bench_dir(), shape, mix)
    from bench.trace import eog_ids
    body = {"temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "logit_bias": {str(i): -100 for i in eog_ids(model)}}
    trace = make_trace(a.phases, a.rates, a.phase_seconds, a.seed)
    print(f"{len(trace)} requests over {len(a.phases)} phases of {a.phase_seconds:.0f} s",
          flush=True)
    state = Path(tempfile.mkdtemp(prefix="reame-adaptive-bench-"))
    plan = [("adaptive off", "off", state / "off"), ("adaptive on", "on", state / "on")]
    if a.restart:
        plan.append(("adaptive on, restarted", "on", state / "on"))
    runs = []
    for label, mode, sdir in plan:
        port = free_port()
        cmd = [sys.executable, "-m", "reame", "serve", str(model), "--port", str(port),
               "--threads", str(a.threads), "--adaptive", mode, "--adaptive-dir", str(sdir),
               *shlex.split(a.reame_args)]
        url = f"http://127.0.0.1:{port}"
        with serving(cmd, url, label.replace(" ", "-").replace(",", "")):
            name = model_id(url)
            sbody = {**body, "model": name} if name else body
            warm_up(url, {**sbody, "max_tokens": 8})
            phase_reports = [None] * len(a.phases)     # GET /v1/adaptive as each phase ends

            def take(k, url=url, out=phase_reports):
                out[k] = fetch_report(url)
            timers = [threading.Timer((k + 1) * a.phase_seconds - 2.0, take, (k,))
                      for k in range(len(a.phases))]
            for t in timers:
                t.start()
            records = asyncio.run(replay(url, trace, sbody, a.phase_seconds))
            for t in timers:
                t.join()
            report = fetch_report(url)
        s = summarize(records, a.phases, a.phase_seconds, a.window)
        runs.append({"label": label, "mode": mode, "summary": s, "report": report,
                     "phase_reports": phase_reports,
                     "requests": records})
        print(table(runs).split("\n\n")[0].splitlines()[-len(a.phases):][0], flush=True)

    command = "python -m bench.adaptive" + (" " + shlex.join(argv) if argv else "")
    when = time.strftime("%Y-%m-%d")
    text = table(runs)
    print("\n" + text)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(
        {"date": when, "command": command, "model": str(model),
         "config": {k: getattr(a, k) for k in ("phases", "rates", "phase_seconds", "window",
                                               "seed", "threads")},
         "runs": runs}, indent=1))
    plotted = plot(runs, a.phases, a.phase_seconds, Path(a.plot)) if a.plot else False
    if a.markdown:
        what = (f"`{command}` ({model.name}, --threads {a.threads}; phases "
                + ", ".join(f"{p} at {r:g} req/s" for p, r in zip(a.phases, a.rates))
                + f", {a.phase_seconds:.0f} s each; steady state = the second half of a phase; "
                f"TPOT = (latency - TTFT) / (tokens - 1); re-converged = seconds after the "
                f"change until every {a.window:.0f} s window stays within 10% of the steady "
                "tok/s).")
        if plotted:
            rel = Path(a.plot).resolve().relative_to(Path(a.markdown).resolve().parent)
            what += f"\n\n![tok/s and p95 TPOT over time]({rel.as_posix()})"
        write_section(Path(a.markdown), f"Adaptive on vs off ({when})", what + "\n\n" + text,
                      "adaptive")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
