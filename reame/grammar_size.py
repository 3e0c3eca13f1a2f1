"""How much text a client's grammar can force, estimated from its source before llguidance
sees it (issue 29).

llguidance bounds what one mask step may cost (lexer fuel, Earley items, lexer states), but
not the walk that collects the bytes a grammar forces: a lexeme of counted repetitions forced
`n` times at the grammar level (GBNF `root ::= x{300}` / `x ::= y{300}` / `y ::= z{300}` /
`z ::= "ab"`: 54 MB forced, 7 s and 1 GB for the first mask, 0.3 s for every later one) is
walked byte by byte at every step, on the thread the engine waits for. Upper bounds (`{1,n}`,
`*`, `maxLength`) cost nothing: llguidance expands them lazily.

`size` is the largest product of *minimum* repetition counts times literal lengths along any
nesting of a grammar: `(a{1000}){1000}` is 1,000,000, `[0-9]{3}-[0-9]{4}` 8. A grammar over
MAX_SIZE is refused: no useful output is that long (a 128k-token context holds ~500 kB).
The estimate errs high (alternatives count their largest branch, recursion counts once), never
low for the counted repetitions it reads.
"""

from __future__ import annotations

import json
import re

MAX_SIZE = 100_000

_COUNT = re.compile(r"\{\s*(\d{1,12})\s*(,\s*\d{0,12}\s*)?\}")
_TILDE = re.compile(r"~\s*(\d{1,12})(\s*\.\.\s*\d{1,12})?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RULE = re.compile(r"\s*[?!]?([A-Za-z_][A-Za-z0-9_]*)(\.-?\d+)?\s*:(?!:)")


class _Groups:
    """Sizes of nested groups: per open group the largest alternative so far, the running sum of
    the current alternative, and the size of its last atom (what a quantifier multiplies)."""

    def __init__(self):
        self.stack = [[0, 0, 0]]

    def atom(self, size: int) -> None:
        g = self.stack[-1]
        g[1] += size
        g[2] = size

    def repeat(self, n: int) -> None:
        g = self.stack[-1]
        g[1] += g[2] * (n - 1) if n else -g[2]
        g[2] *= n

    def open(self) -> None:
        self.stack.append([0, 0, 0])

    def close(self) -> None:
        if len(self.stack) > 1:
            g = self.stack.pop()
            self.atom(max(g[0], g[1]))

    def alternative(self) -> None:
        g = self.stack[-1]
        g[0], g[1], g[2] = max(g[0], g[1]), 0, 0

    def total(self) -> int:
        while len(self.stack) > 1:
            self.close()
        g = self.stack[0]
        return max(g[0], g[1])


def _class_end(s: str, i: int) -> int:
    """Index after the character class `[...]` that starts at s[i] (nested classes too)."""
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
            if s[j + 1:j + 2] == "^":
                j += 1
            if s[j + 1:j + 2] == "]":           # a "]" first in a class is a literal
                j += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(s)


def regex_size(pattern: str) -> int:
    """The size of a regex (Rust `regex` syntax, as llguidance reads it)."""
    g, i, p = _Groups(), 0, pattern
    while i < len(p):
        c = p[i]
        if c == "\\":
            j = i + 2
            if p[i + 1:i + 2] in ("p", "P", "x", "u") and p[j:j + 1] == "{":
                k = p.find("}", j)
                j = k + 1 if k >= 0 else len(p)
            g.atom(1)
            i = j
        elif c == "[":
            g.atom(1)
            i = _class_end(p, i)
        elif c == "(":
            g.open()
            i += 1
            if p[i:i + 1] == "?":               # (?:...), (?P<name>...), (?i): not atoms
                m = re.match(r"\?(P?<[^>]*>|[a-zA-Z-]*:?)", p[i:])
                i += len(m.group(0)) if m else 1
        elif c == ")":
            g.close()
            i += 1
        elif c == "|":
            g.alternative()
            i += 1
        elif c == "{" and (m := _COUNT.match(p, i)):
            g.repeat(int(m.group(1)))
            i = m.end()
        elif c in "*+?":
            i += 1
        else:
            g.atom(1)
            i += 1
    return g.total()


def _string_end(s: str, i: int, quote: str) -> int:
    j = i + 1
    while j < len(s) and s[j] != quote:
        j += 2 if s[j] == "\\" else 1
    return min(j + 1, len(s))


def _json_end(s: str, i: int) -> int:
    """Index after the JSON object that starts at s[i] (strings skipped)."""
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c == '"':
            j = _string_end(s, j, '"')
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(s)


def _lark_items(body: str) -> list:
    """A Lark rule body as items: ("atom", size), ("ref", name), ("rep", n), "(", ")", "|"."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c.isspace():
            i += 1
        elif body.startswith("//", i) or c == "#":
            k = body.find("\n", i)
            i = len(body) if k < 0 else k
        elif c in "\"'":
            j = _string_end(body, i, c)
            out.append(("atom", max(j - i - 2, 1)))
            i = j
        elif c == "/":
            j = i + 1
            while j < len(body) and body[j] != "/":
                j += 2 if body[j] == "\\" else 1
            out.append(("atom", regex_size(body[i + 1:j])))
            i = j + 1
            while i < len(body) and body[i].isalpha():     # flags
                i += 1
        elif body.startswith("%json", i):
            k = body.find("{", i)
            if k < 0:
                i += 5
                continue
            j = _json_end(body, k)
            try:
                out.append(("atom", schema_size(json.loads(body[k:j]))))
            except (ValueError, RecursionError):
                out.append(("atom", 1))
            i = j
        elif c == "<":                                   # <|special|>, <[123]>
            k = body.find(">", i)
            out.append(("atom", 1))
            i = len(body) if k < 0 else k + 1
        elif c in "([":
            out.append("(")
            i += 1
        elif c in ")]":
            out.append(")")
            i += 1
        elif c == "|":
            out.append("|")
            i += 1
        elif c == "{" and (m := _COUNT.match(body, i)):
            out.append(("rep", int(m.group(1))))
            i = m.end()
        elif c == "~" and (m := _TILDE.match(body, i)):
            out.append(("rep", int(m.group(1))))
            i = m.end()
        elif m := _NAME.match(body, i):
            out.append(("ref", m.group(0)))
            i = m.end()
        else:                                            # ?, *, +, .., punctuation
            i += 1
    return out


def lark_size(source: str) -> int:
    """The size of a Lark grammar (llguidance's dialect; GBNF is converted to it first): its
    `start` rule with each rule reference replaced by that rule's size (a rule reached again
    through recursion counts 1)."""
    rules: dict[str, str] = {}
    name = None
    for line in source.splitlines():
        if line.lstrip().startswith("%") and not line.lstrip().startswith("%json"):
            name = None
            continue
        m = _RULE.match(line)
        if m:
            name = m.group(1)
            rules[name] = rules.get(name, "") + "\n|" * (name in rules) + line[m.end():]
        elif name is not None:
            rules[name] += "\n" + line
    items = {n: _lark_items(b) for n, b in rules.items()}
    sizes: dict[str, int] = {}
    busy: set[str] = set()
    start = "start" if "start" in rules else next(iter(rules), None)
    if start is None:
        return 0
    todo = [start]                        # depth-first, without recursion (rule chains are data)
    while todo:
        n = todo[-1]
        if n in sizes:
            todo.pop()
            continue
        busy.add(n)
        need = [r for kind, r in (x for x in items[n] if isinstance(x, tuple))
                if kind == "ref" and r in items and r not in sizes and r not in busy]
        if need:
            todo.append(need[0])
            continue
        g = _Groups()
        for x in items[n]:
            if x == "(":
                g.open()
            elif x == ")":
                g.close()
            elif x == "|":
                g.alternative()
            elif x[0] == "rep":
                g.repeat(x[1])
            elif x[0] == "ref":
                g.atom(sizes.get(x[1], 1))
            else:
                g.atom(x[1])
        sizes[n] = g.total()
        busy.discard(n)
        todo.pop()
    return sizes[start]


def schema_size(schema) -> int:
    """The size of a JSON schema: its patterns, constants and `minItems` repetitions."""
    root = schema
    sizes: dict[int, int] = {}

    def size(s, seen: frozenset) -> int:
        if not isinstance(s, dict):
            return 1
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target = resolve_ref(root, ref)
            if target is not None and id(target) not in seen:
                return size(target, seen | {id(target)})
            return 1
        if id(s) in sizes:
            return sizes[id(s)]
        n = 1
        if isinstance(s.get("pattern"), str):
            n = max(n, regex_size(s["pattern"]))
        if "const" in s:
            n = max(n, len(json.dumps(s["const"])))
        if isinstance(s.get("enum"), list):
            n = max([n] + [len(json.dumps(v)) for v in s["enum"]])
        if isinstance(s.get("minLength"), int) and isinstance(s.get("pattern"), str):
            n = max(n, s["minLength"])
        props = s.get("properties")
        if isinstance(props, dict):
            n = max(n, sum(len(k) + size(v, seen) for k, v in props.items()))
        pp = s.get("patternProperties")
        if isinstance(pp, dict):
            n = max([n] + [regex_size(k) + size(v, seen) for k, v in pp.items()])
        for k in ("additionalProperties", "propertyNames", "not", "if", "then", "else",
                  "contains", "unevaluatedProperties", "additionalItems"):
            n = max(n, size(s.get(k), seen))
        for k in ("anyOf", "oneOf", "allOf", "prefixItems"):
            v = s.get(k)
            if isinstance(v, list) and v:
                each = [size(m, seen) for m in v]
                n = max(n, sum(each) if k in ("allOf", "prefixItems") else max(each))
        items = s.get("items")
        if isinstance(items, (dict, list)):
            each = size(items, seen) if isinstance(items, dict) else \
                max([size(m, seen) for m in items] or [1])
            low = s.get("minItems")
            n = max(n, each * max(low if isinstance(low, int) else 0, 1))
        sizes[id(s)] = n
        return n
    return size(schema, frozenset())


def resolve_ref(root: dict, ref: str):
    """The local schema a "#/..." reference points at, or None."""
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None
