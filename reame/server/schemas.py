"""OpenAI request validation and error shapes.

`parse_chat` and `parse_completion` turn a decoded JSON body into a typed `GenerationRequest` or
raise `APIError` naming the offending parameter, with OpenAI's error body:
`{"error": {"message", "type", "param", "code"}}`. Each endpoint's fields are declared once, as
a pydantic model (`ChatBody`, `CompletionBody`; `TokenizeBody`, `DetokenizeBody`,
`EmbeddingsBody`): its type and default, strict, null meaning the default. A field that does not
change what the server computes (OpenAI bookkeeping: `user`, `metadata`, `prompt_cache_key`,
...) is declared and so accepted; any field not declared (`mirostat`, `audio`, ...) is refused
with a 400 naming it, never silently ignored, and so is a declared value that would change the
result and is not implemented (images, `modalities: ["audio"]`, ...). The parts whose checks
are more than a type (messages and their content parts, prompts as strings or token ids, the
output constraints and tools of guided.py) stay hand-written: their errors name the element
(`messages[2].content[0].type`) and carry their own codes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..sampling import SamplingParams

MAX_STOP = 16              # stop sequences per request (OpenAI allows 4)
MAX_STOP_CHARS = 256       # characters per stop sequence (each token compares its prefixes)
MAX_CHOICES = 128          # prompts x n per request (OpenAI's limit for n)
MAX_TOP_LOGPROBS = 20


class APIError(Exception):
    """An error answered with an HTTP status and OpenAI's error body."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code, self.headers = param, code, headers or {}

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid(param: str | None, message: str, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


# ---- the typed request ----

@dataclass
class GenerationRequest:
    kind: str                                   # "chat" | "completion"
    model: str | None
    prompts: list = field(default_factory=list)     # completion: str or list[int] per prompt
    messages: list[dict] = field(default_factory=list)  # chat: normalised for the template
    n: int = 1
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    params: SamplingParams = field(default_factory=SamplingParams)   # seed = seed of choice 0
    logprobs: bool = False
    top_logprobs: int = 0
    echo: bool = False                          # completion: prepend the prompt to the text
    ignore_eos: bool = False                    # extension: generate past end-of-generation
    chat_template_kwargs: dict = field(default_factory=dict)
    guided: object = None                       # guided.GuidedSpec: an output constraint
    tools: object = None                        # guided.ToolSpec (chat)
    reasoning_effort: str | None = None         # chat: OpenAI's, onto the template's switch
    prediction: str | None = None               # chat: Predicted Outputs' text (drafts)


# ---- JSON body ----

def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> dict:
    """The request body as a JSON object, or a 400."""
    if not raw:
        raise invalid(None, "The request body is empty; expected a JSON object.")
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise invalid(None, f"The request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise invalid(None, "The request body must be a JSON object.")
    if b"\\ud" in raw.lower() and _has_surrogate(body):
        raise invalid(None, "The request body contains invalid Unicode: an unpaired surrogate "
                      "(\\ud800-\\udfff) escape.")
    return body


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(x) -> bool:
    """Whether any string in a decoded JSON value holds a lone surrogate (from a \\uXXXX escape:
    raw UTF-8 cannot carry one). Such strings cannot be encoded back to UTF-8."""
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


# ---- the request bodies, declared ----
#
# Every field a generation request may carry is declared (`extra` forbidden): any other is a
# 400 naming it, never silently ignored. Types are strict (no "2" for 2, no true for 1; 2.0 is
# 2) and a JSON null is the field's default, as OpenAI takes it. Ranges and the checks that
# join fields are made after, by hand; the sampling ranges by SamplingParams.validate.

def _integral(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v


Int = Annotated[int, BeforeValidator(_integral)]
Num = Annotated[float, Field(allow_inf_nan=False)]          # an integer is a number too


def _shape(what: str):
    """A field whose 400 says what it must be: "'stop' must be <what>."."""
    return Field(None, description=what)


class _Generation(BaseModel):
    """The fields of both /v1/chat/completions and /v1/completions."""
    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = None
    n: Int = 1
    max_tokens: Int | None = None
    stream: bool = False
    stream_options: Any = None                  # checked with `stream` (_common)
    stop: str | list[str] | None = _shape("a string or an array of strings")
    ignore_eos: bool = False                    # extension: generate past end-of-generation
    temperature: Num = 1.0
    top_p: Num = 1.0
    top_k: Int = 0
    min_p: Num = 0.0
    repetition_penalty: Num = 1.0
    presence_penalty: Num = 0.0
    frequency_penalty: Num = 0.0
    logit_bias: dict[str, Num] | None = _shape("an object mapping token ids to numbers")
    seed: Int | None = None
    # accepted without effect on the output: OpenAI bookkeeping and routing hints (the prefix
    # cache finds shared prefixes by their tokens); `cache_prompt: true` (llama-server's: the
    # prefix cache is always on)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = _shape("an object of string values")
    cache_prompt: bool = True
    # output constraints (guided.parse_guided)
    response_format: Any = None
    json_schema: Any = None
    grammar: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None


class ChatBody(_Generation):
    messages: Any = None                        # normalised for the template (_messages)
    max_completion_tokens: Int | None = None
    logprobs: bool = False
    top_logprobs: Int = 0
    tools: Any = None                           # these four: guided.parse_tools
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    functions: Any = None
    chat_template_kwargs: dict[str, Any] | None = _shape("an object")
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # GPT-5's; no template reads it
    modalities: list[str] | None = _shape("an array of strings")   # only "text" (parse_chat)
    prediction: Any = None                      # Predicted Outputs (parse_chat)


class CompletionBody(_Generation):
    prompt: Any = None                          # strings or token ids (_prompts)
    logprobs: Int | None = None
    echo: bool = False
    best_of: Int | None = None
    suffix: str | None = None


def _type_name(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(v), "number")


_EXPECTED = {"int_type": "an integer", "float_type": "a number", "bool_type": "a boolean",
             "string_type": "a string", "dict_type": "an object", "list_type": "an array"}


def _present(body: dict, model: type[BaseModel]) -> dict:
    """The body without its null declared fields (null is the default)."""
    return {k: v for k, v in body.items() if v is not None or k not in model.model_fields}


def _validate(model: type[BaseModel], body: dict):
    """`model` validated from a body (nulls already dropped), or the 400 naming the field by
    its top-level name (OpenAI's `param`)."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
    name, kind = err["loc"][0], err["type"]
    if kind == "extra_forbidden":
        raise invalid(name, f"'{name}' is not supported by this server.",
                      "unsupported_parameter")
    what = model.model_fields[name].description
    if what:
        message = f"'{name}' must be {what}."
    elif kind == "literal_error":
        message = f"'{name}' must be {err['ctx']['expected']}."
    elif kind == "finite_number" or kind == "float_type" and type(err["input"]) is int:
        # an int taken as a number fails only beyond the float range (10**400)
        message = f"'{name}' must be a finite number."
    elif kind in _EXPECTED:
        message = f"'{name}' must be {_EXPECTED[kind]}, not {_type_name(err['input'])}."
    else:
        message = f"Invalid value for '{name}': {err['msg']}."
    raise invalid(name, message)


def _stop(v) -> list[str]:
    v = [v] if isinstance(v, str) else v or []
    if len(v) > MAX_STOP:
        raise invalid("stop", f"'stop' may hold at most {MAX_STOP} sequences.")
    if any(len(s) > MAX_STOP_CHARS for s in v):
        raise invalid("stop", f"A stop sequence may be at most {MAX_STOP_CHARS} characters.")
    return [s for s in v if s]


def _sampling(b: _Generation, n_vocab: int, *, logprobs: bool,
              top_logprobs: int) -> SamplingParams:
    bias = {}
    for k, v in (b.logit_bias or {}).items():
        try:
            bias[int(k)] = v
        except ValueError:
            raise invalid("logit_bias", f"logit_bias key {k!r} is not a token id.") from None
    p = SamplingParams(
        temperature=b.temperature,
        top_k=0 if b.top_k == -1 else b.top_k,                # vLLM spells "off" as -1
        top_p=1e-9 if b.top_p == 0.0 else b.top_p,      # OpenAI allows 0: keep only the top token
        min_p=b.min_p, repetition_penalty=b.repetition_penalty,
        presence_penalty=b.presence_penalty, frequency_penalty=b.frequency_penalty,
        logit_bias=bias,
        seed=None if b.seed is None else b.seed % 2**64,   # numpy wants a non-negative seed
        logprobs=logprobs, top_logprobs=top_logprobs)
    try:
        p.validate(n_vocab)
    except ValueError as e:
        msg = str(e)
        param = msg.split()[0]
        raise invalid(param, msg[0].upper() + msg[1:] + ".") from None
    return p


def _common(b: _Generation, body: dict, n_vocab: int, max_n: int, *, logprobs: bool,
            top_logprobs: int) -> GenerationRequest:
    """The request's fields both endpoints share; `body` without nulls (for parse_guided)."""
    if not 1 <= b.n <= max_n:
        raise invalid("n", f"'n' must be between 1 and {max_n} on this server.")
    max_tokens, name = b.max_tokens, "max_tokens"
    if getattr(b, "max_completion_tokens", None) is not None:
        max_tokens, name = b.max_completion_tokens, "max_completion_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise invalid(name, f"'{name}' must be at least 1.")
    opts, include_usage = b.stream_options, False
    if opts is not None:
        if not b.stream:
            raise invalid("stream_options",
                          "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
        if not isinstance(opts, dict):
            raise invalid("stream_options", "'stream_options' must be an object.")
        include_usage = opts.get("include_usage")
        if include_usage is None:
            include_usage = False
        elif not isinstance(include_usage, bool):
            raise invalid("include_usage", "'include_usage' must be a boolean, not "
                          f"{_type_name(include_usage)}.")
    if not b.cache_prompt:
        raise invalid("cache_prompt", "'cache_prompt': false is not supported: the prefix "
                      "cache is always on.", "unsupported_parameter")
    from .guided import parse_guided
    return GenerationRequest(
        kind="chat" if isinstance(b, ChatBody) else "completion", model=b.model, n=b.n,
        max_tokens=max_tokens, stop=_stop(b.stop), stream=b.stream, include_usage=include_usage,
        params=_sampling(b, n_vocab, logprobs=logprobs, top_logprobs=top_logprobs),
        logprobs=logprobs, top_logprobs=top_logprobs, ignore_eos=b.ignore_eos,
        guided=parse_guided(body))


# ---- /v1/chat/completions ----

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def _content(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(where, f"'{where}' must be a string or an array of content parts.")
    texts = []
    for j, part in enumerate(content):
        pw = f"{where}[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(pw, f"'{pw}' must be a content part object with a 'type'.")
        if part["type"] in ("text", "refusal"):
            key = part["type"]
            if not isinstance(part.get(key), str):
                raise invalid(f"{pw}.{key}", f"'{pw}.{key}' must be a string.")
            texts.append(part[key])
        else:
            raise invalid(f"{pw}.type", f"Content parts of type {part['type']!r} are not "
                          "supported by this model; only 'text' is.", "unsupported_content")
    return "\n".join(texts)


def _messages(msgs) -> list[dict]:
    if msgs is None:
        raise invalid("messages", "Missing required parameter: 'messages'.", "missing_required_parameter")
    if not isinstance(msgs, list):
        raise invalid("messages", f"'messages' must be an array, not {_type_name(msgs)}.")
    if not msgs:
        raise invalid("messages", "'messages' must contain at least one message.", "empty_array")
    out = []
    for i, m in enumerate(msgs):
        w = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(w, f"'{w}' must be an object.")
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"{w}.role", f"'{w}.role' must be one of {sorted(ROLES)}.")
        content = m.get("content")
        if content is None:
            if role != "assistant":
                raise invalid(f"{w}.content", f"'{w}.content' is required for role {role!r}.")
            content = ""
        msg = {"role": "system" if role == "developer" else role,
               "content": _content(content, f"{w}.content")}
        for key in ("name", "tool_call_id", "tool_calls"):      # templates may render these
            if m.get(key) is not None:
                msg[key] = m[key]
        out.append(msg)
    return out


def parse_chat(body: dict, n_vocab: int, max_n: int) -> GenerationRequest:
    body = _present(body, ChatBody)
    b = _validate(ChatBody, body)
    if not 0 <= b.top_logprobs <= MAX_TOP_LOGPROBS:
        raise invalid("top_logprobs", f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}.")
    if b.top_logprobs and not b.logprobs:
        raise invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    messages = _messages(b.messages)
    from .guided import parse_tools
    tools = parse_tools(body)
    req = _common(b, body, n_vocab, max_n, logprobs=b.logprobs, top_logprobs=b.top_logprobs)
    other = [m for m in b.modalities or [] if m != "text"]
    if other:
        raise invalid("modalities", f"Output modality {other[0]!r} is not supported by this "
                      "server; only 'text' is.", "unsupported_parameter")
    pred = b.prediction
    if pred is not None:
        if not isinstance(pred, dict) or pred.get("type") != "content" or "content" not in pred:
            raise invalid("prediction", "'prediction' must be {\"type\": \"content\", "
                          "\"content\": ...} (Predicted Outputs).")
        req.prediction = _content(pred["content"], "prediction.content")
    if tools is not None and tools.choice != "none" and req.guided is not None:
        raise invalid(req.guided.param, f"'{req.guided.param}' together with tools is not "
                      "supported: use tool_choice 'none', or no tools.",
                      "unsupported_parameter")
    req.messages = messages
    req.chat_template_kwargs = _template_kwargs(b.chat_template_kwargs or {})
    req.tools = tools
    req.reasoning_effort = b.reasoning_effort
    return req


def _template_kwargs(kw: dict) -> dict:
    """`chat_template_kwargs`: template variables, so each key an identifier (a template can
    name no other); values any JSON a template can read, at most structured.MAX_DEPTH deep.
    They reach the template as a context dict (a key such as `self` collides with nothing)."""
    from ..structured import MAX_DEPTH, too_deep
    for k, v in kw.items():
        if not k.isidentifier():
            raise invalid("chat_template_kwargs", f"'chat_template_kwargs' keys must be "
                          f"identifiers (template variable names), not {k[:40]!r}.")
        if too_deep(v):
            raise invalid(f"chat_template_kwargs.{k}", f"'chat_template_kwargs.{k}' is nested "
                          f"deeper than {MAX_DEPTH} levels.")
    return kw


# ---- /v1/completions ----

def _prompts(p, n_vocab: int) -> list:
    if p is None:
        raise invalid("prompt", "Missing required parameter: 'prompt'.", "missing_required_parameter")
    if isinstance(p, str):
        return [p]
    if isinstance(p, list) and p:
        if all(isinstance(x, str) for x in p):
            return list(p)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            p = [p]                                 # one prompt of token ids
        if all(isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool)
                                                 for t in x) for x in p):
            for x in p:
                if not all(0 <= t < n_vocab for t in x):
                    raise invalid("prompt", f"Token ids in 'prompt' must be in 0..{n_vocab - 1}.")
            return [list(x) for x in p]
    if isinstance(p, list) and not p:
        raise invalid("prompt", "'prompt' must not be empty.", "empty_array")
    raise invalid("prompt", "'prompt' must be a string, an array of strings, an array of token "
                  "ids or an array of arrays of token ids.")


def parse_completion(body: dict, n_vocab: int, max_n: int) -> GenerationRequest:
    body = _present(body, CompletionBody)
    b = _validate(CompletionBody, body)
    lp = b.logprobs
    if lp is not None and not 0 <= lp <= MAX_TOP_LOGPROBS:
        raise invalid("logprobs", f"'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}.")
    if b.echo and lp is not None:
        raise invalid("echo", "'echo' together with 'logprobs' (prompt log-probabilities) is not "
                      "supported by this server.", "unsupported_parameter")
    if b.suffix:
        raise invalid("suffix", "'suffix' (insertion) is not supported by this server.",
                      "unsupported_parameter")
    prompts = _prompts(b.prompt, n_vocab)
    req = _common(b, body, n_vocab, max_n, logprobs=lp is not None, top_logprobs=lp or 0)
    if b.best_of is not None and b.best_of != req.n:
        raise invalid("best_of", "'best_of' other than 'n' is not supported by this server.",
                      "unsupported_parameter")
    if len(prompts) * req.n > MAX_CHOICES:
        raise invalid("prompt", f"at most {MAX_CHOICES} choices (prompts x n) per request.")
    if req.max_tokens is None:
        req.max_tokens = 16                         # OpenAI's default for completions
    req.prompts = prompts
    req.echo = b.echo
    return req


# ---- /tokenize and /detokenize (llama-server's shapes; vLLM's names accepted too) ----

@dataclass
class TokenizeRequest:
    model: str | None
    content: str
    add_special: bool
    parse_special: bool
    with_pieces: bool


class _Lenient(BaseModel):
    """A request of these endpoints: strict types; other fields ignored, as they always were."""
    model_config = ConfigDict(strict=True)
    model: str | None = None


class TokenizeBody(_Lenient):
    content: str | None = None                  # llama-server's
    prompt: str | None = None                   # vLLM's
    add_special: bool | None = None             # llama-server's (default false)
    add_special_tokens: bool | None = None      # vLLM's (default true)
    parse_special: bool = True
    with_pieces: bool = False


def parse_tokenize(body: dict) -> TokenizeRequest:
    """llama-server: {"content", "add_special" (false), "parse_special" (true), "with_pieces"
    (false)}; vLLM: {"prompt", "add_special_tokens" (true)}."""
    b = _validate(TokenizeBody, _present(body, TokenizeBody))
    text = b.content if b.content is not None else b.prompt
    if text is None:
        raise invalid("content", "Missing required parameter: 'content' (a string).",
                      "missing_required_parameter")
    add = b.add_special if b.add_special is not None else b.add_special_tokens
    return TokenizeRequest(model=b.model, content=text,
                           add_special=b.content is None if add is None else add,
                           parse_special=b.parse_special, with_pieces=b.with_pieces)


class DetokenizeBody(_Lenient):
    tokens: list[int] | None = _shape("an array of token ids")


def parse_detokenize(body: dict, n_vocab: int) -> tuple[str | None, list[int]]:
    """{"tokens": [ids]} -> (model, ids); every id must be in the vocabulary."""
    b = _validate(DetokenizeBody, _present(body, DetokenizeBody))
    if b.tokens is None:
        raise invalid("tokens", "Missing required parameter: 'tokens'.",
                      "missing_required_parameter")
    if not all(0 <= t < n_vocab for t in b.tokens):
        raise invalid("tokens", f"Token ids in 'tokens' must be in 0..{n_vocab - 1}.")
    return b.model, b.tokens


# ---- /v1/embeddings ----

MAX_EMBEDDING_INPUTS = 2048        # OpenAI's limit per request


@dataclass
class EmbeddingRequest:
    model: str | None
    inputs: list                    # str or list[int] per input
    encoding_format: str = "float"  # "float" | "base64" (little-endian float32, as OpenAI's)


class EmbeddingsBody(_Lenient):
    input: Any = None                           # strings or token ids (parse_embeddings)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Int | None = None


def parse_embeddings(body: dict, n_vocab: int, n_embd: int) -> EmbeddingRequest:
    """OpenAI's embeddings request: `input` a string, an array of strings, an array of token
    ids or an array of arrays of token ids; `encoding_format` float or base64; `dimensions`
    only the model's own size (no truncation: GGUF does not say a model was trained for it)."""
    b = _validate(EmbeddingsBody, _present(body, EmbeddingsBody))
    x = b.input
    if x is None:
        raise invalid("input", "Missing required parameter: 'input'.",
                      "missing_required_parameter")
    if isinstance(x, str):
        inputs = [x]
    elif isinstance(x, list) and x and all(isinstance(i, str) for i in x):
        inputs = list(x)
    elif isinstance(x, list) and x and all(isinstance(i, int) and not isinstance(i, bool)
                                           for i in x):
        inputs = [list(x)]
    elif isinstance(x, list) and x and all(
            isinstance(i, list) and i and all(isinstance(t, int) and not isinstance(t, bool)
                                              for t in i) for i in x):
        inputs = [list(i) for i in x]
    else:
        raise invalid("input", "'input' must be a non-empty string, an array of strings, an "
                      "array of token ids or an array of arrays of token ids.")
    for i, v in enumerate(inputs):
        if isinstance(v, str) and not v:
            raise invalid("input", f"input[{i}] is empty.")
        if isinstance(v, list) and not all(0 <= t < n_vocab for t in v):
            raise invalid("input", f"Token ids in 'input' must be in 0..{n_vocab - 1}.")
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise invalid("input", f"at most {MAX_EMBEDDING_INPUTS} inputs per request.")
    if b.dimensions is not None and b.dimensions != n_embd:
        raise invalid("dimensions", f"This model's embeddings have {n_embd} dimensions; "
                      "other sizes are not supported.", "unsupported_parameter")
    return EmbeddingRequest(model=b.model, inputs=inputs, encoding_format=b.encoding_format)
