"""One request's generation: sampling, streaming detokenisation, stop conditions.

`Generation` is the per-sequence state machine that both `reame generate` (one request) and the
server's scheduler (many requests per step) drive: give it the logits of its next position, get
back a `Step` with the token and, at the end, the finish reason. Its `TextStream` turns tokens
into text: the text that is now safe to emit, holding back what might be the start of a stop
string until it is known not to be. `reame generate` runs both in one place; the server samples
on the engine thread and runs each choice's TextStream on the request's thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .batch import Batch
from .errors import ContextLengthError, ReameError
from .sampling import Sampled, Sampler, SamplingParams

PREFILL_CHUNK = 512   # prompt tokens per forward call (bounds activation memory)


@dataclass
class Step:
    token: int
    text: str                                  # text safe to emit now (may be empty)
    sampled: Sampled
    finish_reason: str | None = None           # None | "stop" | "length"
    appended: bool = True                      # the token is part of the output (an end-of-
                                               # generation token that ends it is not)


class TextStream:
    """A sequence's text as its tokens arrive: streaming detokenisation, the control tokens kept
    in the text, and stop strings. Text that might be the start of a stop string is held back
    until it is known not to be; a stop string ends the text (`stopped`) before it.

    The server runs one per choice on the request's own thread (reame/server/responses.py), so
    the engine thread only samples; `Generation` runs one itself where there is no server
    (`reame generate`)."""

    def __init__(self, tokenizer, stop=(), keep_special: frozenset = frozenset()):
        from .tokenizer import IncrementalDecoder
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]      # "" would match at once and emit nothing
        self.keep_special = keep_special
        self.decoder = IncrementalDecoder(tokenizer, skip_special=True)
        self.text = ""            # everything released so far
        self._held = ""           # decoded text not yet released (possible stop-string prefix)
        self.stopped = False      # a stop string matched: nothing more is released
        self.stop_hit: str | None = None    # the stop string that matched (the earliest)

    def push(self, token: int) -> str:
        """Add an output token; returns the text now safe to emit."""
        if self.stopped:
            return ""
        self._held += self.decoder.push(token)
        if token in self.keep_special:          # skipped by the decoder: spelled out here
            self._held += self.tokenizer.token_bytes(token).decode("utf-8", "replace")
        return self._release(final=False)

    def flush(self) -> str:
        """The sequence ended: release what was held back."""
        if self.stopped:
            return ""
        self._held += self.decoder.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        """Emit held text up to any stop string; keep back a possible stop-string prefix."""
        held = self._held
        if self.stop:
            hits = [(i, s) for s in self.stop if (i := held.find(s)) >= 0]
            if hits:
                cut, self.stop_hit = min(hits, key=lambda h: h[0])
                out, self._held = held[:cut], ""
                self.stopped = True
                self.text += out
                return out
            if not final:
                keep = 0
                for s in self.stop:                        # longest suffix that starts a stop string
                    for k in range(min(len(s) - 1, len(held)), keep, -1):
                        if s.startswith(held[-k:]):
                            keep = k
                            break
                out, self._held = held[:len(held) - keep], held[len(held) - keep:]
                self.text += out
                return out
        self._held = ""
        self.text += held
        return held


@dataclass
class Generation:
    """One sequence's sampling and its stop conditions on tokens: end of generation, the
    grammar's completion, max_tokens and the context. With `detokenize` (the default) it also
    runs the sequence's `TextStream` (text, stop strings); the server turns that off and runs
    the text on the request's thread, where a stop string ends the sequence through
    `Request.close` (reame/scheduler.py)."""
    tokenizer: object
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    n_ctx: int = 0                              # context per sequence (0: unbounded)
    ignore_eos: bool = False
    constraint: object = None                   # reame.structured.Constraint: a grammar
    keep_special: frozenset = frozenset()       # control tokens whose text stays in the output
                                                # (tool-call and reasoning markers)
    detokenize: bool = True                     # run the TextStream here
    # where the grammar may end but need not (a complete tool call, more may follow), the
    # model's own choice decides: drawn without the grammar's mask, a token the grammar does
    # not allow ends the output ("stop") instead of being redrawn among the allowed ones
    end_outside_grammar: bool = False

    def __post_init__(self):
        self.sampler = Sampler(self.params, self.prompt_ids)
        self.stream = (TextStream(self.tokenizer, self.stop, self.keep_special)
                       if self.detokenize else None)
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None
        if not self.prompt_ids:                   # nothing to take the first logits from
            raise ReameError("the prompt is empty (it encodes to no tokens)")
        if self.n_ctx and len(self.prompt_ids) >= self.n_ctx:
            raise ContextLengthError(f"the prompt has {len(self.prompt_ids)} tokens; the context "
                                     f"holds {self.n_ctx}")

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        """Everything emitted so far (empty without `detokenize`)."""
        return self.stream.text if self.stream is not None else ""

    @property
    def n_past(self) -> int:
        """Tokens in this sequence's KV cache once the last sampled token is fed back."""
        return len(self.prompt_ids) + len(self.output_ids)

    def step(self, logits: np.ndarray, sampled: Sampled | None = None) -> Step:
        """Sample from the logits of the next position and advance. With a constraint, only
        tokens its grammar allows are drawn, and the grammar's completion ends the sequence.
        `sampled`: the token already drawn from these logits (the batched sampler's), to
        advance with."""
        c = self.constraint
        if sampled is None and c is not None and self.end_outside_grammar and c.accepting:
            s = self.sampler.sample(logits, None)          # what the model itself would write
            if not c.mask()[s.token]:                     # not the grammar's: the output ends
                return self._finish(Step(s.token, "", s, appended=False), "stop")
        else:
            s = sampled or self.sampler.sample(logits, c.mask() if c is not None else None)
        tok = s.token
        eog = tok in self.tokenizer.eog_ids and (not self.ignore_eos or c is not None)
        if eog:                                 # a grammar allows it only once complete
            return self._finish(Step(tok, "", s, appended=False), "stop")
        if c is not None:
            c.accept(tok)
        self.output_ids.append(tok)
        step = Step(tok, "", s)
        if self.stream is not None:
            step.text = self.stream.push(tok)
            if self.stream.stopped:                        # a stop string matched
                return self._finish(step, "stop")
        if c is not None and c.done:                       # the grammar is complete
            return self._finish(step, "stop")
        if self.max_tokens is not None and len(self.output_ids) >= self.max_tokens:
            return self._finish(step, "length")
        if self.n_ctx and self.n_past >= self.n_ctx:
            return self._finish(step, "length")
        return step

    def finish(self, reason: str) -> str:
        """End early (a server timeout, a stop string found on the request's side) with
        `reason`; returns the held-back text, now released."""
        return self._finish(Step(-1, "", None, appended=False), reason).text

    def _finish(self, step: Step, reason: str) -> Step:
        if self.stream is not None:
            step.text += self.stream.flush()
        self.finish_reason = self.finish_reason or reason
        step.finish_reason = self.finish_reason
        return step


def generate_stream(engine, gen: Generation, chunk: int = PREFILL_CHUNK) -> Iterator[Step]:
    """Run one Generation to the end on an engine, yielding a Step per sampled token."""
    slot = engine.kv.alloc()
    try:
        ids = gen.prompt_ids
        logits = None
        for start in range(0, len(ids), chunk):
            logits = engine.forward(Batch.prefill(ids[start:start + chunk], start, slot))
        while True:
            step = gen.step(logits[0])
            yield step
            if step.finish_reason:
                return
            logits = engine.forward(Batch.decode([step.token], [gen.n_past - 1], [slot]))
    finally:
        engine.kv.free(slot)
