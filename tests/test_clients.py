"""The OpenAI-API clients people use, end to end against the chat completions API (issue 28,
first acceptance line): the official `openai` 3.x client, langchain-openai's `ChatOpenAI`,
instructor, Simon Willison's `llm` (library and CLI) and pydantic-ai's `OpenAIChatModel`, each
pointed at a real `reame serve` of the shared SmolLM2-135M-Instruct (ChatML template, byte-level
BPE) and stories260K (SentencePiece, no chat template: the server's plain fallback).
/v1/responses and /v1/messages have their own modules (test_responses_api.py,
test_messages_api.py); the 20-of-20 `{name, age}` acceptance line is
test_structured_vocab.py::test_smollm2_gives_exactly_the_schemas_keys.

These models write weak content: the tests check shapes and validity (parsed objects, tool
calls whose arguments validate, streamed == non-streamed at temperature 0, no 5xx), never
meaning. Clients must not reach the network: every connection other than loopback fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import openai
import pydantic
import pydantic_core
import pytest

from conftest import TIME_SCALE, shared_path
from test_server_e2e import ReameServer

SMOL, STORIES = "smol", "stories"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a time zone.",
    "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                   "required": ["tz"]}}}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
ASK_BOB = [{"role": "user", "content": "Bob is 30 years old."}]


class Person(pydantic.BaseModel):
    """A person."""
    name: str = pydantic.Field(max_length=12)    # bounded: stories260K writes strings forever
    age: int = pydantic.Field(ge=0, le=120)


class Named(pydantic.BaseModel):
    """A person (unbounded: the schema a prompt-only mode shows the model is its plainest)."""
    name: str
    age: int


# Modes that only show the schema in the prompt (json_object holds the syntax, nothing holds
# the keys) depend on a 135M model reading it: each of these prompts gets a Named from
# SmolLM2 greedily in some of them; one success of the few shows the path works end to end.
PROMPT_ONLY = ["Bob is 30 years old.", "Who is Anna? She is 25.", "My name is Carl and I am 52."]


def first_success(attempt, failures):
    """attempt(prompt) over PROMPT_ONLY until one returns; `failures` are the client's own
    content-validation errors (an HTTP error is never one of them and propagates)."""
    errors = []
    for prompt in PROMPT_ONLY:
        try:
            return attempt(prompt)
        except failures as e:
            errors.append(f"{prompt!r}: {type(e).__name__}: {str(e)[:200]}")
    pytest.fail("no prompt gave a valid object:\n" + "\n".join(errors))


# ---- servers and the network guard ----

@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("serve")
    common = ("--adaptive", "off", "--max-seqs", "4", "--ctx-size", "2048")
    out = {}
    try:
        out[SMOL] = ReameServer(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"), *common,
                                "--alias", SMOL, log_dir=log_dir)
        out[STORIES] = ReameServer(shared_path("models/stories260K.gguf"), *common,
                                   "--alias", STORIES, log_dir=log_dir)
        yield out
    finally:
        for s in out.values():
            s.stop()


def url(servers, name):
    return servers[name].url + "/v1"


@pytest.fixture(scope="module")
def oa(servers):
    """name -> the official client on that server."""
    return {name: s.client(api_key="sk-unused") for name, s in servers.items()}


LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every connection or name lookup beyond loopback fails the test (a client that counts
    tokens with a downloaded tiktoken file, telemetry, a default base URL)."""
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise AssertionError(f"a client reached the network: {address}")
        return connect(self, address)

    def guarded_getaddrinfo(host, *a, **kw):
        if host not in LOOPBACK:
            raise AssertionError(f"a client looked up {host!r}")
        return getaddrinfo(host, *a, **kw)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    for k in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
        monkeypatch.setenv(k, "false")
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def check_call(call, tools=(WEATHER, TIME)):
    """A tool call of the openai client: a known name, arguments that parse and validate."""
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.type == "function" and call.id
    assert call.function.name in spec
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, spec[call.function.name])
    return args


def stream_text(stream):
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


# ---- openai ----

@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_openai_stream_equals_create(oa, name):
    """chat.completions.create and its stream, greedy, give the same text, and the stream's
    usage chunk the same usage. Catches a stream that drops or duplicates text around a
    held-back boundary (stop-string or marker holds, UTF-8 pieces), or counts usage apart."""
    c = oa[name]
    kw = dict(model=name, messages=ASK_BOB, max_tokens=30, temperature=0)
    r = c.chat.completions.create(**kw)
    chunks = list(c.chat.completions.create(**kw, stream=True,
                                            stream_options={"include_usage": True}))
    assert r.choices[0].message.content
    assert stream_text(chunks) == r.choices[0].message.content
    assert chunks[-1].usage.model_dump() == r.usage.model_dump()
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == \
        r.choices[0].finish_reason


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_openai_parse_with_a_pydantic_model(oa, name):
    """chat.completions.parse(response_format=Person), on both vocabularies, streamed too
    (chat.completions.stream): a validated Person. Catches structured output that fails on
    SentencePiece (the old 500: forced text tokenized with a space prefix), objects left open
    (an invented key fails the strict schema's parse) and a grammar not applied in streams."""
    c = oa[name]
    kw = dict(model=name, messages=ASK_BOB, response_format=Person, max_tokens=120,
              temperature=0)
    r = c.chat.completions.parse(**kw)
    assert isinstance(r.choices[0].message.parsed, Person)
    assert r.choices[0].finish_reason == "stop"
    with c.chat.completions.stream(**kw) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    assert final.choices[0].message.parsed == r.choices[0].message.parsed


@pytest.mark.parametrize("name", [SMOL, STORIES])
@pytest.mark.parametrize("fmt", ["json_object", "json_schema"])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_openai_json_modes(oa, name, fmt, endpoint):
    """response_format json_object / json_schema on chat and completions: 200 and JSON, whole
    when the answer stopped, a valid prefix when max_tokens cut it (json_object leaves the
    model free to write one string forever). Catches the SentencePiece 500 of issue 28 on
    every path, and a format that is accepted but not applied."""
    c = oa[name]
    schema = Person.model_json_schema()
    rf = ({"type": "json_object"} if fmt == "json_object" else
          {"type": "json_schema", "json_schema": {"name": "Person", "schema": schema}})
    if endpoint == "chat":
        r = c.chat.completions.create(model=name, messages=ASK_BOB, response_format=rf,
                                      max_tokens=80, temperature=0)
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    else:
        r = c.completions.create(model=name, prompt="Bob is 30 years old. As JSON:",
                                 max_tokens=80, temperature=0, extra_body={"response_format": rf})
        text, finish = r.choices[0].text, r.choices[0].finish_reason
    assert text.startswith("{")
    if finish == "stop":
        obj = json.loads(text)
        if fmt == "json_schema":
            jsonschema.validate(obj, schema)
    else:
        assert finish == "length" and fmt == "json_object", text
        assert isinstance(pydantic_core.from_json(text, allow_partial="trailing-strings"), dict)


def test_openai_tool_choices(oa):
    """tools with tool_choice required / named / auto / null on SmolLM2. required and named:
    finish_reason tool_calls, content null, one call whose arguments validate (named: that
    function). auto: whatever the model chose, no tool-call markup in content. null: the same
    answer as auto. Catches tool calls returned in content, a named choice that lets the
    model pick another function, null refused (400) or read as "none"."""
    c = oa[SMOL]
    kw = dict(model=SMOL, messages=ASK_WEATHER, tools=[WEATHER, TIME], max_tokens=60,
              temperature=0)
    for choice, want in [("required", None), ({"type": "function", "function":
                                               {"name": "get_time"}}, "get_time")]:
        r = c.chat.completions.create(**kw, tool_choice=choice)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
        assert len(ch.message.tool_calls) == 1
        check_call(ch.message.tool_calls[0])
        if want:
            assert ch.message.tool_calls[0].function.name == want
    auto = c.chat.completions.create(**kw, tool_choice="auto").choices[0]
    assert "<tool_call>" not in (auto.message.content or "")
    for call in auto.message.tool_calls or []:
        check_call(call)
    null = c.chat.completions.create(**kw, tool_choice=None).choices[0]
    assert null.model_dump(exclude={"message": {"tool_calls": {"__all__": {"id"}}}}) == \
        auto.model_dump(exclude={"message": {"tool_calls": {"__all__": {"id"}}}})


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_openai_streamed_tool_call(oa, name):
    """A required call streamed as OpenAI does: the first delta carries id, type and name
    with empty arguments, the argument pieces join to the non-streamed call's arguments,
    valid JSON. Catches arguments that are not valid JSON when joined, a name repeated in
    every delta, markup streamed as content."""
    c = oa[name]
    kw = dict(model=name, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="required",
              parallel_tool_calls=False, max_tokens=120, temperature=0)
    whole = c.chat.completions.create(**kw).choices[0]
    deltas = [ch.choices[0].delta for ch in c.chat.completions.create(**kw, stream=True)
              if ch.choices]
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert all(not d.content for d in deltas)
    first, rest = calls[0], calls[1:]
    assert first.id and first.type == "function" and first.function.name == "get_weather"
    assert first.function.arguments == ""
    assert all(tc.index == 0 and tc.id is None and tc.function.name is None for tc in rest)
    joined = "".join(tc.function.arguments for tc in rest)
    assert joined == whole.message.tool_calls[0].function.arguments
    jsonschema.validate(json.loads(joined), WEATHER["function"]["parameters"])


def test_openai_tool_result_continuation(oa):
    """The assistant's tool_calls and the tool's result go back as messages (the client's own
    message object, as the openai docs show): 200, and the result is part of the prompt (a
    longer result, more prompt tokens). Catches tool messages refused, or dropped from the
    rendered prompt by a template path that does not know them."""
    c = oa[SMOL]
    kw = dict(model=SMOL, tools=[WEATHER], max_tokens=20, temperature=0)
    first = c.chat.completions.create(**{**kw, "max_tokens": 60}, messages=ASK_WEATHER,
                                      tool_choice="required")
    msg = first.choices[0].message
    check_call(msg.tool_calls[0], [WEATHER])

    def follow(result):
        return c.chat.completions.create(**kw, messages=[
            *ASK_WEATHER, msg, {"role": "tool", "tool_call_id": msg.tool_calls[0].id,
                                "content": result}])
    short, long = follow("sunny"), follow("sunny, 21 degrees, light wind from the west")
    assert short.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert long.usage.prompt_tokens > short.usage.prompt_tokens > first.usage.prompt_tokens


HARMLESS = dict(reasoning_effort="low", prompt_cache_key="user-42", safety_identifier="u42",
                verbosity="low", modalities=["text"], metadata={"app": "tests"}, store=False,
                service_tier="auto", user="u42",
                prediction={"type": "content", "content": "Bob is thirty."})


def test_openai_harmless_fields(oa):
    """OpenAI's bookkeeping fields, all at once, as a configuration copied from OpenAI sends
    them: 200 and the same greedy answer as without them. Catches any of them refused (the
    old 400) or changing the output (SmolLM2's template has no thinking switch)."""
    c = oa[SMOL]
    kw = dict(model=SMOL, messages=ASK_BOB, max_tokens=20, temperature=0)
    plain = c.chat.completions.create(**kw).choices[0].message.content
    assert c.chat.completions.create(**kw, **HARMLESS).choices[0].message.content == plain


def test_openai_completions_on_stories(oa):
    """completions.create and its stream on stories260K: the same text, usage counted."""
    c = oa[STORIES]
    kw = dict(model=STORIES, prompt="Once upon a time", max_tokens=24, temperature=0)
    r = c.completions.create(**kw)
    assert r.choices[0].text and r.usage.completion_tokens == 24
    assert "".join(ch.choices[0].text for ch in c.completions.create(**kw, stream=True)
                   if ch.choices) == r.choices[0].text


@pytest.mark.parametrize("name,dim", [(SMOL, 576), (STORIES, 64)])
def test_openai_embeddings(oa, name, dim):
    """embeddings.create as the client sends it (it asks for base64 and decodes): a unit
    vector of the model's width per input, equal inputs equal vectors. Catches base64 that
    is not little-endian float32 or not decoded to the model's width."""
    r = oa[name].embeddings.create(model=name, input=["a cat", "a dog", "a cat"])
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (3, dim)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    np.testing.assert_allclose(v[0], v[2], atol=1e-5)


def test_openai_errors_are_its_exceptions(oa):
    """Bad input gets an OpenAI-shaped 4xx the client raises as its own exception type."""
    c = oa[SMOL]
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="no-such-model", messages=ASK_BOB, max_tokens=2)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=SMOL, messages=ASK_BOB, max_tokens=2,
                                  temperature=-1)
    assert e.value.body["param"] == "temperature"


# ---- langchain-openai ----

def chat_openai(servers, name, **kw):
    from langchain_openai import ChatOpenAI
    kw.setdefault("max_tokens", 120)
    return ChatOpenAI(base_url=url(servers, name), api_key="sk-unused", model=name,
                      temperature=0, max_retries=0, timeout=60 * TIME_SCALE, **kw)


def lc_weather_tool():
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return "sunny"
    return get_weather


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_langchain_invoke_and_stream(servers, name):
    """ChatOpenAI.invoke and .stream (greedy): the same text; the streamed usage (it asks
    for stream_options.include_usage) adds up. Catches a stream whose chunks do not join to
    the answer, or usage missing from the stream."""
    llm = chat_openai(servers, name, max_tokens=24, stream_usage=True)
    whole = llm.invoke("Bob is 30 years old.")
    chunks = list(llm.stream("Bob is 30 years old."))
    assert whole.content and "".join(c.content for c in chunks) == whole.content
    acc = chunks[0]
    for c in chunks[1:]:
        acc = acc + c
    assert acc.usage_metadata == whole.usage_metadata
    assert acc.response_metadata["finish_reason"] == whole.response_metadata["finish_reason"]


@pytest.mark.parametrize("name", [SMOL, STORIES])
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(servers, name, method):
    """with_structured_output(Person): its default json_schema method (response_format with
    strict) and function_calling (a tool forced by name): a validated Person. Catches an
    invented key or a schema not applied (the parser raises), a named tool_choice answered
    with text."""
    out = chat_openai(servers, name).with_structured_output(Person, method=method)
    assert isinstance(out.invoke("Bob is 30 years old."), Person)


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_langchain_bind_tools(servers, name):
    """bind_tools + tool_choice (by name, and "any" = required): the call lands in
    AIMessage.tool_calls with parsed args, no invalid_tool_calls; streamed, the chunks'
    tool_call_chunks merge into the same call. Catches arguments that are not JSON (they go
    to invalid_tool_calls), streamed pieces with repeated ids or names (merged into a broken
    call), a call left in content."""
    weather = lc_weather_tool()
    llm = chat_openai(servers, name)
    for choice in ("get_weather", "any"):
        bound = llm.bind_tools([weather], tool_choice=choice)
        msg = bound.invoke("What is the weather in Paris?")
        assert not msg.invalid_tool_calls and not msg.content
        assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
        assert isinstance(msg.tool_calls[0]["args"]["city"], str)
    chunks = list(bound.stream("What is the weather in Paris?"))
    acc = chunks[0]
    for c in chunks[1:]:
        acc = acc + c
    assert not acc.invalid_tool_calls
    assert [(c["name"], c["args"]) for c in acc.tool_calls] == \
        [(c["name"], c["args"]) for c in msg.tool_calls]
    assert acc.response_metadata["finish_reason"] == "tool_calls"


def test_langchain_tool_loop(servers):
    """The tool loop LangChain documents: the AIMessage with the call, then a ToolMessage
    with the tool's result, sent back; 200 and an AIMessage."""
    from langchain_core.messages import AIMessage, HumanMessage
    weather = lc_weather_tool()
    llm = chat_openai(servers, SMOL, max_tokens=30)
    ask = HumanMessage("What is the weather in Paris?")
    call = llm.bind_tools([weather], tool_choice="get_weather").invoke([ask])
    results = [weather.invoke(tc) for tc in call.tool_calls]     # ToolMessages
    assert isinstance(llm.bind_tools([weather]).invoke([ask, call, *results]), AIMessage)


# ---- instructor ----

@pytest.mark.parametrize("name", [SMOL, STORIES])
@pytest.mark.parametrize("mode", ["JSON_SCHEMA", "TOOLS"])
def test_instructor_modes(oa, name, mode):
    """instructor.from_openai(client, mode=...).create(response_model=Person), no retries:
    JSON_SCHEMA (response_format json_schema) and TOOLS (a tool forced by name) return a
    validated Person the first time. Catches what would make
    instructor retry or fail: an open object, a call in content, a truncated call."""
    import instructor
    client = instructor.from_openai(oa[name], mode=getattr(instructor.Mode, mode))
    p = client.chat.completions.create(model=name, response_model=Person, messages=ASK_BOB,
                                       max_tokens=120, temperature=0, max_retries=0)
    assert isinstance(p, Person)


def test_instructor_json_mode(oa):
    """instructor's JSON mode (json_object, the schema in a system message) on SmolLM2: a
    validated Named, and every answer a JSON object. Catches json_object not applied (prose
    or fenced JSON, which the mode's parser then has to dig out)."""
    import instructor
    from instructor.core.exceptions import InstructorError
    client = instructor.from_openai(oa[SMOL], mode=instructor.Mode.JSON)

    def attempt(prompt):
        p, raw = client.chat.completions.create_with_completion(
            model=SMOL, response_model=Named, messages=[{"role": "user", "content": prompt}],
            max_tokens=80, temperature=0, max_retries=0)
        assert raw.choices[0].message.content.startswith("{")
        return p
    assert isinstance(first_success(attempt, InstructorError), Named)


def test_instructor_partial_stream(oa):
    """create_partial (TOOLS mode: streamed tool-call arguments) ends with the same Person
    as create. Catches streamed argument pieces that do not join to the call's arguments."""
    import instructor
    client = instructor.from_openai(oa[SMOL], mode=instructor.Mode.TOOLS)
    kw = dict(model=SMOL, response_model=Person, messages=ASK_BOB, max_tokens=120,
              temperature=0, max_retries=0)
    whole = client.chat.completions.create(**kw)
    parts = list(client.chat.completions.create_partial(**kw))
    assert parts[-1].model_dump() == whole.model_dump()


# ---- llm ----

@pytest.fixture(scope="module")
def llm_home(servers, tmp_path_factory):
    """LLM_USER_PATH with an extra-openai-models.yaml naming both servers, as llm's docs say
    for OpenAI-compatible servers (api_base; no key needed)."""
    home = tmp_path_factory.mktemp("llm")
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: reame-smol\n  model_name: {SMOL}\n  api_base: {url(servers, SMOL)}\n"
        "  supports_schema: true\n  supports_tools: true\n"
        f"- model_id: reame-stories\n  model_name: {STORIES}\n"
        f"  api_base: {url(servers, STORIES)}\n  supports_schema: true\n"
        f"- model_id: reame-stories-completion\n  model_name: {STORIES}\n"
        f"  api_base: {url(servers, STORIES)}\n  completion: true\n")
    return home


@pytest.fixture
def llm_lib(llm_home, monkeypatch):
    monkeypatch.setenv("LLM_USER_PATH", str(llm_home))
    import llm
    return llm


@pytest.mark.parametrize("model_id", ["reame-smol", "reame-stories"])
def test_llm_library(llm_lib, model_id):
    """llm.get_model(...).prompt(): text (streamed by default, so the pieces are the deltas)
    and schema= (response_format json_schema): one JSON object of Person. Catches a stream
    the openai plugin cannot read, schema output with an invented key (Person.model_validate
    refuses it) or cut."""
    m = llm_lib.get_model(model_id)
    r = m.prompt("Bob is 30 years old.", temperature=0, max_tokens=20)
    pieces = list(r)
    assert pieces and "".join(pieces) == r.text()
    s = m.prompt("Bob is 30 years old.", schema=Person, temperature=0, max_tokens=120)
    Person.model_validate_json(s.text())


def test_llm_completion_model(llm_lib):
    """An llm completion model (`completion: true`) on /v1/completions of stories260K."""
    r = llm_lib.get_model("reame-stories-completion").prompt("Once upon a time", max_tokens=16,
                                                            temperature=0)
    assert r.text()         # (llm records no usage for completion models)


def run_llm_cli(llm_home, *args):
    env = {**os.environ, "LLM_USER_PATH": str(llm_home)}
    for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(k, None)
    p = subprocess.run([str(Path(sys.executable).with_name("llm")), *args], env=env,
                       capture_output=True, text=True, timeout=120 * TIME_SCALE)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_llm_cli(llm_home):
    """The `llm` command: `llm -m reame-smol PROMPT` prints an answer; `llm --schema 'name,
    age int'` (llm's schema DSL) prints one JSON object with exactly those keys."""
    assert run_llm_cli(llm_home, "-m", "reame-smol", "-n", "-o", "max_tokens", "12",
                       "-o", "temperature", "0", "Say hello.").strip()
    out = run_llm_cli(llm_home, "-m", "reame-smol", "-n", "--schema", "name, age int",
                      "-o", "temperature", "0", "-o", "max_tokens", "80",
                      "Bob is 30 years old.")
    obj = json.loads(out)
    assert set(obj) == {"name", "age"} and isinstance(obj["age"], int)


# ---- pydantic-ai ----

def pai_model(servers, name):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=url(servers, name),
                                                         api_key="sk-unused"))


PAI_SETTINGS = {"temperature": 0, "max_tokens": 120}


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_pydantic_ai_text(servers, name):
    """Agent.run_sync with text output; run_stream's text equals it. Catches streamed text
    (and pydantic-ai's usage chunk handling) that does not add up."""
    from pydantic_ai import Agent
    agent = Agent(pai_model(servers, name), model_settings={**PAI_SETTINGS, "max_tokens": 24})
    whole = agent.run_sync("Bob is 30 years old.")
    assert isinstance(whole.output, str) and whole.output

    async def streamed():
        async with agent.run_stream("Bob is 30 years old.") as r:
            return await r.get_output(), r.usage
    text, usage = asyncio.run(streamed())
    assert text == whole.output
    usage = usage() if callable(usage) else usage
    assert (usage.input_tokens, usage.output_tokens) == \
        (whole.usage.input_tokens, whole.usage.output_tokens) and usage.output_tokens > 0


@pytest.mark.parametrize("name", [SMOL, STORIES])
@pytest.mark.parametrize("mode", ["tool", "native"])
def test_pydantic_ai_structured_output(servers, name, mode):
    """output_type=Person with no retry allowed, in pydantic-ai's tool output mode (its
    default: a final_result tool, tool_choice required) and NativeOutput (response_format
    json_schema, strict): a validated Person the first time. Catches whatever would make
    pydantic-ai retry: an open object, a call in content, a strict schema refused."""
    from pydantic_ai import Agent, NativeOutput
    output_type = Person if mode == "tool" else NativeOutput(Person)
    agent = Agent(pai_model(servers, name), output_type=output_type,
                  model_settings=PAI_SETTINGS, retries=0)
    assert isinstance(agent.run_sync("Bob is 30 years old.").output, Person)


@pytest.mark.parametrize("name", [SMOL, STORIES])
def test_pydantic_ai_unbounded_int_output(servers, name):
    """output_type=int (pydantic-ai wraps it as {"response": integer}) and NativeOutput(int):
    an int, also from stories260K. Catches integers left unbounded in the grammar: the story
    model wrote `{"response": -3000000000...` until max_tokens and pydantic-ai never got JSON
    (llama.cpp, and now Reame, stop an integer at 16 digits)."""
    from pydantic_ai import Agent, NativeOutput
    for output_type in (int, NativeOutput(int)):
        agent = Agent(pai_model(servers, name), output_type=output_type,
                      model_settings=PAI_SETTINGS, retries=0)
        assert isinstance(agent.run_sync("Bob is 30 years old. How old is Bob?").output, int)


def test_pydantic_ai_prompted_output(servers):
    """PromptedOutput (json_object, the schema in the system prompt) on SmolLM2: a Named."""
    from pydantic_ai import Agent, PromptedOutput
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    agent = Agent(pai_model(servers, SMOL), output_type=PromptedOutput(Named),
                  model_settings=PAI_SETTINGS, retries=0)
    out = first_success(lambda p: agent.run_sync(p).output, UnexpectedModelBehavior)
    assert isinstance(out, Named)


def test_pydantic_ai_streamed_structured_output(servers):
    """run_stream with output_type=Person (the final_result tool's arguments streamed):
    partial outputs, then the same Person as run_sync."""
    from pydantic_ai import Agent
    agent = Agent(pai_model(servers, SMOL), output_type=Person, model_settings=PAI_SETTINGS)

    async def streamed():
        async with agent.run_stream("Bob is 30 years old.") as r:
            return [o async for o in r.stream_output()], await r.get_output()
    partials, final = asyncio.run(streamed())
    assert isinstance(final, Person) and partials
    assert final == agent.run_sync("Bob is 30 years old.").output


def test_pydantic_ai_function_tool(servers):
    """An agent with a function tool: forced on the first step (SmolLM2 does not choose tools
    by itself; pydantic-ai's per-step tool_choice, a capability), the agent runs it with
    arguments that validate, sends the result back and the model answers in text. Catches a
    named tool_choice not honoured, arguments pydantic-ai cannot validate, a tool result
    message refused."""
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    @dataclass
    class CallWeatherFirst(AbstractCapability):
        def get_model_settings(self):
            return lambda ctx: {"tool_choice": ["get_weather"] if ctx.run_step == 1 else "none"}

    agent = Agent(pai_model(servers, SMOL), model_settings={**PAI_SETTINGS, "max_tokens": 40},
                  capabilities=[CallWeatherFirst()])
    cities = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        cities.append(city)
        return "sunny"
    r = agent.run_sync("What is the weather in Paris?")
    assert len(cities) == 1 and isinstance(cities[0], str)
    parts = [p for m in r.all_messages() for p in m.parts]
    assert [type(p) for p in parts if isinstance(p, (ToolCallPart, ToolReturnPart))] == \
        [ToolCallPart, ToolReturnPart]
    assert isinstance(r.output, str)


# ---- last: nothing above got a 5xx ----

def test_no_5xx_from_any_client(servers):
    """Whatever the clients above sent, neither server answered a 5xx (counted in
    reame_requests_total by status, streams included)."""
    for s in servers.values():
        bad = {k: v for k, v in s.metrics().items()
               if k.startswith("reame_requests_total") and 'status="5' in k and v
               and 'endpoint="/health"' not in k}         # 503 while loading, as it should
        assert not bad, (bad, s.log())
