"""bench/llama_agree.py on stories260K, with llama.cpp's recorded greedy tokens and top-2 gaps
(../shared/testdata/stories260K.expected.json) standing in for a live llama-server."""

from __future__ import annotations

import json

import pytest

from bench import llama_agree


def _cases(expected, n=3):
    return [{"text": c["prompt"], "prompt": c["prompt_tokens"], "tokens": c["greedy_tokens"],
             "gaps": c["greedy_top2_gaps"]} for c in expected["cases"][:n]]


@pytest.fixture(scope="module")
def engine(stories_model):
    from reame.jit.engine import JITEngine
    eng = JITEngine(stories_model, n_ctx=256, max_seqs=1, threads=2, max_logits=65)
    yield eng
    eng.close()


def test_reame_agrees_with_llama_cpp_on_stories_in_both_modes(engine, stories_expected):
    """64 of llama.cpp's greedy tokens per prompt, as one prompt step and token by token:
    no position wrong, most agree. Catches logits rows taken one position off (the row that
    predicts token j is the one at prompt length - 1 + j), and the decode mode feeding the
    tokens at the wrong positions."""
    results = llama_agree.check(engine, _cases(stories_expected), threshold=0.25)
    assert [r["mode"] for r in results] == ["prompt", "decode"] * 3
    for r in results:
        assert r["clear"] >= 40 and not r["wrong"], r
        assert len(r["disagree"]) <= 2, r


def test_a_changed_token_where_llama_cpp_is_sure_is_wrong_and_a_near_tie_is_not(
        engine, stories_expected):
    """Catches a check that ignores the gap (a near-tie reported wrong) or the tokens (the
    changed one passed), in both modes."""
    case = _cases(stories_expected, 1)[0]
    gaps = case["gaps"]
    sure = max(range(5, 60), key=lambda j: gaps[j])
    tokens = list(case["tokens"])
    tokens[sure] = (tokens[sure] + 1) % 512
    gaps = list(gaps)
    tie = sure + 1
    gaps[tie] = 0.01
    bad = dict(case, tokens=tokens, gaps=gaps)
    for r in llama_agree.check(engine, [bad], threshold=0.25):
        assert [w[0] for w in r["wrong"]] == [sure], r
        assert r["wrong"][0][1] == round(case["gaps"][sure], 4) and r["wrong"][0][2] < 0
    # the row after the changed token predicts from a context llama.cpp never saw: it may
    # disagree, but with its gap made a near-tie it is never wrong
    assert all(w[0] != tie for r in llama_agree.check(engine, [bad], 0.25) for w in r["wrong"])


def test_main_reports_and_exits_on_wrong_positions(tmp_path, monkeypatch, stories_path,
                                                   stories_expected):
    """The command end to end with a stand-in llama-server: exit 0 and a JSON of every case
    when Reame agrees, 1 when llama.cpp's data is made to disagree where it is sure."""
    import bench.llama_golden as golden
    by_prompt = {tuple(c["prompt_tokens"]): c for c in stories_expected["cases"]}
    flip = {"on": False}

    def record(server, path, prompt, n_ctx, n=24):
        c = by_prompt[tuple(prompt)]
        toks, gaps = list(c["greedy_tokens"][:n]), list(c["greedy_top2_gaps"][:n])
        if flip["on"]:
            j = max(range(n), key=lambda i: gaps[i])
            toks[j] = (toks[j] + 1) % 512
        return {"tokens": toks, "gaps": gaps}

    monkeypatch.setattr(golden, "record", record)
    args = ["--gguf", str(stories_path), "--llama-server", "unused", "--n", "24",
            "--json", str(tmp_path / "a.json")]
    for c in stories_expected["cases"][:2]:
        args += ["--prompt", c["prompt"]]
    assert llama_agree.main(args) == 0
    out = json.loads((tmp_path / "a.json").read_text())
    assert len(out["results"]) == 4 and all(not r["wrong"] for r in out["results"])
    flip["on"] = True
    assert llama_agree.main(args) == 1
