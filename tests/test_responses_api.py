"""POST /v1/responses (OpenAI's Responses API) through the real server, with the official
`openai` client (responses.create / stream / parse / retrieve / delete) and pydantic-ai's
OpenAIResponsesModel.

Servers: the shared SmolLM2-135M-Instruct (a real chat model and template: greedy answers are
compared with /v1/chat/completions' for the same conversation, which catches any mistranslation
of instructions and items), with an API key; a Qwen3-templated random-weight model for
reasoning items (its `<think>` block forced by a regex, as in test_api_structured) with a store
of 3 responses for the bound. Each test names the wrong implementation it catches.
"""

from __future__ import annotations

import json
import time

import openai
import pydantic
import pytest

from bench.synth import synth_model
from conftest import shared_path
from test_server_e2e import ReameServer, http, per_model

from reame.server.responses_api import ResponseStore

KEY = "sk-resp"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12},
               "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}, "strict": True}
CHAT_WEATHER = {"type": "function", "function": {k: WEATHER[k] for k in
                                                 ("name", "description", "parameters", "strict")}}
GREEDY = dict(model="m", temperature=0)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    s = ReameServer(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"), "--alias", "m",
                    "--api-key", KEY, "--ctx-size", "1024", "--max-seqs", "4",
                    log_dir=tmp_path_factory.mktemp("resp"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(smol):
    return smol.client(api_key=KEY)


def chat_text(client, messages, max_tokens, **kw):
    r = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens,
                                       temperature=0, **kw)
    return r.choices[0].message, r.usage


# ---- create: the translation of input into the chat conversation ----

def test_string_input_is_the_chat_user_message(client):
    """A string input is one user message: the greedy text and the usage equal the chat
    endpoint's. Catches: another role or no generation prompt, usage fields swapped or
    counted differently (e.g. output_tokens without the end token), a non-message output."""
    r = client.responses.create(input="What is the capital of France?", max_output_tokens=24,
                                **GREEDY)
    msg, usage = chat_text(client, [{"role": "user", "content":
                                     "What is the capital of France?"}], 24)
    assert r.object == "response" and r.id.startswith("resp_")
    assert [o.type for o in r.output] == ["message"]
    assert r.output_text == msg.content and r.output_text
    assert r.usage.input_tokens == usage.prompt_tokens
    assert r.usage.output_tokens == usage.completion_tokens
    assert r.usage.total_tokens == usage.total_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    done = usage.completion_tokens < 24
    assert r.status == ("completed" if done else "incomplete")
    assert (r.incomplete_details is None) == done


def test_items_and_instructions_are_the_chat_messages(client):
    """instructions -> a first system message; input_text parts, an assistant output_text
    message and a plain-string message keep their roles and order. Catches: instructions
    dropped, appended last or sent as user; assistant history dropped; parts joined
    differently from the chat endpoint's text parts."""
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Name a colour."},
                                          {"type": "input_text", "text": "Just one word."}]},
             {"type": "message", "role": "assistant", "content": [
                 {"type": "output_text", "text": "Blue.", "annotations": []}]},
             {"role": "user", "content": "And another one?"}]
    r = client.responses.create(input=items, instructions="You answer in French.",
                                max_output_tokens=16, **GREEDY)
    msg, usage = chat_text(client, [
        {"role": "system", "content": "You answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Name a colour."},
                                     {"type": "text", "text": "Just one word."}]},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And another one?"}], 16)
    assert r.output_text == msg.content
    assert r.usage.input_tokens == usage.prompt_tokens
    assert r.instructions == "You answer in French."
    # a developer message is a system message, as on the chat endpoint
    r2 = client.responses.create(input=[{"role": "developer", "content": "You answer in French."},
                                        *items], max_output_tokens=16, **GREEDY)
    assert r2.output_text == r.output_text


def test_stream_events_in_order_and_equal_to_the_whole_response(client):
    """responses.stream: every event in its order with consecutive sequence numbers, deltas
    that concatenate to the done text and to the non-streamed greedy text, and a final
    response equal to the non-streamed one. Catches: a missing or misplaced event (the
    client's accumulator asserts on it), a sequence gap, a final response built from another
    state than the deltas, usage differing between the two paths."""
    kw = dict(input="Is the sky blue? Answer yes or no.", max_output_tokens=30,
              text={"format": {"type": "json_schema", "name": "answer", "strict": True,
                               "schema": {"type": "object", "properties": {
                                   "answer": {"enum": ["yes", "no"]}},
                                   "required": ["answer"], "additionalProperties": False}}},
              **GREEDY)
    whole = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    n_deltas = types.count("response.output_text.delta")
    assert types == (["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added"] + ["response.output_text.delta"] * n_deltas
                     + ["response.output_text.done", "response.content_part.done",
                        "response.output_item.done", "response.completed"])
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[types.index("response.output_text.done")].text
    assert json.loads(text) in ({"answer": "yes"}, {"answer": "no"})
    assert final.output_text == whole.output_text == text
    assert final.status == whole.status == "completed"
    assert (final.usage.input_tokens, final.usage.output_tokens) == \
        (whole.usage.input_tokens, whole.usage.output_tokens)
    item = events[2].item
    assert item.type == "message" and item.status == "in_progress"
    assert events[-2].item.id == item.id and events[-2].item.status == "completed"


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=120)


def test_parse_with_a_pydantic_model_has_exactly_its_keys(client):
    """responses.parse(text_format=Person): text.format json_schema -> the chat
    response_format, objects closed. Catches: text.format ignored (free text does not parse),
    the schema's objects left open (extra keys), a wrong strict/name mapping (400)."""
    for seed in range(4):
        r = client.responses.parse(model="m", input="Invent a person.", text_format=Person,
                                   temperature=1.0, max_output_tokens=60,
                                   extra_body={"seed": seed})
        assert isinstance(r.output_parsed, Person), r.output_text
        assert set(json.loads(r.output_text)) == {"name", "age"}


# ---- tools ----

def test_function_call_and_its_output_continue_as_the_chat_conversation(client):
    """A named function call (flat Responses tool -> chat tool), then the call and its
    function_call_output sent back as items: the follow-up's greedy text and prompt size equal
    the chat endpoint's for the assistant tool_calls + tool message history. Catches: tools
    passed in the chat shape unconverted, call_id not carried, function_call items turned
    into text or dropped, function_call_output not a tool message."""
    first = [{"role": "user", "content": "Weather in Rome?"}]
    r = client.responses.create(input=first, tools=[WEATHER], max_output_tokens=60,
                                tool_choice={"type": "function", "name": "get_weather"},
                                **GREEDY)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and r.status == "completed", r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    args = json.loads(call.arguments)
    assert set(args) == {"city", "unit"}
    follow = client.responses.create(
        input=first + [o.model_dump(exclude_none=True) for o in r.output]
        + [{"type": "function_call_output", "call_id": call.call_id,
            "output": '{"temp": 21}'}], tools=[WEATHER], max_output_tokens=20, **GREEDY)
    msg, usage = chat_text(client, first + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"temp": 21}'}], 20,
        tools=[CHAT_WEATHER])
    assert follow.usage.input_tokens == usage.prompt_tokens
    assert follow.output_text == (msg.content or "")
    assert sum(o.type == "function_call" for o in follow.output) == len(msg.tool_calls or [])


def test_streamed_function_call_events(client):
    """A streamed call: output_item.added (function_call, call_id, name), argument deltas that
    concatenate to ...arguments.done and to the non-streamed arguments. Catches: arguments sent
    as output_text, a new item per delta, done arguments missing a piece."""
    kw = dict(input="Weather in Oslo?", tools=[WEATHER], max_output_tokens=60,
              tool_choice="required", parallel_tool_calls=False, **GREEDY)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [a.item.type for a in added] == ["function_call"]
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    (wcall,) = [o for o in whole.output if o.type == "function_call"]
    assert deltas == done.arguments == wcall.arguments and done.name == "get_weather"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output[0].call_id == added[0].item.call_id


# ---- the store ----

def test_previous_response_id_continues_the_conversation(client):
    """previous_response_id: the stored input and output come before the new input, the
    previous instructions do not (OpenAI's rule); retrieve returns the stored object; delete
    removes it. Catches: previous_response_id accepted and ignored, the output not stored,
    instructions carried over, store: false storing anyway."""
    r1 = client.responses.create(input="My name is Ada.", instructions="Be brief.",
                                 max_output_tokens=12, **GREEDY)
    r2 = client.responses.create(input="What is my name?", previous_response_id=r1.id,
                                 max_output_tokens=12, **GREEDY)
    msg, usage = chat_text(client, [{"role": "user", "content": "My name is Ada."},
                                    {"role": "assistant", "content": r1.output_text},
                                    {"role": "user", "content": "What is my name?"}], 12)
    assert r2.output_text == msg.content
    assert r2.usage.input_tokens == usage.prompt_tokens
    assert r2.previous_response_id == r1.id
    got = client.responses.retrieve(r1.id)
    assert got.output_text == r1.output_text and got.usage == r1.usage
    items = client.responses.input_items.list(r2.id)
    assert [i.type for i in items.data] == ["message"] * 3        # newest first
    client.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    r3 = client.responses.create(input="Hi", store=False, max_output_tokens=2, **GREEDY)
    assert r3.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r3.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(input="x", previous_response_id=r3.id, **GREEDY)
    assert e.value.body["code"] == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"


def test_store_bounds_count_bytes_and_evicts_least_recently_used():
    """The store alone: count and byte bounds, LRU order (a read refreshes), an entry above
    the byte budget not stored. Catches: an unbounded store, FIFO instead of LRU, bytes not
    released on eviction or delete."""
    s = ResponseStore(max_count=3, max_bytes=10_000)
    for i in range(3):
        assert s.put({"id": f"r{i}", "output": []}, [{"t": "x" * 100}])
    assert s.get("r0") is not None                     # r0 is now the most recent
    s.put({"id": "r3", "output": []}, [])
    assert s.get("r1") is None and s.get("r0") is not None and len(s) == 3
    assert not s.put({"id": "big", "output": []}, [{"t": "x" * 20_000}])
    s.put({"id": "r4", "output": []}, [{"t": "x" * 9_850}])     # evicts by bytes too
    assert s.get("r4") is not None and s.bytes <= 10_000 and len(s) == 1
    assert s.delete("r4") and not s.delete("r4")
    assert s.bytes == sum(e[2] for e in s._d.values())


# ---- the event stream alone (paths a real model does not take on demand) ----

class _FakeJob:
    def __init__(self, deltas, n_calls):
        from types import SimpleNamespace
        self._d, self.stream_status = deltas, 499
        self.choices = [SimpleNamespace(out=SimpleNamespace(calls=[None] * n_calls))]
        self.req = SimpleNamespace(logprobs=False)

    def deltas(self):
        yield from self._d

    def _chat_logprobs(self, entries):
        return {"content": []}


class _FakeCtx:
    logprobs = False

    def __init__(self, job):
        self.job = job

    def response(self, status, output, usage=None, error=None, finish=None):
        return {"status": status, "output": list(output), "error": error}

    def finish(self, output, finish, reasoning):
        self.stored = output
        return self.response("completed" if finish != "length" else "incomplete", output)


def _events(deltas, n_calls=0):
    from reame.server.responses_stream import EventStream
    job = _FakeJob(deltas, n_calls)
    ctx = _FakeCtx(job)
    out = [json.loads(b.split(b"data: ", 1)[1]) for b in EventStream(ctx).run()]
    return out, job


def test_stream_failure_and_cut_calls():
    """An engine failure mid-stream ends with response.failed carrying the error (status for
    the metrics: the error's); a call cut by max_output_tokens was streamed but is not in the
    final output (as the whole response leaves it out), and the text before it stays.
    Catches: a failure ending with response.completed or no terminal event, a cut call in
    the final output, stream_status left at 499 after a complete stream."""
    from reame.server.responses import Delta
    from reame.server.schemas import APIError
    err = APIError(500, "sampling failed", "server_error", None, "engine_error")
    ev, job = _events([Delta(0, {"content": "Hi"}), Delta(0, {}, error=err)])
    assert [e["type"] for e in ev][-3:] == ["response.content_part.done",
                                           "response.output_item.done", "response.failed"]
    assert ev[-1]["response"]["error"] == {"code": "server_error", "message": "sampling failed"}
    assert job.stream_status == 500
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": ""}}
    ev, job = _events([Delta(0, {"content": "Let me see."}), Delta(0, {"tool_calls": [call]}),
                       Delta(0, {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}),
                       Delta(0, {}, finish_reason="length")], n_calls=0)
    types = [e["type"] for e in ev]
    assert types.count("response.output_item.added") == 2
    assert types.count("response.function_call_arguments.delta") == 1
    final = ev[-1]
    assert final["type"] == "response.incomplete" and job.stream_status == 200
    assert [o["type"] for o in final["response"]["output"]] == ["message"]
    assert final["response"]["output"][0]["status"] == "completed"
    cut = [e for e in ev if e["type"] == "response.output_item.done"][-1]["item"]
    assert cut["type"] == "function_call" and cut["status"] == "incomplete"
    ev, _ = _events([Delta(0, {}, finish_reason="stop")])   # nothing generated: empty message
    assert [o["type"] for o in ev[-1]["response"]["output"]] == ["message"]


# ---- errors ----

@pytest.mark.parametrize("body,param", [
    ({"input": 5}, "input"),
    ({}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input[0].content[0].text"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": "no"}]},
     "tools[0].parameters"),
    ({"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]},
     "tools[0].function"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice"),
    ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "temperature": 3}, "temperature"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "top_logprobs": 30}, "top_logprobs"),
    ({"input": "x", "include": ["bogus.include"]}, "include[0]"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
     "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"input": "x", "mirostat": 2}, "mirostat"),
    ({"input": "x", "seed": "s"}, "seed"),
    ({"input": "x", "text": {"format": {"type": "json_object"}}, "guided_regex": "a"},
     "guided_regex"),
    ({"input": "x" * 5000}, "input"),
    ({"input": "x", "instructions": "y" * 5000, "truncation": "auto"}, "input"),
    ({"input": "hi", "max_output_tokens": 2000}, "max_output_tokens"),
])
def test_bad_requests_are_400_naming_the_field(smol, body, param):
    """Every malformed or unsupported request is a 400 whose param is the Responses field's
    path, never a 5xx. Catches: a pydantic ValidationError or KeyError escaping as 500, chat
    field names leaking (messages[0], max_completion_tokens, response_format), built-in tools
    or images silently ignored."""
    status, _, raw = http("POST", smol.url + "/v1/responses", {"model": "m", **body},
                          {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    err = json.loads(raw)["error"]
    assert status == 400, raw
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_other_errors(smol, client):
    """Not JSON: 400; unknown id: 404 (retrieve, delete); no key: 401 (the Auth middleware
    covers the new routes)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    assert http("POST", smol.url + "/v1/responses", b"{nope", auth)[0] == 400
    assert http("POST", smol.url + "/v1/responses", {"input": "x"})[0] == 401
    assert http("GET", smol.url + "/v1/responses/resp_nope")[0] == 401
    for method in ("GET", "DELETE"):
        status, _, raw = http(method, smol.url + "/v1/responses/resp_nope", headers=auth)
        assert status == 404 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_truncation_auto_drops_the_oldest_turns(client):
    """A history longer than the context: 400 context_length_exceeded by default, answered
    with truncation 'auto' (the oldest turns dropped, instructions and the last message kept).
    Catches: 'auto' accepted but ignored, the instructions or the new message dropped."""
    turns = []
    for i in range(12):
        turns += [{"role": "user", "content": f"Tell me fact number {i} about cats. " * 8},
                  {"role": "assistant", "content": f"Cats are animals, fact {i}. " * 8}]
    turns.append({"role": "user", "content": "Say OK."})
    kw = dict(input=turns, instructions="Be brief.", max_output_tokens=4, **GREEDY)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(**kw)
    assert e.value.body["code"] == "context_length_exceeded"
    r = client.responses.create(truncation="auto", **kw)
    # as much kept as fits: dropping one message less would not fit (a message is < 100 tokens)
    assert r.truncation == "auto" and 1024 - 100 < r.usage.input_tokens + 4 <= 1024


def test_logprobs(client):
    """include message.output_text.logprobs with top_logprobs: the chat endpoint's logprobs
    for the same greedy request. Catches: logprobs requested but absent, the top-k count
    lost, stream and whole response disagreeing."""
    kw = dict(input="Count: one, two,", max_output_tokens=5, top_logprobs=2,
              include=["message.output_text.logprobs"], **GREEDY)
    r = client.responses.create(**kw)
    lp = r.output[0].content[0].logprobs
    chat = client.chat.completions.create(model="m", temperature=0, max_tokens=5, logprobs=True,
                                          top_logprobs=2, messages=[
                                              {"role": "user", "content": "Count: one, two,"}])
    want = chat.choices[0].logprobs.content
    assert [x.token for x in lp] == [x.token for x in want]
    assert len(lp) == r.usage.output_tokens and [x.logprob for x in lp] == \
        pytest.approx([x.logprob for x in want])
    assert all(len(x.top_logprobs) == 2 for x in lp)
    events = list(client.responses.create(stream=True, **kw))
    streamed = [x for e in events if e.type == "response.output_text.delta" for x in e.logprobs]
    done = [e for e in events if e.type == "response.output_text.done"][0]
    assert [x.token for x in done.logprobs] == [x.token for x in lp]
    assert [x.token for x in streamed] == [x.token for x in lp][:len(streamed)]


def test_requests_are_counted_by_endpoint(smol, client):
    """/v1/responses in reame_requests_total like the other endpoints, streams included (when
    they end), and the item route by its template. Catches: the routes missing from the
    metrics' endpoint set (counted as 'other'), a stream counted before its end or never."""
    auth = {"Authorization": f"Bearer {KEY}"}
    key = 'reame_requests_total{endpoint="%s",status="%d"}'
    routes = [("/v1/responses", 200), ("/v1/responses", 400),
              ("/v1/responses/{response_id}", 404)]
    before = smol.metrics(headers=auth)
    client.responses.create(input="Hi", max_output_tokens=2, **GREEDY)
    list(client.responses.create(input="Hi", max_output_tokens=2, stream=True, **GREEDY))
    http("POST", smol.url + "/v1/responses", {"input": 1}, auth)
    http("GET", smol.url + "/v1/responses/resp_nope", headers=auth)
    after = smol.metrics(headers=auth)
    assert [after.get(key % r, 0) - before.get(key % r, 0) for r in routes] == [2, 1, 1]


def test_a_client_that_leaves_cancels_the_generation(smol, client):
    """Closing a stream early cancels its generation (ClosingStream) and counts a 499.
    Catches: the SSE body not wrapped in ClosingStream (the engine keeps generating for
    nobody), the stream counted as 200."""
    auth = {"Authorization": f"Bearer {KEY}"}
    key = 'reame_requests_total{endpoint="/v1/responses",status="499"}'
    before = smol.metrics(headers=auth).get(key, 0)
    stream = client.responses.create(input="Tell me a long story.", stream=True,
                                     max_output_tokens=900, extra_body={"ignore_eos": True},
                                     **GREEDY)
    for _, e in zip(range(6), stream):
        pass
    stream.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = smol.metrics(headers=auth)
        if m.get(key, 0) == before + 1 and m[per_model("reame_running_requests", "m")] == 0:
            break
        time.sleep(0.1)
    assert m.get(key, 0) == before + 1 and m[per_model("reame_running_requests", "m")] == 0
    gen = m[per_model("reame_generation_tokens_total", "m")]
    time.sleep(0.5)
    assert smol.metrics(headers=auth)[per_model("reame_generation_tokens_total", "m")] == gen


# ---- pydantic-ai ----

class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    country: str = pydantic.Field(max_length=16)


def test_pydantic_ai_responses_model(smol):
    """pydantic-ai's OpenAIResponsesModel: a plain-text run, and a structured one (its output
    tool, forced by tool_choice, answered with a function_call item it validates). Catches:
    any field pydantic-ai sends refused, function_call items it cannot read."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider
    model = OpenAIResponsesModel("m", provider=OpenAIProvider(base_url=smol.url + "/v1",
                                                              api_key=KEY))
    settings = {"max_tokens": 16, "temperature": 0.0}
    r = Agent(model).run_sync("Say hello.", model_settings=settings)
    assert isinstance(r.output, str) and r.output
    r = Agent(model, output_type=City).run_sync(
        "Name a city in Italy.", model_settings={"max_tokens": 80, "temperature": 0.0})
    assert isinstance(r.output, City) and r.output.name


# ---- reasoning ----

THINK = r"<think>\n[a-z ]{5,30}\n</think>\n\n[A-Z][a-z ]{3,20}\."


@pytest.fixture(scope="module")
def thinking(tmp_path_factory):
    path = synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0", vocab="qwen2")
    tpl = shared_path("testdata/templates/Qwen-Qwen3-0.6B.jinja")
    s = ReameServer(path, "--chat-template-file", str(tpl), "--ctx-size", "512", "--alias", "m",
                    "--max-seqs", "4", env={"REAME_RESPONSES_STORE_MAX": "3"},
                    log_dir=tmp_path_factory.mktemp("resp3"))
    yield s
    s.stop()


def test_reasoning_items(thinking):
    """A reasoning model's <think> block is a `reasoning` item (reasoning_text content) before
    the message, streamed as reasoning_text events before the text's; reasoning_tokens count
    it. Catches: the block left in output_text, reasoning sent as output_text deltas, the two
    paths disagreeing, reasoning_tokens 0 or the whole output."""
    c = thinking.client()
    kw = dict(model="m", input="Hi", max_output_tokens=80, temperature=1.0,
              extra_body={"seed": 2, "guided_regex": THINK})
    r = c.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    reasoning = r.output[0].content[0].text
    assert reasoning and "<think>" not in reasoning and "</think>" not in r.output_text
    assert r.output_text[0].isupper() and r.output_text.endswith(".")
    chat = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                     max_tokens=80, temperature=1.0,
                                     extra_body={"seed": 2, "guided_regex": THINK})
    assert reasoning == chat.choices[0].message.reasoning_content
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    events = list(c.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types.index("response.reasoning_text.done") < types.index(
        "response.output_text.delta")
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") \
        == reasoning
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output[1].content[0].text == r.output_text and final.usage == r.usage
    # the reasoning item sent back as input is accepted (and left out of the prompt, as the
    # chat endpoint leaves reasoning_content out)
    follow = c.responses.create(model="m", input=[{"role": "user", "content": "Hi"}]
                                + [o.model_dump(exclude_none=True) for o in r.output]
                                + [{"role": "user", "content": "More"}],
                                max_output_tokens=2, temperature=0)
    assert follow.status in ("completed", "incomplete")


def test_the_store_keeps_only_the_last_3(thinking):
    """REAME_RESPONSES_STORE_MAX=3: the 4th stored response evicts the first; continuing from
    it is a 400 previous_response_not_found, from the others works. Catches: the bound not
    read from the environment, eviction of the newest, a 404/500 instead of OpenAI's error."""
    c = thinking.client()
    ids = [c.responses.create(model="m", input=f"Hi {i}", max_output_tokens=2,
                              temperature=0).id for i in range(4)]
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="m", input="x", previous_response_id=ids[0],
                           max_output_tokens=2)
    assert e.value.body["code"] == "previous_response_not_found"
    assert e.value.status_code == 400
    # retrieving refreshes ids[1]; the next create evicts ids[2], the least recently used
    c.responses.retrieve(ids[1])
    r = c.responses.create(model="m", input="y", previous_response_id=ids[3],
                           max_output_tokens=2, temperature=0)
    assert r.usage.input_tokens > c.responses.retrieve(ids[3]).usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[2])
