"""Structured output, tool calling and reasoning through the real server with the official
`openai` client, on random-weight models with Qwen2's 152k vocabulary (their free output is
noise: only the grammars make the answers valid), and the adaptive runtime's endpoints.

Servers: a Qwen2.5-templated one (tools in the Hermes `<tool_call>` format, an API key) and a
Qwen3-templated one (reasoning models: `<think>` blocks go to reasoning_content).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pydantic
import pytest

from bench.synth import synth_model
from conftest import shared_path
from test_server_e2e import ReameServer, http, per_model

KEY = "sk-test"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0", vocab="qwen2")


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    tpl = shared_path("testdata/templates/Qwen-Qwen2.5-7B-Instruct.jinja")
    s = ReameServer(model_path, "--chat-template-file", str(tpl), "--api-key", KEY, "--alias", "m",
                    "--max-seqs", "16", "--ctx-size", "1024",
                    log_dir=tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client(api_key=KEY)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    age: int = pydantic.Field(ge=0, le=120)
    role: str = pydantic.Field(json_schema_extra={"enum": ["admin", "user"]})


def test_parse_with_a_pydantic_model(client):
    r = client.chat.completions.parse(model="m", messages=[{"role": "user", "content": "Who?"}],
                                      response_format=Person, temperature=0.8, seed=1,
                                      max_tokens=200)
    msg = r.choices[0].message
    assert isinstance(msg.parsed, Person) and msg.parsed.role in ("admin", "user")
    assert r.choices[0].finish_reason == "stop"


SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    "owner": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "active": {"type": "boolean"}}, "required": ["name", "active"],
        "additionalProperties": False},
    "kind": {"enum": ["x", "y"]}},
    "required": ["id", "tags", "owner", "kind"], "additionalProperties": False}


def test_100_json_schema_requests_all_validate(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA,
                                                  "strict": True}}

    def one(i):
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Thing {i}"}],
            response_format=fmt, temperature=1.0, seed=i, max_tokens=300)
        return r.choices[0]
    with ThreadPoolExecutor(16) as ex:
        choices = list(ex.map(one, range(100)))
    for c in choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), SCHEMA)


@pytest.mark.parametrize("field,value,check", [
    ("guided_choice", ["red", "green"], lambda t: t in ("red", "green")),
    ("guided_regex", "[0-9]{4}", lambda t: len(t) == 4 and t.isdigit()),
    ("grammar", 'root ::= "A" | "B"', lambda t: t in ("A", "B")),
    ("json_schema", {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
     lambda t: isinstance(json.loads(t), list)),
])
def test_llama_server_and_vllm_fields(client, field, value, check):
    r = client.completions.create(model="m", prompt="x", max_tokens=40, temperature=1.0,
                                  seed=3, extra_body={field: value})
    assert check(r.choices[0].text), r.choices[0].text


@pytest.mark.parametrize("parallel", [False, True])
def test_tool_choice_required_returns_valid_arguments(client, parallel):
    """One call (parallel_tool_calls false: the grammar ends after it), or several (a noise
    model may open another call, possibly cut by max_tokens: every complete call still
    validates)."""
    for seed in range(3):
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER, TIME], tool_choice="required", temperature=1.0, seed=seed,
            max_tokens=200, parallel_tool_calls=parallel)
        c = r.choices[0]
        assert c.message.tool_calls, c
        if not parallel:
            assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c
            assert not c.message.content
        calls = c.message.tool_calls if c.finish_reason == "tool_calls" else \
            c.message.tool_calls[:-1]                       # the last one may be cut off
        for call in calls:
            tool = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
            jsonschema.validate(json.loads(call.function.arguments),
                                tool["function"]["parameters"])
            assert call.id.startswith("call_") and call.type == "function"


@pytest.mark.parametrize("stream", [False, True])
def test_a_whole_tool_round_trip(client, stream):
    """A named tool call (streamed: its deltas reassembled as the openai helpers do), the tool's
    result, then the final answer: the template renders the history both ways."""
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    kw = dict(model="m", tools=[WEATHER, TIME], temperature=0.7, seed=5, max_tokens=200)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    if stream:
        calls, reason = {}, None
        for chunk in client.chat.completions.create(messages=messages, tool_choice=choice,
                                                    stream=True, **kw):
            d = chunk.choices[0].delta
            for tc in d.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                c["id"] = tc.id or c["id"]
                c["name"] += (tc.function.name or "") if tc.function else ""
                c["args"] += (tc.function.arguments or "") if tc.function else ""
            reason = chunk.choices[0].finish_reason or reason
        assert reason == "tool_calls" and len(calls) == 1
        (c,) = calls.values()
        call = {"id": c["id"], "type": "function",
                "function": {"name": c["name"], "arguments": c["args"]}}
    else:
        r = client.chat.completions.create(messages=messages, tool_choice=choice, **kw)
        (tc,) = r.choices[0].message.tool_calls
        call = tc.model_dump()
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": '{"temp": 21}'}]
    final = client.chat.completions.create(messages=messages, tool_choice="none",
                                           **{**kw, "max_tokens": 8})
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].finish_reason in ("stop", "length")


def test_unsupported_fields_are_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"mirostat": 2})
    assert e.value.body["param"] == "mirostat"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       response_format={"type": "json_object"},
                                       tools=[WEATHER], tool_choice="required")
    assert e.value.body["param"] == "response_format"


# ---- reasoning ----

@pytest.fixture(scope="module")
def thinking_server(model_path, tmp_path_factory):
    tpl = shared_path("testdata/templates/Qwen-Qwen3-0.6B.jinja")
    s = ReameServer(model_path, "--chat-template-file", str(tpl), "--ctx-size", "512", "--alias", "m",
                    log_dir=tmp_path_factory.mktemp("serve3"))
    yield s
    s.stop()


THINK = r"<think>\n[a-z ]{5,30}\n</think>\n\n[A-Z][a-z ]{3,20}\."


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_content_is_split_from_content(thinking_server, stream):
    c = thinking_server.client()
    kw = dict(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=80, seed=2,
              temperature=1.0, extra_body={"guided_regex": THINK})
    if stream:
        reasoning = content = ""
        for chunk in c.chat.completions.create(stream=True, **kw):
            d = chunk.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    else:
        m = c.chat.completions.create(**kw).choices[0].message
        reasoning, content = m.reasoning_content, m.content
    assert reasoning and "<think>" not in reasoning and "</think>" not in content
    assert content[0].isupper() and content.endswith(".")


def test_reasoning_format_none_keeps_the_block(model_path, tmp_path):
    tpl = shared_path("testdata/templates/Qwen-Qwen3-0.6B.jinja")
    s = ReameServer(model_path, "--chat-template-file", str(tpl), "--reasoning-format", "none", "--alias", "m",
                    "--ctx-size", "512", log_dir=tmp_path)
    try:
        m = s.client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=80, seed=2,
            extra_body={"guided_regex": THINK}).choices[0].message
        assert m.content.startswith("<think>") and getattr(m, "reasoning_content", None) is None
    finally:
        s.stop()


# ---- the adaptive runtime's endpoints ----

def test_adaptive_report_freeze_and_metrics(server):
    auth = {"Authorization": f"Bearer {KEY}"}
    status, _, body = http("GET", server.url + "/v1/adaptive", headers=auth)
    assert status == 200
    r = json.loads(body)
    assert r["enabled"] is True and "kernels" in r and "profile" in r
    assert r["profile"]["requests"] > 0                  # the tests above went through it
    assert r["batch"]["start"] == r["batch"]["slots"] == 16     # --max-seqs 16: fixed
    assert http("POST", server.url + "/v1/adaptive/freeze", headers={})[0] == 401
    status, _, body = http("POST", server.url + "/v1/adaptive/freeze", headers=auth)
    assert status == 200 and json.loads(body)["frozen"] is True
    m = server.metrics(headers=auth)
    assert m[per_model("reame_adaptive_frozen", "m")] == 1
    assert m[per_model("reame_adaptive_max_batch", "m")] == r["batch"]["max_batch"]
    status, _, body = http("POST", server.url + "/v1/adaptive/unfreeze", headers=auth)
    assert json.loads(body)["frozen"] is False
    assert server.metrics(headers=auth)[per_model("reame_adaptive_frozen", "m")] == 0


def test_freezing_needs_an_api_key_on_the_server(thinking_server):
    status, _, body = http("POST", thinking_server.url + "/v1/adaptive/freeze")
    assert status == 403 and json.loads(body)["error"]["code"] == "api_key_required"
