"""Speculative decoding learned from traffic: a repetitive agent-like chat workload served with
`reame serve --speculate off|on`, after a restart on the learned state, and by llama-server with and
without its n-gram speculation.

    python -m bench.speculate [--gguf ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--requests 60] [--concurrency 1,4] [--max-tokens 200] [--threads 2] [--seed 0]
        [--servers reame-off,reame-on,reame-restart,llama,llama-ngram] [--llama-server PATH]
        [--llama-args "..."] [--reame-args "..."] [--control] [--json bench/results/speculate.json]
        [--markdown docs/speculation.md] [--plot docs/img/speculation.png] [--quick]

The workload (generated from --seed, the same for every server): --requests streamed
/v1/chat/completions (temperature 0, EOS not banned: a reply ends by itself or at --max-tokens,
the server applies the model's chat template), of two kinds:
- code: a synthetic Python file (40-120 lines of seeded functions, dataclasses and classes)
  asked back rewritten ("Rewrite this file with a docstring on every function", "Repeat this
  code exactly, adding type hints", ...) or asked about;
- json: a list of 5-15 JSON records (id, name, email, city, tags, ...) asked back with one field
  of one record changed, or asked about;
and half of the requests (exactly n // 2, none of the first 5) reuse the file or records of an
earlier request, half of those with the same question again (the same request), the others with
another question, as agents re-read the same content.
--control adds a control workload: 48 unique short chats (no shared content; 16 with --quick) at
16 concurrent requests, for reame-off and reame-on only (fresh servers), --control-rounds times
(default 6; 1 with --quick) in alternating order (off, on; on, off; ...: the machine's drift
falls on both): one p95 of 48 requests moves by ~10% from server to server, more than the line
it checks (2026-12-05, three rounds: per round 1.27x, 1.00x, 1.03x; the pooled ratio 1.05-1.11x
in four runs of the same code within an hour), so the rounds are many and short (~15 s). The
control line pools the rounds: throughput on / off (completion tokens over the summed wall
times) and the p95 time per output token over every round's requests; then, as
diagnostics, each round's own throughput ratio (its two servers back to back: ~3% apart from
round to round on a 2-vCPU VM, 2026-12-07), the same p95 ratio without each round's last
16 requests (the drain, where fewer run at once and which requests overlap depends on how
fast the earlier ones went) and
reame-on's own accounting per round (GET /v1/adaptive "speculation" tpot_vs_no_drafts: each
sequence's time per token on the measured step costs over its tokens' cost on steps without
drafts; the guard keeps it at most 1.03 where only others' drafts lengthened its steps).

Requests are sent by C workers (each takes the next request, in index order, when its previous
one finished) for each C of --concurrency. Per concurrency level the servers run one after the
other, each started fresh: reame-off (`python -m reame serve GGUF --threads N --speculate off
--adaptive-dir EMPTY_DIR`), reame-on (`--speculate on`, another empty dir), reame-restart (a new
`--speculate on` server on reame-on's dir once reame-on was stopped with SIGTERM and exited:
what it learned, reloaded), llama (`llama-server -m GGUF -t N -c 8192 -np C`; -c is shared among
the -np slots: 2,048 tokens a slot at C=4, which the prompts fit; above 4, add
--llama-args=-kvu) and llama-ngram (the same + `--spec-type ngram-mod`, its n-gram sizes at their
defaults: it drafts only after a 24-token match, and at least 48 tokens: never within --quick's
48-token replies). llama servers need --llama-server (else skipped with a note). Each server
answers two short unrelated chats before timing (JIT, caches).

Per request: prompt and completion tokens (the streamed usage), TTFT, decode tok/s =
(completion tokens - 1) / (last token - first token), the output text. Per server x
concurrency: the median decode tok/s of the first 5 and of the last 20 requests (send order),
their ratio, the completion tok/s over the wall time, TTFT p50, the draft tokens accepted /
proposed where the server tells (Reame's /metrics `vllm:spec_decode*` counters or its
GET /v1/adaptive "speculation" section; llama-server's per-request timings draft_n /
draft_n_accepted), and for reame-on / reame-restart the requests whose output differs from
reame-off's at the same concurrency (greedy: there must be none; printed, their indices kept);
and what their last-20 median is made of: each of the last 20 requests' decode tok/s over the
same request's on reame-off, by group (new content, reused content with a new question, the same
question asked again), the median and how many reach 2x.
The table is printed; every request's record goes to --json; --markdown FILE puts a dated section
between <!-- speculate:begin --> and <!-- speculate:end --> (appended the first time); --plot
draws decode tok/s per request index, a line per server, at the first concurrency level
(matplotlib, skipped with a note if it is not installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import trace
from bench.trace import httpx

REPO = trace.REPO
DEFAULT_GGUF = REPO.parent / "shared" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVERS = ("reame-off", "reame-on", "reame-restart", "llama", "llama-ngram")
DEFAULTS = dict(requests=60, concurrency="1,4", max_tokens=200, control_requests=48,
                control_rounds=6)
QUICK = dict(requests=12, concurrency="1", max_tokens=48, control_requests=16, control_rounds=1)
CONTROL_CONCURRENCY = 16
CHAT = "/v1/chat/completions"
FIRST, LAST = 5, 20


# ------------------------------------------------------------------------------ code files
NOUNS = ("order invoice customer ticket flight user payment report item record event session "
         "token job task message booking account product shipment").split()
VERBS = ("load save parse build fetch update remove validate compute render merge filter sort "
         "send find count check format export import").split()
ATTRS = ("id name status total price count owner email priority size created_at updated_at "
         "region currency score weight").split()
STR_ATTRS = ("name status owner email region currency").split()
NUM_ATTRS = ("total price count priority size score weight").split()
IMPORTS = ("import json", "import logging", "import os", "import re", "import time",
           "from collections import defaultdict", "from dataclasses import dataclass, field",
           "from datetime import datetime", "from pathlib import Path")
PURPOSES = ("Helpers for the {noun} service.", "Loading, checking and exporting {noun}s.",
            "The {noun} store and the functions around it.", "Utilities used by the {noun} API.",
            "Batch jobs that process {noun}s.")


def _cls(noun: str) -> str:
    return noun.capitalize()


def _function(rng: random.Random, noun: str, used: set) -> list[str]:
    """A small function about `noun` (a name not in `used`), as lines."""
    attr, num, s = rng.choice(ATTRS), rng.choice(NUM_ATTRS), rng.choice(STR_ATTRS)
    kind = rng.randrange(8)
    names = {0: f"filter_{noun}s_by_{s}", 1: f"count_{noun}s_by_{s}", 2: f"load_{noun}s",
             3: f"validate_{noun}", 4: f"compute_{num}_total", 5: f"format_{noun}",
             6: f"find_{noun}", 7: f"sort_{noun}s_by_{num}"}
    name = names[kind]
    if name in used:
        name = f"{rng.choice(VERBS)}_{noun}_{attr}"
        if name in used:
            return []
    used.add(name)
    value = rng.choice(("'open'", "'active'", "'eu'", "'EUR'", "'admin'", "'done'"))
    limit = rng.choice((0, 1, 10, 100, 1000))
    body = {
        0: [f"def {name}({noun}s, {s}):", "    result = []", f"    for {noun} in {noun}s:",
            f"        if {noun}.{s} == {s}:", f"            result.append({noun})",
            "    return result"],
        1: [f"def {name}({noun}s):", "    counts = defaultdict(int)", f"    for {noun} in {noun}s:",
            f"        counts[{noun}.{s}] += 1", "    return dict(counts)"],
        2: [f"def {name}(path):", "    with open(path) as f:", "        data = json.load(f)",
            f"    {noun}s = [{_cls(noun)}(**row) for row in data[\"{noun}s\"]]",
            f"    logging.info(\"loaded %d {noun}s from %s\", len({noun}s), path)",
            f"    return {noun}s"],
        3: [f"def {name}({noun}):", f"    if not {noun}.{s}:",
            f"        raise ValueError(\"{noun} has no {s}\")",
            f"    if {noun}.{num} < {limit}:",
            f"        raise ValueError(f\"{num} too small: {{{noun}.{num}}}\")", "    return True"],
        4: [f"def {name}({noun}s, rate={rng.choice((0.5, 1.0, 1.2, 0.19, 2.5))}):",
            "    total = 0.0", f"    for {noun} in {noun}s:",
            f"        total += {noun}.{num} * rate", "    return round(total, 2)"],
        5: [f"def {name}({noun}):",
            f"    return f\"{{{noun}.id}}: {{{noun}.{s}}} ({{{noun}.{num}}})\""],
        6: [f"def {name}({noun}s, {noun}_id):", f"    for {noun} in {noun}s:",
            f"        if {noun}.id == {noun}_id:", f"            return {noun}", "    return None"],
        7: [f"def {name}({noun}s, reverse=False):",
            f"    return sorted({noun}s, key=lambda {noun}: {noun}.{num}, reverse=reverse)"],
    }[kind]
    if rng.random() < 0.3 and kind in (0, 1, 4, 6):             # an extra guard line
        body.insert(1, f"    if not {noun}s:")
        body.insert(2, "        return " + {0: "[]", 1: "{}", 4: "0.0", 6: "None"}[kind])
    return body


def _dataclass(rng: random.Random, noun: str) -> list[str]:
    lines = ["@dataclass", f"class {_cls(noun)}:", "    id: int"]
    for a in rng.sample(STR_ATTRS, rng.randint(1, 3)):
        lines.append(f"    {a}: str = \"\"")
    for a in rng.sample(NUM_ATTRS, rng.randint(1, 2)):
        lines.append(f"    {a}: float = 0.0")
    lines.append("    tags: list = field(default_factory=list)")
    return lines


def _store(rng: random.Random, noun: str) -> list[str]:
    c, s = _cls(noun), rng.choice(STR_ATTRS)
    return [f"class {c}Store:", "    def __init__(self, path):", "        self.path = Path(path)",
            "        self.items = {}", "",
            f"    def add(self, {noun}):", f"        self.items[{noun}.id] = {noun}", "",
            f"    def get(self, {noun}_id):", f"        return self.items.get({noun}_id)", "",
            f"    def remove(self, {noun}_id):", f"        self.items.pop({noun}_id, None)", "",
            f"    def by_{s}(self, {s}):",
            f"        return [x for x in self.items.values() if x.{s} == {s}]", "",
            "    def save(self):",
            "        rows = [vars(x) for x in self.items.values()]",
            f"        self.path.write_text(json.dumps({{\"{noun}s\": rows}}, indent=2))"]


def python_file(rng: random.Random) -> tuple[str, str, list[str]]:
    """(path, source, function names): a plausible 40-120 line module."""
    target = rng.randint(40, 120)
    noun = rng.choice(NOUNS)
    others = [n for n in NOUNS if n != noun]
    path = f"{rng.choice(('app', 'service', 'core', 'jobs'))}/{noun}s.py"
    imports = {"import json", "import logging", "from collections import defaultdict",
               "from dataclasses import dataclass, field", "from pathlib import Path",
               *rng.sample(IMPORTS, rng.randint(0, 3))}
    lines = ['"""' + rng.choice(PURPOSES).format(noun=noun) + '"""', "",
             *sorted(imports, key=lambda x: (x.startswith("from"), x)), "", ""]
    lines += _dataclass(rng, noun) + ["", ""]
    used: set[str] = set()
    blocks = 0
    while len(lines) < target:
        r = rng.random()
        if r < 0.1 and blocks:
            block = _store(rng, noun) if f"class {_cls(noun)}Store:" not in lines else []
        elif r < 0.2:
            block = _function(rng, rng.choice(others), used)
        else:
            block = _function(rng, noun, used)
        if block:
            lines += block + ["", ""]
            blocks += 1
    while lines and not lines[-1]:
        lines.pop()
    functions = [m.group(1) for m in re.finditer(r"^def (\w+)", "\n".join(lines), re.M)]
    return path, "\n".join(lines) + "\n", functions


# ------------------------------------------------------------------------------ JSON records
LAST_NAMES = ("Smith Garcia Novak Rossi Silva Tanaka Kowalski Berg Moreau Jensen Costa Ivanova "
              "Lind Okafor Haddad Reyes").split()
CITIES = "Oslo Lyon Porto Graz Turku Gdansk Leeds Bilbao Bergen Ghent Malmo Cork".split()
TAGS = "admin beta billing churn-risk enterprise internal partner trial vip support".split()
DOMAINS = "example.com mail.test corp.example acme.test".split()


def json_records(rng: random.Random) -> tuple[str, list[dict]]:
    """(file name, records): 5-15 records of distinct ids."""
    ids = rng.sample(range(1000, 10000), rng.randint(5, 15))
    recs = []
    for i in ids:
        first, last = rng.choice(trace.NAMES), rng.choice(LAST_NAMES)
        recs.append({"id": i, "name": f"{first} {last}",
                     "email": f"{first.lower()}.{last.lower()}@{rng.choice(DOMAINS)}",
                     "city": rng.choice(CITIES), "tags": rng.sample(TAGS, rng.randint(1, 3)),
                     "active": rng.random() < 0.7, "score": rng.randint(0, 100)})
    return f"{rng.choice(('customers', 'users', 'contacts', 'accounts'))}.json", recs


def json_text(recs: list[dict]) -> str:
    return "[\n" + ",\n".join("  " + json.dumps(r) for r in recs) + "\n]"


# ------------------------------------------------------------------------------ workloads
def code_question(rng: random.Random, functions: list[str]) -> str:
    fn = rng.choice(functions) if functions else "main"
    k = rng.randrange(7)
    if k == 0:
        return "Rewrite this file with a docstring on every function."
    if k == 1:
        return "Repeat this code exactly, adding type hints to every function."
    if k == 2:
        return "Repeat this file exactly, adding a one-line comment above every function."
    if k == 3:
        return (f"Return this file unchanged except that the function `{fn}` is renamed to "
                f"`{fn}_v2`.")
    if k == 4:
        return "List every function and class defined in this file with a one-line summary."
    if k == 5:
        return f"What does the function `{fn}` do? Quote it first, then explain."
    return "Reformat this file with four-space indentation and return it whole."


def json_question(rng: random.Random, recs: list[dict]) -> str:
    r = rng.choice(recs)
    k = rng.randrange(6)
    if k <= 2:                                   # the echo-with-a-change case, the most common
        field, value = rng.choice((("city", json.dumps(rng.choice(CITIES))),
                                   ("active", rng.choice(("true", "false"))),
                                   ("score", str(rng.randint(0, 100))),
                                   ("email", json.dumps(f"new.{r['id']}@example.com"))))
        return (f"Return the same JSON with the field \"{field}\" of the record with id "
                f"{r['id']} set to {value}. Output only the JSON.")
    if k == 3:
        return f"Which records have the tag \"{rng.choice(TAGS)}\"? Answer with their names."
    if k == 4:
        return "Repeat this JSON exactly, adding \"verified\": false to every record."
    return f"Return the record with id {r['id']} as JSON, then its email on its own line."


def chat_messages(kind: str, content: dict, question: str) -> list[dict]:
    if kind == "code":
        text = (f"Here is the file `{content['path']}`:\n\n```python\n{content['text']}```\n\n"
                f"{question}")
    else:
        text = (f"Here are the records of `{content['path']}`:\n\n```json\n{content['text']}\n"
                f"```\n\n{question}")
    return [{"role": "user", "content": text}]


def repetitive_workload(n: int, seed: int) -> list[dict]:
    """[{"i", "kind", "content", "reuse", "same_question", "messages"}]: exactly n // 2 requests
    reuse an earlier request's file or records ("content" = the index of its set, "reuse" =
    True), about half of those with a question already asked about it; the first 5 (when n >=
    10) bring new content: the cold start the first-5 median measures."""
    rng = random.Random(f"{seed}-speculate")
    start = FIRST if n - FIRST >= n // 2 else 1          # the first 5 are new when n allows
    reuse = set(rng.sample(range(start, n), min(n // 2, max(n - start, 0))))
    contents: list[dict] = []                    # {"kind", "path", "text", "names"/"recs", "asked"}
    out = []
    for i in range(n):
        same = False
        if i in reuse:
            cid = rng.randrange(len(contents))
            c = contents[cid]
            same = rng.random() < 0.5
        else:
            cid = len(contents)
            if rng.random() < 0.5:
                path, text, names = python_file(rng)
                c = {"kind": "code", "path": path, "text": text, "names": names, "asked": []}
            else:
                path, recs = json_records(rng)
                c = {"kind": "json", "path": path, "text": json_text(recs), "recs": recs,
                     "asked": []}
            contents.append(c)
        if same:
            question = rng.choice(c["asked"])
        else:
            question = (code_question(rng, c["names"]) if c["kind"] == "code"
                        else json_question(rng, c["recs"]))
            c["asked"].append(question)
        out.append({"i": i, "kind": c["kind"], "content": cid, "reuse": i in reuse,
                    "same_question": same, "messages": chat_messages(c["kind"], c, question)})
    return out


TOPICS = ("a garden", "the ocean", "a small bakery", "winter mornings", "a train journey",
          "a lost key", "the first day at school", "an old lighthouse", "a rainy city",
          "a chess match", "a mountain village", "a robot learning to cook", "the night market",
          "a paper boat", "a desert road", "a friendly dragon", "a jazz club", "a library cat")
ASKS = ("Write a four-line poem about {t}.", "Tell a very short story about {t}.",
        "Give three fun facts a child would like about {t}.",
        "Describe {t} in two sentences.", "Write a haiku about {t}.",
        "Suggest a title for a novel about {t} and explain it in one sentence.")


def control_workload(n: int, seed: int) -> list[dict]:
    """n unique short chats sharing no content: [{"i", "kind": "control", "messages"}]."""
    rng = random.Random(f"{seed}-speculate-control")
    seen, out = set(), []
    while len(out) < n:
        q = rng.choice(ASKS).format(t=rng.choice(TOPICS))
        if rng.random() < 0.5:
            q = f"{rng.choice(trace.NAMES)} asks: {q[0].lower()}{q[1:]}"
        if q in seen:
            continue
        seen.add(q)
        out.append({"i": len(out), "kind": "control", "messages": [{"role": "user",
                                                                      "content": q}]})
    return out


def request_text(req: dict) -> str:
    return "\n".join(m["content"] for m in req["messages"])


# ------------------------------------------------------------------------------ the client
def decode_tok_s(rec: dict) -> float | None:
    """(completion tokens - 1) / (last token - first token); None if that is not measurable."""
    n, a, b = rec.get("completion_tokens"), rec.get("ttft"), rec.get("last_token")
    if rec.get("outcome") != "ok" or not n or n < 2 or a is None or b is None or b <= a:
        return None
    return (n - 1) / (b - a)


async def replay(url: str, requests: list[dict], body: dict, concurrency: int) -> list[dict]:
    """Send the requests by `concurrency` workers, each taking the next one (index order) when its
    previous one finished; the records, in request order."""
    out: list[dict | None] = [None] * len(requests)
    todo = iter(range(len(requests)))
    async with trace.make_client() as client:
        t0 = time.perf_counter()

        async def worker():
            for k in todo:
                req = requests[k]
                rec = await trace.complete(client, url, {**body, "messages": req["messages"]},
                                           t0, path=CHAT)
                out[k] = {"i": req["i"], "kind": req["kind"], "content": req.get("content"),
                          "reuse": req.get("reuse"), **rec, "decode_tok_s": decode_tok_s(rec)}
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return out


# ------------------------------------------------------------------------------ statistics
def median(xs) -> float | None:
    return trace.percentile([x for x in xs if x is not None], 50)


def summarize(records: list[dict]) -> dict:
    recs = sorted(records, key=lambda r: r["i"])
    ok = [r for r in recs if r["outcome"] == "ok"]
    decode = [r["decode_tok_s"] for r in recs]
    wall = (max(r["sent"] + r["latency"] for r in recs) - min(r["sent"] for r in recs)
            if recs else 0.0)
    tokens = sum(r["completion_tokens"] or 0 for r in ok)
    first, last = median(decode[:FIRST]), median(decode[-LAST:])
    return {"requests": len(recs), "ok": len(ok), "failed": len(recs) - len(ok),
            "wall_s": wall, "completion_tokens": tokens, "tok_s": tokens / wall if wall else 0.0,
            "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
            "decode_first5": first, "decode_last20": last,
            "decode_ratio": last / first if first and last is not None else None,
            "decode_median": median(decode), "ttft_p50": median(r["ttft"] for r in ok),
            # each request's time per output token (1 / its decode tok/s), 95th percentile
            "tpot_p95": trace.percentile([1 / d for d in decode if d], 95)}


def mismatches(reference: list[dict], other: list[dict]) -> list[int]:
    """Indices of the requests whose output differs from the reference's (or failed on either
    side, or are missing from either)."""
    ref = {r["i"]: r for r in reference}
    got = {r["i"]: r for r in other}
    bad = []
    for i in sorted(set(ref) | set(got)):
        a, b = ref.get(i), got.get(i)
        if (a is None or b is None or a["outcome"] != "ok" or b["outcome"] != "ok"
                or a["text"] != b["text"]):
            bad.append(i)
    return bad


def spec_counters(lines: list[str]) -> dict[str, float]:
    """Prometheus lines -> {metric name: value summed over label sets}."""
    out: dict[str, float] = {}
    for line in lines:
        m = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                pass
    return out


def _find_numbers(obj, prefix="") -> dict[str, float]:
    """Flattened numeric leaves of a JSON object: {"a.b": 1.0}."""
    if isinstance(obj, bool):
        return {}
    if isinstance(obj, (int, float)):
        return {prefix: float(obj)}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_find_numbers(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {}


ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTED = "vllm:spec_decode_num_draft_tokens_total"


def acceptance(run: dict) -> tuple[float, float] | None:
    """(draft tokens accepted, proposed) where the server tells: Reame's vllm:spec_decode counters,
    else the numbers of its /v1/adaptive "speculation" section whose names say accepted and
    proposed/draft, else llama-server's per-request timings (draft_n_accepted, draft_n; absent
    from a request without drafts: (0, 0) for a run of such requests)."""
    c = spec_counters(run.get("spec_metrics") or [])
    if ACCEPTED in c and DRAFTED in c:                              # vLLM's names
        return c[ACCEPTED], c[DRAFTED]
    c = {k: v for k, v in c.items() if not k.endswith(("_created", "_bucket", "_sum", "_count"))
         and "per_pos" not in k}
    acc = [v for k, v in c.items() if "accepted_tokens" in k]
    prop = [v for k, v in c.items() if "draft_tokens" in k]
    if len(acc) == 1 and len(prop) == 1:
        return acc[0], prop[0]
    nums = _find_numbers(run.get("speculation"))
    acc = [v for k, v in nums.items() if "accept" in k.lower() and "rate" not in k.lower()]
    prop = [v for k, v in nums.items() if any(w in k.lower() for w in ("propos", "draft"))
            and "accept" not in k.lower() and "rate" not in k.lower()]
    if len(acc) == 1 and len(prop) == 1:
        return acc[0], prop[0]
    t = [r["timings"] for r in run.get("requests", []) if r.get("timings")]
    if t:               # llama-server leaves draft_n out of the timings of a request not drafted
        return (float(sum(x.get("draft_n_accepted", 0) for x in t)),
                float(sum(x.get("draft_n", 0) for x in t)))
    return None


# ------------------------------------------------------------------------------ report
def _f(v, fmt=".1f", unit=""):
    return trace._f(v, fmt, unit)


def table(runs: list[dict]) -> str:
    lines = ["| server | workload | C | ok | decode tok/s first 5 | last 20 | last 20 / first 5 | "
             "total tok/s | TTFT p50 | TPOT p95 | drafts accepted | outputs != reame-off |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s = run["summary"]
        acc = acceptance(run)
        acc_s = ("n/a" if acc is None else f"{acc[0]:.0f} / {acc[1]:.0f}"
                 + (f" ({100 * acc[0] / acc[1]:.0f}%)" if acc[1] else ""))
        mis = run.get("mismatches")
        mis_s = "-" if mis is None else f"{len(mis)} / {s['requests']}"
        ok = f"{s['ok']}/{s['requests']}"
        lines.append(
            f"| {run['server']} | {run['workload']}"
            f"{' r%d' % (run.get('round', 0) + 1) if run['workload'] == 'control' else ''} | "
            f"{run['concurrency']} | {ok} | "
            f"{_f(s['decode_first5'])} | {_f(s['decode_last20'])} | "
            f"{_f(s['decode_ratio'], '.2f', 'x')} | {_f(s['tok_s'])} | "
            f"{_f(s['ttft_p50'], '.2f', ' s')} | {_f(s['tpot_p95'] and s['tpot_p95'] * 1e3, '.1f', ' ms')} | "
            f"{acc_s} | {mis_s} |")
    return "\n".join(lines)


def restart_lines(runs: list[dict]) -> list[str]:
    """Per concurrency: reame-restart's first-5 median against reame-on's last-20 median."""
    out = []
    by = {(r["server"], r["workload"], r["concurrency"]): r for r in runs}
    for (server, workload, c), r in by.items():
        on = by.get(("reame-on", workload, c))
        if server != "reame-restart" or on is None:
            continue
        a, b = r["summary"]["decode_first5"], on["summary"]["decode_last20"]
        out.append(f"C={c}: reame-restart first 5 {_f(a)} tok/s vs reame-on last 20 {_f(b)} "
                   f"tok/s ({_f(a / b if a and b else None, '.2f', 'x')})")
    return out


GROUPS = (("new", "new content"), ("reuse", "reused content, a new question"),
          ("same", "the same question again"))


def request_group(req: dict) -> str:
    """A repetitive request's group: its content new, reused with a new question, or the same
    question asked again (whose greedy answer the server has already written)."""
    return "same" if req.get("same_question") else "reuse" if req.get("reuse") else "new"


def group_lines(runs: list[dict], work: list[dict]) -> list[str]:
    """Per concurrency, reame-on's and reame-restart's last 20 of the repetitive workload against
    the same requests on reame-off, by request group: how many, the median of each request's
    decode tok/s ratio, how many reach 2x. What the last-20 median is made of: a request whose
    answer is new text has little to draft, one asked again drafts its whole answer."""
    out = []
    group = {w["i"]: request_group(w) for w in work}
    by = {(r["server"], r["concurrency"]): r for r in runs if r["workload"] == "repetitive"}
    for (server, c), r in by.items():
        off = by.get(("reame-off", c))
        if server not in ("reame-on", "reame-restart") or off is None:
            continue
        base = {x["i"]: x["decode_tok_s"] for x in off["requests"]}
        last = sorted(x["i"] for x in r["requests"])[-LAST:]
        got = {x["i"]: x["decode_tok_s"] for x in r["requests"]}
        parts = []
        for g, label in GROUPS:
            ratios = [got[i] / base[i] for i in last
                      if group.get(i) == g and got.get(i) and base.get(i)]
            if ratios:
                parts.append(f"{label} {len(ratios)} (median {median(ratios):.2f}x, "
                             f"{sum(x >= 2 for x in ratios)} at >= 2x)")
        if parts:
            out.append(f"C={c}: {server}'s last {LAST} / reame-off's, by request: "
                       + "; ".join(parts))
    return out


def control_lines(runs: list[dict]) -> list[str]:
    """The control workload's rounds pooled: reame-on against reame-off, throughput (completion
    tokens over summed wall times) and the p95 time per output token over all requests."""
    pooled = {}
    for r in runs:
        if r["workload"] == "control" and r["server"] in ("reame-off", "reame-on"):
            p = pooled.setdefault(r["server"], {"tokens": 0, "wall": 0.0, "tpot": [], "n": 0,
                                                "head": []})
            p["tokens"] += r["summary"]["completion_tokens"]
            p["wall"] += r["summary"]["wall_s"]
            p["tpot"] += [1 / x["decode_tok_s"] for x in r["requests"] if x["decode_tok_s"]]
            # without the round's last CONTROL_CONCURRENCY requests (the drain: fewer run at
            # once, and which overlap depends on how fast the earlier ones went)
            last = len(r["requests"]) - CONTROL_CONCURRENCY
            p["head"] += [1 / x["decode_tok_s"] for x in r["requests"]
                          if x["decode_tok_s"] and x["i"] < last]
            p["n"] += 1
    if len(pooled) < 2 or not all(p["wall"] and p["tpot"] for p in pooled.values()):
        return []
    off, on = pooled["reame-off"], pooled["reame-on"]
    thr = (on["tokens"] / on["wall"]) / (off["tokens"] / off["wall"])
    t_off, t_on = (trace.percentile(p["tpot"], 95) for p in (off, on))
    out = [f"control, {on['n']} round(s) pooled: throughput reame-on / reame-off "
           f"{thr:.3f}x, p95 time per output token {t_on * 1e3:.1f} / {t_off * 1e3:.1f} ms "
           f"({t_on / t_off:.3f}x) over {len(on['tpot'])} / {len(off['tpot'])} requests"]
    # each round's own ratio (its two servers back to back): how far one round moves
    rounds: dict[int, dict] = {}
    for r in runs:
        if r["workload"] == "control" and r["server"] in ("reame-off", "reame-on") \
                and r["summary"]["wall_s"]:
            rounds.setdefault(r.get("round", 0), {})[r["server"]] = (
                r["summary"]["completion_tokens"] / r["summary"]["wall_s"])
    per = [v["reame-on"] / v["reame-off"] for _, v in sorted(rounds.items()) if len(v) == 2]
    if len(per) > 1:
        out.append("control, throughput reame-on / reame-off per round: "
                   + ", ".join(f"{x:.3f}" for x in per)
                   + f" (from {min(per):.3f} to {max(per):.3f})")
    if off["head"] and on["head"]:
        h_off, h_on = (trace.percentile(p["head"], 95) for p in (off, on))
        out.append(f"control without each round's last {CONTROL_CONCURRENCY} requests (the "
                   f"drain): p95 time per output token {h_on / h_off:.3f}x")
    # the guard's own accounting: each finished sequence's time per token on the step-cost
    # curve over what its tokens cost on steps without drafts (GET /v1/adaptive)
    guard = [r["speculation"]["tpot_vs_no_drafts"] for r in runs
             if r["workload"] == "control" and r["server"] == "reame-on"
             and (r.get("speculation") or {}).get("tpot_vs_no_drafts")]
    if guard:
        out.append("control, reame-on's guard (each sequence's time per token on the measured "
                   "step costs / on steps without drafts), per round: p95 "
                   + ", ".join(f"{g['p95']:.3f}" for g in guard) + "; max "
                   + ", ".join(f"{g['max']:.3f}" for g in guard))
    return out


def identity_lines(runs: list[dict]) -> list[str]:
    out = []
    for r in runs:
        if r.get("mismatches") is not None:
            m = r["mismatches"]
            out.append(f"{r['server']} {r['workload']} C={r['concurrency']}: {len(m)} of "
                       f"{r['summary']['requests']} outputs differ from reame-off"
                       + (f" (requests {', '.join(map(str, m))})" if m else ""))
    return out


def plot(runs: list[dict], path: Path) -> str | None:
    """decode tok/s per request index, a line per server, at the first concurrency level of the
    repetitive workload; an explanation if not drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    rep = [r for r in runs if r["workload"] == "repetitive"]
    if not rep:
        return "no run to plot"
    c = rep[0]["concurrency"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in rep:
        if r["concurrency"] != c:
            continue
        pts = [(x["i"], x["decode_tok_s"]) for x in r["requests"] if x["decode_tok_s"]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=r["server"])
    ax.set_xlabel("request (send order)")
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"Decode speed per request, concurrency {c}")
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# ------------------------------------------------------------------------------ servers
def _get(url: str, path: str):
    try:
        r = httpx.get(url + path, timeout=30)
        return r if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


def reame_state(url: str, model: str | None = None) -> dict:
    """What Reame says about its speculation: the "speculation" section of GET /v1/adaptive
    (None if absent) and the `vllm:spec_decode*` lines of GET /metrics (those of `model` when
    given: each model served has its own, labelled model_name)."""
    spec, keys = None, None
    r = _get(url, "/v1/adaptive")
    if r is not None:
        try:
            data = r.json()
            if isinstance(data, dict):
                spec, keys = data.get("speculation"), sorted(data)
        except ValueError:
            pass
    m = _get(url, "/metrics")
    lines = [x for x in m.text.splitlines() if x.startswith("vllm:spec_decode")
             and (model is None or "model_name=" not in x or f'model_name="{model}"' in x)
             ] if m else []
    return {"speculation": spec, "adaptive_keys": keys, "spec_metrics": lines}


WARM_UP = ("Say hello in one short sentence.",
           "Summarize this note in one sentence: " + trace.user_message(random.Random("warm"), 150))


def warm_up(url: str, body: dict) -> None:
    """Two short unrelated chats must succeed before timing."""
    async def go():
        async with trace.make_client() as client:
            return [await trace.complete(client, url, {**body, "max_tokens": 16, "messages": [
                {"role": "user", "content": q}]}, time.perf_counter(), path=CHAT)
                for q in WARM_UP]
    for rec in asyncio.run(go()):
        if rec["outcome"] != "ok" or not rec["completion_tokens"]:
            raise SystemExit(f"{url}: the warm-up chat failed (status {rec['status']}, "
                             f"{rec['completion_tokens']} tokens, error {rec['error']})")


def server_command(name: str, a, port: int, concurrency: int, adaptive_dir: str | None):
    if name.startswith("reame"):
        mode = "off" if name == "reame-off" else "on"
        return [sys.executable, "-m", "reame", "serve", str(a.gguf), "--port", str(port),
                "--threads", str(a.threads), "--speculate", mode, "--adaptive-dir",
                str(adaptive_dir), *shlex.split(a.reame_args)]
    return [a.llama_server, "-m", str(a.gguf), "--port", str(port), "-t", str(a.threads),
            "-c", "8192", "-np", str(concurrency),
            *(["--spec-type", "ngram-mod"] if name == "llama-ngram" else []),
            *shlex.split(a.llama_args)]


def run_server(name: str, a, workload: str, requests: list[dict], body: dict, concurrency: int,
               adaptive_dir: str | None) -> dict:
    """Start the server, warm it up, replay, read its speculation state, stop it (SIGTERM)."""
    port = trace.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = server_command(name, a, port, concurrency, adaptive_dir)
    with trace.serving(cmd, url, f"speculate-{name}") as proc:
        mid = trace.model_id(url)
        sbody = {**body, "model": mid} if mid else body
        warm_up(url, sbody)
        records = asyncio.run(replay(url, requests, sbody, concurrency))
        state = reame_state(url, mid) if name.startswith("reame") else {}
    run = {"server": name, "workload": workload, "concurrency": concurrency,
           "command": shlex.join(cmd), "summary": summarize(records), **state,
           "exit_code": proc.returncode if proc else None, "requests": records}
    if name == "reame-on" and proc is not None and proc.returncode != 0:
        print(f"note: reame-on exited with {proc.returncode} after SIGTERM (not a graceful "
              "stop): what it learned may not have been saved for reame-restart", flush=True)
    return run


# ------------------------------------------------------------------------------ main
def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m bench.speculate",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=str(DEFAULT_GGUF))
    ap.add_argument("--requests", type=int, help="requests of the workload (default 60)")
    ap.add_argument("--concurrency", help="comma list of client concurrency caps (default 1,4)")
    ap.add_argument("--max-tokens", type=int, help="max_tokens of every request (default 200)")
    ap.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma list of " +
                    ", ".join(SERVERS))
    ap.add_argument("--llama-server", default=None, help="llama-server binary (else the llama "
                    "servers are skipped)")
    ap.add_argument("--llama-args", default="", help="extra llama-server arguments")
    ap.add_argument("--reame-args", default="", help="extra `reame serve` arguments "
                    "(a single flag: --reame-args=--flag)")
    ap.add_argument("--control", action="store_true", help="also the control workload (unique "
                    f"short chats, {CONTROL_CONCURRENCY} concurrent) on reame-off and reame-on")
    ap.add_argument("--control-requests", type=int, help="requests of the control workload "
                    "(default 48)")
    ap.add_argument("--control-rounds", type=int, help="control rounds, alternating the "
                    "servers' order (default 6)")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "speculate.json"))
    ap.add_argument("--markdown", default=None, help="put the table in this Markdown file")
    ap.add_argument("--plot", default=None, help="PNG of decode tok/s per request")
    ap.add_argument("--quick", action="store_true", help="12 requests, concurrency 1, "
                    "48 max tokens")
    a = ap.parse_args(argv)
    for k, v in (QUICK if a.quick else DEFAULTS).items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    a.concurrencies = [int(c) for c in str(a.concurrency).split(",")]
    a.server_list = [s for s in a.servers.split(",") if s]
    if not set(a.server_list) <= set(SERVERS):
        ap.error(f"--servers: choose among {', '.join(SERVERS)}")
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    wanted = [s for s in SERVERS if s in a.server_list]            # the order of SERVERS
    if not a.llama_server:
        for s in ("llama", "llama-ngram"):
            if s in wanted:
                print(f"note: {s} skipped (no --llama-server)", flush=True)
                wanted.remove(s)
    if "reame-restart" in wanted and "reame-on" not in wanted:
        print("note: reame-restart skipped (it restarts on reame-on's adaptive dir: add "
              "reame-on)", flush=True)
        wanted.remove("reame-restart")
    body = {"max_tokens": a.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    work = repetitive_workload(a.requests, a.seed)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-speculate-") as tmp:
        def fresh(label):
            d = Path(tmp) / label
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            return str(d)

        plan = [("repetitive", work, c, 0) for c in a.concurrencies]
        if a.control:
            plan += [("control", control_workload(a.control_requests, a.seed),
                      CONTROL_CONCURRENCY, k) for k in range(a.control_rounds)]
        for workload, requests, c, round_ in plan:
            names = (wanted if workload == "repetitive"
                     else [s for s in wanted if s in ("reame-off", "reame-on")])
            if round_ % 2:                       # every other control round: on first
                names = names[::-1]
            done: dict[str, dict] = {}
            on_dir = None
            for name in names:
                if name == "reame-restart":
                    if on_dir is None:
                        print("note: reame-restart skipped (reame-on did not run)", flush=True)
                        continue
                    d = on_dir
                elif name.startswith("reame"):
                    d = fresh(f"{workload}-c{c}-{name}-r{round_}")
                else:
                    d = None
                run = run_server(name, a, workload, requests, body, c, d)
                run["round"] = round_
                if name == "reame-on":
                    on_dir = d
                if name in ("reame-on", "reame-restart") and "reame-off" in done:
                    run["mismatches"] = mismatches(done["reame-off"]["requests"], run["requests"])
                if name == "reame-off" and "reame-on" in done:     # a round in the other order
                    done["reame-on"]["mismatches"] = mismatches(run["requests"],
                                                                done["reame-on"]["requests"])
                done[name] = run
                runs.append(run)
                print(table([run]).splitlines()[-1], flush=True)

    command = "python -m bench.speculate" + (" " + shlex.join(argv) if argv else "")
    when = time.strftime("%Y-%m-%d")
    text = table(runs)
    notes = (identity_lines(runs) + restart_lines(runs) + group_lines(runs, work)
             + control_lines(runs))
    print("\n" + text + "\n")
    for line in notes:
        print(line)
    total_bad = sum(len(r["mismatches"]) for r in runs if r.get("mismatches") is not None)
    if any(r.get("mismatches") is not None for r in runs):
        print(f"byte identity with reame-off: {total_bad} mismatches")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    config = {k: getattr(a, k) for k in ("requests", "concurrencies", "max_tokens", "threads",
                                         "seed", "server_list", "control", "control_requests",
                                         "control_rounds")}
    Path(a.json).write_text(json.dumps(
        {"date": when, "command": command, "model": str(a.gguf), "config": config,
         "workload": [{k: v for k, v in r.items() if k != "messages"} for r in work],
         "summary": [{"server": r["server"], "workload": r["workload"],
                      "concurrency": r["concurrency"], **r["summary"],
                      "acceptance": acceptance(r), "mismatches": r.get("mismatches")}
                     for r in runs],
         "runs": runs}, indent=1))
    if a.plot:
        why = plot(runs, Path(a.plot))
        if why:
            print(f"note: {why}")
    if a.markdown:
        what = (f"`{command}` ({Path(a.gguf).name}, --threads {a.threads}; {a.requests} chat "
                f"requests of at most {a.max_tokens} tokens, greedy, EOS allowed; half reuse an "
                "earlier request's file or JSON records. Decode tok/s = (completion tokens - 1) / "
                "(last token - first token), medians over the first 5 and last 20 requests in "
                "send order; C = client concurrency cap"
                + (f"; control: {a.control_requests} unique short chats at "
                   f"{CONTROL_CONCURRENCY} concurrent, {a.control_rounds} round(s) in "
                   "alternating order" if a.control else "") + ").")
        body_md = what + "\n\n" + text + ("\n\n" + "\n".join(f"- {x}" for x in notes)
                                          if notes else "")
        trace.write_section(Path(a.markdown), f"Speculative decoding benchmark ({when})",
                            body_md, "speculate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
