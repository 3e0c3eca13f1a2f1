"""Reasoning: `<think>` blocks split from the answer on recorded outputs of Qwen3, DeepSeek-R1
distills and SmolLM3, whole and streamed in random chunks; which templates reason and which
prompts open the block; reasoning then tool calls through both streaming parsers."""

from __future__ import annotations

import random

import pytest
from conftest import shared_path

from reame import reasoning, toolcalls
from reame.chat_template import ChatTemplate
from reame.reasoning import ReasoningStream, split

# (output, started_in_think, reasoning, content)
RECORDS = [
    # Qwen3, thinking mode: the model opens the block itself
    ("<think>\nOkay, the user is asking what 2 + 2 is. That's basic arithmetic: 4.\n</think>\n\n"
     "2 + 2 = **4**.",
     False, "Okay, the user is asking what 2 + 2 is. That's basic arithmetic: 4.", "2 + 2 = **4**."),
    # Qwen3 with enable_thinking=false: the template wrote an empty block, the output is plain
    ("2 + 2 = **4**.", False, "", "2 + 2 = **4**."),
    # Qwen3 sometimes writes the empty block itself
    ("<think>\n\n</think>\n\nHello! How can I help you today?", False, "",
     "Hello! How can I help you today?"),
    # DeepSeek-R1 distill: the prompt ends with "<think>\n", only </think> appears
    ("Alright, so I need to figure out 15% of 80. Hmm, 10% is 8, 5% is 4.\n\nSo 12.\n</think>\n\n"
     "15% of 80 is **12**.",
     True, "Alright, so I need to figure out 15% of 80. Hmm, 10% is 8, 5% is 4.\n\nSo 12.",
     "15% of 80 is **12**."),
    # ... and a distill that writes <think> again anyway
    ("<think>\nHmm.\n</think>\nFine.", True, "Hmm.", "Fine."),
    # unterminated (max_tokens hit while thinking): all reasoning
    ("<think>\nLet me think about this carefully. First, the train leaves at 3 pm", False,
     "Let me think about this carefully. First, the train leaves at 3 pm", ""),
    ("The user wants a poem about the sea. I could use a sonnet form, with </thi", True,
     "The user wants a poem about the sea. I could use a sonnet form, with </thi", ""),
    # no block: all content, unchanged (leading whitespace included)
    ("  Bonjour ! Comment ça va ?\n", False, "", "  Bonjour ! Comment ça va ?\n"),
    ("Use the <think> tag to show reasoning, then </think>.", False, "",
     "Use the <think> tag to show reasoning, then </think>."),
    ("<thin", False, "", "<thin"),
    ("", False, "", ""),
    # tags and near-tags inside reasoning, unicode
    ("<think>\nIs a</b the same as </thing>? 不一样。 Compare <think>s.\n</think>\n\n不一样 — no.",
     False, "Is a</b the same as </thing>? 不一样。 Compare <think>s.", "不一样 — no."),
    # SmolLM3 (/think): same tags, reasoning then the answer
    ("<think>\nThe capital of Australia is Canberra, not Sydney.\n</think>\nThe capital is Canberra.",
     False, "The capital of Australia is Canberra, not Sydney.", "The capital is Canberra."),
]


@pytest.mark.parametrize("text,started,want_r,want_c", RECORDS)
def test_split_recorded_output(text, started, want_r, want_c):
    assert split(text, started_in_think=started) == (want_r, want_c)


@pytest.mark.parametrize("text,started,want_r,want_c", RECORDS)
def test_stream_in_random_chunks(text, started, want_r, want_c):
    rng = random.Random(len(text))
    for trial in range(80):
        s = ReasoningStream(started_in_think=started)
        rs, cs, i = [], [], 0
        while i < len(text):
            k = 1 if trial == 0 else rng.randint(1, rng.choice([2, 4, 9, 50]))
            r, c = s.feed(text[i:i + k])
            rs.append(r)
            cs.append(c)
            i += k
        r, c = s.finish()
        rs.append(r)
        cs.append(c)
        assert ("".join(rs), "".join(cs)) == (want_r, want_c)
        assert (s.reasoning, s.content) == (want_r, want_c)


def test_stream_releases_at_once_and_holds_only_a_partial_tag():
    s = ReasoningStream()
    assert s.feed("<thi") == ("", "")
    assert s.feed("nk>\nFirst") == ("First", "")         # the leading newline dropped
    s = ReasoningStream()
    assert s.feed("<think>\nFirst") == ("First", "")
    assert s.feed(" step. </th") == (" step.", "")        # " </th" may close the block
    assert s.feed("ink>\n\nAns") == ("", "Ans")
    assert s.feed("wer") == ("", "wer")
    assert s.finish() == ("", "")
    s = ReasoningStream()
    assert s.feed("Hi") == ("", "Hi")                     # not a tag: content at once
    s = ReasoningStream(started_in_think=True)
    assert s.feed("x </b") == ("x </b", "")               # "</b" cannot start "</think>"


def test_detect():
    want = {"Qwen-Qwen3-0.6B": True, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": True,
            "HuggingFaceTB-SmolLM3-3B": True, "Qwen-Qwen2.5-7B-Instruct": False,
            "meta-llama-Llama-3.1-8B-Instruct": False, "mistralai-Mistral-Nemo-Instruct-2407": False,
            "google-gemma-2-2b-it": False}
    for name, reasons in want.items():
        src = shared_path(f"testdata/templates/{name}.jinja").read_text(encoding="utf-8")
        assert reasoning.detect(src) is reasons, name
    assert not reasoning.detect(None)


def test_starts_in_think_from_the_rendered_prompt():
    def tpl(name):
        src = shared_path(f"testdata/templates/{name}.jinja").read_text(encoding="utf-8")
        return ChatTemplate(src, "<s>", "</s>")
    msgs = [{"role": "user", "content": "2+2?"}]
    r1 = tpl("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    assert reasoning.starts_in_think(r1.render(msgs, enable_thinking=True))
    assert not reasoning.starts_in_think(r1.render(msgs))    # this template closes it by default
    q3 = tpl("Qwen-Qwen3-0.6B")
    assert not reasoning.starts_in_think(q3.render(msgs))    # the model opens it
    assert not reasoning.starts_in_think(q3.render(msgs, enable_thinking=False))
    assert not reasoning.starts_in_think("<|im_start|>user\nwhat does <think> do?<|im_end|>\n")


def test_reasoning_then_tool_calls_streamed():
    """The server's pipeline: text deltas -> ReasoningStream -> content deltas ->
    ToolCallStream; any chunking gives split() then parse()."""
    out = ("<think>\nThe user wants the weather in Paris; I should call get_weather.\n</think>\n\n"
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    want_r, content = split(out)
    want_c, want_calls = toolcalls.HERMES.parse(content)
    assert want_r.startswith("The user wants") and want_c == ""
    assert [(c.name, c.arguments) for c in want_calls] == [("get_weather", '{"city": "Paris"}')]
    rng = random.Random(3)
    for _ in range(40):
        rs, ts = ReasoningStream(), toolcalls.HERMES.stream()
        r_parts, i = [], 0
        while i < len(out):
            k = rng.randint(1, 12)
            r, c = rs.feed(out[i:i + k])
            r_parts.append(r)
            ts.feed(c)
            i += k
        r, c = rs.finish()
        r_parts.append(r)
        ts.feed(c)
        ts.finish()
        assert "".join(r_parts) == want_r and ts.content == want_c
        assert [(c.name, c.arguments) for c in ts.calls] == [(c.name, c.arguments) for c in want_calls]
