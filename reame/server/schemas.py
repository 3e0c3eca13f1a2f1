"""OpenAI request validation and error shapes.

`parse_chat` and `parse_completion` turn a decoded JSON body into a typed `GenerationRequest` or
raise `APIError` naming the offending parameter, with OpenAI's error body:
`{"error": {"message", "type", "param", "code"}}`. Known fields are checked for type and range;
a field that does not change what the server computes (OpenAI bookkeeping: `user`,
`metadata`, `prompt_cache_key`, ...) is accepted; a field or value that would change the
result and is not implemented (images, `mirostat`, `modalities: ["audio"]`, ...) is refused
with a 400 naming it, never silently ignored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from ..sampling import SamplingParams

MAX_STOP = 16              # stop sequences per request (OpenAI allows 4)
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


# ---- field readers: each returns a value or raises a 400 naming the field ----

def _type_name(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(v), "number")


def _number(body: dict, name: str, default):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(name, f"'{name}' must be a number, not {_type_name(v)}.")
    if not math.isfinite(v):
        raise invalid(name, f"'{name}' must be a finite number.")
    return float(v)


def _integer(body: dict, name: str, default):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(name, f"'{name}' must be an integer, not {_type_name(v)}.")
    return v


def _boolean(body: dict, name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(name, f"'{name}' must be a boolean, not {_type_name(v)}.")
    return v


def _string(body: dict, name: str, default=None):
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, str):
        raise invalid(name, f"'{name}' must be a string, not {_type_name(v)}.")
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise invalid("stop", "'stop' must be a string or an array of strings.")
    if len(v) > MAX_STOP:
        raise invalid("stop", f"'stop' may hold at most {MAX_STOP} sequences.")
    return [s for s in v if s]


def _logit_bias(body: dict) -> dict[int, float]:
    v = body.get("logit_bias")
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise invalid("logit_bias", "'logit_bias' must be an object mapping token ids to biases.")
    out = {}
    for k, b in v.items():
        try:
            tok = int(k)
        except (TypeError, ValueError):
            raise invalid("logit_bias", f"logit_bias key {k!r} is not a token id.") from None
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
            raise invalid("logit_bias", f"logit_bias value for token {k} must be a number.")
        out[tok] = float(b)
    return out


def _sampling(body: dict, n_vocab: int, *, logprobs: bool, top_logprobs: int) -> SamplingParams:
    top_p = _number(body, "top_p", 1.0)
    top_k = _integer(body, "top_k", 0)
    seed = _integer(body, "seed", None)
    p = SamplingParams(
        temperature=_number(body, "temperature", 1.0),
        top_k=0 if top_k == -1 else top_k,            # vLLM spells "off" as -1
        top_p=1e-9 if top_p == 0.0 else top_p,        # OpenAI allows 0: keep only the top token
        min_p=_number(body, "min_p", 0.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0),
        logit_bias=_logit_bias(body),
        seed=None if seed is None else seed % 2**64,  # numpy wants a non-negative seed
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )
    try:
        p.validate(n_vocab)
    except ValueError as e:
        msg = str(e)
        param = msg.split()[0]
        raise invalid(param, msg[0].upper() + msg[1:] + ".") from None
    return p


def _common(body: dict, kind: str, n_vocab: int, max_n: int, *, logprobs: bool,
            top_logprobs: int) -> GenerationRequest:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", f"'model' must be a string, not {_type_name(model)}.")
    n = _integer(body, "n", 1)
    if not 1 <= n <= max_n:
        raise invalid("n", f"'n' must be between 1 and {max_n} on this server.")
    max_tokens = _integer(body, "max_tokens", None)
    if kind == "chat":
        max_tokens = _integer(body, "max_completion_tokens", max_tokens)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None and \
        kind == "chat" else "max_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise invalid(name, f"'{name}' must be at least 1.")
    stream = _boolean(body, "stream", False)
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not stream:
            raise invalid("stream_options",
                          "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
        if not isinstance(opts, dict):
            raise invalid("stream_options", "'stream_options' must be an object.")
        include_usage = _boolean(opts, "include_usage", False)
    from .guided import parse_guided
    _refuse_unknown(body, kind)
    guided = parse_guided(body)
    return GenerationRequest(
        kind=kind, model=model, n=n, max_tokens=max_tokens, stop=_stop(body), stream=stream,
        include_usage=include_usage,
        params=_sampling(body, n_vocab, logprobs=logprobs, top_logprobs=top_logprobs),
        logprobs=logprobs, top_logprobs=top_logprobs,
        ignore_eos=_boolean(body, "ignore_eos", False), guided=guided)


# Every field a generation request may carry; anything else is refused with a 400 naming it,
# never silently ignored. Accepted without effect on the output (checked for type):
# `user`, `safety_identifier`, `metadata`, `store`, `service_tier`, `prompt_cache_key`
# (OpenAI bookkeeping and routing hints: the prefix cache finds shared prefixes by their
# tokens), `verbosity` (GPT-5's; no open model's template reads it), `modalities: ["text"]`,
# `cache_prompt: true` (llama-server: the prefix cache is always on).
_BOTH = {"model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
         "presence_penalty", "frequency_penalty", "logit_bias", "seed", "user", "top_k",
         "min_p", "repetition_penalty", "ignore_eos", "metadata", "store", "service_tier",
         "cache_prompt", "response_format", "json_schema", "grammar", "guided_json",
         "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
         "safety_identifier", "prompt_cache_key"}
KNOWN_FIELDS = {
    "chat": _BOTH | {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "tools",
                     "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "functions",
                     "reasoning_effort", "prediction", "modalities", "verbosity"},
    "completion": _BOTH | {"prompt", "logprobs", "echo", "best_of", "suffix"},
}
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
VERBOSITIES = ("low", "medium", "high")


def _refuse_unknown(body: dict, kind: str) -> None:
    unknown = sorted(k for k in body if k not in KNOWN_FIELDS[kind])
    if unknown:
        raise invalid(unknown[0], f"'{unknown[0]}' is not supported by this server.",
                      "unsupported_parameter")
    if body.get("cache_prompt") is False:
        raise invalid("cache_prompt", "'cache_prompt': false is not supported: the prefix "
                      "cache is always on.", "unsupported_parameter")
    for name in ("user", "safety_identifier", "prompt_cache_key", "service_tier"):
        _string(body, name)
    _boolean(body, "store", False)
    md = body.get("metadata")
    if md is not None and not (isinstance(md, dict) and all(isinstance(v, str)
                                                            for v in md.values())):
        raise invalid("metadata", "'metadata' must be an object of string values.")


def _bookkeeping_chat(body: dict) -> tuple[str | None, str | None]:
    """The chat-only OpenAI fields: `modalities` (text only), `verbosity` (checked, no effect),
    `reasoning_effort` and `prediction` -> (effort, predicted text)."""
    mod = body.get("modalities")
    if mod is not None:
        if not isinstance(mod, list) or not all(isinstance(m, str) for m in mod):
            raise invalid("modalities", "'modalities' must be an array of strings.")
        other = [m for m in mod if m != "text"]
        if other:
            raise invalid("modalities", f"Output modality {other[0]!r} is not supported by "
                          "this server; only 'text' is.", "unsupported_parameter")
    v = _string(body, "verbosity")
    if v is not None and v not in VERBOSITIES:
        raise invalid("verbosity", f"'verbosity' must be one of {list(VERBOSITIES)}.")
    effort = _string(body, "reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise invalid("reasoning_effort", "'reasoning_effort' must be one of "
                      f"{list(REASONING_EFFORTS)}.")
    pred = body.get("prediction")
    text = None
    if pred is not None:
        if not isinstance(pred, dict) or pred.get("type") != "content" or "content" not in pred:
            raise invalid("prediction", "'prediction' must be {\"type\": \"content\", "
                          "\"content\": ...} (Predicted Outputs).")
        text = _content(pred["content"], "prediction.content")
    return effort, text


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


def _messages(body: dict) -> list[dict]:
    msgs = body.get("messages")
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
    logprobs = _boolean(body, "logprobs", False)
    top = _integer(body, "top_logprobs", 0)
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise invalid("top_logprobs", f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}.")
    if top and not logprobs:
        raise invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    messages = _messages(body)
    from .guided import parse_tools
    # null is the default, as OpenAI takes it (`tool_choice: null` with tools is "auto")
    nulls = [k for k in ("tool_choice", "parallel_tool_calls") if k in body and body[k] is None]
    if nulls:
        body = {k: v for k, v in body.items() if k not in nulls}
    tools = parse_tools(body)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise invalid("chat_template_kwargs", "'chat_template_kwargs' must be an object.")
    req = _common(body, "chat", n_vocab, max_n, logprobs=logprobs, top_logprobs=top)
    req.reasoning_effort, req.prediction = _bookkeeping_chat(body)
    if tools is not None and tools.choice != "none" and req.guided is not None:
        raise invalid(req.guided.param, f"'{req.guided.param}' together with tools is not "
                      "supported: use tool_choice 'none', or no tools.",
                      "unsupported_parameter")
    req.messages = messages
    req.chat_template_kwargs = kwargs or {}
    req.tools = tools
    return req


# ---- /v1/completions ----

def _prompts(body: dict, n_vocab: int) -> list:
    p = body.get("prompt")
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
    lp = _integer(body, "logprobs", None)
    if lp is not None and not 0 <= lp <= MAX_TOP_LOGPROBS:
        raise invalid("logprobs", f"'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}.")
    echo = _boolean(body, "echo", False)
    if echo and lp is not None:
        raise invalid("echo", "'echo' together with 'logprobs' (prompt log-probabilities) is not "
                      "supported by this server.", "unsupported_parameter")
    if _string(body, "suffix"):
        raise invalid("suffix", "'suffix' (insertion) is not supported by this server.",
                      "unsupported_parameter")
    prompts = _prompts(body, n_vocab)
    req = _common(body, "completion", n_vocab, max_n, logprobs=lp is not None,
                  top_logprobs=lp or 0)
    best_of = _integer(body, "best_of", None)
    if best_of is not None and best_of != req.n:
        raise invalid("best_of", "'best_of' other than 'n' is not supported by this server.",
                      "unsupported_parameter")
    if len(prompts) * req.n > MAX_CHOICES:
        raise invalid("prompt", f"at most {MAX_CHOICES} choices (prompts x n) per request.")
    if req.max_tokens is None:
        req.max_tokens = 16                         # OpenAI's default for completions
    req.prompts = prompts
    req.echo = echo
    return req


# ---- /tokenize and /detokenize (llama-server's shapes; vLLM's names accepted too) ----

@dataclass
class TokenizeRequest:
    model: str | None
    content: str
    add_special: bool
    parse_special: bool
    with_pieces: bool


def parse_tokenize(body: dict) -> TokenizeRequest:
    """llama-server: {"content", "add_special" (false), "parse_special" (true), "with_pieces"
    (false)}; vLLM: {"prompt", "add_special_tokens" (true)}."""
    model = _string(body, "model")
    if body.get("content") is not None:
        key, add_default = "content", False
    elif body.get("prompt") is not None:
        key, add_default = "prompt", True
    else:
        raise invalid("content", "Missing required parameter: 'content' (a string).",
                      "missing_required_parameter")
    text = _string(body, key)
    add = _boolean(body, "add_special", None)
    if add is None:
        add = _boolean(body, "add_special_tokens", add_default)
    return TokenizeRequest(model=model, content=text, add_special=add,
                           parse_special=_boolean(body, "parse_special", True),
                           with_pieces=_boolean(body, "with_pieces", False))


def parse_detokenize(body: dict, n_vocab: int) -> tuple[str | None, list[int]]:
    """{"tokens": [ids]} -> (model, ids); every id must be in the vocabulary."""
    model = _string(body, "model")
    ids = body.get("tokens")
    if ids is None:
        raise invalid("tokens", "Missing required parameter: 'tokens'.",
                      "missing_required_parameter")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                            for t in ids):
        raise invalid("tokens", "'tokens' must be an array of token ids.")
    if not all(0 <= t < n_vocab for t in ids):
        raise invalid("tokens", f"Token ids in 'tokens' must be in 0..{n_vocab - 1}.")
    return model, ids


# ---- /v1/embeddings ----

MAX_EMBEDDING_INPUTS = 2048        # OpenAI's limit per request


@dataclass
class EmbeddingRequest:
    model: str | None
    inputs: list                    # str or list[int] per input
    encoding_format: str = "float"  # "float" | "base64" (little-endian float32, as OpenAI's)


def parse_embeddings(body: dict, n_vocab: int, n_embd: int) -> EmbeddingRequest:
    """OpenAI's embeddings request: `input` a string, an array of strings, an array of token
    ids or an array of arrays of token ids; `encoding_format` float or base64; `dimensions`
    only the model's own size (no truncation: GGUF does not say a model was trained for it)."""
    model = _string(body, "model")
    x = body.get("input")
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
    fmt = _string(body, "encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise invalid("encoding_format", "'encoding_format' must be 'float' or 'base64'.")
    dims = _integer(body, "dimensions", None)
    if dims is not None and dims != n_embd:
        raise invalid("dimensions", f"This model's embeddings have {n_embd} dimensions; "
                      "other sizes are not supported.", "unsupported_parameter")
    return EmbeddingRequest(model=model, inputs=inputs, encoding_format=fmt)
