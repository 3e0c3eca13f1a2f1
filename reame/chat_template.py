"""Chat templates: the GGUF's `tokenizer.chat_template` (a Jinja2 template written for Hugging
Face transformers) rendered the way transformers renders it.

Environment (transformers' `_compile_jinja_template`): an *immutable sandboxed* Jinja2
environment with `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension
(`{% break %}`, `{% continue %}`), a no-op `{% generation %}` block, the `tojson` filter without
HTML escaping (`ensure_ascii=False`, `indent=`, `separators=`, `sort_keys=`), and the globals
`raise_exception(msg)` and `strftime_now(fmt)`. Variables: `messages`, `add_generation_prompt`,
`bos_token`, `eos_token`, `tools` (None when absent) and any extra keyword the caller passes
(`enable_thinking`, `date_string`, ...).

Messages: `content` may be a string or a list of OpenAI parts `{"type": "text", "text": ...}`;
the text parts are joined with "\\n". Other part types are refused (TemplateError).

System messages: a template that rejects a system message (Gemma's raises) or drops it is
detected once, by rendering a probe conversation; for such a template the system message is
folded into the first user message as "<system>\\n\\n<user>" (what llama.cpp does too).

Tools (OpenAI shapes): `tools` reaches the template as given. Assistant messages with
`tool_calls` (`[{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}]`) are
passed with each `arguments` string decoded into an object when it is a JSON object (templates
write `arguments | tojson`, as transformers users pass them); `tool` messages keep
`tool_call_id` and `content`. What a template cannot render is found once, by probe
conversations (`ChatTemplate.tool_support`), and filled in the way llama.cpp's minja does:
- no tool list (SmolLM3's, Phi-3.5's, ChatML): `tool_format.instructions(tools)` is appended to
  the system message (one is added if there is none);
- no tool calls: the calls are written into the assistant content in the model's format
  (`tool_format.render`, e.g. `<tool_call>...</tool_call>`);
- no tool role: tool results become one user message of `<tool_response>...</tool_response>`;
- one call per message only (Llama 3.x): parallel calls are split into consecutive messages;
- content that must not be null / must be a string: null or "" chosen as the template accepts;
- 9-character call ids (Mistral's templates): ids are mapped to 9 hex characters derived from
  them (the same id always maps to the same one, in calls and results alike).
`tool_format` is the output format the template teaches (reame.toolcalls.detect_format, or
the Hermes fallback).

Fallback when the GGUF has no template: ChatML when the vocabulary has `<|im_start|>` and
`<|im_end|>`, else the plain format

    <system>\\n\\nUser: <user>\\n\\nAssistant: <assistant>\\n\\nUser: ...\\n\\nAssistant:

`--chat-template-file` (override_path) replaces either.

Bounds (issue 29): a render may run at most MAX_LOOP_STEPS loop iterations (every `{% for %}`
body counts one, nested loops each of theirs) and RENDER_SECONDS; `+` and `*` may not build a
string or list over MAX_TEXT items. A template's loops may be driven by client data
(`chat_template_kwargs`, the number of messages), so an exceeded bound is a TemplateError (a
400), not a stalled server. Client values reach the template as a context dict, so a
`chat_template_kwargs` key such as `self` cannot collide with a Python parameter.

Control tokens: `encode` keeps every client string from becoming a control token, not only
message contents: tool names, descriptions and parameter schemas, the calls and arguments of
assistant messages, message names and ids, `chat_template_kwargs` values (see `encode`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Iterable

import jinja2
from jinja2 import nodes, pass_context
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from . import toolcalls
from .errors import TemplateError

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

PLAIN = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{- message['content'] + '\\n\\n' }}"
    "{%- else %}{{- message['role'] | capitalize + ': ' + message['content'] + '\\n\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"
)


class _RaisedByTemplate(Exception):
    pass


class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` (transformers' AssistantTracker): renders the
    body as is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message):
    raise _RaisedByTemplate(str(message))


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


MAX_LOOP_STEPS = 1_000_000     # loop iterations per render (a tool conversation: ~100s)
RENDER_SECONDS = 5.0           # per render, checked at every loop iteration
MAX_TEXT = 1 << 24             # characters (items) a `+` or `*` may build
_TICK = "__reame_loop_step"    # the context name of the per-render budget (not a kwarg: set last)


class _OverBudget(Exception):
    pass


class _Budget:
    """One render's allowance: `step()` runs at the top of every loop body."""

    def __init__(self):
        self.steps = 0
        self.deadline = time.monotonic() + RENDER_SECONDS

    def step(self) -> str:
        self.steps += 1
        if self.steps > MAX_LOOP_STEPS:
            raise _OverBudget(f"its loops ran over {MAX_LOOP_STEPS:,} iterations")
        if not self.steps & 1023 and time.monotonic() > self.deadline:
            raise _OverBudget(f"it ran over {RENDER_SECONDS:g} s")
        return ""


def _sized(x) -> int:
    return len(x) if isinstance(x, (str, list, tuple)) else 0


@pass_context
def _loop_step(context, _):
    return context[_TICK].step()


class _Environment(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with a loop-step budget compiled into every `{% for %}` body and
    `+` / `*` refusing to build strings or lists over MAX_TEXT."""
    intercepted_binops = frozenset(["+", "*"])

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            n = _sized(left) * right if isinstance(right, int) else \
                _sized(right) * left if isinstance(left, int) else 0
        else:
            n = _sized(left) + _sized(right)
        if n > MAX_TEXT:
            raise _OverBudget(f"it built a value of {n:,} items (at most {MAX_TEXT:,})")
        return super().call_binop(context, operator, left, right)

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):     # a filter: called directly, unlike a global
            step = nodes.ExprStmt(nodes.Filter(nodes.Const(None), _TICK, [], [], None, None))
            step.set_lineno(loop.lineno)
            loop.body.insert(0, step)
        return tree


def _environment() -> ImmutableSandboxedEnvironment:
    env = _Environment(trim_blocks=True, lstrip_blocks=True,
                       extensions=[_GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.filters[_TICK] = _loop_step
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def normalize_messages(messages: Iterable[dict]) -> list[dict]:
    """Copies of `messages` with list-of-parts content joined into one string."""
    from .structured import MAX_DEPTH, too_deep
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TemplateError(f"message {i} is not an object")
        if too_deep(m, MAX_DEPTH):          # tool calls are any JSON; the walkers recurse
            raise TemplateError(f"message {i} is nested deeper than {MAX_DEPTH} levels")
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if isinstance(part, str):
                    texts.append(part)
                elif isinstance(part, dict) and part.get("type", "text") == "text":
                    texts.append(str(part.get("text", "")))
                else:
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise TemplateError(f"message {i}: content part of type {kind!r} is not "
                                        "supported (only text parts)")
            m["content"] = "\n".join(texts)
        if "tool_calls" in m and not m["tool_calls"]:
            del m["tool_calls"]         # Llama's templates test `'tool_calls' in message`
        out.append(m)
    return out


@dataclass(frozen=True)
class ToolSupport:
    """What a template renders of a tool conversation (found by probing it)."""
    tools: bool            # the `tools` list appears in the prompt
    calls: bool            # assistant `tool_calls` appear (name and arguments)
    responses: bool        # `tool` messages appear
    parallel: bool         # several calls in one assistant message render
    null_content: bool     # an assistant message with calls may have content None
    short_ids: bool        # call ids must be 9 alphanumeric characters (Mistral)


_P_FN, _P_FN2 = "\ue000probe_fn_a", "\ue000probe_fn_b"
_P_ARG, _P_RES = "\ue000probe_arg", "\ue000probe_result"
_P_LONG_ID, _P_SHORT_ID = "call_0123456789abcdef01234567", "a0b1c2d3e"


def _short_id(call_id) -> str:
    s = str(call_id)
    if len(s) == 9 and s.isalnum():
        return s
    return hashlib.sha256(s.encode()).hexdigest()[:9]


def _arguments_text(args) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _openai_call(call) -> "toolcalls.ToolCall":
    f = call.get("function") if isinstance(call, dict) else None
    f = f if isinstance(f, dict) else {}
    return toolcalls.ToolCall(str(f.get("name", "")), _arguments_text(f.get("arguments", {})),
                              str(call.get("id", "")) if isinstance(call, dict) else "")


def _template_call(call) -> dict:
    """An OpenAI tool call as templates read it: `function.arguments` an object when the
    JSON string holds one."""
    if not isinstance(call, dict):
        return call
    call = dict(call)
    f = call.get("function")
    if isinstance(f, dict):
        f = dict(f)
        args = f.get("arguments")
        if isinstance(args, str):
            try:
                value = json.loads(args)
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                f["arguments"] = value
        call["function"] = f
    return call


# marker characters for client pieces (two not in the prompt are taken): private use areas
_MARKER_CODES = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE))


class _ControlText:
    """The control-token texts of a vocabulary (what parse_special matches, as
    Tokenizer.has_special_text), to find them in client strings."""

    _cache: dict[int, tuple] = {}

    def __init__(self, tok):
        from .tokenizer.vocab import ATTR_CONTROL, ATTR_UNKNOWN
        v = tok.vocab
        texts = sorted({v.tokens[i] for i in v.special_cache
                        if v.tokens[i] and v.attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN)},
                       key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, texts))) if texts else None
        self.heads = {t[:k] for t in texts for k in range(1, len(t))}     # proper prefixes
        self.tails = {t[k:] for t in texts for k in range(1, len(t))}     # proper suffixes
        self.longest = max(map(len, texts), default=0)

    @classmethod
    def of(cls, tok) -> "_ControlText":
        hit = cls._cache.get(id(tok))
        if hit is None or hit[0] is not tok:
            hit = cls._cache[id(tok)] = (tok, cls(tok))
        return hit[1]

    def spans(self, s: str) -> list[tuple[int, int]]:
        """Where `s` spells a control token, or begins (ends) with the end (start) of one:
        merged, in order."""
        if self.pattern is None or not s:
            return []
        found = [m.span() for m in self.pattern.finditer(s)]
        n = len(s)
        for k in range(min(self.longest - 1, n), 0, -1):
            if s[n - k:] in self.heads:
                found.append((n - k, n))
                break
        for k in range(min(self.longest - 1, n), 0, -1):
            if s[:k] in self.tails:
                found.append((0, k))
                break
        found.sort()
        out: list[tuple[int, int]] = []
        for a, b in found:
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def _strings(self, value):
        """Every string in decoded JSON (object keys too), without recursion."""
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict):
                stack.extend(v.keys())
                stack.extend(v.values())
            elif isinstance(v, (list, tuple)):
                stack.extend(v)

    def risky_strings(self, value) -> list[str]:
        return [x for x in self._strings(value) if self.spans(x)]

    def mark(self, value, o: str, c: str):
        """A copy of `value` with each span of each string between `o` and `c`."""
        def wrap(s: str) -> str:
            spans = self.spans(s)
            if not spans:
                return s
            parts, pos = [], 0
            for a, b in spans:
                parts += [s[pos:a], o, s[a:b], c]
                pos = b
            parts.append(s[pos:])
            return "".join(parts)

        def walk(v):
            if isinstance(v, str):
                return wrap(v)
            if isinstance(v, dict):
                return {walk(k): walk(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return type(v)(walk(x) for x in v)
            return v
        return walk(value)


def _split_marked(text: str, o: str, c: str) -> list[tuple[str, bool]] | None:
    """`text` without the markers, as (piece, parse_special) segments: the pieces between `o`
    and `c` are not parsed. None when the markers do not pair up."""
    segments, depth, pos = [], 0, 0
    for m in re.finditer(re.escape(o) + "|" + re.escape(c), text):
        if m.start() > pos:
            segments.append((text[pos:m.start()], depth == 0))
        depth += 1 if m.group(0) == o else -1
        if depth < 0:
            return None
        pos = m.end()
    if depth:
        return None
    segments.append((text[pos:], True))
    return [(t, p) for t, p in segments if t]


class ChatTemplate:
    """A compiled chat template. `render(messages)` -> prompt text; `encode(tok, messages)` ->
    prompt ids with special tokens parsed only in the template's own text."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 origin: str = "gguf"):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin            # "gguf", a file path, "fallback-chatml", "fallback-plain"
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template ({origin}) has a syntax error at line "
                                f"{e.lineno}: {_one_line(e.message or e)}") from None
        self.supports_system_role = self._probe_system_role()

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any],
                      override_path: str | None = None) -> "ChatTemplate":
        tokens = metadata.get("tokenizer.ggml.tokens") or []

        def token_text(key: str) -> str:
            tid = metadata.get(key)
            if tid is None or not 0 <= int(tid) < len(tokens):
                return ""
            return tokens[int(tid)]

        bos = token_text("tokenizer.ggml.bos_token_id")
        eos = token_text("tokenizer.ggml.eos_token_id")
        if override_path:
            try:
                with open(override_path, encoding="utf-8") as f:
                    source = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise TemplateError(f"cannot read chat template file {override_path}: "
                                    f"{getattr(e, 'strerror', None) or e}") from None
            return cls(source, bos, eos, origin=str(override_path))
        source = metadata.get("tokenizer.chat_template")
        if isinstance(source, str) and source.strip():
            return cls(source, bos, eos, origin="gguf")
        if "<|im_start|>" in tokens and "<|im_end|>" in tokens:
            return cls(CHATML, bos, eos, origin="fallback-chatml")
        return cls(PLAIN, bos, eos, origin="fallback-plain")

    @property
    def is_fallback(self) -> bool:
        return self.origin.startswith("fallback")

    # -- rendering ------------------------------------------------------------------------

    def _render_raw(self, messages: list[dict], add_generation_prompt: bool, tools, extra) -> str:
        ctx = dict(extra)
        ctx.update(messages=messages, add_generation_prompt=add_generation_prompt,
                   bos_token=self.bos_token, eos_token=self.eos_token, tools=tools)
        ctx[_TICK] = _Budget()
        try:
            return self._template.render(ctx)           # a dict: any key is only a variable
        except _OverBudget as e:
            raise TemplateError(f"chat template stopped: {e}") from None
        except _RaisedByTemplate as e:
            raise TemplateError(f"chat template rejected the conversation: {_one_line(e)}") \
                from None
        except TemplateError:
            raise
        except Exception as e:          # UndefinedError, SecurityError, TypeError, ...
            raise TemplateError(f"chat template failed: {type(e).__name__}: {_one_line(e)}") \
                from None

    def _probe_system_role(self) -> bool:
        probe = [{"role": "system", "content": "\ue000sys-probe\ue000"},
                 {"role": "user", "content": "user-probe"}]
        try:
            return "\ue000sys-probe\ue000" in self._render_raw(probe, True, None, {})
        except TemplateError:
            return False

    def render(self, messages: list[dict], /, add_generation_prompt: bool = True, tools=None,
               **extra) -> str:
        """The prompt text. Raises TemplateError (one line) when the template fails."""
        return self._render_raw(self._prepare(messages, tools), add_generation_prompt, tools,
                                extra)

    # -- tools ----------------------------------------------------------------------------

    @cached_property
    def tool_format(self) -> "toolcalls.ToolFormat":
        """The tool-call format of this template's model (the Hermes fallback when the
        template has none)."""
        return toolcalls.detect_format(self.source) or toolcalls.HERMES_FALLBACK

    def _probe(self, messages, tools=None) -> str | None:
        try:
            return self._render_raw(self._fold_system(normalize_messages(messages)), True,
                                    tools, {})
        except TemplateError:
            return None

    @cached_property
    def tool_support(self) -> ToolSupport:
        """What this template renders of tools, calls and results, found once by rendering
        probe conversations (a few milliseconds, on first use)."""
        tool = {"type": "function", "function": {
            "name": _P_FN, "description": "probe",
            "parameters": {"type": "object", "properties": {"k": {"type": "string"}}}}}
        out = self._probe([{"role": "user", "content": "u"}], [tool])
        tools_ok = out is not None and _P_FN in out

        def conversation(content, call_id, names):
            calls = [{"id": f"{call_id[:-1]}{k}", "type": "function",
                      "function": {"name": n, "arguments": {"k": _P_ARG}}}
                     for k, n in enumerate(names)]
            results = [{"role": "tool", "tool_call_id": c["id"], "content": _P_RES}
                       for c in calls]
            return [{"role": "user", "content": "u"},
                    {"role": "assistant", "content": content, "tool_calls": calls}, *results]

        rendered = None                 # (out, content, id) of the first variant that renders
        chosen = None                   # ... of the first that shows the call
        for content in (None, ""):
            for call_id in (_P_LONG_ID, _P_SHORT_ID):
                out = self._probe(conversation(content, call_id, [_P_FN]))
                if out is None:
                    continue
                rendered = rendered or (out, content, call_id)
                if _P_FN in out and _P_ARG in out:
                    chosen = chosen or (out, content, call_id)
        calls_ok = chosen is not None
        out, content, call_id = chosen or rendered or ("", "", _P_LONG_ID)
        parallel = False
        if calls_ok:
            two = self._probe(conversation(content, call_id, [_P_FN, _P_FN2]))
            parallel = two is not None and _P_FN in two and _P_FN2 in two
        return ToolSupport(tools=tools_ok, calls=calls_ok, responses=_P_RES in out,
                           parallel=parallel, null_content=content is None,
                           short_ids=call_id == _P_SHORT_ID)

    def _prepare_tools(self, msgs: list[dict], tools) -> list[dict]:
        caps, fmt = self.tool_support, self.tool_format
        empty = None if caps.null_content else ""
        out: list[dict] = []
        responses_at = -1               # index in `out` of a user message of tool responses
        for m in msgs:
            role = m.get("role")
            if role == "assistant" and m.get("tool_calls"):
                calls = [_template_call(c) for c in m["tool_calls"]]
                if caps.short_ids:
                    calls = [dict(c, id=_short_id(c["id"])) if isinstance(c, dict) and
                             "id" in c else c for c in calls]
                content = m.get("content")
                if not caps.calls:
                    text = fmt.render([_openai_call(c) for c in m["tool_calls"]])
                    m = {k: v for k, v in m.items() if k != "tool_calls"}
                    m["content"] = (content + "\n" if content else "") + text
                    out.append(m)
                    continue
                content = content or empty
                if caps.parallel or len(calls) == 1:
                    out.append(dict(m, content=content, tool_calls=calls))
                else:
                    for k, c in enumerate(calls):
                        out.append(dict(m, content=content if k == 0 else empty,
                                        tool_calls=[c]))
                continue
            if role == "tool":
                if caps.short_ids and m.get("tool_call_id") is not None:
                    m = dict(m, tool_call_id=_short_id(m["tool_call_id"]))
                if not caps.responses:
                    text = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
                    if responses_at == len(out) - 1 and out:
                        out[-1]["content"] += "\n" + text
                    else:
                        out.append({"role": "user", "content": text})
                        responses_at = len(out) - 1
                    continue
            out.append(m)
        if tools and not caps.tools:
            text = fmt.instructions(tools)
            if out and out[0].get("role") == "system":
                out[0] = dict(out[0], content=(out[0].get("content") or "") + "\n\n" + text)
            else:
                out.insert(0, {"role": "system", "content": text})
        return out

    def _prepare(self, messages, tools=None) -> list[dict]:
        msgs = normalize_messages(messages)
        if tools or any(m.get("tool_calls") or m.get("role") == "tool" for m in msgs):
            msgs = self._prepare_tools(msgs, tools)
        return self._fold_system(msgs)

    def _fold_system(self, msgs: list[dict]) -> list[dict]:
        if not self.supports_system_role and msgs and msgs[0].get("role") == "system":
            system = msgs.pop(0).get("content") or ""
            for m in msgs:
                if m.get("role") == "user":
                    m["content"] = system + "\n\n" + (m.get("content") or "")
                    break
            else:
                msgs.insert(0, {"role": "user", "content": system})
        return msgs

    # -- tokenizing -----------------------------------------------------------------------

    def encode(self, tok, messages: list[dict], limit: int | None = None, /,
               add_generation_prompt: bool = True, tools=None, **extra) -> list[int]:
        """Prompt token ids for `messages`: the template's text has its control tokens parsed,
        no client string does (a user who types `<|im_end|>` gets those characters, not the
        control token) - message contents, names and ids, tool calls and their arguments, the
        tools (names, descriptions, parameter schemas: keys too) and `extra`
        (chat_template_kwargs). BOS is added when the vocabulary asks for it and the template
        did not write it already (no double BOS).

        When a client string spells a control token (or, at either end, part of one: two
        strings side by side must not make one either), the template is rendered once more
        with each such piece between two marker characters that occur nowhere in the prompt;
        the marked pieces are tokenized as text. When the markers do not come back so that
        removing them gives the prompt (a template that cuts or counts such a string), the
        request is refused (TemplateError) rather than parsed.

        `limit` (positional: any keyword is the template's): tokenizing stops with TokenLimit
        once the prompt is known to have more tokens (Tokenizer.encode)."""
        msgs = self._prepare(messages, tools)
        text = self._render_raw(msgs, add_generation_prompt, tools, extra)
        segments = self._segments(tok, text, messages, add_generation_prompt, tools, extra)
        ids = tok.encode_segments(segments, add_special=False, limit=limit)
        if tok.add_bos and tok.bos_id is not None and (not ids or ids[0] != tok.bos_id):
            ids.insert(0, tok.bos_id)
        return ids

    def _segments(self, tok, text, messages, add_generation_prompt, tools, extra):
        guard = _ControlText.of(tok)
        risky = guard.risky_strings((messages, tools, extra))
        if not risky:
            return [(text, True)]
        used = set(text)
        free = (ch for ch in map(chr, itertools.chain(*_MARKER_CODES)) if ch not in used)
        o, c = next(free), next(free)
        try:
            mm, mt, mx = guard.mark((messages, tools, extra), o, c)
            mtext = self._render_raw(self._prepare(mm, mt), add_generation_prompt, mt, mx)
        except (TemplateError, RecursionError):
            mtext = None
        segments = _split_marked(mtext, o, c) if mtext is not None else None
        if segments is None or "".join(t for t, _ in segments) != text:
            raise TemplateError(f"a request field spells a control token ({_one_line(risky[0], 60)})"
                                " and the chat template transforms it, so it cannot be kept "
                                "apart from the template's own control tokens")
        return segments

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r}, system_role={self.supports_system_role})"
