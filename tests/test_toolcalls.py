"""Tool-call formats: detection from the shared chat templates; each family's parser on recorded
model outputs (single and parallel calls, text before a call, whitespace, unicode, malformed
and truncated calls); streaming in random chunk sizes gives the whole parse, with OpenAI-shaped
deltas that concatenate to the final arguments; llguidance grammars for tool_choice "required"
and named functions, driven with a byte-level toy vocabulary."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import llguidance as llg
import pytest
from conftest import shared_path

from reame import toolcalls as tc
from reame.toolcalls import ToolCall

TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": "hermes", "Qwen-Qwen3-0.6B": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3", "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek",
    "HuggingFaceTB-SmolLM3-3B": None, "microsoft-Phi-3.5-mini-instruct": None,
    "google-gemma-2-2b-it": None,
}


@pytest.mark.parametrize("name", TEMPLATES)
def test_detect_format_of_shared_templates(name):
    src = shared_path(f"testdata/templates/{name}.jinja").read_text(encoding="utf-8")
    fmt = tc.detect_format(src)
    assert (fmt and fmt.name) == TEMPLATES[name]
    if fmt:
        assert fmt.native


def test_detect_format_newer_mistral_and_fallback():
    src = "{{ '[TOOL_CALLS]' + tool.name + '[ARGS]' + tool.arguments|tojson }}"
    assert tc.detect_format(src) is tc.MISTRAL_ARGS
    fb = tc.detect_format("{% if tools %}{{ tools|tojson }}{% endif %}{{ messages[0].content }}")
    assert fb is tc.HERMES_FALLBACK and not fb.native and fb.name == "hermes"
    assert tc.detect_format("{{ messages[0].content }}") is None
    assert tc.detect_format(None) is None


# -- recorded outputs -------------------------------------------------------------------------
# (format, output as the model prints it, expected content, expected [(name, arguments)])

W = '{"city": "Paris", "unit": "celsius"}'
RECORDS = [
    # Qwen2.5 / Qwen3 (hermes)
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": ' + W + '}\n</tool_call>',
     "", [("get_weather", W)]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
     '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
     '</tool_call>', "", [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')]),
    ("hermes", "I'll check the current weather in both cities for you.\n\n<tool_call>\n"
     '{"name": "get_weather", "arguments": {"city": "São Paulo"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "America/Sao_Paulo"}}\n'
     "</tool_call>\n", "I'll check the current weather in both cities for you.",
     [("get_weather", '{"city": "São Paulo"}'), ("get_time", '{"timezone": "America/Sao_Paulo"}')]),
    ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "北京 天气 ☀️", '
     '"filters": {"lang": ["zh", "en"], "max": 5}, "exact": false}}\n</tool_call>', "",
     [("search", '{"query": "北京 天气 ☀️", "filters": {"lang": ["zh", "en"], "max": 5}, '
                 '"exact": false}')]),
    ("hermes", '<tool_call>\n{"name": "run_python", "arguments": {"code": "print(\\"}{\\")\\n'
     'x = {\'a\': [1, 2]}"}}\n</tool_call>', "",
     [("run_python", '{"code": "print(\\"}{\\")\\nx = {\'a\': [1, 2]}"}')]),
    ("hermes", '<tool_call>\n{ "name" : "get_weather" ,\n  "arguments" : {\n    "city": "Paris"\n  }\n}'
     '\n</tool_call>', "", [("get_weather", '{\n    "city": "Paris"\n  }')]),
    # the envelope's closing brace forgotten (small models do): still the call
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
     "", [("get_weather", '{"city": "Paris"}')]),
    # malformed: not JSON after the tag, so content (the tag included)
    ("hermes", 'Calling it now: <tool_call>\nget_weather(city="Paris")\n</tool_call>',
     'Calling it now: <tool_call>\nget_weather(city="Paris")\n</tool_call>', []),
    ("hermes", '<tool_call>\n{"name": get_weather, "arguments": {}}\n</tool_call>',
     '<tool_call>\n{"name": get_weather, "arguments": {}}\n</tool_call>', []),
    # one good call, then a broken one: the good call stays, the rest is content
    ("hermes", '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n'
     '{"arguments": {"x": 1}}\n</tool_call>', '<tool_call>\n{"arguments": {"x": 1}}\n</tool_call>',
     [("a", "{}")]),
    # arguments never closed: the call ends at the closing tag, the next call still counts
    ("hermes", '<tool_call>\n{"name": "a", "arguments": {"x": [1, 2\n</tool_call>\n<tool_call>\n'
     '{"name": "b", "arguments": {}}\n</tool_call>', "", [("a", '{"x": [1, 2\n'), ("b", "{}")]),
    # a JSON string name is decoded (a tool named "météo", written with escapes)
    ("hermes", '<tool_call>\n{"name": "m\\u00e9t\\u00e9o", "arguments": {"ville": "Nice"}}\n'
     '</tool_call>', "", [("météo", '{"ville": "Nice"}')]),
    ("hermes", "The <tool> element and <tool_call markers are HTML-ish.\n",
     "The <tool> element and <tool_call markers are HTML-ish.\n", []),
    ("hermes", "Paris is sunny today, 21 °C.", "Paris is sunny today, 21 °C.", []),
    # cut off by max_tokens: inside the envelope -> content; inside the arguments -> the call
    ("hermes", 'Sure.\n<tool_call>\n{"name": "get_wea', 'Sure.\n<tool_call>\n{"name": "get_wea', []),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
     "", [("get_weather", '{"city": "Par')]),
    # Llama 3.x
    ("llama3", '{"name": "get_weather", "parameters": ' + W + '}', "", [("get_weather", W)]),
    ("llama3", '{"type": "function", "name": "get_weather", "parameters": {"city": "Zürich"}}',
     "", [("get_weather", '{"city": "Zürich"}')]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
     "", [("get_weather", '{"city": "Paris"}')]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
     '{"name": "get_time", "parameters": {"timezone": "Europe/Paris"}}', "",
     [("get_weather", '{"city": "Paris"}'), ("get_time", '{"timezone": "Europe/Paris"}')]),
    ("llama3", '\n\n{"name": "get_time", "arguments": {}}\n', "", [("get_time", "{}")]),
    ("llama3", 'Let me look that up. <|python_tag|>{"name": "get_time", "parameters": {}}',
     "Let me look that up.", [("get_time", "{}")]),
    ("llama3", '{"answer": 42, "unit": "none"}', '{"answer": 42, "unit": "none"}', []),
    ("llama3", '{"name": get_weather, "parameters": {}}', '{"name": get_weather, "parameters": {}}', []),
    ("llama3", 'The JSON would be {"name": "get_weather", "parameters": {}} but I will not call it.',
     'The JSON would be {"name": "get_weather", "parameters": {}} but I will not call it.', []),
    # Mistral Nemo: a JSON list, ids optional
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": ' + W + ', "id": "a1B2c3D4e"}]',
     "", [("get_weather", W)]),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name": "get_weather", "arguments": {"city": "Köln"}}]', "",
     [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Köln"}')]),
    ("mistral", 'Let me check.[TOOL_CALLS][{"name": "get_time", "arguments": {}}]',
     "Let me check.", [("get_time", "{}")]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": }]',
     '[TOOL_CALLS][{"name": "get_weather", "arguments": }]', []),
    ("mistral", "Bonjour ! Il fait beau à Paris.", "Bonjour ! Il fait beau à Paris.", []),
    # the second call of the list is broken: the first stays, the rest is content
    ("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, {"nme": "get_weather"}]',
     '{"nme": "get_weather"}]', [("get_time", "{}")]),
    # newer Mistral
    ("mistral_args", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]'
     '{"timezone": "[UTC+1]"}', "",
     [("get_weather", '{"city": "Paris"}'), ("get_time", '{"timezone": "[UTC+1]"}')]),
    ("mistral_args", 'Checking.[TOOL_CALLS]get_weather[CALL_ID]x7Yk2pQ9m[ARGS]{"city": "Lyon"}',
     "Checking.", [("get_weather", '{"city": "Lyon"}')]),
    ("mistral_args", "[TOOL_CALLS]get weather now", "[TOOL_CALLS]get weather now", []),
    # Granite
    ("granite", '<|tool_call|>[{"name": "get_current_weather", "arguments": {"location": "Boston, MA"}}]',
     "", [("get_current_weather", '{"location": "Boston, MA"}')]),
    ("granite", '<|tool_call|>[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [2]}}]',
     "", [("a", '{"x": 1}'), ("b", '{"y": [2]}')]),
    # DeepSeek V3 / R1
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
     '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function'
     '<｜tool▁sep｜>get_time\n```json\n{"timezone": "Asia/Tokyo"}\n```<｜tool▁call▁end｜>'
     "<｜tool▁calls▁end｜>", "",
     [("get_weather", '{"city": "Paris"}'), ("get_time", '{"timezone": "Asia/Tokyo"}')]),
    ("deepseek", "I need the weather.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
     "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"東京\"}\n```<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>", "I need the weather.", [("get_weather", '{"city": "東京"}')]),
]
IDS = [f"{i}-{r[0]}" for i, r in enumerate(RECORDS)]
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


@pytest.mark.parametrize("fmt,text,content,calls", RECORDS, ids=IDS)
def test_parse_recorded_output(fmt, text, content, calls):
    got_content, got = tc.FORMATS[fmt].parse(text)
    assert got_content == content
    assert [(c.name, c.arguments) for c in got] == calls
    assert all(CALL_ID.fullmatch(c.id) for c in got)
    assert len({c.id for c in got}) == len(got)


def run_stream(fmt, text, rng, max_chunk):
    s = fmt.stream()
    deltas, i = [], 0
    while i < len(text):
        k = rng.randint(1, max_chunk)
        deltas += s.feed(text[i:i + k])
        i += k
    deltas += s.finish()
    return s, deltas


def check_deltas(deltas, content, calls):
    """The OpenAI streaming shape: content pieces; per call a first entry with id, type and
    name (arguments ""), then argument pieces; everything concatenates to the final result."""
    assert "".join(d.get("content", "") for d in deltas) == content
    args: dict[int, str] = {}
    for d in deltas:
        assert set(d) in ({"content"}, {"tool_calls"}), d
        if "content" in d:
            assert d["content"]
            continue
        (e,) = d["tool_calls"]
        i = e["index"]
        if i not in args:
            assert i == len(args)                       # calls open in order, once
            assert e["type"] == "function" and e["function"]["arguments"] == ""
            assert e["id"] == calls[i].id and e["function"]["name"] == calls[i].name
            args[i] = ""
        else:
            assert set(e) == {"index", "function"} and set(e["function"]) == {"arguments"}
            assert e["function"]["arguments"]
            args[i] += e["function"]["arguments"]
    assert [args[i] for i in range(len(args))] == [c.arguments for c in calls]


@pytest.mark.parametrize("fmt,text,content,calls", RECORDS, ids=IDS)
def test_stream_in_random_chunks_equals_whole_parse(fmt, text, content, calls):
    f = tc.FORMATS[fmt]
    rng = random.Random(hash(text) & 0xffff)
    for trial in range(60):
        s, deltas = run_stream(f, text, rng, max_chunk=1 if trial == 0 else rng.choice([2, 3, 7, 40]))
        assert s.content == content
        assert [(c.name, c.arguments) for c in s.calls] == calls
        check_deltas(deltas, content, s.calls)


def test_plain_text_is_released_at_once():
    s = tc.HERMES.stream()
    assert s.feed("Hello wor") == [{"content": "Hello wor"}]
    assert s.feed("ld <too") == [{"content": "ld"}]          # " <too" might open a call
    assert s.feed("l>s") == [{"content": " <tool>s"}]
    assert s.feed("\n\n") == []                               # whitespace before a call is dropped
    assert s.feed("<tool_call>\n{\"name\": \"f\", \"argu") == []
    d = s.feed('ments": {"a"')
    assert d[0]["tool_calls"][0]["function"] == {"name": "f", "arguments": ""}
    assert d[1] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}
    assert s.feed(': 1}}\n</tool_call>') == [
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}]
    assert s.finish() == []
    assert s.content == "Hello world <tool>s" and s.calls[0].arguments == '{"a": 1}'


def test_arguments_stream_as_they_are_written():
    args = json.dumps({"code": "for i in range(10):\n    print(i)\n" * 5})
    text = tc.HERMES.render([ToolCall("run_python", args)])
    s = tc.HERMES.stream()
    pieces = [d["tool_calls"][0]["function"]["arguments"]
              for ch in text for d in s.feed(ch) if "tool_calls" in d]
    pieces += [d["tool_calls"][0]["function"]["arguments"] for d in s.finish()]
    assert pieces[0] == "" and len(pieces) > len(args) // 2     # one piece per character or so
    assert "".join(pieces) == args == s.calls[0].arguments


def test_llama_holds_a_leading_brace_until_it_is_known():
    s = tc.LLAMA3.stream()
    assert s.feed("  ") == [] and s.feed('{"na') == []
    assert s.feed('me": "get_time", "parameters": {')[0]["tool_calls"][0]["function"]["name"] \
        == "get_time"
    s = tc.LLAMA3.stream()
    assert s.feed('{"nope') == [{"content": '{"nope'}]


@pytest.mark.parametrize("fmt", sorted(tc.FORMATS))
def test_render_parse_round_trip(fmt):
    f = tc.FORMATS[fmt]
    calls = [ToolCall("get_weather", json.dumps({"city": "Paris", "tags": ["a", "}"]})),
             ToolCall("get_time", "{}")]
    content, got = f.parse(f.render(calls))
    assert content == "" and [(c.name, c.arguments) for c in got] == \
        [(c.name, c.arguments) for c in calls]
    if fmt != "llama3":             # there, bare JSON is a call only at the start (see RECORDS)
        assert f.parse("Text first. " + f.render(calls[:1]))[0] == "Text first."


def test_to_openai_shape():
    c = ToolCall("f", '{"a": 1}')
    assert c.to_openai() == {"id": c.id, "type": "function",
                             "function": {"name": "f", "arguments": '{"a": 1}'}}


def test_feed_after_finish_is_an_error():
    s = tc.HERMES.stream()
    s.finish()
    with pytest.raises(ValueError):
        s.feed("x")


# -- grammars -----------------------------------------------------------------------------------

SPECIALS = ["[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<|tool_call|>", "<think>", "</think>",
            "</s>"]
SPECIAL_IDS = {s: 256 + i for i, s in enumerate(SPECIALS)}


class ToyVocab:
    """Every single byte, then control tokens (marked as llguidance's TokenizerWrapper expects:
    a leading 0xff byte); the last is EOS."""
    tokens = [bytes([i]) for i in range(256)] + [b"\xff" + s.encode() for s in SPECIALS]
    special_token_ids = list(range(256, 256 + len(SPECIALS)))
    eos_token_id = 256 + len(SPECIALS) - 1
    bos_token_id = None

    def __call__(self, data: bytes) -> list[int]:
        return list(data)


TOY = llg.LLTokenizer(llg.TokenizerWrapper(ToyVocab()))


def toy_ids(text: str, specials: dict[str, int]) -> list[int]:
    """Bytes, except the given markers, which become their control tokens."""
    out, i = [], 0
    while i < len(text):
        for s, t in specials.items():
            if text.startswith(s, i):
                out.append(t)
                i += len(s)
                break
        else:
            out += list(text[i].encode())
            i += 1
    return out


def compile_lark(g: str) -> str:
    lark = llg.LLMatcher.grammar_from_lark(g)
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(lark, TOY)
    assert not is_error and not messages, messages
    return lark


def accepts(grammar: str, text: str, specials: dict[str, int]) -> bool:
    m = llg.LLMatcher(TOY, grammar, log_level=0)
    return m.consume_tokens(toy_ids(text, specials)) and m.is_accepting()


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time now"}},
]


def specials_of(fmt):
    return {k: v for k, v in SPECIAL_IDS.items() if k in fmt.markers}


def call_text(fmt, *calls):
    return fmt.render([ToolCall(n, json.dumps(a, ensure_ascii=False)) for n, a in calls])


@pytest.mark.parametrize("fmt", sorted(tc.FORMATS))
def test_grammar_required(fmt):
    f, sp = tc.FORMATS[fmt], specials_of(tc.FORMATS[fmt])
    g = compile_lark(f.grammar(TOOLS, "required", parallel=True, special_tokens=sp))
    one = call_text(f, ("get_weather", {"city": "Zürich", "unit": "celsius"}))
    two = call_text(f, ("get_weather", {"city": "Paris"}), ("get_time", {}))
    assert accepts(g, one, sp) and accepts(g, two, sp)
    assert accepts(g, call_text(f, ("get_time", {})), sp)
    for bad in [call_text(f, ("get_wether", {"city": "Paris"})),         # no such tool
                call_text(f, ("get_weather", {"town": "Paris"})),        # missing / unknown key
                call_text(f, ("get_weather", {"city": 7})),              # wrong type
                call_text(f, ("get_weather", {"city": "P", "unit": "kelvin"})),
                "I think it is sunny.",                                  # not a call at all
                one.replace('": ', '":'),                                # not the model's spacing
                ""]:
        assert not accepts(g, bad, sp), bad
    single = compile_lark(f.grammar(TOOLS, "required", parallel=False, special_tokens=sp))
    assert accepts(single, one, sp) and not accepts(single, two, sp)


@pytest.mark.parametrize("fmt", sorted(tc.FORMATS))
def test_grammar_named_function(fmt):
    f, sp = tc.FORMATS[fmt], specials_of(tc.FORMATS[fmt])
    choice = {"type": "function", "function": {"name": "get_weather"}}
    g = compile_lark(f.grammar(TOOLS, choice, parallel=True, special_tokens=sp))
    assert accepts(g, call_text(f, ("get_weather", {"city": "Oslo"})), sp)
    assert not accepts(g, call_text(f, ("get_time", {})), sp)
    assert not accepts(g, call_text(f, ("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})), sp)


@pytest.mark.parametrize("fmt", ["mistral", "mistral_args", "granite"])
def test_grammar_markers_are_control_tokens(fmt):
    f, sp = tc.FORMATS[fmt], specials_of(tc.FORMATS[fmt])
    assert sp
    g = compile_lark(f.grammar(TOOLS, "required", special_tokens=sp))
    text = call_text(f, ("get_time", {}))
    assert accepts(g, text, sp)
    assert not accepts(g, text, {})            # the marker spelled out in plain bytes
    g_text = compile_lark(f.grammar(TOOLS, "required"))     # no ids given: markers are text
    assert accepts(g_text, text, {}) and not accepts(g_text, text, sp)


def test_grammar_thinking_prefix():
    f = tc.HERMES
    call = call_text(f, ("get_time", {}))
    opt = compile_lark(f.grammar(TOOLS, "required", thinking="optional"))
    assert accepts(opt, call, {})
    assert accepts(opt, "<think>\nThe user wants the time.\n</think>\n\n" + call, {})
    assert not accepts(opt, "<think>\nno call after</think>\n\nIt is noon.", {})
    assert not accepts(opt, "The user wants the time.\n</think>\n\n" + call, {})
    opened = compile_lark(f.grammar(TOOLS, "required", thinking="open"))
    assert accepts(opened, "The user wants the time.\n</think>\n\n" + call, {})
    assert not accepts(opened, call, {})
    # with </think> a control token of the vocabulary
    sp = {"<think>": SPECIAL_IDS["<think>"], "</think>": SPECIAL_IDS["</think>"]}
    g = compile_lark(f.grammar(TOOLS, "required", special_tokens=sp, thinking="optional"))
    assert accepts(g, "<think>\nhm\n</think>\n" + call, sp)
    assert not accepts(g, "<think>\nhm\n</think>\n" + call, {})


def test_grammar_choices_that_give_no_grammar_or_an_error():
    assert tc.HERMES.grammar(TOOLS, "auto") is None
    assert tc.HERMES.grammar(TOOLS, "none") is None
    with pytest.raises(tc.ToolChoiceError, match="nope"):
        tc.HERMES.grammar(TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(tc.ToolChoiceError):
        tc.HERMES.grammar(TOOLS, "sometimes")
    with pytest.raises(tc.ToolChoiceError):
        tc.HERMES.grammar([], "required")
    with pytest.raises(ValueError):
        tc.HERMES.grammar(TOOLS, "required", thinking="maybe")


def walk(grammar: str, rng: random.Random, limit: int = 3000) -> list[int]:
    """A random sentence of the grammar: random allowed tokens, favouring the ones that close
    things, until EOS is allowed and chosen."""
    m = llg.LLMatcher(TOY, grammar, log_level=0)
    out = []
    for _ in range(limit):
        mask = m.compute_bitmask()
        allowed = [t for t in range(len(ToyVocab.tokens)) if mask[t // 8] >> (t % 8) & 1]
        if ToyVocab.eos_token_id in allowed and rng.random() < 0.7:
            return out
        allowed = [t for t in allowed if t != ToyVocab.eos_token_id]
        if not allowed:
            return out
        closing = [t for t in allowed if t < 256 and chr(t) in '"}]']
        t = rng.choice(closing if closing and rng.random() < 0.3 else allowed)
        assert m.consume_token(t)
        out.append(t)
    raise AssertionError("the walk did not end")


@pytest.mark.parametrize("fmt", sorted(tc.FORMATS))
def test_every_grammar_sentence_parses_to_valid_calls(fmt):
    """What constrained decoding can produce is what the parser reads back: calls of the
    offered tools whose arguments are valid for their schemas."""
    f, sp = tc.FORMATS[fmt], specials_of(tc.FORMATS[fmt])
    g = compile_lark(f.grammar(TOOLS, "required", parallel=True, special_tokens=sp))
    names = {t: s for s, t in sp.items()}
    schemas = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"})
               for t in TOOLS}
    rng = random.Random(fmt)
    for _ in range(12):
        ids = walk(g, rng)
        text = b"".join(names[t].encode() if t in names else bytes([t]) for t in ids)
        content, calls = f.parse(text.decode("utf-8"))
        assert content == "" and calls, text
        for c in calls:
            jsonschema.validate(json.loads(c.arguments), schemas[c.name])


def test_special_token_ids_from_a_tokenizer():
    class Tok:
        vocab = {"[TOOL_CALLS]": 5, "[ARGS]": 32, "<think>": 40, "hello": 7}

        def token_to_id(self, text):
            return self.vocab.get(text)

        def is_special(self, i):
            return i in (5, 32)
    assert tc.MISTRAL_ARGS.special_token_ids(Tok()) == {"[TOOL_CALLS]": 5, "[ARGS]": 32}
    assert tc.HERMES.special_token_ids(Tok()) == {}
