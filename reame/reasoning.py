"""Reasoning: the `<think>...</think>` block of thinking models, apart from the answer.

Qwen3, DeepSeek-R1 and its distills, SmolLM3 (and QwQ, Granite 3.3 in thinking mode) write
their reasoning between `<think>` and `</think>` before the answer. Some templates open the
block in the prompt (DeepSeek-R1's ends its generation prompt with `<think>\\n`), so the output
starts inside it and only `</think>` appears: `starts_in_think(prompt)` tells.

    split("<think>\\nThe user says hi.\\n</think>\\n\\nHello!")
        -> ("The user says hi.", "Hello!")
    split("The user says hi.\\n</think>\\n\\nHello!", started_in_think=True)
        -> ("The user says hi.", "Hello!")
    split("<think>\\nStill thinking when max_tokens hit")
        -> ("Still thinking when max_tokens hit", "")        # unterminated: all reasoning
    split("Hello!")                                          # no block: all content
        -> ("", "Hello!")

Rules: a block counts only at the start of the output (after whitespace); the whitespace
around the reasoning and at the start of the answer after `</think>` is dropped; an output
without a block is returned unchanged. `ReasoningStream` does the same on deltas, holding back
only a possible partial tag and trailing whitespace, so any chunking gives the same result.
The tags must reach the text: if a vocabulary makes them control tokens, the detokenizer must
keep `TAGS`.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"
TAGS = (OPEN, CLOSE)
_WS = " \t\r\n"


def detect(template_source: str | None) -> bool:
    """Whether a chat template deals in `<think>` blocks (its model reasons)."""
    s = template_source or ""
    return OPEN in s and CLOSE in s


def effort_kwargs(template_source: str | None, effort: str) -> dict:
    """The chat-template variables that carry OpenAI's `reasoning_effort` to a template with a
    thinking switch: `reasoning_effort` itself where the template reads it (gpt-oss: low,
    medium, high), else `enable_thinking` (Qwen3, SmolLM3, DeepSeek-R1 distills' patched
    templates) or `thinking` (Granite 3.3) as a boolean: "none" and "minimal" turn thinking
    off, the other efforts on. {} when the template has no switch (the effort is ignored)."""
    import re
    s = template_source or ""
    on = effort not in ("none", "minimal")
    if re.search(r"\breasoning_effort\b", s):
        return {"reasoning_effort": {"none": "low", "minimal": "low",
                                     "xhigh": "high"}.get(effort, effort)}
    if re.search(r"\benable_thinking\b", s):
        return {"enable_thinking": on}
    if re.search(r"\b(?:if|elif|and|or|not)\s+thinking\b", s):
        return {"thinking": on}
    return {}


def starts_in_think(prompt: str) -> bool:
    """Whether the rendered prompt leaves a `<think>` block open for the output."""
    return prompt.rstrip(_WS).endswith(OPEN)


def _partial(buf: str, tag: str) -> int:
    """Length of the longest suffix of `buf` that is a proper prefix of `tag`."""
    for k in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:k]):
            return k
    return 0


class ReasoningStream:
    """feed(delta) -> (reasoning_delta, content_delta); finish() -> the held-back rest."""

    def __init__(self, started_in_think: bool = False):
        self._state = "think" if started_in_think else "start"
        self._lead = True               # nothing of the current part released yet
        self._buf = ""
        self._reasoning: list[str] = []
        self._content: list[str] = []

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def content(self) -> str:
        return "".join(self._content)

    def feed(self, delta: str) -> tuple[str, str]:
        self._buf += delta
        return self._run(final=False)

    def finish(self) -> tuple[str, str]:
        return self._run(final=True)

    def _run(self, final: bool) -> tuple[str, str]:
        r, c = [], []
        buf = self._buf
        if self._state == "start":
            s = buf.lstrip(_WS)
            if s.startswith(OPEN):
                self._state, buf = "think", s[len(OPEN):]
            elif not final and (not s or OPEN.startswith(s)):
                return "", ""
            else:
                self._state, self._lead = "content", False
        if self._state == "think":
            if self._lead:
                s = buf.lstrip(_WS)
                if s.startswith(OPEN):          # a model that opens the block again
                    s = s[len(OPEN):].lstrip(_WS)
                elif not final and OPEN.startswith(s):
                    self._buf = buf
                    return "", ""
                buf = s
            i = buf.find(CLOSE)
            if i >= 0:                          # the answer starts, without its whitespace
                r.append(buf[:i].rstrip(_WS))
                self._state, self._lead, buf = "content", True, buf[i + len(CLOSE):]
            else:                               # hold a partial tag and trailing whitespace
                keep = 0 if final else _partial(buf, CLOSE)
                cut = len(buf[:len(buf) - keep].rstrip(_WS))
                r.append(buf[:cut])
                buf = "" if final else buf[cut:]
                self._lead = self._lead and not cut
        if self._state == "content":
            if self._lead:
                buf = buf.lstrip(_WS)
                if buf:
                    self._lead = False
            c.append(buf)
            buf = ""
        self._buf = buf
        rd, cd = "".join(r), "".join(c)
        self._reasoning.append(rd)
        self._content.append(cd)
        return rd, cd


def split(text: str, started_in_think: bool = False) -> tuple[str, str]:
    """(reasoning, content) of a whole output."""
    s = ReasoningStream(started_in_think)
    s.feed(text)
    s.finish()
    return s.reasoning, s.content
