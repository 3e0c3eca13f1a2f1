"""From scheduler events to OpenAI responses: whole JSON bodies or Server-Sent Events.

A `Job` is one HTTP request's generation. It submits to the scheduler, waits for the first event
(so an error before any output still gets its own HTTP status) and then either collects every
choice into one `chat.completion` / `text_completion` object or yields SSE chunks ending with
`data: [DONE]`. Closing the stream (the client went away) cancels the request at once.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .. import __version__
from ..generate import TextStream
from ..scheduler import EngineFailure, Event, RequestTimeout, SchedulerStopped
from ..structured import GrammarError
from .metrics import Metrics, sequence_stats
from .schemas import APIError, GenerationRequest

log = logging.getLogger("reame.server")

FINGERPRINT = f"reame-{__version__}"


def error_for(e: BaseException, retry_after: int = 1) -> APIError:
    """The HTTP error for a failure reported by the scheduler."""
    if isinstance(e, RequestTimeout):
        return APIError(503, f"{e}; the server is busy, retry later.", "server_error", None,
                        "timeout", {"Retry-After": str(retry_after)})
    if isinstance(e, SchedulerStopped):
        return APIError(503, str(e), "server_error", None, "shutting_down",
                        {"Retry-After": str(retry_after)})
    if isinstance(e, EngineFailure):
        return APIError(500, str(e), "server_error", None, "engine_error")
    if isinstance(e, GrammarError):         # the request's own grammar hit a limit mid-way
        return APIError(400, str(e), "invalid_request_error", None, "invalid_grammar")
    return APIError(500, f"internal error: {type(e).__name__}", "server_error", None, None)


class ClientGone(APIError):
    """The client closed its connection while waiting: nobody will read the answer."""

    def __init__(self):
        super().__init__(499, "Client closed the request.", "invalid_request_error", None,
                         "client_closed_request")


def client_key(environ) -> str | None:
    """Who sent a request, for sharing the batch fairly between clients: the peer's address;
    behind a proxy on this machine (a loopback peer), the address that proxy saw (the last
    X-Forwarded-For entry, which nginx's $proxy_add_x_forwarded_for appends)."""
    addr = environ.get("REMOTE_ADDR")
    forwarded = environ.get("HTTP_X_FORWARDED_FOR")
    if forwarded and addr and (addr.startswith("127.") or addr == "::1"):
        return forwarded.rsplit(",", 1)[-1].strip() or addr
    return addr


def client_connected(environ) -> Callable[[], bool] | None:
    """A check that the client of this WSGI request is still connected, when the server exposes
    its socket (gunicorn does): readable with a peek that reads end-of-file means the peer
    closed. The socket is polled first: a socket with a timeout (the worker's send timeout)
    would otherwise wait that long inside recv even with MSG_DONTWAIT."""
    sock = environ.get("gunicorn.socket")
    if sock is None or not hasattr(sock, "recv"):
        return None

    def connected() -> bool:
        try:
            p = select.poll()
            p.register(sock.fileno(), select.POLLIN)
            if not p.poll(0):
                return True                 # nothing to read: still connected
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except (BlockingIOError, InterruptedError, TimeoutError):
            return True
        except ConnectionError:             # reset by the peer
            return False
        except (OSError, ValueError):       # e.g. a TLS socket, which cannot peek
            return True
    return connected


class _Choice:
    __slots__ = ("index", "parts", "n_tokens", "logprobs", "finish_reason", "t_last", "offset",
                 "out", "stream")

    def __init__(self, index: int, stream: TextStream, prefix: str = ""):
        self.stream = stream                     # its tokens -> text, stop strings
        self.out = None                          # chat_output.ChatOutput: splits the text
        self.index = index
        self.parts: list[str] = [prefix] if prefix else []
        self.n_tokens = 0
        self.logprobs: list[tuple[int, float, list]] = []   # (token, logprob, top [(id, lp)])
        self.finish_reason: str | None = None
        self.t_last: float | None = None
        self.offset = len(prefix)               # text offset of the next token (completions)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Job:
    def __init__(self, service, req: GenerationRequest, prompts: list[list[int]],
                 metrics: Metrics | None, endpoint: str, t_arrival: float,
                 connected: Callable[[], bool] | None = None, client: str | None = None):
        self.service, self.req, self.prompts = service, req, prompts
        self.metrics, self.endpoint, self.t_arrival = metrics, endpoint, t_arrival
        self.chat = req.kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = service.id
        self.tok = service.tok
        prefixes = [""] * (len(prompts) * req.n)
        if req.echo:
            for i, p in enumerate(req.prompts):
                text = p if isinstance(p, str) else self.tok.decode(p, skip_special=True)
                for j in range(req.n):
                    prefixes[i * req.n + j] = text
        # grammar, kept markers, reasoning and tool-call splitting (400 for a bad grammar)
        plan = service.output_plan(req, prompts) if hasattr(service, "output_plan") else None
        keep = frozenset(plan.keep) if plan is not None else frozenset()
        # each choice's text is made here, on the request's thread (the engine thread only
        # samples): detokenising, the kept control tokens, stop strings
        self.choices = [_Choice(k, TextStream(self.tok, req.stop, keep), prefixes[k])
                        for k in range(len(prefixes))]
        self.first_token_seen = False
        self.recorded = False
        self.stream_status = 499        # a stream's outcome: 499 until its last byte is taken
        self.streaming = False          # answered as a stream (see answer)
        self.delivered: Callable[[], bool] | None = None   # did the client take every byte?
        if self.chat and plan is not None and (plan.think or plan.tool_format is not None):
            from .chat_output import ChatOutput
            for ch in self.choices:
                ch.out = ChatOutput(plan.think, plan.started_in_think, plan.tool_format)
        self.request = (service.submit(req, prompts, plan, client=client) if plan is not None
                        else service.submit(req, prompts, client=client))   # may raise 429, 503
        self._events = self.request.events(idle=connected)
        self._first: Event | None = None

    # ---- lifecycle ----

    def wait_first(self) -> None:
        """Block until the first event; raise its error as an HTTP error if it failed."""
        try:
            self._first = next(self._events)
        except StopIteration:
            self._first = None
        if self._first is not None and self._first.error is not None:
            self._record()
            raise error_for(self._first.error, self.service.config.retry_after)
        if self._first is None and self.request.cancelled:
            self._record()
            raise ClientGone()

    def events(self) -> Iterator[Event]:
        """The request's events, until every choice has ended (a choice ended by a stop string
        here ends without waiting for the engine to take note)."""
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        for ev in self._events:
            yield ev
            if all(ch.finish_reason is not None for ch in self.choices):
                return

    def cancel(self) -> None:
        self.request.cancel()

    @property
    def usage(self) -> dict:
        p = sum(len(x) for x in self.prompts)
        c = sum(ch.n_tokens for ch in self.choices)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": self.request.cached_tokens}}

    def _record(self) -> None:
        """Token counters and the request duration, once."""
        if self.recorded or self.metrics is None:
            return
        self.recorded = True
        m, model = self.metrics, (self.model,)
        m.inc("reame_prompt_tokens_total", sum(len(x) for x in self.prompts), model)
        m.inc("reame_generation_tokens_total", sum(ch.n_tokens for ch in self.choices), model)
        m.observe("reame_request_duration_seconds", time.monotonic() - self.t_arrival,
                  (self.model, self.endpoint))
        m.finished(self.model,
                   *sequence_stats(self.request, self.choices, self.prompts, self.req.n))

    # ---- one event ----

    def _apply(self, ev: Event) -> tuple[_Choice, str, list]:
        """Update the choice; return it, the text to emit and its new logprob entries. The
        text is made here from the sampled token; a stop string in it ends the choice (and
        the engine is told to end its sequence); tokens after that are not part of it."""
        ch = self.choices[ev.index]
        if ch.finish_reason is not None:
            return ch, "", []
        step = ev.step
        new_lp = []
        text = ""
        finish = ev.finish_reason
        if step is not None:
            ch.n_tokens += 1
            if step.appended:
                text = ch.stream.push(step.token)
                if ch.stream.stopped:
                    finish = "stop"
            if self.req.logprobs and step.appended and step.sampled.logprob is not None:
                entry = (step.token, step.sampled.logprob, step.sampled.top_logprobs)
                ch.logprobs.append(entry)
                new_lp.append(entry)
            if self.metrics is not None:
                if not self.first_token_seen:
                    self.metrics.observe("reame_time_to_first_token_seconds",
                                         ev.t - self.t_arrival, (self.model,))
                elif ch.t_last is not None:
                    self.metrics.observe("reame_time_per_output_token_seconds",
                                         ev.t - ch.t_last, (self.model,))
            self.first_token_seen = True
            ch.t_last = ev.t
        if finish:
            text += ch.stream.flush()
            ch.finish_reason = finish
            self.request.close(ch.index, ch.n_tokens, end=finish != ev.finish_reason)
        if text:
            ch.parts.append(text)
        return ch, text, new_lp

    # ---- logprob shapes ----

    def _token_str(self, tid: int) -> tuple[str, list[int]]:
        b = self.tok.token_bytes(tid)
        return b.decode("utf-8", errors="replace"), list(b)

    def _chat_logprobs(self, entries) -> dict:
        content = []
        for tid, lp, top in entries:
            s, b = self._token_str(tid)
            tops = []
            for t, l in top:
                ts, tb = self._token_str(t)
                tops.append({"token": ts, "logprob": l, "bytes": tb})
            content.append({"token": s, "logprob": lp, "bytes": b, "top_logprobs": tops})
        return {"content": content, "refusal": None}

    def _completion_logprobs(self, entries, ch: _Choice) -> dict:
        tokens, lps, tops, offsets = [], [], [], []
        for tid, lp, top in entries:
            s, _ = self._token_str(tid)
            tokens.append(s)
            lps.append(lp)
            d = {}
            for t, l in top:
                d.setdefault(self._token_str(t)[0], l)
            tops.append(d if self.req.top_logprobs else None)
            offsets.append(ch.offset)
            ch.offset += len(s)
        return {"tokens": tokens, "token_logprobs": lps,
                "top_logprobs": tops if self.req.top_logprobs else None, "text_offset": offsets}

    # ---- a whole response ----

    def result(self) -> dict:
        error = None
        try:
            for ev in self.events():
                if ev.error is not None:
                    error = ev.error
                    break
                self._apply(ev)
        finally:
            self.cancel()                           # no-op when finished
            self._record()
        if error is not None:
            raise error_for(error, self.service.config.retry_after)
        if self.request.cancelled:
            raise ClientGone()
        choices = []
        for ch in self.choices:
            reason = ch.finish_reason or "length"
            if self.chat:
                message = {"role": "assistant", "content": ch.text, "refusal": None}
                if ch.out is not None:
                    ch.out.feed(ch.text)
                    ch.out.finish(reason)
                    message = ch.out.message()
                    if ch.out.calls and reason == "stop":
                        reason = "tool_calls"
                c = {"index": ch.index, "message": message,
                     "logprobs": self._chat_logprobs(ch.logprobs) if self.req.logprobs else None,
                     "finish_reason": reason}
            else:
                c = {"index": ch.index, "text": ch.text,
                     "logprobs": (self._completion_logprobs(ch.logprobs, ch)
                                  if self.req.logprobs else None),
                     "finish_reason": reason}
            choices.append(c)
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT,
                "choices": choices, "usage": self.usage}

    # ---- a stream ----

    def _chunk(self, choices: list[dict], usage=False) -> bytes:
        d = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
             "created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT,
             "choices": choices}
        if self.req.include_usage:
            d["usage"] = self.usage if usage else None
        return b"data: " + json.dumps(d, ensure_ascii=False).encode() + b"\n\n"

    def _choice_chunk(self, ch: _Choice, text: str | None, lp: list, finish: str | None,
                      role: bool = False) -> dict:
        if self.chat:
            delta = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return {"index": ch.index, "delta": delta,
                    "logprobs": self._chat_logprobs(lp) if lp else None, "finish_reason": finish}
        return {"index": ch.index, "text": text or "",
                "logprobs": self._completion_logprobs(lp, ch) if lp else None,
                "finish_reason": finish}

    def _delta_chunk(self, ch: _Choice, delta: dict, lp: list, finish: str | None = None) -> dict:
        return {"index": ch.index, "delta": delta,
                "logprobs": self._chat_logprobs(lp) if lp else None, "finish_reason": finish}

    def deltas(self) -> Iterator["Delta"]:
        """The generation as chat deltas, in order: per choice, `{"content"}`,
        `{"reasoning_content"}` or `{"tool_calls"}` deltas (an empty delta carries logprobs
        alone), then one with the choice's finish_reason ("tool_calls" when it ended in calls);
        an engine failure on the way is one last Delta with `error` set. Every API's stream is
        this sequence in its own wire format (chat chunks here, /v1/responses and /v1/messages
        events in their modules). Content that is already here joins into one delta
        (`coalesced`: the tokens of a step that accepted drafts go out as one chunk). The caller
        must close() it: closing early cancels the generation; taken to its end, it does not
        finalise: the caller sets `stream_status` once its last byte is taken."""
        try:
            yield from coalesced(self._pieces(), lambda: self.request.out.qsize() > 0)
        finally:
            self.cancel()
            self._record()

    def _pieces(self) -> Iterator[tuple[float, list["Delta"]]]:
        """deltas() before joining: each event's step time and deltas."""
        for ev in self.events():
            if ev.error is not None:
                yield ev.t, [Delta(ev.index, {}, [], None,
                                   error_for(ev.error, self.service.config.retry_after))]
                return
            was_open = self.choices[ev.index].finish_reason is None
            ch, text, lp = self._apply(ev)
            if not was_open:                      # it ended already: a later token
                continue
            finish = ch.finish_reason
            out = []
            if ch.out is not None:                # reasoning / tool calls split apart
                parts = ch.out.feed(text)
                if finish:
                    parts += ch.out.finish(finish)
                out += [Delta(ch.index, d, lp if i == 0 else []) for i, d in enumerate(parts)]
                if lp and not parts:
                    out.append(Delta(ch.index, {}, lp))
                if finish:
                    out.append(Delta(ch.index, {}, [], "tool_calls"
                                     if ch.out.calls and finish == "stop" else finish))
            else:
                if text or lp:
                    out.append(Delta(ch.index, {"content": text}, lp))
                if finish:
                    out.append(Delta(ch.index, {}, [], finish))
            yield ev.t, out

    def sse(self) -> Iterator[bytes]:
        """The SSE body of a chat or text completion. The caller must close() it: closing early
        cancels the generation."""
        deltas = self.deltas()
        try:
            if self.chat:
                for ch in self.choices:
                    yield self._chunk([self._choice_chunk(ch, None, [], None, role=True)])
            elif self.req.echo:
                for ch in self.choices:
                    yield self._chunk([self._choice_chunk(ch, ch.text, [], None)])
            status = 200
            for d in deltas:
                if d.error is not None:
                    status = d.error.status
                    yield b"data: " + json.dumps(d.error.body()).encode() + b"\n\n"
                    break
                ch = self.choices[d.index]
                if self.chat:
                    yield self._chunk([self._delta_chunk(ch, d.delta, d.logprobs,
                                                         d.finish_reason)])
                else:
                    yield self._chunk([self._choice_chunk(ch, d.delta.get("content"),
                                                          d.logprobs, d.finish_reason)])
            if self.req.include_usage:
                yield self._chunk([], usage=True)
            yield b"data: [DONE]\n\n"
            # resumed: the server wrote [DONE] and asks for more; a failed write closes the
            # generator at the yield instead, and the outcome stays 499
            self.stream_status = status
        finally:
            deltas.close()


@dataclass
class Delta:
    """One piece of a streamed generation (see Job.deltas)."""
    index: int                      # the choice
    delta: dict                     # a chat delta: content, reasoning_content or tool_calls
    logprobs: list = field(default_factory=list)    # (token, logprob, top) entries
    finish_reason: str | None = None
    error: APIError | None = None


def _joinable(d: Delta) -> bool:
    return d.error is None and d.finish_reason is None and set(d.delta) <= {"content"}


def coalesced(events: Iterator[tuple[float, list[Delta]]],
              ready: Callable[[], bool]) -> Iterator[Delta]:
    """The deltas of `events` ((step time, deltas) per scheduler event, a token each), with
    the content deltas of one choice made by one step joined (their text and logprob entries,
    in order) while the step's next event is already there (`ready()`): a step that accepted k
    drafted tokens puts k events at once, and they go out as one chunk, as vLLM streams a
    step's tokens, instead of k JSON chunks each encoded, written and parsed on a 2-core machine
    that also runs the forward pass. Tokens of different steps are never joined (a stream
    without drafts is token by token, however slowly its client reads), and nothing is held
    waiting: when no event is ready at an event's end, what is held goes out. Reasoning,
    tool-call, finish and error deltas pass as they are, after the content before them."""
    held, held_t = None, None
    for t, ds in events:
        for d in ds:
            if held is not None:
                if _joinable(d) and d.index == held.index and t == held_t:
                    joined = held.delta.get("content", "") + d.delta.get("content", "")
                    has = "content" in held.delta or "content" in d.delta
                    held = Delta(held.index, {"content": joined} if has else {},
                                 held.logprobs + d.logprobs)
                    continue
                yield held
                held = None
            if _joinable(d):
                held, held_t = d, t
            else:
                yield d
        if held is not None and not ready():
            yield held
            held = None
    if held is not None:
        yield held


class ClosingStream:
    """A WSGI response iterable whose close() cancels the generation even if it never started.

    gunicorn (and every WSGI server) calls close() when the response ends or writing to the
    client fails; a generator that was never advanced would not run its `finally` on close.
    close() then tells `on_end` the stream's outcome: 200 when it was taken to its end, 499
    when the client left before, the error's status when it failed on the way.
    """

    def __init__(self, job: Job, body: Iterator[bytes] | None = None):
        self.job = job
        self._it = job.sse() if body is None else body
        self.on_end: Callable[[int], None] | None = None   # told the outcome (200, 499, ...)

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except StopIteration:
            # written whole; but bytes the kernel accepted may never reach a client that left:
            # 200 only once the client acknowledged them all (the worker's GuardedSocket)
            job = self.job
            if job.stream_status == 200 and job.delivered is not None and not job.delivered():
                job.stream_status = 499
            raise

    def close(self) -> None:
        try:
            self._it.close()
        finally:
            self.job.cancel()
            self.job._record()
            on_end, self.on_end = self.on_end, None
            if on_end is not None:
                on_end(self.job.stream_status)



def start_job(req, service, r: GenerationRequest, prompts: list[list[int]], metrics,
              endpoint: str) -> Job:
    """The Job generating a request: timed from its arrival, cancelled once its client left."""
    job = Job(service, r, prompts, metrics, endpoint,
              getattr(req.context, "t_arrival", time.monotonic()),
              connected=client_connected(req.env), client=client_key(req.env))
    job.delivered = getattr(req.env.get("gunicorn.socket"), "delivered", None)
    req.env["reame.job"] = job          # the access log reads a stream's outcome from it
    return job


def answer(resp, job: Job, stream: bool, body: Callable[[], Iterator[bytes]] | None = None,
           result: Callable[[], dict] | None = None) -> None:
    """Wait for the job's first token (cancelling it if that fails), then answer: as SSE, the
    stream `body()` makes (the chat or text completion chunks by default), else `result()`
    (`job.result` by default) as JSON."""
    try:
        job.wait_first()
    except BaseException:
        job.cancel()
        raise
    if stream:
        resp.content_type = "text/event-stream; charset=utf-8"
        resp.set_header("Cache-Control", "no-cache")
        resp.set_header("X-Accel-Buffering", "no")       # nginx: do not buffer this response
        resp.stream = ClosingStream(job, None if body is None else body())
        job.streaming = True
    else:
        resp.media = (job.result if result is None else result)()


# ---- /v1/embeddings ----

def embeddings_result(service, request, inputs: int, prompts: list[list[int]], model_fmt: str,
                      metrics: Metrics | None, t_arrival: float,
                      connected: Callable[[], bool] | None = None) -> dict:
    """Wait for every input's vector and build OpenAI's `list` of `embedding` objects
    (`encoding_format` "float": arrays of numbers; "base64": little-endian float32 bytes)."""
    import base64
    vectors: dict = {}
    error = None
    try:
        for ev in request.events(idle=connected):
            if ev.error is not None:
                error = ev.error
                break
            if ev.embedding is not None:
                vectors[ev.index] = ev.embedding
    finally:
        request.cancel()                            # no-op when finished
    n_tokens = sum(len(p) for p in prompts)
    if metrics is not None:
        metrics.inc("reame_prompt_tokens_total", n_tokens, (service.id,))
        metrics.observe("reame_request_duration_seconds", time.monotonic() - t_arrival,
                        (service.id, "/v1/embeddings"))
    if error is not None:
        raise error_for(error, service.config.retry_after)
    if request.cancelled:
        raise ClientGone()
    if len(vectors) != inputs:                      # out of time before every vector was done
        raise error_for(RequestTimeout("the request timed out during prompt processing"),
                        service.config.retry_after)
    data = []
    for i in range(inputs):
        v = vectors[i]
        emb = (base64.b64encode(v.astype("<f4").tobytes()).decode() if model_fmt == "base64"
               else v.astype(float).tolist())
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {"object": "list", "data": data, "model": service.id,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
