"""Tool calls in model output: one format per model family, found from the chat template.

Formats (what the model prints; `ToolFormat.render` writes the same text):

- `hermes` (Qwen2.5, Qwen3, Hermes, SmolLM3; also the fallback for templates that know no
  format of their own), each call in tags, several calls one after the other:

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

- `llama3` (Llama 3.1/3.2/3.3): bare JSON at the start of the reply, or after `<|python_tag|>`;
  several calls separated by `;`:

      {"name": "get_weather", "parameters": {"city": "Paris"}}

- `mistral` (Mistral Nemo, Mistral 7B v0.3, Small up to 3.1): a JSON list after the control
  token (the model may add a 9-character "id"):

      [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

- `mistral_args` (templates with `[ARGS]`: Mistral Small 3.2, Magistral, Devstral), one
  `[TOOL_CALLS]` per call:

      [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

- `granite` (IBM Granite 3.x): `<|tool_call|>[{"name": "get_weather", "arguments": {...}}]`
- `deepseek` (DeepSeek V3/R1 and their distills' templates):

      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
      ```json
      {"city": "Paris"}
      ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

`detect_format(template_source)` picks one. Each format can `parse` a whole output into
content and `ToolCall`s, `stream()` a parser that turns text deltas into OpenAI chat-completion
deltas, `grammar(...)` a Lark grammar (llguidance) that forces a call for `tool_choice`
"required" or a named function, and `instructions(tools)` a system-prompt text for templates
that cannot render tools themselves.

Parsing rules (the same for whole outputs and streams, whatever the chunking):

- a call is recognised once the model has written its envelope up to the opening `{` of the
  arguments, name first (`{"name": "f", "arguments": {`); from there it is a tool call and its
  arguments are streamed as written. The arguments are the model's own JSON text, so deltas
  concatenate to the final `arguments`. If they later turn out not to be valid JSON (a
  truncated output, a model error) the call keeps that text, as OpenAI's own calls may;
  a missing closing brace of the envelope is forgiven;
- text that never reaches that point (a marker followed by anything else, JSON that is not a
  call, a truncated marker) stays content, marker included; parsing never raises;
- but an output cut by max_tokens (`finish(truncated=True)`, finish_reason "length") keeps no
  tool-call markup: a section that had not reached its first call (`<tool_call>\n{"name`), or
  a marker cut in the middle (`<tool_`), is dropped, and a call whose arguments were cut is
  dropped from `calls` (its streamed deltas have been sent; a whole response never shows it);
- whitespace next to a tool-call section is dropped; other text is returned unchanged;
- the markers of some formats are control tokens (`[TOOL_CALLS]`, `<|python_tag|>`,
  `<|tool_call|>`, DeepSeek's): the detokenizer must keep `ToolFormat.markers` in the text.

Use (a chat request with `tools`; `template` a reame.chat_template.ChatTemplate):

    fmt = template.tool_format                        # detect_format(...) or HERMES_FALLBACK
    prompt = template.render(messages, tools=tools)   # tools, calls and results as it can
    g = fmt.grammar(tools, tool_choice, parallel_tool_calls,
                    special_tokens=fmt.special_token_ids(tok), thinking=...)  # None for auto
    s = fmt.stream()                 # per choice; feed() the content deltas, then finish()
    content, calls = fmt.parse(text) # non-streamed
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Mapping

import regex

# JSON written as json.dumps writes it (and as templates render arguments): no free
# whitespace, ", " and ": " separators. A tool schema's own "x-guidance" options win.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ToolChoiceError(ValueError):
    """A tool_choice that names no tool of the request, or tools that are not usable."""


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    name: str
    arguments: str                      # JSON text, as the model wrote it
    id: str = field(default_factory=new_call_id)

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


_STR = r'"((?:[^"\\\n]|\\.)*)"'                      # a JSON string, captured without quotes
_HEAD = (r'\s*\{\s*"name"\s*:\s*' + _STR +
         r'\s*,\s*"(?:arguments|parameters)"\s*:\s*\{')


@dataclass(frozen=True)
class ToolFormat:
    """One family's tool-call syntax. A tool-call *section* opens at a trigger marker (or, for
    llama3, at a `{` that starts the output), holds one or more calls, and closes."""
    name: str
    triggers: tuple[str, ...]           # markers that open a section anywhere in the text
    head: str                           # regex up to and including the arguments' `{`; group 1: name
    open: str = ""                      # regex between the trigger and the first call
    envelope: bool = True               # the arguments sit inside a JSON object to close
    tail: str = ""                      # regex after the call (after its envelope)
    next: str | None = None             # regex separating calls of one section
    close: str = ""                     # regex ending the section
    ends: tuple[str, ...] = ()          # markers that end an unterminated call
    at_start: bool = False              # a section may open with a bare `{` at output start
    markers: tuple[str, ...] = ()       # special tokens the detokenizer must keep
    native: bool = True                 # False: the fallback, not the template's own format

    # -- parsing ----------------------------------------------------------------------------

    def stream(self) -> "ToolCallStream":
        return ToolCallStream(self)

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(content, calls) of a whole output."""
        s = self.stream()
        s.feed(text)
        s.finish()
        return s.content, s.calls

    # -- writing ----------------------------------------------------------------------------

    def render(self, calls: list[ToolCall]) -> str:
        """The text the model prints for `calls` (arguments as given)."""
        def obj(c, key="arguments"):
            return f'{{"name": {json.dumps(c.name, ensure_ascii=False)}, "{key}": {c.arguments}}}'
        n = self.name
        if n == "hermes":
            return "\n".join(f"<tool_call>\n{obj(c)}\n</tool_call>" for c in calls)
        if n == "llama3":
            return "; ".join(obj(c, "parameters") for c in calls)
        if n == "mistral":
            return "[TOOL_CALLS][" + ", ".join(obj(c) for c in calls) + "]"
        if n == "mistral_args":
            return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{c.arguments}" for c in calls)
        if n == "granite":
            return "<|tool_call|>[" + ", ".join(obj(c) for c in calls) + "]"
        if n == "deepseek":
            return (_DS_BEGIN + "\n".join(
                f"{_DS_CALL}function{_DS_SEP}{c.name}\n```json\n{c.arguments}\n```{_DS_CALL_END}"
                for c in calls) + _DS_END)
        raise AssertionError(n)

    def instructions(self, tools: list[dict]) -> str:
        """A system-prompt section listing `tools` and this format, for templates that do not
        render tools themselves."""
        lines = [json.dumps(t, ensure_ascii=False) for t in tools]
        example = self.render([ToolCall("<function-name>", "<arguments-json-object>")])
        return ("# Tools\n\nYou can call the functions described by these JSON signatures:\n"
                + "\n".join(lines) + "\n\nTo call a function, reply with exactly:\n" + example
                + "\n\nTo call several, write one call after the other.")

    # -- constrained decoding -------------------------------------------------------------

    def special_token_ids(self, tok) -> dict[str, int]:
        """The control-token ids of this format's markers (and `<think>`, `</think>`) in a
        tokenizer (anything with `token_to_id(text)` and `is_special(id)`): what `grammar`
        takes as `special_tokens`."""
        out = {}
        for m in self.markers + ("<think>", "</think>"):
            i = tok.token_to_id(m)
            if i is not None and tok.is_special(i):
                out[m] = i
        return out

    def grammar(self, tools: list[dict], choice="required", parallel: bool = True,
                special_tokens: Mapping[str, int] | None = None,
                thinking: str | None = None) -> str | None:
        """A Lark grammar (llguidance dialect) whose every sentence is a tool call in this
        format, with arguments valid for the tool's `parameters` schema.

        choice: "required" (any of `tools`; one or more calls when `parallel`), a named
        function (`{"type": "function", "function": {"name": ...}}`: exactly one call of it),
        or "auto"/"none" (no grammar: None). special_tokens: marker text -> token id for the
        markers that are control tokens in the vocabulary (see `special_token_ids`); other
        markers are matched as text. thinking: None; "optional" (the output may begin with a
        `<think>...</think>` block, Qwen3); "open" (the prompt opened `<think>`, so the output
        starts inside it and must close it first, DeepSeek-R1)."""
        if choice in (None, "auto", "none"):
            return None
        funcs = _functions(tools)
        if not funcs:
            raise ToolChoiceError("tool_choice needs at least one function in 'tools'")
        if choice == "required":
            chosen = funcs
        elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            want = choice["function"].get("name")
            chosen = [f for f in funcs if f["name"] == want]
            if not chosen:
                raise ToolChoiceError(f"tool_choice names function {want!r}, which is not "
                                      "in 'tools'")
            parallel = False
        else:
            raise ToolChoiceError("tool_choice must be 'none', 'auto', 'required' or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}")
        sp = dict(special_tokens or {})

        def m(marker):                   # a marker: a control token, or text
            return f"<[{sp[marker]}]>" if marker in sp else _lit(marker)

        rules = []
        for i, f in enumerate(chosen):
            name, a = json.dumps(f["name"], ensure_ascii=False), f"args_{i}"
            obj = '{"name": ' + name + ', "arguments": '
            n = self.name
            if n == "hermes":
                body = [m("<tool_call>"), _lit("\n" + obj), a, _lit("}\n"), m("</tool_call>")]
            elif n == "llama3":
                body = [_lit('{"name": ' + name + ', "parameters": '), a, _lit("}")]
            elif n == "mistral":
                body = [_lit(obj), a, "call_id?", _lit("}")]
            elif n == "granite":
                body = [_lit(obj), a, _lit("}")]
            elif n == "mistral_args":
                body = [m("[TOOL_CALLS]"), _lit(f["name"]), m("[ARGS]"), a]
            elif n == "deepseek":
                body = [m(_DS_CALL), _lit("function"), m(_DS_SEP),
                        _lit(f["name"] + "\n```json\n"), a, _lit("\n```"), m(_DS_CALL_END)]
            else:
                raise AssertionError(n)
            rules.append(f"call_{i}: " + " ".join(body))
            rules.append(f"{a}: %json " + json.dumps(_args_schema(f), ensure_ascii=False))
        alts = " | ".join(f"call_{i}" for i in range(len(chosen)))
        sep = {"hermes": '"\\n"', "llama3": '"; "', "mistral": '", "', "granite": '", "',
               "mistral_args": "", "deepseek": '"\\n"'}[self.name]
        many = f"call ({sep} call)*" if parallel else "call"
        if parallel and self.name == "hermes":
            # the newline after a call does not commit to another one: after it the model
            # still chooses between the next `<tool_call>` and the end (with
            # Generation.end_outside_grammar, by its own unconstrained choice)
            many += f" {sep}?"
        calls = {"mistral": f'{m("[TOOL_CALLS]")} "[" {many} "]"',
                 "granite": f'{m("<|tool_call|>")} "[" {many} "]"',
                 "deepseek": f"{m(_DS_BEGIN)} {many} {m(_DS_END)}"}.get(self.name, many)
        head = ["%llguidance {}"]
        if thinking == "optional":
            head += ["start: think? calls", f"think: {m('<think>')} think_rest"]
        elif thinking == "open":
            head += ["start: think_rest calls"]
        elif thinking is None:
            head += ["start: calls"]
        else:
            raise ValueError(f"thinking must be None, 'optional' or 'open', not {thinking!r}")
        if thinking:
            if "</think>" in sp:
                head += [f"think_rest: /(.|\\n)*/ {m('</think>')} WS?"]
            else:
                head += ["think_rest: think_text WS?", 'think_text[lazy]: /(.|\\n)*<\\/think>/']
            head += ["WS: /[ \\t\\r\\n]+/"]
        head += [f"calls: {calls}", f"call: {alts}",
                 'call_id: ", \\"id\\": \\"" /[a-zA-Z0-9]{9}/ "\\""']
        return "\n".join(head + rules) + "\n"


def _lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _functions(tools) -> list[dict]:
    out = []
    for t in tools or []:
        f = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" \
            else None
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            out.append(f)
    return out


def _args_schema(f: dict) -> dict:
    schema = f.get("parameters")
    if not isinstance(schema, dict) or not schema:
        schema = {"type": "object"}
    from .structured import bound_integers
    schema = bound_integers(schema)
    schema["x-guidance"] = {**JSON_STYLE, **(schema.get("x-guidance") or {})}
    return schema


# ---- the formats ----------------------------------------------------------------------------

_DS_BEGIN, _DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

HERMES = ToolFormat(
    "hermes", triggers=("<tool_call>",), head=_HEAD, tail=r"\s*</tool_call>",
    ends=("</tool_call>", "<tool_call>"), markers=("<tool_call>", "</tool_call>"))
HERMES_FALLBACK = dataclasses.replace(HERMES, native=False)
LLAMA3 = ToolFormat(
    "llama3", triggers=("<|python_tag|>",), at_start=True, next=r"\s*;",
    head=(r'\s*\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*' + _STR +
          r'\s*,\s*"(?:parameters|arguments)"\s*:\s*\{'),
    markers=("<|python_tag|>",))
MISTRAL = ToolFormat(
    "mistral", triggers=("[TOOL_CALLS]",), open=r"\s*\[", head=_HEAD, next=r"\s*,",
    close=r"\s*\]", ends=("[TOOL_CALLS]",), markers=("[TOOL_CALLS]",))
MISTRAL_ARGS = ToolFormat(
    "mistral_args", triggers=("[TOOL_CALLS]",), envelope=False,
    head=r'\s*([^\s\[\]{}"]+)\s*(?:\[CALL_ID\][^\[\]]*)?\[ARGS\]\s*\{',
    ends=("[TOOL_CALLS]",), markers=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"))
GRANITE = ToolFormat(
    "granite", triggers=("<|tool_call|>",), open=r"\s*\[", head=_HEAD, next=r"\s*,",
    close=r"\s*\]", ends=("<|tool_call|>",), markers=("<|tool_call|>",))
DEEPSEEK = ToolFormat(
    "deepseek", triggers=(_DS_BEGIN,), open=r"\s*" + _DS_CALL, next=r"\s*" + _DS_CALL,
    close=r"\s*" + _DS_END, envelope=False,
    head=r"\s*(?:function)?" + _DS_SEP + r"\s*([^\n<]+?)\s*```(?:json)?\s*\{",
    tail=r"\s*```\s*" + _DS_CALL_END, ends=(_DS_CALL_END, "```"),
    markers=(_DS_BEGIN, _DS_END, _DS_CALL, _DS_CALL_END, _DS_SEP))

FORMATS = {f.name: f for f in (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, GRANITE, DEEPSEEK)}


def detect_format(template_source: str | None) -> ToolFormat | None:
    """The tool-call format a chat template teaches its model: the template's own markers
    decide; a template that mentions tools without a known format gets the Hermes fallback;
    None when it knows nothing of tools (the caller may still use HERMES_FALLBACK with
    `instructions(tools)` in the system prompt, as ChatTemplate does)."""
    s = template_source or ""
    if "[TOOL_CALLS]" in s:
        return MISTRAL_ARGS if "[ARGS]" in s else MISTRAL
    if "tool▁calls▁begin" in s:
        return DEEPSEEK
    if "<|tool_call|>" in s:
        return GRANITE
    if "<tool_call>" in s:
        return HERMES
    if "<|python_tag|>" in s or ('"parameters"' in s and "<|start_header_id|>" in s):
        return LLAMA3
    if re.search(r"\btools\b|\btool_calls\b", s):
        return HERMES_FALLBACK
    return None


# ---- the streaming parser -------------------------------------------------------------------

_WS = " \t\r\n"


def _held_prefix(buf: str, markers) -> int:
    """Length of the longest suffix of `buf` that is a proper prefix of a marker."""
    best = 0
    for mk in markers:
        for k in range(min(len(mk) - 1, len(buf)), best, -1):
            if buf.endswith(mk[:k]):
                best = k
                break
    return best


class ToolCallStream:
    """feed(text delta) -> OpenAI chat-completion deltas: `{"content": "..."}` and
    `{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}`
    then `{"tool_calls": [{"index", "function": {"arguments": "<piece>"}}]}`; finish() at the end
    of the output. Plain text is released as soon as it cannot start a tool call (only a
    possible marker prefix and trailing whitespace are held back). `content` and `calls` hold
    the result so far."""

    def __init__(self, fmt: ToolFormat):
        self.fmt = fmt
        self.calls: list[ToolCall] = []
        self._content: list[str] = []
        self._out: list[dict] = []
        self._state = "text"
        self._buf = ""                  # unconsumed text of the current state
        self._fresh = fmt.at_start      # nothing released yet: a bare `{` may open a section
        self._skip_ws = False           # drop whitespace after a closed section
        self._revert = ""               # marker text to release if the section holds no call
        self._consumed = ""             # section text consumed before its first call commits
        self._committed = False         # the current section holds a call
        self._depth = 0                 # JSON nesting in arguments / envelope
        self._in_str = self._esc = False
        self._re = {k: regex.compile(getattr(fmt, k)) for k in ("head", "open", "tail", "close")}
        self._re["next"] = regex.compile(fmt.next) if fmt.next is not None else None
        self._end_first = {e[0] for e in fmt.ends}
        self._done = False

    @property
    def content(self) -> str:
        return "".join(self._content)

    def feed(self, text: str) -> list[dict]:
        if self._done:
            raise ValueError("feed() after finish()")
        self._buf += text
        self._run(final=False)
        return self._take()

    def finish(self, truncated: bool = False) -> list[dict]:
        """The end of the output. `truncated`: it was cut (max_tokens): no tool-call markup
        becomes content, and an unfinished call is not one of `calls`."""
        if not self._done:
            if truncated:
                self._truncate()
            self._run(final=True)
            self._done = True
        return self._take()

    def _truncate(self) -> None:
        """Before the final run of a cut output: drop what would turn markup into content."""
        st = self._state
        if st == "text":                        # a marker cut in the middle: not content
            keep = _held_prefix(self._buf, self.fmt.triggers)
            if keep:
                self._buf = self._buf[:len(self._buf) - keep].rstrip(_WS)
        elif st in ("open", "head"):
            if self._committed:                 # a later call was cut before its name
                self._buf = ""
                self._state, self._skip_ws = "text", True
            else:                               # the section never reached a call
                self._revert = self._consumed = self._buf = ""
                self._state = "text"
        elif st == "args":                      # arguments cut: not a call
            self.calls.pop()
            self._out = [d for d in self._out if not (
                "tool_calls" in d and d["tool_calls"][0]["index"] == len(self.calls))]
            self._buf = ""
            self._state, self._skip_ws = "text", True

    # -- output -----------------------------------------------------------------------------

    def _take(self) -> list[dict]:
        out, self._out = self._out, []
        return out

    def _emit_content(self, text: str) -> None:
        if not text:
            return
        self._fresh = False
        self._content.append(text)
        if self._out and "content" in self._out[-1]:
            self._out[-1]["content"] += text
        else:
            self._out.append({"content": text})

    def _emit_args(self, text: str) -> None:
        if not text:
            return
        call = self.calls[-1]
        call.arguments += text
        i = len(self.calls) - 1
        last = self._out[-1] if self._out else None
        if last and "tool_calls" in last and last["tool_calls"][0]["index"] == i \
                and "id" not in last["tool_calls"][0]:             # never into the header
            last["tool_calls"][0]["function"]["arguments"] += text
        else:
            self._out.append({"tool_calls": [{"index": i, "function": {"arguments": text}}]})

    # -- the state machine ----------------------------------------------------------------

    def _run(self, final: bool) -> None:
        while getattr(self, "_st_" + self._state)(final):
            pass

    def _goto(self, state: str, buf: str) -> bool:
        self._state, self._buf = state, buf
        return True

    def _st_text(self, final: bool) -> bool:
        buf = self._buf
        if self._skip_ws:
            buf = buf.lstrip(_WS)
            self._buf = buf
            if not buf and not final:
                return False
            self._skip_ws = False
        if self._fresh:
            s = buf.lstrip(_WS)
            if not s and not final:
                return False
            self._fresh = False
            if s.startswith("{"):
                self._revert, self._consumed, self._committed = "", "", False
                return self._goto("head", buf)
        hits = [(i, t) for t in self.fmt.triggers if (i := buf.find(t)) >= 0]
        if hits:
            i, t = min(hits)
            before = buf[:i]
            kept = before.rstrip(_WS)
            self._emit_content(kept)
            self._revert, self._consumed, self._committed = before[len(kept):] + t, "", False
            return self._goto("open", buf[i + len(t):])
        if final:
            self._emit_content(buf)
            self._buf = ""
            return False
        keep = _held_prefix(buf, self.fmt.triggers)
        cut = len(buf[:len(buf) - keep].rstrip(_WS))
        self._emit_content(buf[:cut])
        self._buf = buf[cut:]
        return False

    def _end_section(self, buf: str) -> bool:
        self._skip_ws = True
        return self._goto("text", buf)

    def _fail(self) -> bool:
        """The section does not hold a call after all: its text is content."""
        if self._committed:                 # a later call failed: the rest is content
            return self._end_section(self._buf)
        self._emit_content(self._revert)
        self._fresh = False
        return self._goto("text", self._consumed + self._buf)

    def _match(self, key: str, final: bool):
        """'wait', 'fail' or the match of pattern `key` at the start of the buffer."""
        m = self._re[key].match(self._buf, partial=True)
        if m is None:
            return "fail"
        if m.partial:
            return "fail" if final else "wait"
        return m

    def _st_open(self, final: bool) -> bool:
        m = self._match("open", final)
        if m == "wait":
            return False
        if m == "fail":
            return self._fail()
        self._consumed += self._buf[:m.end()]
        return self._goto("head", self._buf[m.end():])

    def _st_head(self, final: bool) -> bool:
        m = self._match("head", final)
        if m == "wait":
            return False
        if m == "fail":
            return self._fail()
        try:
            name = json.loads('"' + m.group(1) + '"') if self.fmt.envelope else m.group(1).strip()
        except ValueError:
            return self._fail()
        self._committed = True
        i = len(self.calls)
        call = ToolCall(name, "")
        self.calls.append(call)
        self._out.append({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                          "function": {"name": name, "arguments": ""}}]})
        self._emit_args("{")
        self._depth, self._in_str, self._esc = 1, False, False
        return self._goto("args", self._buf[m.end():])

    def _scan(self, final: bool) -> tuple[int, bool]:
        """Scan JSON in the buffer until nesting returns to 0 or an end marker appears outside
        a string. Returns (position reached, finished)."""
        buf, ends, first = self._buf, self.fmt.ends, self._end_first
        for i, c in enumerate(buf):
            if self._in_str:
                if self._esc:
                    self._esc = False
                elif c == "\\":
                    self._esc = True
                elif c == '"':
                    self._in_str = False
                continue
            if c in first:
                rest = buf[i:]
                if any(rest.startswith(e) for e in ends):
                    return i, True
                if not final and _held_prefix(rest, ends) == len(rest):
                    return i, False
            if c == '"':
                self._in_str = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1, True
        return len(buf), final

    def _st_args(self, final: bool) -> bool:
        end, done = self._scan(final)
        self._emit_args(self._buf[:end])
        self._buf = self._buf[end:]
        if not done:
            return False
        if self.fmt.envelope and self._depth == 0:
            self._depth, self._in_str, self._esc = 1, False, False
            return self._goto("envelope", self._buf)
        return self._goto("tail", self._buf)

    def _st_envelope(self, final: bool) -> bool:
        end, done = self._scan(final)
        if not done:
            self._buf = self._buf[end:]
            return False
        return self._goto("tail", self._buf[end:])

    def _st_tail(self, final: bool) -> bool:
        m = self._match("tail", final)
        if m == "wait":
            return False
        if m == "fail":
            if final and self._re["tail"].match(self._buf, partial=True):
                self._buf = ""              # a truncated closing marker
            return self._end_section(self._buf)
        return self._goto("sep", self._buf[m.end():])

    def _st_sep(self, final: bool) -> bool:
        nxt = self._match("next", final) if self._re["next"] is not None else "fail"
        if not isinstance(nxt, str):
            return self._goto("head", self._buf[nxt.end():])
        if nxt == "wait":
            return False
        m = self._match("close", final)
        if m == "wait":
            return False
        if m == "fail":
            if final and self._re["close"].match(self._buf, partial=True):
                self._buf = ""
            return self._end_section(self._buf)
        return self._end_section(self._buf[m.end():])
