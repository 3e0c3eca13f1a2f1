"""Tokenizer throughput: tokens/s encoding 100 KB of English and 100 KB of mixed-script text,
and the cost of tokenizing a 4,096-token prompt against the prefill budget.

    python bench/tokenize.py [--vocab qwen2 llama-bpe llama-spm] [--repeat 3]

The corpora are generated deterministically here (seeded RNG over fixed word lists). Every
timed run is first validated: decode(encode(text)) must give the text back. "cold" times a
tokenizer whose word cache is empty (a server's first request); "warm" the same text again.
llama.cpp's tokenizer (llama-cpp-python, vocab_only) is timed beside it when importable, and
its ids are compared with ours. Results go to bench/results/tokenize.json.

Budget: the engine's prefill time for the same prompt: Reame's measured prefill rate of the
0.5B Q8_0 model (bench/results/engine.json, written by `python -m bench.engine`), else
llama.cpp's 262 tok/s; 5% of that time is the budget (see docs/tokenizers.md).
"""

from __future__ import annotations

import os
import sys

# this file is named like the stdlib's `tokenize` module: keep its folder off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from reame.gguf_file import GGUFFile  # noqa: E402
from reame.tokenizer import Tokenizer  # noqa: E402

PREFILL_TOK_S = 262.0          # llama.cpp, 0.5B Q8_0, this machine
PROMPT_TOKENS = 4096
BUDGET_FRACTION = 0.05
SIZE = 100_000                 # characters

EN_WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people mr how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three tokenizer inference server "
    "quantization kernel latency throughput benchmark llama qwen mistral phi gemma vocabulary "
    "don't it's we're they've I'll you'd isn't 2024 3.14 1,000 42% $19.99 e-mail co-operate"
).split()


def english(seed: int = 1) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < SIZE:
        s = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(6, 24)))
        s = s[0].upper() + s[1:] + rng.choice(".....,;!?") + (" " if rng.random() > 0.1 else "\n\n")
        out.append(s)
        n += len(s)
    return "".join(out)[:SIZE]


# scripts of the mixed corpus: (alphabet, word length range, separator). Words are random
# strings over each alphabet, so most of them are new to the word cache (a pessimistic corpus:
# real text repeats its words far more).
SCRIPTS = [
    ("".join(chr(c) for c in range(0x4E00, 0x4E00 + 3000)), (2, 40), ""),      # CJK runs
    ("".join(chr(c) for c in range(0x3041, 0x3097))
     + "".join(chr(c) for c in range(0x30A1, 0x30FB)),
     (2, 12), ""),                                                              # kana
    ("абвгдеёжзийклмнопрстуфхцчшщъыьэюя", (2, 12), " "),                         # Cyrillic
    ("ابتثجحخدذرزسشصضطظعغفقكلمنهوي", (2, 9), " "),                               # Arabic
    ("कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह" + "ािीुूेैोौ्", (2, 9), " "),            # Devanagari
    ("가각간갇갈감갑값강개객거건걸검겁게겨격견결경계고곡곤골공과관광괴교구국군굴궁", (1, 5), " "),
    ("αβγδεζηθικλμνξοπρστυφχψω", (2, 10), " "),
    ("🦙🚀😶✅🎉❤😀😁😂🤣😃😄😅😆😉😊", (1, 3), " "),
]


def mixed(seed: int = 2) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < SIZE:
        if rng.random() < 0.35:                       # English sentence
            s = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(4, 14))) + ". "
        else:
            alphabet, (lo, hi), sep = rng.choice(SCRIPTS)
            s = sep.join("".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))
                         for _ in range(rng.randint(2, 8)))
            s += rng.choice(["。", ". ", "! ", "\n", " ", "? ", "، ", "\n\n", " 12345 "])
        out.append(s)
        n += len(s)
    return "".join(out)[:SIZE]


def load(name: str) -> Tokenizer:
    from conftest import shared_dir
    path = shared_dir() / "testdata" / "vocab" / f"ggml-vocab-{name}.gguf"
    return Tokenizer.from_metadata(GGUFFile(path).metadata), path


def time_encode(tok: Tokenizer, text: str, repeat: int) -> tuple[float, float, list[int]]:
    """(best cold seconds, best warm seconds, ids)."""
    colds, warms = [], []
    ids = None
    for _ in range(repeat):
        tok.clear_cache()
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special=False)
        colds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tok.encode(text, add_special=False)
        warms.append(time.perf_counter() - t0)
    return min(colds), min(warms), ids


_LLAMA_SCRIPT = r"""
import json, sys, time
import llama_cpp
path, text_file, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(text_file, encoding="utf-8").read()
llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
best, ids = float("inf"), None
for _ in range(repeat):
    t0 = time.perf_counter()
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    best = min(best, time.perf_counter() - t0)
print(json.dumps([best, list(ids)]))
"""


def llama_cpp_time(path, text: str, repeat: int, python: str):
    """(best seconds, ids) of llama.cpp's tokenizer (llama-cpp-python, vocab_only), run by
    `python` (this interpreter or another one that has llama_cpp), on the same text."""
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run([python, "-c", _LLAMA_SCRIPT, str(path), f.name, str(repeat)],
                           capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise SystemExit(f"llama.cpp tokenizer failed: {r.stderr[-2000:]}")
    best, ids = json.loads(r.stdout)
    return best, ids


def llama_python(option: str | None) -> str | None:
    """A Python that can import llama_cpp: this one, --llama-python, or $REAME_LLAMA_PYTHON."""
    import subprocess
    for cand in (sys.executable, option, os.environ.get("REAME_LLAMA_PYTHON")):
        if cand and subprocess.run([cand, "-c", "import llama_cpp"],
                                   capture_output=True).returncode == 0:
            return cand
    return None


def engine_prefill() -> float | None:
    """Reame's measured prefill tok/s on the 0.5B Q8_0 model (bench/engine.py's results)."""
    try:
        res = json.loads((REPO / "bench" / "results" / "engine.json").read_text())["results"]
        return next(r["reame"]["prefill_tps"] for r in res if r["model"] == "qwen2-0.5b")
    except (OSError, ValueError, KeyError, StopIteration):
        return None


def prompt_of(tok: Tokenizer, text: str, n_tokens: int) -> str:
    """The prefix of `text` that tokenizes to about n_tokens."""
    ids = tok.encode(text, add_special=False)
    if len(ids) <= n_tokens:
        return text
    return tok.decode(ids[:n_tokens])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", nargs="+", default=["qwen2", "llama-bpe", "llama-spm"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tokenize.json"))
    ap.add_argument("--llama-python", default=None,
                    help="a python that can import llama_cpp (default: this one if it can)")
    ap.add_argument("--prefill-tok-s", type=float, default=None,
                    help="the engine's prefill rate the budget is taken against (default: "
                         "Reame's 0.5B Q8_0 figure in bench/results/engine.json, else 262)")
    args = ap.parse_args()
    global PREFILL_TOK_S
    PREFILL_TOK_S = args.prefill_tok_s or engine_prefill() or PREFILL_TOK_S

    corpora = {"english": english(), "mixed": mixed()}
    lpy = llama_python(args.llama_python)
    have_llama = lpy is not None
    if not have_llama:
        print("llama-cpp-python is not installed: the llama.cpp column is skipped "
              "(pip install llama-cpp-python, or pass --llama-python)")

    results = {"machine": platform.processor() or platform.machine(),
               "python": sys.version.split()[0], "cpus": os.cpu_count(), "corpus_chars": SIZE,
               "prefill_tok_s": PREFILL_TOK_S, "prompt_tokens": PROMPT_TOKENS,
               "budget_s": PROMPT_TOKENS / PREFILL_TOK_S * BUDGET_FRACTION, "vocabs": {}}
    print(f"{'vocab':<11}{'corpus':<9}{'tokens':>8}{'cold tok/s':>13}{'warm tok/s':>13}"
          f"   {'llama.cpp tok/s'}")
    for name in args.vocab:
        t0 = time.perf_counter()
        tok, path = load(name)
        load_s = time.perf_counter() - t0
        entry = {"load_s": round(load_s, 3)}
        for cname, text in corpora.items():
            ids = tok.encode(text, add_special=False)
            if tok.decode(ids) != text:          # validate before timing
                raise SystemExit(f"{name}/{cname}: decode(encode(text)) != text")
            cold, warm, ids = time_encode(tok, text, args.repeat)
            row = {"tokens": len(ids), "cold_s": round(cold, 4), "warm_s": round(warm, 4),
                   "cold_tok_s": round(len(ids) / cold), "warm_tok_s": round(len(ids) / warm)}
            ref = llama_cpp_time(path, text, args.repeat, lpy) if have_llama else None
            lc = "skipped"
            if ref is not None:
                row["llama_cpp_s"] = round(ref[0], 4)
                row["llama_cpp_tok_s"] = round(len(ref[1]) / ref[0])
                row["ids_equal_llama_cpp"] = list(ref[1]) == ids
                lc = f"{row['llama_cpp_tok_s']:,}" + (" (same ids)" if row["ids_equal_llama_cpp"]
                                                     else " (IDS DIFFER)")
            entry[cname] = row
            print(f"{name:<11}{cname:<9}{len(ids):>8}{row['cold_tok_s']:>13,}"
                  f"{row['warm_tok_s']:>13,}   {lc}")
        # the 4,096-token prompt, cold cache, mixed script (the harder case)
        prompt = prompt_of(tok, corpora["mixed"], PROMPT_TOKENS)
        cold, warm, ids = time_encode(tok, prompt, args.repeat)
        budget = results["budget_s"]
        entry["prompt_4096"] = {"tokens": len(ids), "cold_s": round(cold, 4),
                                "warm_s": round(warm, 4),
                                "fraction_of_prefill": round(cold / (len(ids) / PREFILL_TOK_S), 5)}
        print(f"{name:<11}4096-token prompt: {cold * 1e3:.1f} ms cold, {warm * 1e3:.1f} ms warm "
              f"= {100 * entry['prompt_4096']['fraction_of_prefill']:.2f}% of a "
              f"{len(ids) / PREFILL_TOK_S:.1f} s prefill (budget 5% = {budget:.2f} s) "
              f"{'OK' if cold < budget else 'OVER BUDGET'}; load {load_s * 1e3:.0f} ms")
        results["vocabs"][name] = entry
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
