"""The OpenAI Responses API's request and response shapes, as pydantic v2 models.

Requests are validated strictly (no string-to-number coercion, no unknown fields): a body that
does not fit becomes an OpenAI-shaped 400 naming the field's path (`input[2].content[0].text`,
`tools[1].parameters`), never a 500 (`validate`). Unions whose members are told apart by a
`type` field (input items, content parts, tools, `text.format`) are dispatched by hand
(responses_api.py: `to_messages`, `_parts`, `_tools`, `_format`), so an unknown or
unsupported `type` gets its own message and the path never carries pydantic's union tags.

The response side (`Response`, its output items and `Usage`) is what `POST /v1/responses`,
`GET /v1/responses/{id}` and the streamed events carry, in the shapes the `openai` 3.x client
reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .schemas import APIError, invalid


class _In(BaseModel):
    """A request object: strict types, unknown fields refused."""
    model_config = ConfigDict(extra="forbid", strict=True)


Status = Literal["in_progress", "completed", "incomplete"]

# ---- content parts ----


class InputText(_In):
    type: Literal["input_text"]
    text: str


class OutputTextPart(_In):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class RefusalPart(_In):
    type: Literal["refusal"]
    refusal: str


class SummaryText(_In):
    type: Literal["summary_text"]
    text: str


class ReasoningTextPart(_In):
    type: Literal["reasoning_text"]
    text: str


# ---- input items ----

class MessageItem(_In):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Any]                 # parts are checked one by one (by their type)
    id: str | None = None
    status: Status | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_In):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: Status | None = None
    namespace: None = None
    caller: dict[str, Any] | None = None


class FunctionCallOutputItem(_In):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[Any]                  # a string, or input_text parts
    id: str | None = None
    status: Status | None = None
    name: str | None = None
    namespace: None = None
    caller: dict[str, Any] | None = None


class ReasoningItem(_In):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = []
    content: list[ReasoningTextPart] | None = None
    encrypted_content: str | None = None
    status: Status | None = None


# ---- tools, text format, reasoning ----

class FunctionTool(_In):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionChoice(_In):
    type: Literal["function"]
    name: str = Field(min_length=1)


class AllowedTool(_In):
    type: Literal["function"]
    name: str = Field(min_length=1)


class AllowedToolsChoice(_In):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[AllowedTool] = Field(min_length=1)


class FormatText(_In):
    type: Literal["text"]


class FormatJSONObject(_In):
    type: Literal["json_object"]


class FormatJSONSchema(_In):
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_In):
    format: dict[str, Any] | None = None     # one of the Format* models, by its type
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_In):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # reasoning summaries are not written (no open model's template makes one): accepted,
    # and reasoning items carry the whole reasoning text in `content` with `summary: []`
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: Literal["standard"] | None = None


class StreamOptions(_In):
    include_obfuscation: bool | None = None      # no obfuscation padding is sent either way


INCLUDABLE = {
    # no output item these ask about can occur here (the tools are refused): nothing changes
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    # reasoning is not encrypted: reasoning items carry their text in `content`, and
    # `encrypted_content` stays null
    "reasoning.encrypted_content",
    # log-probabilities of the output tokens (with `top_logprobs` alternatives)
    "message.output_text.logprobs",
}


# Reame's extensions of the chat request, accepted here too (docs/server.md): fields of
# ResponsesRequest, passed to the chat request as they are and checked there (as on
# /v1/chat/completions; responses_api.chat_body)
EXTENSIONS = ("seed", "top_k", "min_p", "repetition_penalty", "presence_penalty",
              "frequency_penalty", "logit_bias", "stop", "ignore_eos", "chat_template_kwargs",
              "grammar", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
              "structured_outputs")


class _ResponsesFields(_In):
    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    max_tool_calls: int | None = Field(None, ge=0)     # limits built-in tools: none here
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: str | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    context_management: Any = None
    moderation: Any = None
    prompt_cache_options: dict[str, Any] | None = None      # caching hints: no effect here


ResponsesRequest = create_model(
    "ResponsesRequest", __base__=_ResponsesFields, __module__=__name__,
    __doc__="""POST /v1/responses: its fields and the EXTENSIONS (any value, null by default).
    Fields that would change the result and are not implemented (`background: true`,
    `conversation`, `prompt`, `context_management`, `moderation`) are declared so that they get
    their own 400 (responses_api.refuse_unsupported).""",
    **{name: (Any, None) for name in EXTENSIONS})


# ---- the response ----

class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutputText(_Out):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[dict[str, Any]] = []


class OutputMessage(_Out):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: Status
    content: list[OutputText]


class ReasoningText(_Out):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class OutputReasoning(_Out):
    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list[Any] = []
    content: list[ReasoningText]
    encrypted_content: str | None = None
    status: Status


class OutputFunctionCall(_Out):
    id: str
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    status: Status


class InputTokensDetails(_Out):
    cached_tokens: int
    cache_write_tokens: int = 0         # not tracked: the prefix cache keeps every full block


class OutputTokensDetails(_Out):
    reasoning_tokens: int


class Usage(_Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(_Out):
    code: str
    message: str


class IncompleteDetails(_Out):
    reason: Literal["max_output_tokens", "content_filter"]


class Response(_Out):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "incomplete", "in_progress", "failed", "cancelled"]
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputMessage | OutputReasoning | OutputFunctionCall] = []
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = {}
    service_tier: str = "default"
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = {}
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = []
    top_logprobs: int = 0
    top_p: float | None = None
    truncation: str = "disabled"
    usage: Usage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    background: bool = False


# ---- validation errors as OpenAI's 400 ----

_TAGS = {"str", "int", "float", "bool", "none", "dict", "list", "literal"}


def _path(prefix: str, loc: tuple) -> str:
    """A pydantic error location as a field path: `input[2].content`, `text.format.schema`.
    pydantic's union-member tags (`str`, `list[any]`, ...) are dropped."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TAGS or "[" in part or part.startswith("function-"):
            continue
        else:
            out = f"{out}.{part}" if out else part
    return out


def _describe(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "an integer", float: "a number"}.get(type(v), "a value")


def error_from(e: ValidationError, prefix: str = "") -> APIError:
    """The 400 for a pydantic validation error: its first problem, named by path."""
    errs = e.errors(include_url=False)
    err = errs[0]
    path = _path(prefix, err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return invalid(path, f"Unknown parameter: '{path}'. It is not supported by this server.",
                       "unsupported_parameter")
    if kind == "missing":
        return invalid(path, f"Missing required parameter: '{path}'.",
                       "missing_required_parameter")
    same = [x for x in errs if _path(prefix, x["loc"]) == path]
    if len(same) > 1:               # every member of a union refused it
        return invalid(path, f"Invalid type for '{path}': {_describe(err.get('input'))} is "
                       "not allowed here.", "invalid_type")
    return invalid(path, f"Invalid value for '{path}': {err['msg']}.",
                   "invalid_type" if kind.endswith("_type") else "invalid_value")


def validate(model: type[BaseModel], data, prefix: str = ""):
    """`model` validated from `data` (a decoded JSON value), or the 400 naming the field."""
    if not isinstance(data, dict):
        return_path = prefix or "body"
        raise invalid(prefix or None, f"'{return_path}' must be an object, not "
                      f"{_describe(data)}.", "invalid_type")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error_from(e, prefix) from None
