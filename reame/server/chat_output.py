"""A chat choice's output, as the OpenAI API returns it: reasoning, content and tool calls.

The generated text goes through two splitters (reame/reasoning.py, then reame/toolcalls.py):
the `<think>` block of a reasoning model becomes `reasoning_content`, tool calls in the model
family's format become `tool_calls`, the rest is `content`. Streaming and whole responses use
the same splitters, so both give the same message.
"""

from __future__ import annotations

from .. import reasoning


class ChatOutput:
    def __init__(self, think: bool, started_in_think: bool, tool_format=None):
        self.reason = reasoning.ReasoningStream(started_in_think) if think else None
        self.tools = tool_format.stream() if tool_format is not None else None
        self.reasoning_parts: list[str] = []
        self.content_parts: list[str] = []

    def _content(self, text: str) -> list[dict]:
        if not text:
            return []
        out = self.tools.feed(text) if self.tools is not None else [{"content": text}]
        self.content_parts += [d["content"] for d in out if "content" in d]
        return out

    def feed(self, text: str) -> list[dict]:
        """Chat deltas for a piece of generated text: `{"reasoning_content": ...}`,
        `{"content": ...}`, `{"tool_calls": [...]}`."""
        if not text:
            return []
        r, c = self.reason.feed(text) if self.reason is not None else ("", text)
        out = [{"reasoning_content": r}] if r else []
        if r:
            self.reasoning_parts.append(r)
        return out + self._content(c)

    def finish(self, finish_reason: str | None = None) -> list[dict]:
        """The held-back rest. finish_reason "length" (cut by max_tokens): tool-call markup
        that never became a whole call is dropped, not turned into content, and a call whose
        arguments were cut is not among `calls` (reame/toolcalls.py)."""
        out = []
        if self.reason is not None:
            r, c = self.reason.finish()
            if r:
                self.reasoning_parts.append(r)
                out.append({"reasoning_content": r})
            out += self._content(c)
        if self.tools is not None:
            tail = self.tools.finish(truncated=finish_reason == "length")
            self.content_parts += [d["content"] for d in tail if "content" in d]
            out += tail
        return out

    @property
    def calls(self) -> list:
        return self.tools.calls if self.tools is not None else []

    def message(self) -> dict:
        """The whole message (after finish())."""
        calls = self.calls
        content = "".join(self.content_parts)
        msg = {"role": "assistant", "content": content if content or not calls else None,
               "refusal": None}
        if self.reason is not None and self.reasoning_parts:
            msg["reasoning_content"] = "".join(self.reasoning_parts)
        if calls:
            msg["tool_calls"] = [c.to_openai() for c in calls]
        return msg
