"""POST /v1/responses (OpenAI's Responses API), GET and DELETE /v1/responses/{id}.

One way through: the request (validated by the pydantic models of responses_models.py) is
turned into the equivalent /v1/chat/completions body and parsed by `parse_chat`, so every check,
the chat template, tools, structured output and reasoning_effort apply unchanged; the `Job`
that serves chat completions generates it. Its chat message (content, reasoning_content,
tool_calls) becomes Responses output items (`reasoning`, `message` with `output_text`,
`function_call`), and a stream's chat deltas (`Job.deltas`) become the Responses events
(`response.created` ... `response.completed`).

Input items become chat messages: `instructions` a system message first; messages of any role
(their `input_text` / `output_text` parts as text parts); `function_call` items the assistant
message's `tool_calls` (merged into the assistant message just before them, as OpenAI returns a
turn as [message, function_call, ...]); `function_call_output` items `tool` messages;
`reasoning` items are dropped (as the chat endpoint drops `reasoning_content` in history, and
templates such as Qwen3's render no past reasoning).

The store (`ResponseStore`) keeps each stored response and its conversation in this worker's
memory, bounded in count and bytes, least recently used evicted first.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import OrderedDict

import falcon

from . import responses_models as M
from .responses import Job, answer, start_job
from .schemas import APIError, invalid, parse_chat, parse_json

ENDPOINT = "/v1/responses"


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# ---- the store ----

class ResponseStore:
    """Stored responses of this worker process: id -> (response object, conversation items).

    Bounded by `max_count` responses and `max_bytes` (their JSON size, each response counted
    with its whole conversation, so continuing a conversation costs its full size again);
    the least recently used (created or read) is evicted first. A response larger than the
    whole budget is not stored. Thread-safe (HTTP threads share it)."""

    def __init__(self, max_count: int = 1000, max_bytes: int = 64 << 20):
        self.max_count, self.max_bytes = max_count, max_bytes
        self._d: OrderedDict[str, tuple[dict, list, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> "ResponseStore":
        return cls(int(os.environ.get("REAME_RESPONSES_STORE_MAX", "1000")),
                   int(float(os.environ.get("REAME_RESPONSES_STORE_MB", "64")) * (1 << 20)))

    def put(self, response: dict, items: list) -> bool:
        size = len(json.dumps(response)) + len(json.dumps(items))
        if size > self.max_bytes or self.max_count < 1:
            return False
        with self._lock:
            self._pop(response["id"])
            self._d[response["id"]] = (response, items, size)
            self.bytes += size
            while len(self._d) > self.max_count or self.bytes > self.max_bytes:
                self._pop(next(iter(self._d)))
        return True

    def get(self, rid: str) -> tuple[dict, list] | None:
        with self._lock:
            e = self._d.get(rid)
            if e is None:
                return None
            self._d.move_to_end(rid)
            return e[0], e[1]

    def delete(self, rid: str) -> bool:
        with self._lock:
            return self._pop(rid)

    def _pop(self, rid: str) -> bool:
        e = self._d.pop(rid, None)
        if e is not None:
            self.bytes -= e[2]
        return e is not None

    def __len__(self) -> int:
        return len(self._d)


# ---- input items -> chat messages ----

_UNSUPPORTED_PARTS = {"input_image", "input_file", "input_audio"}


def _parts(content, path: str) -> str | list[dict]:
    """A message's content as chat content: a string, or text parts."""
    if isinstance(content, str):
        return content
    out = []
    for j, p in enumerate(content):
        pp = f"{path}[{j}]"
        t = p.get("type") if isinstance(p, dict) else None
        if t == "input_text":
            out.append({"type": "text", "text": M.validate(M.InputText, p, pp).text})
        elif t == "output_text":
            out.append({"type": "text", "text": M.validate(M.OutputTextPart, p, pp).text})
        elif t == "refusal":
            out.append({"type": "refusal", "refusal": M.validate(M.RefusalPart, p, pp).refusal})
        elif t in _UNSUPPORTED_PARTS:
            raise invalid(f"{pp}.type", f"Content parts of type {t!r} are not supported by this "
                          "model; only text ('input_text', 'output_text') is.",
                          "unsupported_content")
        else:
            raise invalid(f"{pp}.type" if isinstance(p, dict) else pp, f"'{pp}' must be a "
                          "content part: {\"type\": \"input_text\", \"text\": ...}.")
    return out


def _text_of(parts) -> str:
    if isinstance(parts, str):
        return parts
    return "\n".join(p.get("text", p.get("refusal", "")) for p in parts)


def to_messages(items: list, paths: list[str]) -> tuple[list[dict], list[str]]:
    """Chat messages for input items, and for each message the path of the item it came from
    (for errors)."""
    msgs: list[dict] = []
    origins: list[str] = []
    for item, path in zip(items, paths):
        if not isinstance(item, dict):
            raise invalid(path, f"'{path}' must be an object (an input item).", "invalid_type")
        t = item.get("type", "message")
        if t == "message":
            m = M.validate(M.MessageItem, item, path)
            msgs.append({"role": m.role, "content": _parts(m.content, f"{path}.content")})
        elif t == "function_call":
            c = M.validate(M.FunctionCallItem, item, path)
            call = {"id": c.call_id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}}
            last = msgs[-1] if msgs else None
            if last is not None and last["role"] == "assistant":    # the turn's calls
                last.setdefault("tool_calls", []).append(call)
                continue
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif t == "function_call_output":
            o = M.validate(M.FunctionCallOutputItem, item, path)
            out = o.output
            if not isinstance(out, str):
                parts = _parts(out, f"{path}.output")
                out = _text_of(parts)
            msgs.append({"role": "tool", "tool_call_id": o.call_id, "content": out})
        elif t == "reasoning":
            M.validate(M.ReasoningItem, item, path)         # checked, then dropped
            continue
        elif isinstance(t, str):
            raise invalid(f"{path}.type", f"Input items of type {t!r} are not supported by "
                          "this server (only message, function_call, function_call_output and "
                          "reasoning items are).", "unsupported_parameter")
        else:
            raise invalid(f"{path}.type", f"'{path}.type' must be a string.", "invalid_type")
        origins.append(path)
    return msgs, origins


def input_items(value) -> list:
    """The request's `input` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


# ---- the request -> a chat-completions body ----

REFUSED = ("conversation", "prompt", "context_management", "moderation")


def refuse_unsupported(r: M.ResponsesRequest) -> None:
    if r.background:
        raise invalid("background", "'background': true is not supported by this server; "
                      "responses are generated while the request waits (or streams).",
                      "unsupported_parameter")
    for name in REFUSED:
        if getattr(r, name) is not None:
            raise invalid(name, f"'{name}' is not supported by this server"
                          + (" (use previous_response_id)." if name == "conversation" else "."),
                          "unsupported_parameter")
    for i, inc in enumerate(r.include or []):
        if inc not in M.INCLUDABLE:
            raise invalid(f"include[{i}]", f"'include' value {inc!r} is not supported; known "
                          f"values: {sorted(M.INCLUDABLE)}.", "unsupported_parameter")


def _tools(r: M.ResponsesRequest) -> tuple[list[dict], list[int], object]:
    """Chat tools, the request index of each, and the chat tool_choice."""
    tools, index = [], []
    for i, t in enumerate(r.tools or []):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind == "function" and "function" in t and "name" not in t:
            raise invalid(f"tools[{i}].function", "Responses function tools are flat: "
                          "{\"type\": \"function\", \"name\", \"parameters\", ...}; "
                          "'function' is the chat completions shape.")
        if kind != "function":
            raise invalid(f"tools[{i}].type", f"Tools of type {kind!r} are not supported by this "
                          "server; only 'function' tools are.", "unsupported_parameter")
        f = M.validate(M.FunctionTool, t, f"tools[{i}]")
        fn = {"name": f.name}
        if f.description is not None:
            fn["description"] = f.description
        if f.parameters is not None:
            fn["parameters"] = f.parameters
        if f.strict is not None:
            fn["strict"] = f.strict
        tools.append({"type": "function", "function": fn})
        index.append(i)
    choice = r.tool_choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            c = M.validate(M.FunctionChoice, choice, "tool_choice")
            choice = {"type": "function", "function": {"name": c.name}}
        elif kind == "allowed_tools":           # only these tools are shown and callable
            c = M.validate(M.AllowedToolsChoice, choice, "tool_choice")
            names = {a.name for a in c.tools}
            unknown = names - {t["function"]["name"] for t in tools}
            if unknown:
                raise invalid("tool_choice.tools", f"'tool_choice.tools' names {sorted(unknown)}, "
                              "which are not among 'tools'.")
            keep = [k for k, t in enumerate(tools) if t["function"]["name"] in names]
            tools, index = [tools[k] for k in keep], [index[k] for k in keep]
            choice = c.mode
        else:
            raise invalid("tool_choice.type", f"'tool_choice' of type {kind!r} is not supported "
                          "by this server ('auto', 'none', 'required', a function or "
                          "allowed_tools are).", "unsupported_parameter")
    elif choice is not None and choice not in ("auto", "none", "required"):
        raise invalid("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or "
                      "an object.")
    return tools, index, choice


def _format(text: M.TextConfig | None):
    if text is None or text.format is None:
        return None
    kind = text.format.get("type")
    p = "text.format"
    if kind == "text":
        M.validate(M.FormatText, text.format, p)
        return None
    if kind == "json_object":
        M.validate(M.FormatJSONObject, text.format, p)
        return {"type": "json_object"}
    if kind == "json_schema":
        f = M.validate(M.FormatJSONSchema, text.format, p)
        js = {"name": f.name, "schema": f.schema_}
        if f.strict is not None:
            js["strict"] = f.strict
        return {"type": "json_schema", "json_schema": js}
    raise invalid("text.format.type", "'text.format.type' must be 'text', 'json_object' or "
                  "'json_schema'.")


def chat_body(r: M.ResponsesRequest, messages: list[dict]) -> tuple[dict, list[int]]:
    """The /v1/chat/completions body equivalent to the request (and each chat tool's index in
    the request's `tools`)."""
    body: dict = {"messages": messages}
    if r.model is not None:
        body["model"] = r.model
    if r.max_output_tokens is not None:
        body["max_completion_tokens"] = r.max_output_tokens
    for k in ("temperature", "top_p", "parallel_tool_calls") + M.EXTENSIONS:
        if getattr(r, k) is not None:
            body[k] = getattr(r, k)
    tools, index, choice = _tools(r)
    if tools:
        body["tools"] = tools
    if choice is not None:
        body["tool_choice"] = choice
    fmt = _format(r.text)
    if fmt is not None:
        body["response_format"] = fmt
    if r.text is not None and r.text.verbosity is not None:
        body["verbosity"] = r.text.verbosity
    if r.reasoning is not None and r.reasoning.effort is not None:
        body["reasoning_effort"] = r.reasoning.effort
    if r.top_logprobs or "message.output_text.logprobs" in (r.include or []):
        body["logprobs"] = True
        body["top_logprobs"] = r.top_logprobs or 0
    return body, index


_RENAMES = [(re.compile(r"^max_(completion_)?tokens$"), "max_output_tokens"),
            (re.compile(r"^response_format(\.json_schema)?"), "text.format"),
            (re.compile(r"^reasoning_effort$"), "reasoning.effort"),
            (re.compile(r"^verbosity$"), "text.verbosity"),
            (re.compile(r"^logprobs$"), "include"),
            (re.compile(r"^messages$"), "input")]


def remap(e: APIError, origins: list[str], tool_index: list[int]) -> APIError:
    """A chat-level error named in the Responses request's terms."""
    p = e.param
    if not p:
        return e
    m = re.match(r"^messages\[(\d+)\](.*)$", p)
    if m:
        k = int(m.group(1))
        p = origins[k] if k < len(origins) else "input"
    m = re.match(r"^tools\[(\d+)\](?:\.function)?(.*)$", p)
    if m:
        k = int(m.group(1))
        p = f"tools[{tool_index[k] if k < len(tool_index) else k}]{m.group(2)}"
    for pat, new in _RENAMES:
        p = pat.sub(new, p)
    e.param = p
    return e


# ---- output items ----

def output_items(message: dict, finish: str, logprobs: list | None) -> list[dict]:
    """The output items of a chat message: reasoning, message, function calls."""
    out = []
    if message.get("reasoning_content"):
        out.append(M.OutputReasoning(id=_id("rs"), status="completed", content=[
            M.ReasoningText(text=message["reasoning_content"])]).model_dump())
    calls = message.get("tool_calls") or []
    content = message.get("content") or ""
    if content or not calls:
        status = "incomplete" if finish == "length" else "completed"
        out.append(M.OutputMessage(id=_id("msg"), status=status, content=[
            M.OutputText(text=content, logprobs=logprobs or [])]).model_dump())
    for c in calls:
        out.append(M.OutputFunctionCall(
            id=_id("fc"), call_id=c["id"], name=c["function"]["name"],
            arguments=c["function"]["arguments"], status="completed").model_dump())
    return out


# ---- the resource ----

class Responses:
    """POST /v1/responses; GET and DELETE /v1/responses/{response_id}."""

    def __init__(self, models, config, metrics, store: ResponseStore | None = None):
        self.models, self.config, self.metrics = models, config, metrics
        self.store = store if store is not None else ResponseStore.from_env()

    # -- create --

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        from .app import _read_body, take_keep_alive
        body = parse_json(_read_body(req, self.config.max_body_bytes))
        take_keep_alive(req, body)              # Ollama's keep_alive: for ServedModels.get
        r = M.validate(M.ResponsesRequest, body)
        refuse_unsupported(r)
        history = []
        if r.previous_response_id is not None:
            prev = self.store.get(r.previous_response_id)
            if prev is None:
                raise APIError(400, f"Previous response with id '{r.previous_response_id}' "
                               "not found.", "invalid_request_error", "previous_response_id",
                               "previous_response_not_found")
            history = prev[1]
        new = input_items(r.input)
        if not new and not history:
            raise invalid("input", "Missing required parameter: 'input'.",
                          "missing_required_parameter")
        items = history + new
        paths = (["previous_response_id"] * len(history)
                 + ([("input" if isinstance(r.input, str) else f"input[{i}]")
                     for i in range(len(new))]))
        messages, origins = to_messages(items, paths)
        if r.instructions is not None:
            messages.insert(0, {"role": "system", "content": r.instructions})
            origins.insert(0, "instructions")
        cbody, tool_index = chat_body(r, messages)
        service = self.models.get(req, body)
        try:
            g = parse_chat(cbody, service.n_vocab, 1)
            service.check_model(g.model)
            prompt = self._prompt(service, g, origins, r.truncation == "auto")
            job = start_job(req, service, g, [prompt], self.metrics, ENDPOINT)
        except APIError as e:
            raise remap(e, origins, tool_index) from None

        def ctx():              # made once the first token is in (its created_at)
            return _Context(self, r, service, job, items)
        answer(resp, job, bool(r.stream), lambda: ctx().sse(), lambda: ctx().whole())

    @staticmethod
    def _prompt(service, g, origins: list[str], truncate: bool) -> list[int]:
        """The chat prompt; with truncation 'auto', the oldest messages (after the leading
        system ones) are dropped until it fits, keeping the last message. Each drop is the
        first message after the leading system ones, with the tool results that follow it (a
        system message it uncovers is kept). The fewest drops that fit are found by bisection,
        a few renders, where dropping one message per render took 85 s for 3,000 messages."""
        try:
            return service.chat_prompt(g)
        except APIError as e:
            if not truncate or e.code != "context_length_exceeded":
                raise
            error = e
        messages, names = list(g.messages), list(origins)
        drops, i, n = [], 0, len(messages)
        while True:
            while i < n and messages[i]["role"] == "system":
                i += 1
            end = i + 1
            while end < n and messages[end]["role"] == "tool":
                end += 1                        # a call's results go with it
            if end >= n:
                break                           # the last message stays
            drops.append((i, end))
            i = end
        if not drops:
            raise error

        def keep(k: int) -> None:               # g and origins without the first k drops
            gone = {j for a, b in drops[:k] for j in range(a, b)}
            g.messages = [m for j, m in enumerate(messages) if j not in gone]
            origins[:] = [o for j, o in enumerate(names) if j not in gone]

        lo, hi = 0, len(drops)                  # lo does not fit; all the drops: raises if not
        keep(hi)
        ids = service.chat_prompt(g)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            keep(mid)
            try:
                ids, hi = service.chat_prompt(g), mid
            except APIError as e:
                if e.code != "context_length_exceeded":
                    raise
                lo = mid
        keep(hi)
        return ids

    # -- read, delete --

    def _stored(self, response_id: str):
        e = self.store.get(response_id)
        if e is None:
            raise APIError(404, f"Response with id '{response_id}' not found.",
                           "invalid_request_error", None, "response_not_found")
        return e

    def on_get_item(self, req, resp, response_id):
        resp.media = self._stored(response_id)[0]

    on_head_item = on_get_item

    def on_get_input_items(self, req, resp, response_id):
        response, items = self._stored(response_id)
        n = len(response["output"])
        data = [dict(it, id=it.get("id") or f"item_{k}") for k, it in
                enumerate(items[:len(items) - n])][::-1]
        resp.media = {"object": "list", "data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None}

    on_head_input_items = on_get_input_items

    def on_delete_item(self, req, resp, response_id):
        if not self.store.delete(response_id):
            self._stored(response_id)
        resp.media = {"id": response_id, "object": "response", "deleted": True}


class _Context:
    """One response being made: its request, its Job, and the shapes around them."""

    def __init__(self, res: Responses, r: M.ResponsesRequest, service, job: Job, items: list):
        self.res, self.r, self.service, self.job, self.items = res, r, service, job, items
        self.id = _id("resp")
        self.created = int(time.time())
        self.logprobs = job.req.logprobs

    def response(self, status: str, output: list[dict], usage=None, error=None,
                 finish: str | None = None) -> dict:
        r = self.r
        tools = [t for t in (r.tools or [])]
        fmt = (r.text.format if r.text is not None and r.text.format is not None
               else {"type": "text"})
        obj = M.Response(
            id=self.id, created_at=self.created, status=status, model=self.service.id,
            completed_at=int(time.time()) if status == "completed" else None,
            error=error, output=output, usage=usage,
            incomplete_details={"reason": "max_output_tokens"} if status == "incomplete" else None,
            instructions=r.instructions, max_output_tokens=r.max_output_tokens,
            max_tool_calls=r.max_tool_calls, previous_response_id=r.previous_response_id,
            parallel_tool_calls=r.parallel_tool_calls is not False,
            reasoning={"effort": r.reasoning.effort if r.reasoning else None,
                       "summary": r.reasoning.summary if r.reasoning else None},
            store=r.store is not False, temperature=r.temperature if r.temperature is not None
            else 1.0, top_p=r.top_p if r.top_p is not None else 1.0,
            text={"format": fmt, "verbosity": (r.text.verbosity if r.text else None) or "medium"},
            tool_choice=r.tool_choice if r.tool_choice is not None else "auto", tools=tools,
            top_logprobs=r.top_logprobs or 0, truncation=r.truncation or "disabled",
            user=r.user, metadata=r.metadata or {}, safety_identifier=r.safety_identifier,
            prompt_cache_key=r.prompt_cache_key)
        return obj.model_dump(mode="json")

    def usage(self, reasoning: str) -> dict:
        u = self.job.usage
        n_reason = (len(self.service.tok.encode(reasoning, add_special=False))
                    if reasoning else 0)
        return {"input_tokens": u["prompt_tokens"],
                "input_tokens_details": {"cached_tokens":
                                         u["prompt_tokens_details"]["cached_tokens"],
                                         "cache_write_tokens": 0},
                "output_tokens": u["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens": min(n_reason,
                                                                  u["completion_tokens"])},
                "total_tokens": u["total_tokens"]}

    def _status(self, finish: str | None) -> str:
        return "incomplete" if finish in ("length", None) else "completed"

    def finish(self, output: list[dict], finish: str | None, reasoning: str) -> dict:
        """The final response object; stored unless `store` is false."""
        obj = self.response(self._status(finish), output, self.usage(reasoning))
        if self.r.store is not False:
            self.res.store.put(obj, self.items + output)
        return obj

    # -- a whole response --

    def whole(self) -> dict:
        res = self.job.result()
        choice = res["choices"][0]
        msg, finish = choice["message"], choice["finish_reason"]
        lp = choice["logprobs"]["content"] if choice.get("logprobs") else None
        output = output_items(msg, finish, lp)
        return self.finish(output, finish, msg.get("reasoning_content") or "")

    # -- a stream --

    def sse(self):
        """The Responses events of the generation (`event: TYPE`, `data: {...}`)."""
        from .responses_stream import EventStream
        return EventStream(self).run()
