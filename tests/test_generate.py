"""reame.generate: the per-request state machine (stop sequences, finish reasons, limits) with a
small fake tokenizer, and generate_stream on the stories model with every engine."""

from __future__ import annotations

import numpy as np
import pytest

from reame.engines import ENGINES, create_engine
from reame.errors import ContextLengthError, ReameError
from reame.generate import Generation, generate_stream
from reame.sampling import SamplingParams
from reame.tokenizer import Tokenizer

GREEDY = SamplingParams(temperature=0.0)


class FakeTokenizer:
    """Token i is PIECES[i] (bytes); BOS/EOS/EOT are control tokens (skipped when decoding),
    EOS and EOT end a generation. All the Generation needs: eog_ids, token_bytes,
    add_space_prefix."""

    PIECES = [b"<s>", b"</s>", b"<|eot|>", b"Hel", b"lo", b" wor", b"ld", b"!", b"\n", b"STOP",
              b"ST", b"OP", b"S", b"x", b"\xc3", b"\xa9", "é".encode(), b"ab", b"c"]
    SPECIAL = {0, 1, 2}
    eog_ids = {1, 2}
    add_space_prefix = False

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        if skip_special and token_id in self.SPECIAL:
            return b""
        return self.PIECES[token_id]

    def id(self, piece) -> int:
        return self.PIECES.index(piece.encode() if isinstance(piece, str) else piece)


TOK = FakeTokenizer()
V = len(TOK.PIECES)
EOS, EOT = 1, 2


def onehot(token: int) -> np.ndarray:
    x = np.zeros(V, dtype=np.float32)
    x[token] = 10.0
    return x


def ids(*pieces) -> list[int]:
    return [p if isinstance(p, int) else TOK.id(p) for p in pieces]


def run(tokens, prompt=(0,), **kw):
    """Drive a greedy Generation with logits that force `tokens`; stop when it finishes.
    Returns (generation, steps)."""
    gen = Generation(TOK, list(prompt), GREEDY, **kw)
    steps = []
    for t in tokens:
        steps.append(gen.step(onehot(t)))
        if steps[-1].finish_reason:
            break
    return gen, steps


def emitted(steps) -> str:
    return "".join(s.text for s in steps)


# ---- stop sequences -------------------------------------------------------------------------

def test_stop_is_a_single_token():
    gen, steps = run(ids("Hel", "lo", "STOP", "x"), stop=["STOP"])
    assert [s.text for s in steps] == ["Hel", "lo", ""]
    assert steps[-1].finish_reason == "stop" and gen.finish_reason == "stop" and gen.finished
    assert gen.text == "Hello" and gen.output_ids == ids("Hel", "lo", "STOP")


def test_stop_spans_two_tokens():
    gen, steps = run(ids("Hel", "lo", "ST", "OP", "x"), stop=["STOP"])
    assert [s.text for s in steps] == ["Hel", "lo", "", ""]        # "ST" held back, then dropped
    assert steps[-1].finish_reason == "stop" and gen.text == "Hello"


def test_stop_spans_three_tokens_and_a_split_character():
    gen, steps = run(ids("x", b"\xc3", b"\xa9", "!", "lo"), stop=["xé!"])
    assert emitted(steps) == "" and gen.finish_reason == "stop" and len(steps) == 4
    gen, steps = run(ids("x", b"\xc3", b"\xa9", "lo"), stop=["é!"], max_tokens=4)
    assert [s.text for s in steps] == ["x", "", "", "élo"]
    assert gen.finish_reason == "length"


def test_stop_inside_a_token():
    gen, steps = run(ids("Hel", "lo"), stop=["l"])
    assert emitted(steps) == "He" and len(steps) == 1 and gen.finish_reason == "stop"
    gen, steps = run(ids("x", "STOP"), stop=["TO"])
    assert emitted(steps) == "xS"


def test_a_stop_prefix_that_does_not_match_is_emitted_later():
    gen, steps = run(ids("Hel", "ST", "x", "lo", "!"), stop=["STOP"], max_tokens=5)
    assert [s.text for s in steps] == ["Hel", "", "STx", "lo", "!"]
    assert gen.finish_reason == "length" and gen.text == "HelSTxlo!"
    # a prefix that grows and then fails: "S" + "ST" = "SST" (could still be "ST..."), then "x"
    gen, steps = run(ids("S", "ST", "x"), stop=["STOP"], max_tokens=3)
    assert [s.text for s in steps] == ["", "S", "STx"]


def test_a_held_prefix_is_released_at_the_end():
    gen, steps = run(ids("Hel", "ST"), stop=["STOP"], max_tokens=2)
    assert [s.text for s in steps] == ["Hel", "ST"] and steps[-1].finish_reason == "length"
    gen, steps = run(ids("Hel", "ST", EOS), stop=["STOP"])
    assert [s.text for s in steps] == ["Hel", "", "ST"] and steps[-1].finish_reason == "stop"
    gen, steps = run(ids("Hel", "ST"), prompt=[0] * 4, stop=["STOP"], n_ctx=6)
    assert emitted(steps) == "HelST" and steps[-1].finish_reason == "length"
    # a server timeout ends it early: held text is released too
    gen, steps = run(ids("Hel", "ST"), stop=["STOP"])
    assert emitted(steps) == "Hel" and not gen.finished
    assert gen.finish("timeout") == "ST" and gen.finish_reason == "timeout"
    assert gen.text == "HelST"


def test_several_stop_strings():
    gen, steps = run(ids("Hel", "lo", " wor", "ld", "!"), stop=["!", "ld"])
    assert emitted(steps) == "Hello wor" and len(steps) == 4
    gen, steps = run(ids("Hel", "lo", " wor", "ld", "!"), stop=["ld", "!"])
    assert emitted(steps) == "Hello wor"
    # the earliest match in the text wins, whatever the order of the list
    gen, steps = run(ids("Hel", "lo", " wor"), stop=["wor", "lo w"])
    assert emitted(steps) == "Hel" and gen.finish_reason == "stop"
    # one stop string holds text back while another, shorter one matches later in it
    gen, steps = run(ids("Hel", "lo", " wor"), stop=["Hello!", "lo w"])
    assert [s.text for s in steps] == ["", "", "Hel"]
    # overlapping stop strings: "abc" completes before "bcd" could
    gen, steps = run(ids("ab", "c", "x"), stop=["bcd", "abc"])
    assert emitted(steps) == "" and len(steps) == 2


def test_stop_at_the_very_start():
    gen, steps = run(ids("Hel", "lo"), stop=["Hel"])
    assert len(steps) == 1 and steps[0].text == "" and steps[0].finish_reason == "stop"
    assert gen.text == "" and gen.output_ids == ids("Hel")
    gen, steps = run(ids("ST", "OP", "x"), stop=["STOP"])
    assert emitted(steps) == "" and len(steps) == 2


def test_empty_stop_strings_are_ignored():
    gen, steps = run(ids("Hel", "lo"), stop=[""], max_tokens=2)
    assert emitted(steps) == "Hello" and gen.finish_reason == "length"
    gen, steps = run(ids("Hel", "lo", "!"), stop=["", "!"])
    assert emitted(steps) == "Hello" and gen.finish_reason == "stop"


def test_stop_text_is_never_emitted_random():
    """Random token streams and stop strings against a direct definition: the text is the output
    decoded up to the first token whose text contains a stop string, cut at the earliest match;
    what each step emits is a prefix of that, and never contains a stop string."""
    rng = np.random.default_rng(0)
    normal = [i for i in range(3, V) if i not in (14, 15)]          # complete characters only
    alphabet = "".join(sorted({c for i in normal for c in TOK.PIECES[i].decode()}))
    for trial in range(400):
        toks = [int(t) for t in rng.choice(normal, size=int(rng.integers(1, 12)))]
        stops = ["".join(rng.choice(list(alphabet), size=int(rng.integers(1, 5))))
                 for _ in range(int(rng.integers(1, 4)))]
        gen, steps = run(toks, stop=stops, max_tokens=len(toks))
        text = ""
        want, reason = None, "length"
        for t in toks:
            text += TOK.PIECES[t].decode()
            hits = [i for s in stops if (i := text.find(s)) >= 0]
            if hits:
                want, reason = text[:min(hits)], "stop"
                break
        want = text if want is None else want
        out = ""
        for s in steps:
            out += s.text
            assert want.startswith(out), (toks, stops)
            assert not any(st in out for st in stops), (toks, stops)
        assert out == want == gen.text, (toks, stops, out, want)
        assert gen.finish_reason == reason and steps[-1].finish_reason == reason


# ---- end of generation, limits ----------------------------------------------------------------

@pytest.mark.parametrize("eog", [EOS, EOT])
def test_eog_finishes_with_stop_and_is_not_emitted(eog):
    gen, steps = run(ids("Hel", eog, "lo"))
    assert len(steps) == 2 and steps[-1].token == eog
    assert steps[-1].text == "" and steps[-1].finish_reason == "stop"
    assert gen.text == "Hel" and gen.output_ids == ids("Hel")   # EOG not part of the output
    assert gen.n_past == 2


def test_ignore_eos_goes_on_without_the_eos_text():
    gen, steps = run(ids("Hel", EOS, "lo", EOT), ignore_eos=True, max_tokens=4)
    assert [s.finish_reason for s in steps] == [None, None, None, "length"]
    assert gen.text == "Hello" and gen.output_ids == ids("Hel", EOS, "lo", EOT)


def test_length_at_max_tokens():
    for n in (1, 2, 5):
        gen, steps = run(ids("x") * 10, max_tokens=n)
        assert len(steps) == n and gen.text == "x" * n
        assert [s.finish_reason for s in steps] == [None] * (n - 1) + ["length"]


def test_stop_wins_over_length_on_the_same_token():
    gen, steps = run(ids("Hel", "lo"), stop=["lo"], max_tokens=2)
    assert gen.finish_reason == "stop" and emitted(steps) == "Hel"


def test_length_at_the_context_limit():
    # 5 prompt tokens in a context of 8: 3 more tokens fill it
    gen, steps = run(ids("x") * 10, prompt=[0] * 5, n_ctx=8)
    assert len(steps) == 3 and steps[-1].finish_reason == "length" and gen.n_past == 8
    gen, steps = run(ids("x") * 10, prompt=[0] * 7, n_ctx=8)
    assert len(steps) == 1 and steps[-1].finish_reason == "length"
    # max_tokens and n_ctx together: whichever comes first
    gen, steps = run(ids("x") * 10, prompt=[0] * 2, n_ctx=8, max_tokens=3)
    assert len(steps) == 3
    gen, steps = run(ids("x") * 10, prompt=[0] * 2, n_ctx=4, max_tokens=3)
    assert len(steps) == 2


@pytest.mark.parametrize("n_prompt", [8, 9, 100])
def test_prompt_that_does_not_fit(n_prompt):
    with pytest.raises(ContextLengthError) as ei:
        Generation(TOK, [0] * n_prompt, GREEDY, n_ctx=8)
    assert isinstance(ei.value, ReameError)
    msg = str(ei.value)
    assert f"{n_prompt} tokens" in msg and "8" in msg and "\n" not in msg


def test_empty_prompt_is_refused():
    with pytest.raises(ReameError, match="prompt is empty"):
        Generation(TOK, [], GREEDY)


def test_steps_carry_the_sampled_token_and_logprobs():
    gen = Generation(TOK, [0], SamplingParams(temperature=0.0, logprobs=True, top_logprobs=2))
    step = gen.step(onehot(TOK.id("Hel")))
    assert step.token == TOK.id("Hel") and step.sampled.token == step.token
    assert step.sampled.logprob == pytest.approx(0.0, abs=1e-3)
    assert [t for t, _ in step.sampled.top_logprobs][0] == step.token


# ---- generate_stream on the stories model -------------------------------------------------------

@pytest.fixture(scope="module", params=ENGINES)
def engine(request, stories_model):
    eng = create_engine(stories_model, request.param, n_ctx=128, max_seqs=1, threads=2)
    yield eng
    if hasattr(eng, "close"):
        eng.close()


@pytest.fixture(scope="module")
def stories_tok(stories_model):
    return Tokenizer.from_metadata(stories_model.metadata)


def test_generate_stream_greedy_matches_llama_cpp(engine, stories_tok, stories_expected):
    for case in stories_expected["cases"]:
        gen = Generation(stories_tok, case["prompt_tokens"], GREEDY,
                         max_tokens=len(case["greedy_tokens"]), n_ctx=engine.n_ctx)
        steps = list(generate_stream(engine, gen))
        assert [s.token for s in steps] == case["greedy_tokens"], case["prompt"]
        assert "".join(s.text for s in steps) == gen.text == case["greedy_text"]
        assert [s.finish_reason for s in steps][-2:] == [None, "length"]
        assert stories_tok.encode(case["prompt"]) == case["prompt_tokens"]


def test_generate_stream_stop_and_context_limit(engine, stories_tok, stories_expected):
    case = stories_expected["cases"][0]
    # stop sequence "Lily" (a token boundary inside the greedy text) on a real model
    gen = Generation(stories_tok, case["prompt_tokens"], GREEDY, max_tokens=64,
                     stop=[" Lily", "park"], n_ctx=engine.n_ctx)
    steps = list(generate_stream(engine, gen))
    want = case["greedy_text"][:case["greedy_text"].index(" Lily")]
    assert gen.text == want and gen.finish_reason == "stop"
    # a context of 12: 5 prompt tokens + 7; the KV cache slot is given back after each run
    gen = Generation(stories_tok, case["prompt_tokens"], GREEDY, n_ctx=12)
    steps = list(generate_stream(engine, gen))
    assert [s.token for s in steps] == case["greedy_tokens"][:7]
    assert steps[-1].finish_reason == "length"
    # a prompt prefilled in chunks of 2 gives the same tokens
    gen = Generation(stories_tok, case["prompt_tokens"], GREEDY, max_tokens=16)
    assert [s.token for s in generate_stream(engine, gen, chunk=2)] == \
        case["greedy_tokens"][:16]


def test_generate_stream_seeded_sampling_is_reproducible(engine, stories_tok, stories_expected):
    case = stories_expected["cases"][3]

    def sample(seed):
        p = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=seed)
        gen = Generation(stories_tok, case["prompt_tokens"], p, max_tokens=40,
                         n_ctx=engine.n_ctx)
        return [s.token for s in generate_stream(engine, gen)]

    a = sample(1)
    assert sample(1) == a and sample(2) != a
