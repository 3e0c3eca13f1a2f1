"""One request's generation: sampling, streaming detokenisation, stop conditions.

`Generation` is the per-request state machine that both `reame generate` (one request) and the
server's scheduler (many requests per step) drive: give it the logits of its next position, get
back a `Step` with the token, the text that is now safe to emit and, at the end, the finish
reason. Text that might be the start of a stop sequence is held back until it is known not to be.
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


@dataclass
class Generation:
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

    def __post_init__(self):
        from .tokenizer import IncrementalDecoder
        self.stop = [s for s in self.stop if s]   # "" would match at once and emit nothing
        self.sampler = Sampler(self.params, self.prompt_ids)
        self.decoder = IncrementalDecoder(self.tokenizer, skip_special=True)
        self.output_ids: list[int] = []
        self.text = ""            # everything emitted so far
        self._held = ""           # decoded text not yet emitted (possible stop-sequence prefix)
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
    def n_past(self) -> int:
        """Tokens in this sequence's KV cache once the last sampled token is fed back."""
        return len(self.prompt_ids) + len(self.output_ids)

    def step(self, logits: np.ndarray) -> Step:
        """Sample from the logits of the next position and advance. With a constraint, only
        tokens its grammar allows are drawn, and the grammar's completion ends the sequence."""
        c = self.constraint
        s = self.sampler.sample(logits, c.mask() if c is not None else None)
        tok = s.token
        eog = tok in self.tokenizer.eog_ids and (not self.ignore_eos or c is not None)
        if eog:                                 # a grammar allows it only once complete
            return self._finish(Step(tok, "", s), "stop")
        if c is not None:
            c.accept(tok)
        self.output_ids.append(tok)
        self._held += self.decoder.push(tok)
        if tok in self.keep_special:             # skipped by the decoder: spelled out here
            self._held += self.tokenizer.token_bytes(tok).decode("utf-8", "replace")
        text = self._release(final=False)
        step = Step(tok, text, s)
        if self.finished:                                  # a stop sequence matched
            step.finish_reason = self.finish_reason
            return step
        if c is not None and c.done:                       # the grammar is complete
            return self._finish(step, "stop")
        if self.max_tokens is not None and len(self.output_ids) >= self.max_tokens:
            return self._finish(step, "length")
        if self.n_ctx and self.n_past >= self.n_ctx:
            return self._finish(step, "length")
        return step

    def finish(self, reason: str) -> str:
        """End early (a server timeout) with `reason`; returns the held-back text, now released."""
        return self._finish(Step(-1, "", None), reason).text

    def _finish(self, step: Step, reason: str) -> Step:
        self._held += self.decoder.flush()
        step.text += self._release(final=True)
        self.finish_reason = self.finish_reason or reason
        step.finish_reason = self.finish_reason
        return step

    def _release(self, final: bool) -> str:
        """Emit held text up to any stop sequence; keep back a possible stop-sequence prefix."""
        held = self._held
        if self.stop:
            hits = [(i, s) for s in self.stop if (i := held.find(s)) >= 0]
            if hits:
                cut = min(i for i, _ in hits)
                out, self._held = held[:cut], ""
                self.finish_reason = "stop"
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
