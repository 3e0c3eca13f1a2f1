"""POST /v1/messages (Anthropic's Messages API) end to end, with the `anthropic` client from
PyPI and pydantic-ai's AnthropicModel, against two real servers:

- the shared SmolLM2-135M-Instruct (a real model: text, tools, structured output), with an API
  key;
- a random-weight model with Qwen2's vocabulary and DeepSeek-R1-Distill's template, whose
  thinking switch (`enable_thinking`) opens a `<think>` block in the prompt, so the output is a
  thinking block whatever the noise model writes: the `thinking` request field and thinking
  blocks are checked deterministically.

Each test says which plausible wrong implementation it catches.
"""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pydantic
import pytest

from bench.synth import synth_model
from conftest import shared_path
from test_server_e2e import ReameServer, http

KEY = "sk-ant-test"
GREEDY = {"temperature": 0}          # anthropic 2.x takes sampling fields through extra_body
WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12},
               "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"]}}
TIME = {"name": "get_time", "description": "The time in a time zone.",
        "input_schema": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                         "required": ["tz"]}}


def _openai_tool(t: dict) -> dict:
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": t["input_schema"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    s = ReameServer(model, "--api-key", KEY, "--alias", "m", "--ctx-size", "1024",
                    log_dir=tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)
    yield c
    c.close()


@pytest.fixture(scope="module")
def chat(server):
    return server.client(api_key=KEY)


def _text(msg) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


# ---- text ----

SYSTEM = [{"type": "text", "text": "You are a terse assistant."},
          {"type": "text", "text": "Answer in one sentence."}]
TURNS = [{"role": "user", "content": "Hi, I am Ada."},
         {"role": "assistant", "content": [{"type": "text", "text": "Hello Ada."}]},
         {"role": "user", "content": [{"type": "text", "text": "What is my name?"},
                                      {"type": "text", "text": "Be brief."}]}]


def test_create_equals_chat_completions(client, chat):
    """Greedy text, stop reason and usage of a system-prompted multi-turn conversation equal
    the chat endpoint's for the same conversation. Catches a wrong translation (system blocks
    joined differently from chat's content parts, a dropped or reordered turn, assistant
    blocks lost), usage that counts the prompt differently, ids/shape not Anthropic's."""
    r = client.messages.create(model="m", max_tokens=12, system=SYSTEM, messages=TURNS,
                               extra_body=GREEDY)
    c = chat.chat.completions.create(
        model="m", max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, TURNS[0],
                  {"role": "assistant", "content": "Hello Ada."}, TURNS[2]])
    assert r.id.startswith("msg_") and r.type == "message" and r.role == "assistant"
    assert r.model == "m"
    assert [b.type for b in r.content] == ["text"]
    assert _text(r) == c.choices[0].message.content
    assert r.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[
        c.choices[0].finish_reason]
    assert r.stop_sequence is None
    u = r.usage
    assert u.output_tokens == c.usage.completion_tokens
    assert u.input_tokens + u.cache_read_input_tokens == c.usage.prompt_tokens
    assert u.cache_creation_input_tokens == 0


def test_cached_prefix_is_cache_read(client):
    """The same long prompt twice: the second reads its full blocks from the prefix cache.
    Catches cache_read_input_tokens left 0, or input_tokens counting cached tokens twice
    (Anthropic's input_tokens excludes the cache reads)."""
    msgs = [{"role": "user", "content": "Tell me about the sea. " * 30}]
    a = client.messages.create(model="m", max_tokens=1, messages=msgs, extra_body=GREEDY)
    b = client.messages.create(model="m", max_tokens=1, messages=msgs, extra_body=GREEDY)
    total = a.usage.input_tokens + a.usage.cache_read_input_tokens
    assert b.usage.cache_read_input_tokens >= 64
    assert b.usage.input_tokens + b.usage.cache_read_input_tokens == total


def test_stream_equals_create_and_event_order(client):
    """The streamed text equals the non-streamed greedy text, with Anthropic's event order.
    Catches deltas dropped or duplicated, a block never closed or opened twice, message_delta
    without stop_reason / usage, events out of order (the SDK's accumulator raises on a delta
    before message_start)."""
    kw = dict(model="m", max_tokens=12, system="You are terse.",
              messages=[{"role": "user", "content": "Name three colours."}], extra_body=GREEDY)
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == _text(whole) and text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    events = [e.type for e in client.messages.create(stream=True, **kw)]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    body = [e for e in events[1:-2] if e != "ping"]
    assert body[0] == "content_block_start" and body[-1] == "content_block_stop"
    assert set(body[1:-1]) == {"content_block_delta"}


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences(client, stream):
    """A stop sequence from the greedy text ends it there: stop_reason "stop_sequence" and
    stop_sequence the one that matched (the second listed). Catches end_turn for a stop
    string, stop_sequence null or the first listed instead of the one matched, the stop
    string left in the text."""
    kw = dict(model="m", max_tokens=16, messages=[{"role": "user", "content": "Say hello."}],
              extra_body=GREEDY)
    full = _text(client.messages.create(**kw))
    word = full.split()[2]
    stops = ["@@never@@", word]
    if stream:
        with client.messages.stream(stop_sequences=stops, **kw) as s:
            text = "".join(s.text_stream)
            r = s.get_final_message()
    else:
        r = client.messages.create(stop_sequences=stops, **kw)
        text = _text(r)
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == word
    assert text == full[:full.index(word)]


def test_max_tokens(client):
    """Cut by max_tokens: stop_reason "max_tokens", output_tokens == max_tokens. Catches
    "end_turn" for a cut answer, or the budget not passed through."""
    r = client.messages.create(model="m", max_tokens=3, extra_body=GREEDY,
                               messages=[{"role": "user", "content": "Write a long story."}])
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 3


def test_output_config_format_constrains_the_answer(client):
    """output_config.format (Anthropic's structured outputs) holds the text to the schema, with
    closed objects. Catches the field accepted and ignored (SmolLM2 answers prose)."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = client.messages.create(model="m", max_tokens=40, extra_body=GREEDY,
                               output_config={"format": {"type": "json_schema",
                                                         "schema": schema}},
                               messages=[{"role": "user", "content": "Describe a person."}])
    value = json.loads(_text(r))
    jsonschema.validate(value, schema)
    assert set(value) == {"name", "age"} and r.stop_reason == "end_turn"


def test_count_tokens(client):
    """count_tokens equals the prompt a create with the same conversation uses, and counts the
    tools. Catches counting the raw text, not the rendered template, or ignoring tools."""
    kw = dict(model="m", system=SYSTEM, messages=TURNS)
    n = client.messages.count_tokens(**kw).input_tokens
    r = client.messages.create(max_tokens=1, extra_body=GREEDY, **kw)
    assert n == r.usage.input_tokens + r.usage.cache_read_input_tokens
    assert client.messages.count_tokens(tools=[WEATHER], **kw).input_tokens > n


# ---- tools ----

@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_time"}])
def test_tool_use_and_result_continuation(client, chat, choice):
    """tool_choice any / a named tool: one tool_use block whose input validates against the
    tool's schema (stop_reason tool_use), the streamed input_json_delta pieces reassemble to the
    same input; then the tool_result continuation's greedy answer equals the chat endpoint's for
    the same history. Catches arguments left a JSON string instead of an object, ids not
    toolu_, any/tool mapped to auto, a tool_result not rendered as the tool message, the
    assistant's tool_use lost from the history."""
    kw = dict(model="m", max_tokens=60, tools=[WEATHER, TIME], extra_body=GREEDY,
              messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    r = client.messages.create(tool_choice={**choice, "disable_parallel_tool_use": True}, **kw)
    assert r.stop_reason == "tool_use"
    (use,) = [b for b in r.content if b.type == "tool_use"]
    assert use.id.startswith("toolu_")
    if choice["type"] == "tool":
        assert use.name == "get_time"
    tool = {"get_weather": WEATHER, "get_time": TIME}[use.name]
    assert isinstance(use.input, dict)
    jsonschema.validate(use.input, tool["input_schema"])
    with client.messages.stream(tool_choice={**choice, "disable_parallel_tool_use": True},
                                **kw) as s:
        final = s.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert (streamed.name, streamed.input) == (use.name, use.input)

    history = kw["messages"] + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name,
                                           "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": [{"type": "text", "text": "21 C, sunny"}]},
                                     {"type": "text", "text": "Thanks. Summarise."}]}]
    r2 = client.messages.create(**{**kw, "messages": history, "max_tokens": 12})
    c = chat.chat.completions.create(
        model="m", max_tokens=12, temperature=0, tools=[_openai_tool(WEATHER), _openai_tool(TIME)],
        messages=[kw["messages"][0],
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": use.id, "type": "function", "function": {
                          "name": use.name, "arguments": json.dumps(use.input)}}]},
                  {"role": "tool", "tool_call_id": use.id, "content": "21 C, sunny"},
                  {"role": "user", "content": "Thanks. Summarise."}])
    m = c.choices[0].message
    assert _text(r2) == (m.content or "")
    assert [b.name for b in r2.content if b.type == "tool_use"] == \
        [t.function.name for t in m.tool_calls or []]


# ---- auth and errors ----

def test_auth_x_api_key_and_bearer(server, client):
    """x-api-key (the anthropic client's header) and Bearer both authenticate; a wrong key is
    401 authentication_error in Anthropic's shape, also on count_tokens; the OpenAI endpoints
    keep OpenAI's shape and accept x-api-key too. Catches x-api-key ignored (every Anthropic
    client locked out), the 401 in OpenAI's shape on /v1/messages, Bearer broken."""
    msg = dict(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    bearer = anthropic.Anthropic(base_url=server.url, auth_token=KEY, max_retries=0)
    assert bearer.messages.create(**msg).type == "message"
    wrong = anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0)
    for call in (lambda: wrong.messages.create(**msg),
                 lambda: wrong.messages.count_tokens(model="m", messages=msg["messages"])):
        with pytest.raises(anthropic.AuthenticationError) as e:
            call()
        assert e.value.status_code == 401
        assert e.value.body["type"] == "error"
        assert e.value.body["error"]["type"] == "authentication_error"
    status, _, body = http("POST", server.url + "/v1/messages", msg)
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    status, _, body = http("POST", server.url + "/v1/chat/completions",
                           {"model": "m", "max_tokens": 1,
                            "messages": [{"role": "user", "content": "x"}]},
                           headers={"x-api-key": KEY, "Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["object"] == "chat.completion"
    status, _, body = http("POST", server.url + "/v1/chat/completions", {"model": "m"})
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"


OK = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
BAD = [
    (b"{not json", 400, "not valid JSON"),
    ({"model": "m", "messages": OK["messages"]}, 400, "max_tokens"),
    ({**OK, "max_tokens": 0}, 400, "max_tokens"),
    ({**OK, "messages": []}, 400, "messages"),
    ({**OK, "messages": [{"role": "system", "content": "x"}]}, 400, "messages[0].role"),
    ({**OK, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 400,
     "messages[0].content[0].text"),
    ({**OK, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/a.png"}}]}]}, 400, "image"),
    ({**OK, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "document", "source": {}}]}]}]}, 400, "document"),
    ({**OK, "mcp_servers": []}, 400, "mcp_servers"),
    ({**OK, "top_k": "5"}, 400, "top_k"),
    ({**OK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400,
     "server tools"),
    ({**OK, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, 400, "nope"),
    ({**OK, "tool_choice": {"type": "any"}}, 400, "tool"),
    ({**OK, "thinking": {"type": "enabled"}}, 400, "budget_tokens"),
    ({**OK, "messages": OK["messages"] + [{"role": "assistant", "content": "Su"}]}, 400,
     "prefill"),
    ({**OK, "max_tokens": 100000}, 400, "context length"),
    ({**OK, "output_config": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}},
     400, "output_config.format"),
    ({**OK, "model": "claude-nope"}, 404, "claude-nope"),
    ([1, 2], 400, "JSON object"),
]


@pytest.mark.parametrize("body,status,words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_4xx_in_anthropic_shape(server, body, status, words):
    """Bad input is a 4xx with Anthropic's error body naming the problem, never a 5xx or
    OpenAI's shape. Catches: the OpenAI error shape leaking from the shared checks (bad JSON,
    the chat checks, the template), pydantic's ValidationError escaping as a 500, images or
    server tools silently dropped, unknown fields ignored, prefill continued as a new turn."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, _, raw = http("POST", server.url + "/v1/messages", data,
                      headers={"x-api-key": KEY, "Content-Type": "application/json",
                               "anthropic-version": "2023-06-01"})
    assert st == status, raw
    err = json.loads(raw)
    assert err["type"] == "error" and set(err["error"]) == {"type", "message"}
    assert err["error"]["type"] == {400: "invalid_request_error", 404: "not_found_error"}[status]
    assert words.lower() in err["error"]["message"].lower(), err


def test_transport_errors_in_anthropic_shape(server):
    """Errors outside the resource: a body over the limit (answered by the worker from its
    Content-Length), a wrong method, an unknown path under /v1/messages. Catches the hook
    missing in the worker or in the HTTP-error handler."""
    import socket
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nx-api-key: " + KEY.encode()
                  + b"\r\nContent-Length: 999999999999\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["error"]["type"] == "request_too_large"
    auth = {"x-api-key": KEY}
    st, _, raw = http("GET", server.url + "/v1/messages", headers=auth)
    assert st == 405 and json.loads(raw)["error"]["type"] == "invalid_request_error"
    st, _, raw = http("POST", server.url + "/v1/messages/nope", OK, headers=auth)
    assert st == 404 and json.loads(raw)["error"]["type"] == "not_found_error"


def test_admission_and_engine_errors_in_anthropic_shape():
    """The errors raised while serving (429 queue full, 503 busy, 500 engine) through the app's
    handlers, on a /v1/messages path and on chat. Catches the hook keyed on the wrong path, or
    wrong error types for those statuses."""
    from types import SimpleNamespace

    import falcon
    from reame.server.app import handle_api_error
    from reame.server.schemas import APIError
    for status, kind in ((429, "rate_limit_error"), (503, "overloaded_error"),
                         (500, "api_error"), (413, "request_too_large")):
        for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions"):
            resp = falcon.Response()
            handle_api_error(SimpleNamespace(path=path), resp,
                             APIError(status, "no", "rate_limit_error", None, "queue_full",
                                      {"Retry-After": "1"}), {})
            assert resp.status_code == status and resp.get_header("Retry-After") == "1"
            if path == "/v1/chat/completions":
                assert resp.media["error"]["code"] == "queue_full"
            else:
                assert resp.media == {"type": "error", "error": {"type": kind, "message": "no"}}


# ---- pydantic-ai ----

@pytest.fixture()
def agent_model(server, monkeypatch):
    import pydantic_ai.models.anthropic as pa
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    # pydantic-ai 2.38 calls anthropic's BetaMessageParam, a Union of TypedDicts in anthropic
    # 2.x, as a constructor (TypeError before any request); a dict is what it builds
    monkeypatch.setattr(pa, "BetaMessageParam", dict, raising=False)
    return AnthropicModel("m", provider=AnthropicProvider(base_url=server.url, api_key=KEY))


def test_pydantic_ai_text(agent_model):
    """An Agent run of plain text. Catches a response shape pydantic-ai's Anthropic model
    cannot read (usage fields, content blocks, stop_reason values)."""
    from pydantic_ai import Agent
    r = Agent(agent_model, model_settings={"max_tokens": 12, "temperature": 0}).run_sync(
        "Say hello.")
    assert isinstance(r.output, str) and r.output.strip()


class City(pydantic.BaseModel):
    name: str
    country: str


def test_pydantic_ai_structured_output(agent_model):
    """A structured output_type: pydantic-ai forces its output tool (tool_choice any) and
    reads the tool_use block's input, then sends the tool_result back. Catches tool_use input
    that is not an object, tool_choice any not forcing a call, the tool_result history
    refused."""
    from pydantic_ai import Agent
    r = Agent(agent_model, output_type=City,
              model_settings={"max_tokens": 80, "temperature": 0}).run_sync(
        "Name a city in France.")
    assert isinstance(r.output, City) and r.output.name


# ---- thinking ----

@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    model = synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0", vocab="qwen2")
    tpl = shared_path("testdata/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    s = ReameServer(model, "--chat-template-file", str(tpl), "--alias", "m", "--ctx-size", "512",
                    log_dir=tmp_path_factory.mktemp("serve-think"))
    yield s
    s.stop()


@pytest.mark.parametrize("display", [None, "omitted"])
def test_thinking_blocks(thinking_server, display):
    """thinking enabled opens the template's think block: the answer is a thinking block
    (signature ""), streamed as thinking_delta events then a signature_delta; display
    "omitted" keeps the block, empty; thinking disabled closes the block in the prompt and the
    answer is text. Catches `thinking` not reaching the template's switch, reasoning left in
    a text block, thinking streamed as text_delta, streamed and whole answers differing."""
    c = anthropic.Anthropic(base_url=thinking_server.url, api_key="none", max_retries=0)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    if display:
        thinking["display"] = display
    kw = dict(model="m", max_tokens=12, extra_body=GREEDY,
              messages=[{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": [
                            {"type": "thinking", "thinking": "a greeting", "signature": "x"},
                            {"type": "text", "text": "Hello."}]},
                        {"role": "user", "content": "Why?"}])
    r = c.messages.create(thinking=thinking, **kw)
    assert [b.type for b in r.content] == ["thinking"] and r.stop_reason == "max_tokens"
    assert r.content[0].signature == ""
    assert (r.content[0].thinking == "") == (display == "omitted")
    events = list(c.messages.create(thinking=thinking, stream=True, **kw))
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas[-1] == "signature_delta"
    assert ("thinking_delta" in deltas) == (display != "omitted")
    streamed = "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                       and e.delta.type == "thinking_delta")
    assert streamed == r.content[0].thinking
    off = c.messages.create(thinking={"type": "disabled"}, **kw)
    assert "thinking" not in [b.type for b in off.content] and _text(off)
    c.close()
