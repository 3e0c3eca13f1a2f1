"""Computing a saved strategy's hot prefixes into the prefix cache in the server's idle time.

A restart that saved hot prefixes used to queue them all as one request ahead of the first
client: /health said 200 while nothing was answered for as long as they took (~85 s for long
prefixes on 2 cores, issue 29). Here they are computed a piece at a time (PIECE tokens, whole
KV blocks, each piece a prefix-cache hit for everything before it) and a piece starts only when
no request runs or waits, of this model or (Turns.may_idle) another served by the process: a
client arriving during warm-up shares at most one piece's steps.
`tick()` is the whole decision, so tests drive it without a thread or a clock.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("reame.server")

PIECE = 256                    # tokens a piece adds, rounded up to whole KV blocks
POLL = 0.05                    # seconds between looks at an idle server


class PrefixWarmer:
    def __init__(self, scheduler, prefixes: list[list[int]], block_size: int,
                 piece: int = PIECE):
        self.scheduler = scheduler
        self.prefixes = [list(p) for p in prefixes if p]
        self.piece = -(-max(piece, block_size) // block_size) * block_size
        self.done = [0] * len(self.prefixes)       # tokens of each prefix computed so far
        self.current = None                        # the piece being computed (a Request)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def finished(self) -> bool:
        return all(d == len(p) for d, p in zip(self.done, self.prefixes))

    def status(self) -> dict:
        return {"prefixes": len(self.prefixes), "tokens": sum(map(len, self.prefixes)),
                "computed": sum(self.done)}

    def tick(self) -> bool:
        """Start the next piece if the server is idle and no piece runs; False once every
        prefix is computed (or the warmer stopped)."""
        if self._stop.is_set() or self.finished:
            return False
        if self.current is not None:
            if not self.current.finished:
                return True
            self.current = None
        s = self.scheduler
        turns = getattr(s, "turns", None)
        if s.running or s.queue_depth or (turns is not None and not turns.may_idle(s)):
            return True                            # clients first, this model's or another's
        i = next(k for k, (d, p) in enumerate(zip(self.done, self.prefixes)) if d < len(p))
        end = min(len(self.prefixes[i]), self.done[i] + self.piece)
        try:
            self.current = s.submit_embeddings([self.prefixes[i][:end]], pooling="last")
        except Exception as e:                     # a stopped engine, a full queue: give up
            log.warning("warm-up: hot prefixes not computed: %s", e)
            self._stop.set()
            return False
        self.done[i] = end
        return True

    # ---- the thread ----

    def start(self) -> "PrefixWarmer":
        if self.prefixes:
            log.info("warm-up: computing %d hot prefixes (%d tokens) into the prefix cache "
                     "while no request runs", len(self.prefixes), sum(map(len, self.prefixes)))
            self._thread = threading.Thread(target=self._run, name="reame-warmup", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while self.tick():
            self._stop.wait(POLL)
        if self.finished:
            log.info("warm-up: %d hot prefixes computed", len(self.prefixes))

    def stop(self) -> None:
        """Stop starting pieces and cancel the one running (a SIGTERM drains clients only)."""
        self._stop.set()
        if self.current is not None:
            self.current.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
