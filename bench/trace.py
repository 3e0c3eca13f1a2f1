"""Trace-replay serving benchmark: request traces replayed against OpenAI-compatible servers.

    python -m bench.trace [--model shape:mix | --gguf PATH] [--pattern agentic,multiturn]
                          [--rate 2] [--requests 80] [--conversations 8] [--turns 10]
                          [--output-tokens 32] [--seed 0] [--threads 2] [--reame-args "..."]
                          [--llama-server PATH] [--llama-args "..."] [--url URL] [--eog-ids 2,3]
                          [--json bench/results/trace.json] [--markdown docs/benchmarks.md]
                          [--quick]
    python -m bench.trace --pool RUN.json RUN.json ... [--markdown FILE]

Patterns (generated from --seed, the same for every server of a run):
- agentic: --requests completions arriving as a Poisson process of --rate req/s; every prompt is
  one ~600-token system prefix (fake JSON tool schemas, identical for all requests) followed by
  a unique 10-30 token task;
- multiturn: --conversations conversations starting as a Poisson process of --rate conv/s, of
  --turns turns each; a turn is sent when the previous one finished and resends the history
  (previous prompt + the reply it got + a new ~270-token user message: ~3,000 tokens by turn 10);
  with --think S, a user pauses an exponential time of mean S seconds after each reply first
  (without it, two conversations that once finish in the same step stay in lockstep: each
  turn of the second waits for the first's whole prefill).
Every request is a streamed /v1/completions call of --output-tokens tokens (temperature 0,
end-of-generation tokens banned with logit_bias), sent at its arrival time with no client-side
concurrency cap, never retried. The servers run one after the other: Reame (`python -m reame
serve MODEL --threads N`), then llama-server if --llama-server is given (`-np 4 -c 8192 -t N`);
--url runs only against a server already listening. Before timing, each server must answer a
warm-up completion with exactly --output-tokens tokens. (llama-server shares -c among its -np
slots unless its KV cache is unified: if turn-10 prompts are refused, add --llama-args "-kvu" or a
larger -c.)

Per server x pattern: completion tok/s over the wall time from the first send to the last
completion, offered tok/s (rate x output tokens, agentic), rejected requests (HTTP >= 400, 429
counted apart), latency and TTFT p50/p95, prefix hits (sum cached_tokens / sum prompt_tokens
where the server reports usage.prompt_tokens_details.cached_tokens), and for multiturn the p50
TTFT of each turn (turn 1 vs the last). The table is printed; JSON with every request's record
goes to --json; --markdown FILE puts a dated section between <!-- trace:begin --> and
<!-- trace:end --> (appended the first time, only that section replaced afterwards).

--pool reads the JSON of several multiturn runs (other seeds, think times) and, per server,
pools their requests turn by turn: each turn's p50 TTFT over every conversation of every run
(8 conversations a run make a noisy median per turn; a run's turn-1 median also depends on how
its conversations happened to start together) and the last turn's against the first's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import httpx
except ImportError:              # newer openai releases depend on httpx2, the same API renamed
    import httpx2 as httpx

REPO = Path(__file__).resolve().parent.parent
MARKS = ("<!-- trace:begin -->", "<!-- trace:end -->")
PATTERNS = ("agentic", "multiturn")
DEFAULTS = dict(rate=2.0, requests=80, conversations=8, turns=10, output_tokens=32,
                prefix_tokens=600, user_tokens=270)
QUICK = dict(rate=4.0, requests=6, conversations=2, turns=3, output_tokens=8,
             prefix_tokens=100, user_tokens=40)
TIMEOUT_S = 600.0


# ------------------------------------------------------------------------------ the traces
VERBS = ("search list create update delete fetch summarize translate schedule cancel validate "
         "export archive compare estimate assign approve refund notify").split()
THINGS = ("orders invoices customers tickets flights hotels files emails events payments "
          "shipments reports users repositories alerts contracts meetings builds").split()
PARAMS = {"string": "query name region status currency language owner path email city tag "
                    "reason".split(),
          "integer": "limit offset page year quantity priority days amount".split(),
          "boolean": "verbose dry_run include_archived notify force".split()}
WORDS = ("the a new old last next first every this that our their customer team project report "
         "system service data order account invoice meeting budget plan release issue change "
         "request review test build deploy server client user price week month quarter year "
         "today tomorrow morning afternoon quickly carefully again still already only also "
         "please need want check send find make keep move open close update write read share "
         "because before after while when if and but or so then with without from into about "
         "for of on at by to in is was are were will should could can must has have had").split()
NAMES = "Alice Bob Chen Dana Emil Farah Goran Hana Ivo Jun Kira Leo Mina Nils Omar Pia".split()

_TOKEN_PROXY = re.compile(r"[^\W\d_]+|\d+|[^\w\s]+|_")


def approx_tokens(text: str) -> int:
    """Word-count proxy for a BPE tokenizer: words, numbers, underscores and runs of other
    punctuation (within 3% of Qwen2's tokenizer on these traces)."""
    return len(_TOKEN_PROXY.findall(text))


def arrivals(n: int, rate: float, rng: random.Random) -> list[float]:
    """Offsets (s) of a Poisson process of `rate` events/s: 0, then exponential gaps."""
    t, out = 0.0, []
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out


def tool_prefix(seed: int, tokens: int = 600) -> str:
    """A system prompt listing fake JSON tool schemas, ~`tokens` long (approx_tokens)."""
    rng = random.Random(f"{seed}-tools")
    head = ("You are an agent that completes tasks by calling tools. Answer with one tool call "
            "as JSON. The tools:\n")
    lines, names, n = [], set(), approx_tokens(head)
    while n < tokens:
        verb, thing = rng.choice(VERBS), rng.choice(THINGS)
        if f"{verb}_{thing}" in names:
            continue
        names.add(f"{verb}_{thing}")
        props = {}
        for _ in range(rng.randint(2, 4)):
            kind = rng.choice(list(PARAMS))
            p = rng.choice(PARAMS[kind])
            props[p] = {"type": kind, "description": f"The {p.replace('_', ' ')} of the {thing}"}
        tool = {"name": f"{verb}_{thing}",
                "description": f"{verb.capitalize()} {thing} in the {rng.choice(WORDS[:20])} "
                               f"{rng.choice(THINGS)} system.",
                "parameters": {"type": "object", "properties": props,
                               "required": sorted(props)[:1]}}
        lines.append(json.dumps(tool) + "\n")
        n += approx_tokens(lines[-1])
    if len(lines) > 1 and n - tokens > approx_tokens(lines[-1]) / 2:     # the closer size
        lines.pop()
    return head + "".join(lines) + "\n"


def sentence(rng: random.Random, words: int) -> str:
    ws = [rng.choice(WORDS) for _ in range(words)]
    return " ".join([ws[0].capitalize(), *ws[1:]]) + "."


def user_task(rng: random.Random, i: int) -> str:
    """A unique 10-30 token task."""
    target = rng.randint(10, 30)
    text = f"{rng.choice(NAMES)} asks (ticket {i}): {rng.choice(VERBS)} the {rng.choice(THINGS)}"
    while approx_tokens(text) < target - 1:
        text += " " + rng.choice(WORDS)
    return text + "."


def agentic_trace(n: int, rate: float, seed: int, prefix_tokens: int = 600) -> list[dict]:
    """[{"i", "at", "prompt"}]: the shared tool prefix + a unique task, Poisson arrivals."""
    prefix = tool_prefix(seed, prefix_tokens)
    rng = random.Random(f"{seed}-agentic")
    at = arrivals(n, rate, random.Random(f"{seed}-agentic-arrivals"))
    return [{"i": i, "at": at[i], "prompt": f"{prefix}User: {user_task(rng, i)}\nAssistant:"}
            for i in range(n)]


def user_message(rng: random.Random, tokens: int) -> str:
    """A ~`tokens`-long user message of random sentences."""
    text = f"{rng.choice(NAMES)} here."
    while approx_tokens(text) < tokens:
        text += " " + sentence(rng, rng.randint(6, 16))
    return text


def multiturn_trace(conversations: int, turns: int, rate: float, seed: int,
                    user_tokens: int = 270, think: float = 0.0) -> list[dict]:
    """[{"conv", "at", "user": [message of each turn], "think": [pause before each turn]}],
    Poisson conversation starts; the pause before turns 2.. is exponential with mean `think`
    seconds (0: each turn is sent as soon as the previous one finished)."""
    at = arrivals(conversations, rate, random.Random(f"{seed}-multiturn-arrivals"))
    out = []
    for c in range(conversations):
        rng = random.Random(f"{seed}-multiturn-{c}")
        user = [user_message(rng, user_tokens) for _ in range(turns)]
        pause = random.Random(f"{seed}-multiturn-think-{c}")
        out.append({"conv": c, "at": at[c], "user": user,
                    "think": [0.0] + [pause.expovariate(1 / think) if think > 0 else 0.0
                                      for _ in range(turns - 1)]})
    return out


def next_prompt(prompt: str, reply: str, message: str) -> str:
    """The next turn's prompt: the previous prompt + its reply + the new user message."""
    if not prompt:
        return f"A conversation between a user and an assistant.\n\nUser: {message}\nAssistant:"
    return f"{prompt}{reply}\nUser: {message}\nAssistant:"


# ------------------------------------------------------------------------------ the client
def make_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=TIMEOUT_S, limits=httpx.Limits(
        max_connections=None, max_keepalive_connections=None))


def chunk_text(choice: dict) -> str:
    """The text a streamed choice carries: `text` (/v1/completions) or `delta.content` (chat)."""
    if "text" in choice:
        return choice.get("text") or ""
    return (choice.get("delta") or {}).get("content") or ""


async def complete(client, url: str, body: dict, t0: float,
                   path: str = "/v1/completions") -> dict:
    """One streamed request to path (/v1/completions or /v1/chat/completions); its record
    (times in s, `sent` from t0; ttft and last_token from the send; timings: llama-server's
    last `timings` object, if any)."""
    start = time.perf_counter()
    rec = {"sent": start - t0, "status": None, "outcome": "failed", "ttft": None,
           "last_token": None, "latency": None, "prompt_tokens": None, "completion_tokens": None,
           "cached_tokens": None, "text": "", "timings": None, "error": None}
    parts, first_chunk = [], None
    try:
        async with client.stream("POST", url + path, json=body) as r:
            rec["status"] = r.status_code
            if r.status_code >= 400:
                rec["outcome"] = "rejected_429" if r.status_code == 429 else "rejected_other"
                rec["error"] = (await r.aread()).decode(errors="replace")[:500]
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    ev = json.loads(data)
                    if ev.get("error"):
                        rec["error"] = json.dumps(ev["error"])[:500]
                        break
                    now = time.perf_counter() - start
                    for ch in ev.get("choices") or []:
                        first_chunk = now if first_chunk is None else first_chunk
                        text = chunk_text(ch)
                        if text:
                            rec["ttft"] = now if rec["ttft"] is None else rec["ttft"]
                            rec["last_token"] = now
                        parts.append(text)
                    if ev.get("timings"):
                        rec["timings"] = ev["timings"]
                    if u := ev.get("usage"):
                        rec["prompt_tokens"] = u.get("prompt_tokens")
                        rec["completion_tokens"] = u.get("completion_tokens")
                        rec["cached_tokens"] = (u.get("prompt_tokens_details") or {}).get(
                            "cached_tokens")
    except (httpx.HTTPError, ValueError) as e:           # transport error, malformed JSON
        rec["error"] = f"{type(e).__name__}: {e}"
    rec["latency"] = time.perf_counter() - start
    rec["text"] = "".join(parts)
    if rec["ttft"] is None:           # every chunk had empty text: the first one carried tokens
        rec["ttft"] = rec["last_token"] = first_chunk
    if rec["status"] == 200 and rec["error"] is None:
        rec["outcome"] = "ok"
    return rec


async def _at(t0: float, offset: float) -> None:
    await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))


async def replay_agentic(url: str, trace: list[dict], body: dict) -> list[dict]:
    """Send every request of the trace at its arrival offset; their records."""
    async with make_client() as client:
        t0 = time.perf_counter()

        async def one(req):
            await _at(t0, req["at"])
            rec = await complete(client, url, {**body, "prompt": req["prompt"]}, t0)
            return {"i": req["i"], "at": req["at"], **rec}
        return list(await asyncio.gather(*(one(r) for r in trace)))


async def replay_multiturn(url: str, trace: list[dict], body: dict) -> list[dict]:
    """Start each conversation at its offset, each turn when the previous one finished (a
    failed turn ends its conversation); the records of every turn sent."""
    async with make_client() as client:
        t0 = time.perf_counter()

        async def conversation(conv):
            await _at(t0, conv["at"])
            prompt, reply, out = "", "", []
            for k, message in enumerate(conv["user"]):
                await asyncio.sleep(conv["think"][k])      # the user reads the reply
                prompt = next_prompt(prompt, reply, message)
                rec = await complete(client, url, {**body, "prompt": prompt}, t0)
                out.append({"conv": conv["conv"], "turn": k + 1, "at": conv["at"],
                            "prompt_chars": len(prompt), **rec})
                if rec["outcome"] != "ok":
                    break
                reply = rec["text"]
            return out
        return [r for rs in await asyncio.gather(*(conversation(c) for c in trace)) for r in rs]


# ------------------------------------------------------------------------------ statistics
def percentile(xs, p: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default); None when empty."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: list[dict], pattern: str, rate: float, output_tokens: int) -> dict:
    ok = [r for r in records if r["outcome"] == "ok"]
    count = {o: sum(r["outcome"] == o for r in records)
             for o in ("rejected_429", "rejected_other", "failed")}
    wall = (max(r["sent"] + r["latency"] for r in records) - min(r["sent"] for r in records)
            if records else 0.0)
    tokens = sum(r["completion_tokens"] or 0 for r in ok)
    reported = [r for r in ok if r["cached_tokens"] is not None and r["prompt_tokens"]]
    prompt_sum = sum(r["prompt_tokens"] for r in reported)
    s = {"pattern": pattern, "rate": rate, "requests": len(records), "ok": len(ok),
         "rejected": count["rejected_429"] + count["rejected_other"], **count,
         "wall_s": wall, "completion_tokens": tokens, "tok_s": tokens / wall if wall else 0.0,
         "offered_tok_s": rate * output_tokens if pattern == "agentic" else None,
         "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
         "prefix_hits": sum(r["cached_tokens"] for r in reported) / prompt_sum
         if prompt_sum else None}
    for key in ("latency", "ttft"):
        for p in (50, 95):
            s[f"{key}_p{p}"] = percentile([r[key] for r in ok], p)
    if pattern == "multiturn":
        turns = max((r["turn"] for r in records), default=0)
        s["ttft_p50_by_turn"] = [percentile([r["ttft"] for r in ok if r["turn"] == k], 50)
                                 for k in range(1, turns + 1)]
        first, last = (s["ttft_p50_by_turn"] or [None])[0], (s["ttft_p50_by_turn"] or [None])[-1]
        s["ttft_turn_first"], s["ttft_turn_last"] = first, last
        s["ttft_turn_ratio"] = last / first if first and last is not None else None
    return s


# ------------------------------------------------------------------------------ report
def _f(v, fmt=".2f", unit=""):
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def table(runs: list[dict], turns: int) -> str:
    lines = ["| server | pattern | rate | tok/s | offered tok/s | rejected | latency p50 / p95 | "
             f"TTFT p50 / p95 | prefix hits | TTFT turn 1 / turn {turns} (ratio) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s = run["summary"]
        rejected = f"{s['rejected']} ({s['rejected_429']} x 429)" if s["rejected"] else "0"
        if s["failed"]:
            rejected += f", {s['failed']} failed"
        unit = "req/s" if s["pattern"] == "agentic" else "conv/s"
        by_turn = "-"
        if s["pattern"] == "multiturn":
            by_turn = (f"{_f(s['ttft_turn_first'])} / {_f(s['ttft_turn_last'])} s "
                       f"({_f(s['ttft_turn_ratio'], '.1f', 'x')})")
        lines.append(
            f"| {run['server']} | {s['pattern']} | {s['rate']:g} {unit} | {s['tok_s']:.1f} | "
            f"{_f(s['offered_tok_s'], '.1f')} | {rejected} | "
            f"{_f(s['latency_p50'])} / {_f(s['latency_p95'])} s | "
            f"{_f(s['ttft_p50'])} / {_f(s['ttft_p95'])} s | "
            f"{_f(s['prefix_hits'] and 100 * s['prefix_hits'], '.0f', '%')} | {by_turn} |")
    return "\n".join(lines)


def pool(paths: list[Path]) -> list[dict]:
    """Per server, in first-seen order: the multiturn requests of every run in the JSON files at
    paths, pooled turn by turn: {server, runs, conversations, ttft_p50_by_turn, ttft_turn_first,
    ttft_turn_last, ttft_turn_ratio}."""
    pooled: dict[str, dict] = {}
    for path in paths:
        for run in json.loads(Path(path).read_text())["runs"]:
            if run["pattern"] != "multiturn":
                continue
            p = pooled.setdefault(run["server"], {"server": run["server"], "runs": 0,
                                                  "records": []})
            p["runs"] += 1
            p["records"] += run["requests"]
    out = []
    for p in pooled.values():
        s = summarize(p["records"], "multiturn", 0.0, 0)
        out.append({"server": p["server"], "runs": p["runs"],
                    "conversations": sum(r["turn"] == 1 for r in p["records"]),
                    **{k: s[k] for k in ("ttft_p50_by_turn", "ttft_turn_first", "ttft_turn_last",
                                         "ttft_turn_ratio")}})
    return out


def pool_table(pooled: list[dict]) -> str:
    turns = max((len(p["ttft_p50_by_turn"]) for p in pooled), default=0)
    lines = ["| server | runs | conversations | " + " | ".join(f"turn {k}" for k in
                                                             range(1, turns + 1))
             + f" | turn {turns} / turn 1 |", "|---|---|---|" + "---|" * (turns + 1)]
    for p in pooled:
        lines.append(f"| {p['server']} | {p['runs']} | {p['conversations']} | "
                     + " | ".join(_f(v) for v in p["ttft_p50_by_turn"])
                     + f" | {_f(p['ttft_turn_ratio'], '.2f', 'x')} |")
    return "\n".join(lines)


def write_section(path: Path, title: str, body: str, key: str = "trace") -> None:
    """Put `## title` and body between MARKS (named `key`) in path: replaced if there, else
    appended."""
    begin, end = (m.replace("trace", key, 1) for m in MARKS)
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n## {title}\n\n{body}\n{end}"
    i = text.find(begin)
    j = text.find(end, i) if i >= 0 else -1
    if i >= 0 and j >= 0:
        text = text[:i] + block + text[j + len(end):]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text)


# ------------------------------------------------------------------------------ servers
def free_port() -> int:
    from bench.server import free_port as fp
    return fp()


def wait_ready(url: str, proc: subprocess.Popen | None, log: Path | None,
               timeout: float = TIMEOUT_S) -> None:
    t = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            r = httpx.get(url + "/health", timeout=5)
            if r.status_code == 200:
                return
            if r.status_code == 503 and r.json().get("status") == "failed":     # Reame's answer
                raise SystemExit(f"{url}: the server failed to load the model: "
                                 f"{r.json().get('error')}\n{_tail(log)}")
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        if time.monotonic() > t:
            raise SystemExit(f"{url}: /health not 200 after {timeout:.0f} s\n{_tail(log)}")
        time.sleep(0.25)


def _tail(log: Path | None) -> str:
    return log.read_text(errors="replace")[-3000:] if log and log.exists() else ""


@contextlib.contextmanager
def serving(cmd: list[str] | None, url: str, label: str):
    """Start cmd (None: the server at url is already running), wait for /health; stop it after
    (SIGTERM, then SIGKILL after 60 s). Yields the process (None with cmd None): its returncode
    tells, after the block, whether it stopped by itself."""
    if cmd is None:
        wait_ready(url, None, None, 30)
        yield None
        return
    log = Path(tempfile.gettempdir()) / f"bench-trace-{label}-{url.rsplit(':', 1)[1]}.log"
    print(f"{label}: {shlex.join(cmd)} (log {log})", flush=True)
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_ready(url, proc, log)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def model_id(url: str) -> str | None:
    try:
        return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return None


def warm_up(url: str, body: dict) -> None:
    """The validation before timing: one completion must return exactly max_tokens tokens."""
    async def go():
        async with make_client() as client:
            return await complete(client, url, {**body, "prompt": "Warm-up: say something."},
                                  time.perf_counter())
    rec = asyncio.run(go())
    if rec["outcome"] != "ok" or rec["completion_tokens"] != body["max_tokens"]:
        raise SystemExit(f"{url}: the warm-up completion returned {rec['completion_tokens']} "
                         f"tokens, expected {body['max_tokens']} (status {rec['status']}, error "
                         f"{rec['error']}); are the end-of-generation ids banned (--eog-ids)?")


# ------------------------------------------------------------------------------ main
def eog_ids(model: Path) -> list[int]:
    from reame.model import load_model
    from reame.tokenizer import Tokenizer
    return sorted(Tokenizer.from_metadata(load_model(model).metadata).eog_ids)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m bench.trace", description=__doc__.split("\n")[0])
    ap.add_argument("--pattern", default="agentic,multiturn", help="comma list of " +
                    ", ".join(PATTERNS))
    ap.add_argument("--rate", help="arrivals/s: requests (agentic), conversations "
                    "(multiturn); a comma list runs each rate (default 2)")
    ap.add_argument("--requests", type=int, help="agentic requests (default 80)")
    ap.add_argument("--conversations", type=int, help="multiturn conversations (default 8)")
    ap.add_argument("--turns", type=int, help="turns per conversation (default 10)")
    ap.add_argument("--think", type=float, default=0.0, help="multiturn: mean seconds a user "
                    "waits after a reply before the next turn (exponential; default 0)")
    ap.add_argument("--output-tokens", type=int, help="tokens per completion (default 32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    ap.add_argument("--reame-args", default="", help="extra `reame serve` arguments "
                    "(a single flag: --reame-args=--flag)")
    ap.add_argument("--llama-server", default=None, help="also run this llama-server binary")
    ap.add_argument("--llama-args", default="", help="extra llama-server arguments")
    ap.add_argument("--url", default=None, help="only this already running server (base URL)")
    ap.add_argument("--model", default="qwen2-0.5b:Q8_0", help="bench/synth.py shape:mix")
    ap.add_argument("--gguf", default=None, help="serve this file instead of a synthetic model")
    ap.add_argument("--eog-ids", default=None, help="comma list of end-of-generation token ids "
                    "(default: read from the model file)")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "trace.json"))
    ap.add_argument("--markdown", default=None, help="put the table in this Markdown file (a "
                    "section per set of --pattern: only that section is replaced)")
    ap.add_argument("--quick", action="store_true", help="a tiny trace (smoke test)")
    ap.add_argument("--pool", nargs="+", metavar="RUN.json", default=None, help="no run: pool "
                    "the multiturn requests of these JSON results turn by turn, per server")
    a = ap.parse_args(argv)
    for k, v in (QUICK if a.quick else DEFAULTS).items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    a.rates = [float(r) for r in str(a.rate).split(",")]
    a.patterns = a.pattern.split(",")
    if not set(a.patterns) <= set(PATTERNS):
        ap.error(f"--pattern: choose among {', '.join(PATTERNS)}")
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    if a.pool:
        text = pool_table(pool([Path(x) for x in a.pool]))
        print(text)
        if a.markdown:
            command = "python -m bench.trace " + shlex.join(argv)
            write_section(Path(a.markdown), f"Multi-turn runs pooled ({time.strftime('%Y-%m-%d')})",
                          f"`{command}`: p50 TTFT (s) of each turn over every conversation of "
                          "the runs.\n\n" + text, "trace-pool")
        return 0
    model = None
    if a.gguf:
        model = Path(a.gguf)
    elif not a.url:
        from bench.engine import bench_dir
        from bench.synth import synth_model
        shape, mix = a.model.split(":")
        model = synth_model(bench_dir(), shape, mix)
    eog = ([int(x) for x in a.eog_ids.split(",")] if a.eog_ids
           else eog_ids(model) if model else [])
    body = {"max_tokens": a.output_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": {str(i): -100 for i in eog}}
    traces = {(p, rate): agentic_trace(a.requests, rate, a.seed, a.prefix_tokens)
              if p == "agentic" else
              multiturn_trace(a.conversations, a.turns, rate, a.seed, a.user_tokens, a.think)
              for p in a.patterns for rate in a.rates}
    replay = {"agentic": replay_agentic, "multiturn": replay_multiturn}

    servers = []                                              # (label, command, url)
    if a.url:
        servers.append((a.url, None, a.url.rstrip("/")))
    else:
        port = free_port()
        servers.append(("reame", [sys.executable, "-m", "reame", "serve", str(model), "--port",
                                  str(port), "--threads", str(a.threads),
                                  *shlex.split(a.reame_args)], f"http://127.0.0.1:{port}"))
        if a.llama_server:
            port = free_port()
            servers.append(("llama-server", [a.llama_server, "-m", str(model), "--port", str(port),
                                             "-np", "4", "-c", "8192", "-t", str(a.threads),
                                             *shlex.split(a.llama_args)],
                            f"http://127.0.0.1:{port}"))
    runs = []
    for label, cmd, url in servers:
        with serving(cmd, url, label):
            name = model_id(url)
            sbody = {**body, "model": name} if name else body
            warm_up(url, sbody)
            for pattern, rate in traces:
                records = asyncio.run(replay[pattern](url, traces[pattern, rate], sbody))
                s = summarize(records, pattern, rate, a.output_tokens)
                runs.append({"server": label, "pattern": pattern, "summary": s,
                             "requests": records})
                print(table(runs[-1:], a.turns).splitlines()[-1], flush=True)

    command = "python -m bench.trace" + (" " + shlex.join(argv) if argv else "")
    when = time.strftime("%Y-%m-%d")
    text = table(runs, a.turns)
    print("\n" + text)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    config = {k: getattr(a, k) for k in ("patterns", "rates", "requests", "conversations",
                                         "turns", "output_tokens", "seed", "threads",
                                         "prefix_tokens", "user_tokens", "think")}
    Path(a.json).write_text(json.dumps(
        {"date": when, "command": command, "model": str(model) if model else None,
         "eog_ids": eog, "config": config,
         "summary": [{"server": r["server"], **r["summary"]} for r in runs], "runs": runs},
        indent=1))
    if a.markdown:
        what = (f"`{command}` ({Path(model).name if model else a.url}, --threads {a.threads}; "
                f"{a.output_tokens} output tokens a request, greedy, EOS banned). agentic: "
                f"{a.requests} requests at the rate (Poisson), one "
                f"~{a.prefix_tokens}-token tool prefix + a 10-30 token task; multiturn: "
                f"{a.conversations} conversations started at the rate of {a.turns} turns "
                f"(~{a.user_tokens} new user tokens a turn"
                + (f", {a.think} s mean pause before each" if a.think else "")
                + "). Times in seconds; prefix hits = "
                "cached / prompt tokens.")
        write_section(Path(a.markdown), f"Trace benchmark: {', '.join(a.patterns)} ({when})",
                      what + "\n\n" + text, "trace-" + "-".join(a.patterns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
