"""The Anthropic Messages API's request and response shapes, as pydantic models.

Requests are strict (`extra` forbidden, no type coercion): a field this server does not
implement is a 400 naming it (reame/server/messages_api.py turns a ValidationError into one),
never silently ignored. Fields accepted without effect are marked so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

# ---- errors: Anthropic's shape ----

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
               504: "timeout_error", 529: "overloaded_error"}


def is_messages_path(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def anthropic_error(status: int, message: str) -> dict:
    """Anthropic's error body for an HTTP status."""
    kind = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# ---- the request ----

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CacheControl(_Strict):
    """Accepted, no effect: the prefix cache finds shared prefixes by their tokens."""
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None    # of an earlier answer: not rendered


class _Unsupported(BaseModel):
    """A block this server cannot read (checked when translated: a 400 naming it)."""
    model_config = ConfigDict(extra="allow")


class ImageBlock(_Unsupported):
    type: Literal["image"]


class DocumentBlock(_Unsupported):
    type: Literal["document"]


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None


ResultPart = Annotated[Union[TextBlock, ImageBlock, DocumentBlock], Field(discriminator="type")]


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ResultPart] | None = None
    is_error: bool = False
    cache_control: CacheControl | None = None


Block = Annotated[Union[TextBlock, ImageBlock, DocumentBlock, ThinkingBlock,
                        RedactedThinkingBlock, ToolUseBlock, ToolResultBlock],
                  Field(discriminator="type")]


class InputMessage(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(_Strict):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    # accepted: calls under tool_choice any / tool always validate against input_schema
    # (constrained); under auto they are parsed as the model wrote them
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _server_tools(cls, data):
        if isinstance(data, dict) and data.get("type") not in (None, "custom"):
            raise ValueError(f"server tools (type {data.get('type')!r}) are not supported by "
                             "this server; only custom tools, {name, description, "
                             "input_schema}")
        return data


class ToolChoiceAuto(_Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(_Strict):
    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(_Strict):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Strict):
    type: Literal["none"]


ToolChoice = Annotated[Union[ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone],
                       Field(discriminator="type")]


class ThinkingEnabled(_Strict):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1)        # not enforced: the model thinks as it does
    display: Literal["summarized", "omitted"] | None = None


class ThinkingAdaptive(_Strict):
    type: Literal["adaptive"]
    display: Literal["summarized", "omitted"] | None = None


class ThinkingDisabled(_Strict):
    type: Literal["disabled"]


Thinking = Annotated[Union[ThinkingEnabled, ThinkingAdaptive, ThinkingDisabled],
                     Field(discriminator="type")]


class OutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    format: OutputFormat | None = None
    # accepted, no effect (documented): thinking is the template's switch, set by `thinking`
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class Metadata(_Strict):
    user_id: str | None = None


class CountTokensRequest(_Strict):
    """POST /v1/messages/count_tokens: the conversation part of a request."""
    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages."""
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None    # no effect
    inference_geo: str | None = None                                  # no effect
    speed: Literal["standard", "fast"] | None = None                  # no effect


# ---- the answer ----

class Usage(BaseModel):
    input_tokens: int                   # prompt tokens computed (not found in the cache)
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0    # prompt tokens found in the prefix cache


class TextOut(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingOut(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""                 # no signature: this server does not check them


class ToolUseOut(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class MessageOut(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[Union[ThinkingOut, TextOut, ToolUseOut]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None = None
    usage: Usage
