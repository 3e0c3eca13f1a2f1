"""How tool-call outputs end (issue 28 item 6): with tool_choice "required" the call set ends
after a complete call unless the model itself opens another (parallel_tool_calls true), after
exactly one call otherwise; an output cut by max_tokens never leaves tool-call markup in
`content`, and a call whose arguments were cut is not reported.

The parser and the sampling rule on their own, then the shared SmolLM2 (Hermes format, its
markers plain text) through the in-process server, whole and streamed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import shared_path
from falcon import testing

from reame.generate import Generation
from reame.sampling import SamplingParams
from reame.server.chat_output import ChatOutput
from reame.toolcalls import HERMES, MISTRAL

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def parse(fmt, text, truncated, chunk=None):
    s = fmt.stream()
    chunk = chunk or len(text) or 1
    for i in range(0, len(text), chunk):
        s.feed(text[i:i + chunk])
    s.finish(truncated=truncated)
    return s.content, [(c.name, c.arguments) for c in s.calls]


@pytest.mark.parametrize("text,content,calls", [
    ('<tool_call>\n{"name', "", []),                                # the leak
    ('Sure.\n<tool_call>\n{"name": "get_wea', "Sure.", []),
    ('Hello <tool_', "Hello", []),                                   # a marker cut inside
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', "", []),
    (CALL + "\n<tool_call>\n{\"na", "", [("get_weather", '{"city": "Paris"}')]),
    (CALL[:-5], "", [("get_weather", '{"city": "Paris"}')]),         # complete; closing cut
    ("Just text, cut", "Just text, cut", []),
])
def test_a_cut_output_keeps_no_markup(text, content, calls):
    """finish(truncated=True), whatever the chunking. Catches the old parser, which gave
    '<tool_call>\\n{"name' back as content and reported a call with cut arguments."""
    for chunk in (None, 1, 3):
        assert parse(HERMES, text, True, chunk) == (content, calls), chunk


def test_an_output_that_ended_keeps_its_text():
    """Without truncation the rules are unchanged: text that never became a call is content."""
    assert parse(HERMES, '<tool_call>\n{"name', False) == ('<tool_call>\n{"name', [])
    assert parse(HERMES, "Hello <tool_", False) == ("Hello <tool_", [])


def test_a_cut_list_keeps_its_complete_calls():
    """Mistral's list: the complete first call stays, the cut second one goes."""
    text = '[TOOL_CALLS][{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"x": '
    assert parse(MISTRAL, text, True) == ("", [("f", "{}")])


def test_chat_output_passes_the_length_finish_on():
    """Catches a ChatOutput that drops the finish reason: a cut call's markup as content."""
    out = ChatOutput(False, False, HERMES)
    out.feed('<tool_call>\n{"name')
    out.finish("length")
    assert out.message()["content"] == "" and "tool_calls" not in out.message()
    out = ChatOutput(False, False, HERMES)
    out.feed(CALL)
    out.finish("stop")
    assert out.message()["tool_calls"][0]["function"]["name"] == "get_weather"


def test_parallel_hermes_grammar_does_not_commit_on_the_newline():
    """After a complete call and its newline the grammar may still end. Catches the old
    `call ("\\n" call)*`, where the newline a model writes after `</tool_call>` forced another
    call."""
    from reame import structured as S
    from reame.tokenizer import Tokenizer
    from reame.model import load_model
    tok = Tokenizer.from_metadata(load_model(
        str(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))).metadata)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    g = S.compile_grammar(S.lark(HERMES.grammar(tools, "required", True)), tok, "tools")
    c = S.Constraint(g, tok)
    for t in tok.encode(CALL + "\n", add_special=False, parse_special=False):
        assert c.mask()[t]
        c.accept(t)
    assert c.accepting


# ---- the sampling rule ----

class _Tok:
    eog_ids = {0}


class _Grammar:
    """Accepting (a call is complete): tokens 0 (end), 1 and 2 (another call) allowed."""
    accepting, done = True, False

    def mask(self):
        m = np.zeros(8, bool)
        m[[0, 1, 2]] = True
        return m

    def accept(self, t):
        assert t in (1, 2)


def _step(logits, end_outside):
    g = Generation(_Tok(), [5], SamplingParams(temperature=0.0), constraint=_Grammar(),
                   detokenize=False, end_outside_grammar=end_outside)
    return g.step(np.array(logits, np.float32))


def test_the_models_own_choice_decides_where_the_grammar_may_end():
    """At an accepting state a token the grammar does not allow ends the output ("stop", not
    appended), where plain masking would redraw it among the allowed (another call); a token
    the grammar allows is taken as drawn. Catches sampling the masked distribution there: the
    runaway of repeated calls."""
    wants_text = [0.0, 1.0, 0.5, 0, 0, 3.0, 0, 0]       # the model would write token 5
    s = _step(wants_text, True)
    assert s.finish_reason == "stop" and not s.appended
    s = _step(wants_text, False)
    assert s.token == 1 and not s.finish_reason        # masked: forced into another call
    s = _step([0.0, 1.0, 4.0, 0, 0, 3.0, 0, 0], True)  # the model opens another call itself
    assert s.token == 2 and s.appended and not s.finish_reason


# ---- SmolLM2 through the server ----

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client():
    from reame.engines import create_engine
    from reame.model import load_model
    from reame.server import ServerConfig, create_app
    m = load_model(str(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf")))
    app = create_app(create_engine(m, "jit", n_ctx=1024, max_seqs=4),
                     ServerConfig(model=m.path, max_seqs=4, adaptive_boot=0, adaptive="off"))
    yield testing.TestClient(app)
    app.reame.service.stop()


def chat(client, stream=False, **body):
    body = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": "required",
            "temperature": 0, **body, "stream": stream}
    r = client.simulate_post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json
    content, calls, reason = "", {}, None
    for block in r.text.split("\n\n"):
        if not block.startswith("data: {"):
            continue
        ch = json.loads(block[6:])["choices"][0]
        content += ch["delta"].get("content") or ""
        for tc in ch["delta"].get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            c["name"] += tc.get("function", {}).get("name") or ""
            c["arguments"] += tc.get("function", {}).get("arguments") or ""
        reason = ch["finish_reason"] or reason
    return content, list(calls.values()), reason


@pytest.mark.parametrize("parallel", [True, False])
def test_required_ends_after_the_call(client, parallel):
    """SmolLM2 writes one call and would write prose after it: the answer is that one call,
    finish_reason tool_calls, in about the call's tokens. Catches the runaway (the same call
    again and again until max_tokens, finish_reason length) of the masked grammar."""
    for seed, temperature in ((0, 0.0), (1, 1.0), (2, 1.0)):
        r = chat(client, max_tokens=150, seed=seed, temperature=temperature,
                 parallel_tool_calls=parallel)
        ch = r["choices"][0]
        assert ch["finish_reason"] == "tool_calls", ch
        assert len(ch["message"]["tool_calls"]) == 1 and ch["message"]["content"] is None
        assert r["usage"]["completion_tokens"] < 60
        json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_leaves_no_markup(client, stream):
    """Cut inside the envelope (12 tokens: `<tool_call>\\n{"name": "get_`), the content is
    empty and there is no call; cut inside the arguments (20 tokens), no call in a whole
    response. Catches the issue's `"<tool_call>\\n{\\"name"` in content."""
    if stream:
        content, calls, reason = chat(client, True, max_tokens=12)
        assert reason == "length" and content == "" and calls == []
        content, calls, reason = chat(client, True, max_tokens=20)
        assert reason == "length" and "<tool_call" not in content and "{" not in content
    else:
        for n in (12, 20):
            ch = chat(client, max_tokens=n)["choices"][0]
            assert ch["finish_reason"] == "length"
            assert ch["message"]["content"] == "" and "tool_calls" not in ch["message"], ch
