"""POST /v1/messages: Anthropic's Messages API over the chat path.

The request is declared as pydantic models (reame/server/messages_models.py: what Anthropic's
API takes, `extra` forbidden, so a field that would change the result and is not implemented
is a 400 naming it), translated one way into the equivalent chat-completions body, and parsed
by `parse_chat`: every check,
the template's tools, the reasoning switch and the output plan (grammars, tool-call and
reasoning splitting) are the chat endpoint's. The generation is a `Job` as for chat; the answer
is rendered as Anthropic's `message` object, or its stream as Anthropic's events from
`Job.deltas()`:

    message_start, ping, (content_block_start, content_block_delta*, content_block_stop)*,
    message_delta (stop_reason, stop_sequence, usage), message_stop

and `event: error` on a failure after the stream started. Errors on these paths are
Anthropic's shape, `{"type": "error", "error": {"type", "message"}}` (app.py's handlers call
`messages_models.anthropic_error` for paths under /v1/messages, and so does the worker for
the errors it answers itself). POST /v1/messages/count_tokens counts the prompt the same
request would have.

Translation (Anthropic -> chat): `system` (a string or text blocks) is a system message;
user text blocks are a user message's text parts, each `tool_result` a `tool` message
(`tool_call_id` = `tool_use_id`); assistant text blocks are its content and `tool_use` blocks
its `tool_calls` (arguments = the input as JSON); thinking blocks of earlier turns are dropped
(the templates that know reasoning drop earlier turns' reasoning too). `tools` are functions
(`input_schema` = `parameters`), `tool_choice` auto / any / tool / none is "auto" / "required"
/ the named function / "none", `disable_parallel_tool_use` is `parallel_tool_calls: false`;
`thinking` enabled / adaptive / disabled is `reasoning_effort` "medium" / "medium" / "none"
(the template's switch); `output_config.format` (a JSON schema) is `response_format`.
"""

from __future__ import annotations

import json

import falcon
from pydantic import ValidationError

from .messages_models import (CountTokensRequest, DocumentBlock, ImageBlock, MessageOut,
                              MessagesRequest, RedactedThinkingBlock, TextBlock, TextOut,
                              ThinkingBlock, ThinkingOut, ToolResultBlock, ToolUseBlock,
                              ToolUseOut, Usage, anthropic_error)
from .responses import Job, answer, start_job
from .schemas import APIError, GenerationRequest, invalid, parse_chat, parse_json


def _where(body, loc) -> str:
    """A pydantic error location as a path in the request (`messages[0].content[1].text`):
    the union members and discriminator tags pydantic puts in `loc` are skipped."""
    cur, out = body, ""
    for i, p in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur):
            cur, out = cur[p], f"{out}[{p}]"
        elif isinstance(cur, dict) and isinstance(p, str) and p == cur.get("type") and not last:
            continue                                    # a discriminated union's tag
        elif isinstance(cur, dict) and isinstance(p, str) and (p in cur or last):
            cur, out = cur.get(p), f"{out}.{p}" if out else p
        # else: a union member's label
    return out


def _validation_error(e: ValidationError, body: dict) -> APIError:
    """The deepest error (a union reports one per member: the member that got furthest is the
    one the client meant), its location spelled as a path of the request."""
    errs = [(_where(body, err["loc"]), err) for err in e.errors()]
    depth = max(len(w) for w, _ in errs)
    deepest = [(w, err) for w, err in errs if len(w) == depth]
    where = deepest[0][0]
    msgs = []
    for w, err in deepest:
        if w != where:
            continue
        m = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            m = "this field is not supported by this server"
        if msgs:
            m = m.removeprefix("Input should be ")
        if m not in msgs:
            msgs.append(m)
    return invalid(where or None, f"{where or 'body'}: {' or '.join(msgs)}")


def _chat_messages(r: CountTokensRequest) -> list[dict]:
    """The conversation as chat-completions messages."""
    out: list[dict] = []
    if r.system:
        out.append({"role": "system", "content": r.system if isinstance(r.system, str) else
                    [{"type": "text", "text": b.text} for b in r.system]})
    for i, m in enumerate(r.messages):
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts: list[dict] = []
        calls: list[dict] = []
        for j, b in enumerate(m.content):
            w = f"messages[{i}].content[{j}]"
            if isinstance(b, (ImageBlock, DocumentBlock)):
                raise invalid(w, f"{w}: content blocks of type {b.type!r} are not supported: "
                              "this model reads text only.")
            if m.role == "user" and isinstance(b, (ToolUseBlock, ThinkingBlock,
                                                   RedactedThinkingBlock)):
                raise invalid(w, f"{w}: {b.type} blocks belong to assistant messages.")
            if m.role == "assistant" and isinstance(b, ToolResultBlock):
                raise invalid(w, f"{w}: tool_result blocks belong to user messages.")
            if isinstance(b, TextBlock):
                texts.append({"type": "text", "text": b.text})
            elif isinstance(b, ToolResultBlock):
                if texts:                            # text before a result: its own message
                    out.append({"role": "user", "content": texts})
                    texts = []
                out.append({"role": "tool", "tool_call_id": b.tool_use_id,
                            "content": _result_text(b, w)})
            elif isinstance(b, ToolUseBlock):
                calls.append({"id": b.id, "type": "function", "function": {
                    "name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)}})
            # thinking and redacted_thinking of earlier turns: dropped
        if m.role == "assistant":
            msg = {"role": "assistant", "content": texts or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif texts or not any(isinstance(b, ToolResultBlock) for b in m.content):
            out.append({"role": "user", "content": texts})
    return out


def _result_text(b: ToolResultBlock, where: str) -> str:
    if b.content is None:
        text = ""
    elif isinstance(b.content, str):
        text = b.content
    else:
        for k, part in enumerate(b.content):
            if not isinstance(part, TextBlock):
                raise invalid(f"{where}.content[{k}]", f"{where}.content[{k}]: content blocks "
                              f"of type {part.type!r} are not supported: this model reads "
                              "text only.")
        text = "\n".join(part.text for part in b.content)
    return "Error: " + text if b.is_error else text


# the chat fields' names in parse_chat's messages, as this API spells them
_RENAMED = {"'response_format'": "'output_config.format'", "'stop'": "'stop_sequences'",
            "'parallel_tool_calls'": "'tool_choice.disable_parallel_tool_use'",
            "'reasoning_effort'": "'thinking'"}


def _chat_body(r: CountTokensRequest) -> dict:
    """The equivalent chat-completions request body."""
    if r.messages[-1].role == "assistant":
        raise invalid("messages", "A last message from the assistant (prefill) is not "
                      "supported by this server: end with a user message.")
    body: dict = {"model": r.model, "messages": _chat_messages(r)}
    if isinstance(r, MessagesRequest):
        body.update(max_tokens=r.max_tokens, stream=r.stream)
        for name, v in (("temperature", r.temperature), ("top_p", r.top_p),
                        ("top_k", r.top_k), ("stop", r.stop_sequences)):
            if v is not None:
                body[name] = v
    if r.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t.name, **({"description": t.description} if t.description else {}),
            "parameters": t.input_schema}} for t in r.tools]
    tc = r.tool_choice
    if tc is not None and tc.type == "tool" and tc.name not in {t.name for t in r.tools or []}:
        raise invalid("tool_choice", f"tool_choice.name: {tc.name!r} is not one of the tools.")
    if tc is not None:
        body["tool_choice"] = ({"type": "function", "function": {"name": tc.name}}
                               if tc.type == "tool" else
                               {"auto": "auto", "any": "required", "none": "none"}[tc.type])
        if getattr(tc, "disable_parallel_tool_use", None) and r.tools:
            body["parallel_tool_calls"] = False
    if r.thinking is not None:
        body["reasoning_effort"] = "none" if r.thinking.type == "disabled" else "medium"
    if r.output_config is not None and r.output_config.format is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": r.output_config.format.schema_}}
    return body


def parse_messages(body: dict, n_vocab: int, max_n: int, count_only: bool = False
                   ) -> tuple[CountTokensRequest, GenerationRequest]:
    """The typed Anthropic request and the GenerationRequest it means; 400 naming the field."""
    try:
        r = (CountTokensRequest if count_only else MessagesRequest).model_validate(body)
    except ValidationError as e:
        raise _validation_error(e, body) from None
    return r, parse_chat(_chat_body(r), n_vocab, max_n)


def _renamed(e: APIError) -> APIError:
    """The chat checks' error in this API's field names."""
    for a, b in _RENAMED.items():
        e.message = e.message.replace(a, b)
    return e


# ---- the answer ----

def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def _input(arguments: str) -> dict:
    try:
        v = json.loads(arguments)
    except (ValueError, RecursionError):    # the model's text: any nesting
        return {}
    return v if isinstance(v, dict) else {}


def _usage(job: Job) -> Usage:
    u = job.usage
    cached = u["prompt_tokens_details"]["cached_tokens"] or 0
    return Usage(input_tokens=u["prompt_tokens"] - cached, cache_read_input_tokens=cached,
                 output_tokens=u["completion_tokens"])


def _stop(job: Job, finish_reason: str | None) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for the chat finish_reason."""
    hit = job.choices[0].stream.stop_hit
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "stop" and hit is not None:
        return "stop_sequence", hit
    return ("max_tokens", None) if finish_reason in (None, "length") else ("end_turn", None)


def message_id(job: Job) -> str:
    return "msg_" + job.id.rsplit("-", 1)[-1]


def message_result(job: Job, omit_thinking: bool = False) -> dict:
    """The whole answer as Anthropic's `message` object."""
    res = job.result()
    c = res["choices"][0]
    msg = c["message"]
    content: list = []
    if msg.get("reasoning_content"):
        content.append(ThinkingOut(thinking="" if omit_thinking else msg["reasoning_content"]))
    if msg.get("content"):
        content.append(TextOut(text=msg["content"]))
    for tc in msg.get("tool_calls") or []:
        content.append(ToolUseOut(id=tool_use_id(tc["id"]), name=tc["function"]["name"],
                                  input=_input(tc["function"]["arguments"])))
    reason, seq = _stop(job, c["finish_reason"])
    return MessageOut(id=message_id(job), model=job.model, content=content, stop_reason=reason,
                      stop_sequence=seq, usage=_usage(job)).model_dump()


def _event(name: str, data: dict) -> bytes:
    return (b"event: " + name.encode() + b"\ndata: "
            + json.dumps({"type": name, **data}, ensure_ascii=False).encode() + b"\n\n")


def stream_events(job: Job, omit_thinking: bool = False):
    """The answer as Anthropic's SSE events, from the job's chat deltas. Close it to cancel."""
    deltas = job.deltas()
    index, kind = -1, None                    # the open content block and its kind
    calls: dict[int, int] = {}                # chat tool-call index -> block index

    def start(new_kind: str, block: dict):
        nonlocal index, kind
        out = stop()
        index, kind = index + 1, new_kind
        return out + [_event("content_block_start", {"index": index, "content_block": block})]

    def stop():
        nonlocal kind
        out = []
        if kind == "thinking":
            out.append(_event("content_block_delta", {"index": index, "delta": {
                "type": "signature_delta", "signature": ""}}))
        if kind is not None:
            out.append(_event("content_block_stop", {"index": index}))
        kind = None
        return out

    try:
        usage = _usage(job).model_dump()
        yield _event("message_start", {"message": {
            "id": message_id(job), "type": "message", "role": "assistant", "model": job.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 0}}})
        yield _event("ping", {})
        finish, error = None, None
        for d in deltas:
            if d.error is not None:
                error = d.error
                break
            out = []
            if d.delta.get("reasoning_content"):
                if kind != "thinking":
                    out += start("thinking", {"type": "thinking", "thinking": "",
                                              "signature": ""})
                if not omit_thinking:
                    out.append(_event("content_block_delta", {"index": index, "delta": {
                        "type": "thinking_delta", "thinking": d.delta["reasoning_content"]}}))
            if d.delta.get("content"):
                if kind != "text":
                    out += start("text", {"type": "text", "text": ""})
                out.append(_event("content_block_delta", {"index": index, "delta": {
                    "type": "text_delta", "text": d.delta["content"]}}))
            for tc in d.delta.get("tool_calls") or []:
                if "id" in tc:                        # a new call: its own block
                    out += start("tool_use", {"type": "tool_use", "id": tool_use_id(tc["id"]),
                                              "name": tc["function"]["name"], "input": {}})
                    calls[tc["index"]] = index
                args = tc.get("function", {}).get("arguments")
                if args:
                    out.append(_event("content_block_delta", {
                        "index": calls.get(tc["index"], index),
                        "delta": {"type": "input_json_delta", "partial_json": args}}))
            if d.finish_reason is not None:
                finish = d.finish_reason
            yield from out
        if error is not None:
            yield b"event: error\ndata: " + json.dumps(anthropic_error(
                error.status, error.message)).encode() + b"\n\n"
            status = error.status
        else:
            yield from stop()
            reason, seq = _stop(job, finish)
            usage = _usage(job).model_dump()
            yield _event("message_delta", {"delta": {"stop_reason": reason,
                                                     "stop_sequence": seq}, "usage": usage})
            yield _event("message_stop", {})
            status = 200
        # resumed: the server wrote the last event and asks for more (see Job.sse)
        job.stream_status = status
    finally:
        deltas.close()


# ---- the resources ----

class Messages:
    """POST /v1/messages and POST /v1/messages/count_tokens."""

    def __init__(self, models, config, metrics, read_body):
        self.models, self.config, self.metrics = models, config, metrics
        self.read_body = read_body

    def _parse(self, req, count_only: bool):
        body = parse_json(self.read_body(req, self.config.max_body_bytes))
        service = self.models.get(req, body)
        r, gr = parse_messages(body, service.n_vocab, service.max_n, count_only)
        service.check_model(gr.model)
        return service, r, gr

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            service, r, gr = self._parse(req, False)
            job = start_job(req, service, gr, [service.chat_prompt(gr)], self.metrics,
                            "/v1/messages")
        except APIError as e:
            raise _renamed(e) from None
        omit = r.thinking is not None and getattr(r.thinking, "display", None) == "omitted"
        answer(resp, job, gr.stream, lambda: stream_events(job, omit),
               lambda: message_result(job, omit))

    def on_post_count_tokens(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            service, _, gr = self._parse(req, True)
            resp.media = {"input_tokens": len(service.chat_prompt(gr))}
        except APIError as e:
            raise _renamed(e) from None
