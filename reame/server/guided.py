"""Structured output and tools in a request: which grammar constrains the output.

Request fields, from the three APIs clients speak (at most one of them per request):

| field | API | grammar |
|---|---|---|
| `response_format: {"type": "json_object"}` | OpenAI | any JSON object |
| `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}` | OpenAI | the schema |
| `json_schema: {...}` | llama-server | the schema |
| `grammar: "root ::= ..."` | llama-server | GBNF |
| `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` | vLLM | schema, regex, one of the strings, GBNF or Lark |
| `structured_outputs: {"json" / "regex" / "choice" / "grammar": ...}` | vLLM (newer) | the same |

Tools (`tools`, `tool_choice`, `parallel_tool_calls`) are validated here too; with `tool_choice`
"required" or a named function the output is constrained to the model family's tool-call
format (reame/toolcalls.py builds that grammar).

Bounds (issue 29): a schema or tool nested deeper than structured.MAX_DEPTH is a 400 naming the
field here; compile_guided compiles the grammar and its first mask on the request's thread, a
grammar over a bound (reame/structured.py) being a 400 `invalid_grammar` with a short message.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import structured as S
from .schemas import invalid

GUIDED_FIELDS = ("response_format", "json_schema", "grammar", "guided_json", "guided_regex",
                 "guided_choice", "guided_grammar", "structured_outputs")


@dataclass(frozen=True)
class GuidedSpec:
    kind: str            # "json_object" | "json_schema" | "regex" | "choice" | "gbnf" | "lark"
    source: object       # the schema, pattern, choices or grammar text
    param: str           # the request field it came from (for errors)


def _schema(value, param: str):
    if not isinstance(value, (dict, bool)):
        raise invalid(param, f"'{param}' must be a JSON schema object.")
    return shallow(value, param)


def shallow(value, param: str):
    """`value`, or a 400 when it nests objects/arrays deeper than structured.MAX_DEPTH (the
    schema walkers recurse; a 5,000-deep `guided_json` was a 500 RecursionError)."""
    if S.too_deep(value):
        raise invalid(param, f"'{param}' is nested deeper than {S.MAX_DEPTH} levels.")
    return value


def parse_guided(body: dict) -> GuidedSpec | None:
    """The one output constraint a request asks for, or None. 400 for malformed fields or for
    several at once."""
    found = []
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object",
                                                              "json_schema"):
            raise invalid("response_format", "'response_format' must be an object whose "
                          "'type' is 'text', 'json_object' or 'json_schema'.")
        if rf["type"] == "json_object":
            found.append(GuidedSpec("json_object", None, "response_format"))
        elif rf["type"] == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or "schema" not in js:
                raise invalid("response_format.json_schema", "'response_format.json_schema' "
                              "must be an object with a 'schema'.")
            found.append(GuidedSpec("json_schema", _schema(js["schema"],
                                                           "response_format.json_schema.schema"),
                                    "response_format"))
    if body.get("json_schema") is not None:
        found.append(GuidedSpec("json_schema", _schema(body["json_schema"], "json_schema"),
                                "json_schema"))
    if body.get("guided_json") is not None:
        v = body["guided_json"]
        if isinstance(v, str):                      # vLLM accepts the schema as a string too
            import json
            try:
                v = json.loads(v)
            except RecursionError:
                raise invalid("guided_json", f"'guided_json' is nested deeper than "
                              f"{S.MAX_DEPTH} levels.") from None
            except ValueError:
                raise invalid("guided_json", "'guided_json' must be a JSON schema.") from None
        found.append(GuidedSpec("json_schema", _schema(v, "guided_json"), "guided_json"))
    for field, kind in (("grammar", "gbnf"), ("guided_regex", "regex"),
                        ("guided_grammar", "grammar")):
        v = body.get(field)
        if v is not None:
            if not isinstance(v, str) or not v.strip():
                raise invalid(field, f"'{field}' must be a non-empty string.")
            found.append(GuidedSpec(kind, v, field))
    if body.get("guided_choice") is not None:
        found.append(GuidedSpec("choice", _choices(body["guided_choice"], "guided_choice"),
                                "guided_choice"))
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise invalid("structured_outputs", "'structured_outputs' must be an object.")
        keys = [k for k in ("json", "regex", "choice", "grammar") if so.get(k) is not None]
        other = sorted(k for k, v in so.items() if v is not None and k not in
                       ("json", "regex", "choice", "grammar"))
        if other:
            raise invalid(f"structured_outputs.{other[0]}", f"'structured_outputs.{other[0]}' "
                          "is not supported by this server.", "unsupported_parameter")
        for k in keys:
            p = f"structured_outputs.{k}"
            v = so[k]
            if k == "json":
                found.append(GuidedSpec("json_schema", _schema(v, p), p))
            elif k == "choice":
                found.append(GuidedSpec("choice", _choices(v, p), p))
            else:
                if not isinstance(v, str) or not v.strip():
                    raise invalid(p, f"'{p}' must be a non-empty string.")
                found.append(GuidedSpec("regex" if k == "regex" else "grammar", v, p))
    if len(found) > 1:
        raise invalid(found[1].param, f"Only one output constraint may be given; this request "
                      f"has {', '.join(repr(f.param) for f in found)}.")
    return found[0] if found else None


def _choices(v, param: str) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(c, str) and c for c in v):
        raise invalid(param, f"'{param}' must be a non-empty array of non-empty strings.")
    return v


def compile_guided(spec: GuidedSpec, tok, open_objects: bool = False) -> S.Grammar:
    """The checked grammar (400 naming the field if llguidance refuses it). A JSON schema's
    objects are closed (structured.close_objects) unless `open_objects` (the server's
    --additional-properties open)."""
    try:
        if spec.kind == "json_object":
            src = S.json_object()
        elif spec.kind == "json_schema":
            src = S.json_schema(spec.source, open_objects)
        elif spec.kind == "regex":
            src = S.regex(spec.source)
        elif spec.kind == "choice":
            src = S.choice(spec.source)
        elif spec.kind == "gbnf":
            src = S.gbnf(spec.source)
        else:                                       # vLLM's guided_grammar: GBNF or Lark
            from llguidance.gbnf_to_lark import any_to_lark
            src = S.lark(S.to_lark(any_to_lark, spec.source, "grammar"))
        return S.compile_grammar(src, tok, spec.kind.replace("_", " "))
    except S.GrammarError as e:
        raise invalid(spec.param, f"The {spec.param!r} could not be used: {e}",
                      "invalid_grammar") from None


# ---- tools ----

def closed_tools(tools: list[dict]) -> list[dict]:
    """The tools with their `parameters` schemas closed (structured.close_objects), for the
    tool-call grammar: constrained arguments carry no key the function does not declare."""
    out = []
    for t in tools:
        f = t.get("function") if isinstance(t, dict) else None
        if isinstance(f, dict) and isinstance(f.get("parameters"), dict):
            t = {**t, "function": {**f, "parameters": S.close_objects(f["parameters"])}}
        out.append(t)
    return out


@dataclass
class ToolSpec:
    tools: list[dict]                 # OpenAI tool objects, as sent
    choice: object                    # "auto" | "none" | "required" | function name (str)
    parallel: bool


def parse_tools(body: dict) -> ToolSpec | None:
    tools = body.get("tools")
    if body.get("functions") is not None:
        raise invalid("functions", "'functions' is deprecated; use 'tools'.",
                      "unsupported_parameter")
    if tools is None or tools == []:
        choice = body.get("tool_choice")
        if choice not in (None, "none", "auto"):
            raise invalid("tool_choice", "'tool_choice' needs 'tools'.")
        return None
    if not isinstance(tools, list):
        raise invalid("tools", "'tools' must be an array.")
    names = set()
    for i, t in enumerate(tools):
        w = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type") != "function":
            raise invalid(f"{w}.type", f"'{w}' must be an object with type 'function'.")
        f = t.get("function")
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
            raise invalid(f"{w}.function.name", f"'{w}.function.name' must be a string.")
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise invalid(f"{w}.function.parameters", f"'{w}.function.parameters' must be a "
                          "JSON schema object.")
        shallow(t, w)                   # the template's tojson and the schema walkers recurse
        if f["name"] in names:
            raise invalid(f"{w}.function.name", f"Duplicate tool name {f['name']!r}.")
        names.add(f["name"])
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or name not in names:
            raise invalid("tool_choice", "'tool_choice' must name one of the tools: "
                          '{"type": "function", "function": {"name": ...}}.')
        choice = name
    elif choice not in ("auto", "none", "required"):
        raise invalid("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or a "
                      "named function.")
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise invalid("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.")
    return ToolSpec(tools, choice, parallel)
