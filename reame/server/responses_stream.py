"""A /v1/responses stream: the Job's chat deltas as the Responses API's server-sent events.

    response.created, response.in_progress,
    per output item: response.output_item.added, then
      reasoning: response.content_part.added (reasoning_text), response.reasoning_text.delta...,
                 response.reasoning_text.done, response.content_part.done
      message:   response.content_part.added (output_text), response.output_text.delta...,
                 response.output_text.done, response.content_part.done
      function_call: response.function_call_arguments.delta..., ...arguments.done
    response.output_item.done,
    response.completed (or response.incomplete when max_output_tokens cut it, or
    response.failed with its error when the engine failed on the way).

Each event is `event: TYPE` and `data: {"type": TYPE, "sequence_number": N, ...}`. The last
event's response object is the one a non-streamed request returns (output items, usage), and it
is stored the same way.
"""

from __future__ import annotations

import json

from . import responses_models as M
from .responses_api import _id


class EventStream:
    def __init__(self, ctx):
        self.ctx = ctx
        self.job = ctx.job
        self.seq = 0
        self.output: list[dict] = []        # items, as they are (being) made
        self.cur: dict | None = None        # the open item: {"kind", "item", "index", "text"}
        self.calls: dict[int, dict] = {}    # tool-call index -> its open item
        self.pending_lp: list = []          # logprobs not yet sent with a text delta
        self.all_lp: list = []
        self.reasoning = ""

    def event(self, type_: str, **data) -> bytes:
        d = {"type": type_, "sequence_number": self.seq, **data}
        self.seq += 1
        return (b"event: " + type_.encode() + b"\ndata: "
                + json.dumps(d, ensure_ascii=False).encode() + b"\n\n")

    # ---- items ----

    def _open(self, kind: str, item: dict) -> list[bytes]:
        out = self._close()
        index = len(self.output)
        self.output.append(item)
        self.cur = {"kind": kind, "item": item, "index": index, "text": []}
        out.append(self.event("response.output_item.added", output_index=index, item=item))
        part = ({"type": "reasoning_text", "text": ""} if kind == "reasoning" else
                {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                if kind == "message" else None)
        if part is not None:
            out.append(self.event("response.content_part.added", item_id=item["id"],
                                  output_index=index, content_index=0, part=part))
        return out

    def _close(self, status: str = "completed") -> list[bytes]:
        cur, self.cur = self.cur, None
        if cur is None:
            return []
        item, index, kind = cur["item"], cur["index"], cur["kind"]
        text = "".join(cur["text"])
        out = []
        ids = dict(item_id=item["id"], output_index=index)
        if kind == "reasoning":
            self.reasoning += text
            out.append(self.event("response.reasoning_text.done", **ids, content_index=0,
                                  text=text))
            part = M.ReasoningText(text=text).model_dump()
            out.append(self.event("response.content_part.done", **ids, content_index=0,
                                  part=part))
            item.update(content=[part], status="completed")
        elif kind == "message":
            lp = self.all_lp if self.ctx.logprobs else []
            out.append(self.event("response.output_text.done", **ids, content_index=0,
                                  text=text, logprobs=lp))
            part = M.OutputText(text=text, logprobs=lp).model_dump()
            out.append(self.event("response.content_part.done", **ids, content_index=0,
                                  part=part))
            item.update(content=[part], status=status)
        else:
            item.update(arguments=text, status=status)
            out.append(self.event("response.function_call_arguments.done", **ids,
                                  name=item["name"], arguments=text))
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    def _ensure(self, kind: str) -> list[bytes]:
        if self.cur is not None and self.cur["kind"] == kind:
            return []
        if kind == "reasoning":
            item = M.OutputReasoning(id=_id("rs"), status="in_progress", content=[]).model_dump()
        else:
            item = M.OutputMessage(id=_id("msg"), status="in_progress", content=[]).model_dump()
        return self._open(kind, item)

    # ---- one delta ----

    def _lp(self, entries) -> list[dict]:
        return self.job._chat_logprobs(entries)["content"] if entries else []

    def on_delta(self, d) -> list[bytes]:
        out = []
        lp = self._lp(d.logprobs)
        self.all_lp += lp
        self.pending_lp += lp
        delta = d.delta
        if delta.get("reasoning_content"):
            out += self._ensure("reasoning")
            self.cur["text"].append(delta["reasoning_content"])
            out.append(self.event("response.reasoning_text.delta", item_id=self.cur["item"]["id"],
                                  output_index=self.cur["index"], content_index=0,
                                  delta=delta["reasoning_content"]))
        elif delta.get("content"):
            out += self._ensure("message")
            self.cur["text"].append(delta["content"])
            lps, self.pending_lp = self.pending_lp, []
            out.append(self.event("response.output_text.delta", item_id=self.cur["item"]["id"],
                                  output_index=self.cur["index"], content_index=0,
                                  delta=delta["content"], logprobs=lps))
        for tc in delta.get("tool_calls") or []:
            if "id" in tc:                      # a new call: its own item
                item = M.OutputFunctionCall(id=_id("fc"), call_id=tc["id"],
                                            name=tc["function"]["name"], arguments="",
                                            status="in_progress").model_dump()
                out += self._open("function_call", item)
                self.calls[tc["index"]] = self.cur
            piece = (tc.get("function") or {}).get("arguments") or ""
            cur = self.calls.get(tc["index"])
            if piece and cur is not None and cur is self.cur:
                cur["text"].append(piece)
                out.append(self.event("response.function_call_arguments.delta",
                                      item_id=cur["item"]["id"], output_index=cur["index"],
                                      delta=piece))
        return out

    # ---- the whole stream ----

    def run(self):
        ctx, job = self.ctx, self.job
        start = ctx.response("in_progress", [])
        deltas = job.deltas()
        try:
            yield self.event("response.created", response=start)
            yield self.event("response.in_progress", response=start)
            finish, error = None, None
            for d in deltas:
                if d.error is not None:
                    error = d.error
                    break
                for b in self.on_delta(d):
                    yield b
                if d.finish_reason is not None:
                    finish = d.finish_reason
            if error is not None:
                for b in self._close("incomplete"):
                    yield b
                failed = ctx.response("failed", self.output, error={
                    "code": "server_error", "message": error.message})
                yield self.event("response.failed", response=failed)
                status = error.status
            else:
                truncated = finish in ("length", None)
                ch = job.choices[0]
                kept = len(ch.out.calls) if ch.out is not None else 0
                # a call whose arguments were cut is not among the result's calls (as in a
                # whole response): its events were sent, the final output leaves it out
                drop = {id(c["item"]) for i, c in self.calls.items() if i >= kept}
                cut = self.cur is not None and (self.cur["kind"] == "message"
                                                or id(self.cur["item"]) in drop)
                for b in self._close("incomplete" if truncated and cut else "completed"):
                    yield b
                if not any(it["type"] != "reasoning" and id(it) not in drop
                           for it in self.output):
                    for b in self._ensure("message") + self._close(
                            "incomplete" if truncated else "completed"):
                        yield b     # no text, no call: an empty message, as a whole response
                output = [it for it in self.output if id(it) not in drop]
                final = ctx.finish(output, finish, self.reasoning)
                kind = "response.completed" if final["status"] == "completed" else \
                    "response.incomplete"
                yield self.event(kind, response=final)
                status = 200
            # resumed after the last event was taken: the client received the whole stream
            job.stream_status = status
        finally:
            deltas.close()
