"""Step planning: which tokens of which sequences the next forward step computes, and what the
step's logits do.

The planner never calls the model. `plan()` builds a `StepPlan` (vLLM's `schedule()`):
1. every running sequence, oldest admission first, gets its next tokens: one for a decoding
   sequence, a chunk of at most `prefill_chunk` for one still computing its prompt (or
   recomputing after a preemption), within the step's `token_budget`; decode tokens are placed
   first, so a long prompt never delays the running sequences' next tokens; once a prompt
   finishes in the step, the budget left goes only to prompts that finish too (a partial chunk
   would delay that first token and gain its own prompt nothing);
2. each gets the KV blocks those tokens need; when the pool has none left, the most recently
   admitted sequence is *preempted*: its blocks are released (the full ones stay cached, so
   the recompute is mostly a prefix hit) and it waits again at the head of the queue;
3. waiting sequences are admitted while slots, blocks and budget last, round robin over
   clients and then requests (a request's next sequence waits behind the first sequence of
   every client, then request, that holds fewer places; among equals, first come first
   served: `_fair_order`); with the batch full or the KV pool short, a client holding two
   places more than a waiting one's yields its newest (`_yield_places`, preemptions); and not
   head-of-line blocked: a younger request that fits is admitted when an older one does not
   yet fit, unless the older one has been overtaken `max_bypass` times already;
   an admitted sequence takes the longest cached prefix of its tokens (full blocks keyed by a
   hash chain, reame/kv_blocks.py) and computes only the rest.
`apply(plan, logits)` (vLLM's `update_from_output()`) advances each sequence, registers the
blocks that became full in the prefix cache, samples the sequences whose last token was
computed, forks the `n` choices of a prompt (they share its full blocks; the partial last block
is copied) and releases the blocks of finished sequences. There is no prefill or decode phase:
a sequence's computed-token count catches up with its token count.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .batch import Batch
from .kv_blocks import ROOT, BlockPool


@dataclass
class SchedulerParams:
    """Every knob of the step plan in one place (the adaptive runtime tunes these)."""
    max_batch: int = 8            # sequences running at once (KV slots, logits rows per step)
    token_budget: int = 512       # tokens per forward step (decode tokens + prompt chunks)
    prefill_chunk: int = 512      # prompt tokens of one sequence per step
    max_waiting: int = 512        # sequences that may wait to be admitted before a 429
    max_bypass: int = 8           # younger admissions that may overtake a waiting request
    reserve_per_running: int = 1  # blocks kept free per running sequence when admitting

    def check(self, engine_tokens: int, slots: int) -> None:
        if not 1 <= self.max_batch <= slots:
            raise ValueError(f"max_batch={self.max_batch}: the engine has {slots} KV slots")
        if not self.max_batch <= self.token_budget <= engine_tokens:
            raise ValueError(f"token_budget={self.token_budget}: must be at least max_batch "
                             f"and at most the engine's {engine_tokens} tokens per step")
        if self.prefill_chunk < 1 or self.max_waiting < 0 or self.max_bypass < 0:
            raise ValueError("prefill_chunk >= 1, max_waiting >= 0 and max_bypass >= 0")


WAITING, RUNNING, DONE = "waiting", "running", "done"
_order = itertools.count()


class Seq:
    """One generated sequence: its tokens (prompt, then sampled), how many have K/V in the
    cache, its blocks and its slot. `siblings` are the other choices of its prompt, forked off
    it once the prompt is computed."""

    def __init__(self, tokens: list[int], gen=None, owner=None, index: int = 0,
                 pooling: str | None = None):
        self.tokens = list(tokens)
        # an embedding: no sampling; the final hidden states of the prompt are pooled
        # ("mean" over every token, or the "last" token's) once it is computed
        self.pooling = pooling
        self.pooled: np.ndarray | None = None
        self.n_prompt = len(self.tokens)
        self.gen, self.owner, self.index = gen, owner, index
        self.n_computed = 0
        self.blocks: list[int] = []
        self.hashes: list[bytes] = []      # of the full blocks of tokens, as far as computed
        self.n_registered = 0              # leading blocks offered to the prefix cache
        self.n_kept = 1 << 62              # output tokens its reader kept (a stop string)
        self.slot = -1
        self.state = WAITING
        self.siblings: list[Seq] = []
        self.order = next(_order)          # arrival order
        self.admitted = -1                 # admission order (preemption takes the highest)
        self.bypassed = 0                  # younger admissions while this one waited
        self.n_cached: int | None = None   # prompt tokens found in the cache at first admission
        self.n_preempted = 0
        self.t_first = self.t_last = None  # when its first / latest token was emitted

    @property
    def remaining(self) -> int:
        return len(self.tokens) - self.n_computed

    def __repr__(self) -> str:
        return (f"Seq(#{self.order} {self.state} {self.n_computed}/{len(self.tokens)} "
                f"blocks={self.blocks} slot={self.slot})")


@dataclass
class Work:
    seq: Seq
    start: int          # first position computed
    n: int              # tokens computed
    row: int = -1       # logits row (the chunk reaches the last token), else -1
    offset: int = 0     # index of its first token in the step's batch
    # drafted tokens verified after the sequence's next token (reame/speculate): the work
    # computes n = 1 + len(draft) positions, each with a logits row from `row` on
    draft: list[int] = field(default_factory=list)

    @property
    def decodes(self) -> bool:
        """A decode token (with its draft, if any), not a prompt chunk."""
        return self.n - len(self.draft) == 1


@dataclass
class StepPlan:
    batch: Batch
    work: list[Work]            # decode tokens first, then prompt chunks
    n_decode: int = 0           # the first n_decode entries of work are decode tokens
    preempted: list[Seq] = field(default_factory=list)
    admitted: list[Seq] = field(default_factory=list)


@dataclass
class Outcome:
    """What apply() did to one sequence: a sampled step (to emit), or an error."""
    seq: Seq
    step: object = None
    error: BaseException | None = None


def _keys(seq: "Seq") -> tuple:
    """(client, request) of a sequence, for fairness: the client its request names (the HTTP
    layer's address), else the request itself; a sequence without a request is its own."""
    if seq.owner is None:
        return id(seq), id(seq)
    client = _client(seq)
    return (("client", client) if client is not None else id(seq.owner)), id(seq.owner)


FAIR_CHUNK = 64    # prompt tokens a client takes in a step another client's sequence decodes in


def _client(seq: "Seq"):
    """The client a sequence's request names, or None (no address: an embedded scheduler, the
    warm-up): such requests take turns in admission but neither yield nor bound others."""
    return getattr(seq.owner, "client", None)


class Planner:
    def __init__(self, kv, params: SchedulerParams | None = None, salt: bytes = b"",
                 speculator=None, max_logits: int | None = None):
        """`speculator`: a reame.speculate.Speculator drafting tokens for the decoding
        sequences (None: no speculation); `max_logits`: the logits rows one step may ask the
        engine for (None: unbounded)."""
        self.kv, self.params = kv, params or SchedulerParams()
        self.speculator = speculator
        self.max_logits = max_logits or 1 << 30
        self.bs = kv.block_size
        self.pool = BlockPool(kv.n_blocks, self.bs, salt)
        self.slots = list(range(kv.max_seqs - 1, -1, -1))
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []          # in admission order
        self.preemptions = 0
        self._left: dict = {}                   # prompt tokens a bounded client may still take
        self._admissions = itertools.count()

    # ---- queue ----

    def add(self, seq: Seq) -> None:
        """A new prompt (with its siblings attached) joins the end of the queue."""
        seq.state = WAITING
        self.waiting.append(seq)

    @property
    def n_waiting(self) -> int:
        return sum(1 + len(s.siblings) for s in self.waiting)

    @property
    def n_running(self) -> int:
        """Slots in use: running sequences and the siblings they will fork."""
        return sum(1 + len(s.siblings) for s in self.running)

    # ---- plan ----

    def plan(self) -> StepPlan | None:
        """The next step, or None when nothing can run."""
        p = self.params
        # decode tokens first: the budget for prompt chunks is what one token per decoding
        # sequence leaves (token_budget >= max_batch, so every decoding sequence gets one)
        budget = p.token_budget - sum(1 for s in self.running if s.remaining == 1)
        decode, chunks, preempted = [], [], []
        preempted += self._yield_places()
        self._shares()
        for seq in list(self.running):          # oldest first: preemption victims are newer
            if seq.state != RUNNING:
                continue                        # preempted by an older one this step
            n = 1 if seq.remaining == 1 else self._chunk(seq.remaining,
                                                         self._room(seq, budget), chunks)
            if seq.remaining > 1:
                self._take(seq, n)
            if n and (n := self._grow(seq, n, preempted)):
                if seq.remaining == 1 and seq.n_computed >= seq.n_prompt:
                    decode.append((seq, n))
                else:       # a prompt's last token left alone by a chunk the budget cut is
                    chunks.append((seq, n))         # a prompt row, on the prompt kernel
                    if seq.remaining > 1:           # (it was counted with the decode tokens)
                        budget -= n
        admitted = self._admit(budget, chunks) if budget else []
        if not (decode or chunks or self.running) and self.waiting:
            seq = self.waiting[0]               # alone, it still does not fit: a caller's bug
            raise RuntimeError(f"a sequence of {len(seq.tokens)} tokens (and "
                               f"{len(seq.siblings)} more choices) cannot fit a KV pool of "
                               f"{self.pool.n_blocks} blocks of {self.bs} and a batch of "
                               f"{self.params.max_batch}")
        drafts = self._drafts(decode, chunks) if self.speculator is not None and decode else {}
        work, tokens, positions, slots, rows = [], [], [], [], []
        for seq, n in decode + chunks:
            start = seq.n_computed
            draft = drafts.get(id(seq), [])
            w = Work(seq, start, n + len(draft), offset=len(tokens), draft=draft)
            tokens += seq.tokens[start:start + n] + draft
            positions += range(start, start + w.n)
            slots += [seq.slot] * w.n
            if draft:                           # every position of a verified draft: logits
                w.row = len(rows)
                rows += range(len(tokens) - w.n, len(tokens))
            elif start + n == len(seq.tokens) and seq.pooling is None:
                w.row = len(rows)
                rows.append(len(tokens) - 1)
            work.append(w)
        if not work:
            return None
        n_decode = sum(w.n for w in work[:len(decode)])      # decode rows come first
        return StepPlan(Batch.build(tokens, positions, slots, rows, n_decode=n_decode), work,
                        len(decode), preempted, admitted)

    def _drafts(self, decode: list, chunks: list) -> dict[int, list[int]]:
        """Draft tokens for the decoding sequences (id(seq) -> tokens), within the token budget
        and the logits rows the step leaves, and the KV blocks free without preempting anyone
        (a draft never displaces a sequence)."""
        rows = len(decode) + sum(1 for s, n in chunks if s.n_computed + n == len(s.tokens))
        used = len(decode) + sum(n for _, n in chunks)
        room = min(self.params.token_budget - used, self.max_logits - rows)
        seqs = [s for s, _ in decode if not s.siblings and s.pooling is None]
        if room <= 0 or not seqs:
            return {}
        caps = []
        for s in seqs:
            cap = self.kv.n_ctx - 1 - s.n_computed          # positions stay in the context
            limit = getattr(s.gen, "max_tokens", None)
            if limit is not None:                           # tokens past max_tokens: wasted
                cap = min(cap, limit - len(s.gen.output_ids) - 1)
            caps.append(max(0, cap))
        proposed = self.speculator.propose(seqs, caps, used, room)
        out = {}
        for s, d in zip(seqs, proposed):
            if d:
                need = -(-(s.n_computed + 1 + len(d)) // self.bs) - len(s.blocks)
                if need > self.pool.available:
                    d = d[:(len(s.blocks) + self.pool.available) * self.bs - s.n_computed - 1]
                    need = self.pool.available
                if d:
                    self._add_blocks(s, need)
                    out[id(s)] = d
        return out

    def _shares(self) -> None:
        """The prompt tokens each client may take this step: at most FAIR_CHUNK for a client
        holding or asking for more places (running and waiting sequences) than another client
        with work; no bound otherwise. A step is as long as its prompt tokens make it and the
        oldest prompt takes its chunk first, so 128 prompts of 4,000 tokens from one client
        made another client's prompt wait for one of them to finish (1.7-3.7 s to its first
        token) and then its every token wait for ~500 prompt tokens. A client alone, and the
        client with the fewest places, go at full speed."""
        places: dict = {}                       # running and waiting: what a client asks
        for s in self.running + list(self.waiting):
            if (c := _client(s)) is not None:
                places[c] = places.get(c, 0) + 1 + len(s.siblings)
        fewest = min(places.values(), default=0)
        self._left = {c: FAIR_CHUNK for c, n in places.items() if n > fewest}

    def _room(self, seq: Seq, budget: int) -> int:
        c = _client(seq)
        return min(budget, self._left[c]) if c in self._left else budget

    def _take(self, seq: Seq, n: int) -> None:
        c = _client(seq)
        if c in self._left:
            self._left[c] -= n

    def _chunk(self, remaining: int, budget: int, chunks: list) -> int:
        """How many of its `remaining` prompt tokens a sequence computes this step: as many as
        the chunk size and the budget allow, except that a chunk which would not finish its
        prompt waits when the step already finishes another prompt. Such a partial chunk would
        delay that prompt's first token (and every decoding sequence's next one) by its own cost
        and gain its own prompt nothing: it finishes in a later step either way. The oldest
        prompt always gets its chunk (nothing precedes it), so long prompts still advance every
        step."""
        n = min(remaining, self.params.prefill_chunk, budget)
        if n < remaining and any(s.remaining == k for s, k in chunks):
            return 0
        return n

    def _grow(self, seq: Seq, n: int, preempted: list) -> int:
        """Give seq the blocks for its next n tokens, preempting newer sequences when the pool
        is exhausted; returns how many tokens it can compute (fewer when it is the newest)."""
        while True:
            need = -(-(seq.n_computed + n) // self.bs) - len(seq.blocks)
            if need <= self.pool.available:
                break
            victim = self.running[-1]
            if victim is seq:                   # the newest: shrink, or wait its turn
                n = (len(seq.blocks) + self.pool.available) * self.bs - seq.n_computed
                if n > 0:
                    continue                    # fits now
                self.preempt(seq)
                preempted.append(seq)
                return 0
            self.preempt(victim)
            preempted.append(victim)
        self._add_blocks(seq, need)
        return n

    def _add_blocks(self, seq: Seq, need: int) -> None:
        """`need` more blocks (available: the caller checked) at the end of seq's table."""
        new = [self.pool.allocate() for _ in range(max(0, need))]
        if new:
            self.kv.set_blocks(seq.slot, len(seq.blocks), new)
            seq.blocks += new

    def _fair_order(self) -> list[Seq]:
        """The waiting sequences in the order they are offered a place: round robin over
        clients, then over each client's requests. A sequence ranks by the slots its client
        holds (running, or claimed by that client's waiting sequences ahead of it), then by
        those its request holds likewise, then by its place in the queue; so a request of 128
        prompts takes one place in each round, beside every other request, instead of 128
        before them, and a client with 50 streams one place beside each other client.
        Sequences without an owner are requests (and clients) of their own."""
        held: dict = {}
        for s in self.running:
            for k in _keys(s):
                held[k] = held.get(k, 0) + 1 + len(s.siblings)
        ranked = []
        for pos, s in enumerate(self.waiting):
            c, r = _keys(s)
            ranked.append((held.get(c, 0), held.get(r, 0), pos, s))
            for k in (c, r):
                held[k] = held.get(k, 0) + 1 + len(s.siblings)
        ranked.sort(key=lambda t: t[:3])
        return [t[3] for t in ranked]

    def _yield_places(self) -> list[Seq]:
        """With the batch full, or the KV pool too short for it, and a sequence waiting whose
        client holds at least two places fewer than the client holding the most, preempt that
        client's newest sequences (as many as the waiting one needs): a client's share of the
        batch and of the pool is bounded while another waits (50 streams of one client took
        every place, 3 prompts of 4,000 tokens the whole pool, and a second client waited for
        one of them to end). The preempted sequences wait again behind the other client's,
        their full blocks still cached."""
        if not self.waiting or not any(_client(s) is not None for s in self.running):
            return []                           # nothing to yield: no sort of the queue
        first = self._fair_order()[0]
        mine = _client(first)
        out = []
        while mine is not None:
            places: dict = {}
            for s in self.running:
                if (c := _client(s)) is not None:
                    places[c] = places.get(c, 0) + 1 + len(s.siblings)
            top = max(places, key=places.get, default=None)
            if top is None or top == mine or places[top] < places.get(mine, 0) + 2:
                return out
            if not self._short_of(first):
                return out
            victims = [s for s in self.running if _client(s) == top and not s.siblings]
            if not victims:
                return out
            victim = max(victims, key=lambda s: s.admitted)
            self.preempt(victim)
            out.append(victim)
        return out

    def _short_of(self, seq: Seq) -> bool:
        """Whether seq would not be admitted for want of a batch place or of KV blocks."""
        p = self.params
        hits = self._prefix_hits(seq)
        need_blocks = -(-len(seq.tokens) // self.bs) - len(hits)
        free_hits = sum(1 for b in hits if self.pool.ref[b] == 0)
        reserve = p.reserve_per_running * len(self.running)
        return (self.n_running + 1 + len(seq.siblings) > p.max_batch
                or need_blocks + free_hits + reserve > self.pool.available)

    def _admit(self, budget: int, chunks: list) -> list[Seq]:
        """Admit waiting sequences that fit (see the module docstring), in their fair order;
        each gets its first chunk in `chunks`."""
        p = self.params
        admitted = []
        reserve = p.reserve_per_running * len(self.running)
        order = self._fair_order() if budget else []
        for i, seq in enumerate(order):
            if budget == 0:
                break
            need_slots = 1 + len(seq.siblings)
            hits = self._prefix_hits(seq)
            need_blocks = -(-len(seq.tokens) // self.bs) - len(hits)
            free_hits = sum(1 for b in hits if self.pool.ref[b] == 0)   # taking them uses them
            fits = (self.n_running + need_slots <= p.max_batch
                    and need_blocks + free_hits + reserve <= self.pool.available)
            n = self._chunk(len(seq.tokens) - len(hits) * self.bs, self._room(seq, budget),
                            chunks)
            if not fits or not n:
                if seq.bypassed >= p.max_bypass:
                    break                       # nothing younger overtakes it any more
                continue
            for older in order[:i]:             # everyone still waiting ahead of it was bypassed
                if older.state == WAITING:
                    older.bypassed += 1
            self.waiting.remove(seq)
            self._start(seq, hits)
            admitted.append(seq)
            self._take(seq, n)
            n = self._grow(seq, n, [])          # its remaining tokens: those past its hits
            if n:
                chunks.append((seq, n))
                budget -= n
            reserve += p.reserve_per_running
        return admitted

    def _prefix_hits(self, seq: Seq) -> list[int]:
        """Cached blocks of seq's longest cached prefix, leaving at least one token to compute
        (its logits are needed)."""
        n_full = (len(seq.tokens) - 1) // self.bs
        if seq.pooling == "mean":               # every token's hidden state is needed
            n_full = 0
        if len(seq.hashes) < n_full:
            parent = seq.hashes[-1] if seq.hashes else ROOT
            seq.hashes += self.pool.hashes(seq.tokens[:n_full * self.bs], parent, len(seq.hashes))
        return self.pool.lookup(seq.hashes[:n_full])

    def _start(self, seq: Seq, hits: list[int]) -> None:
        seq.slot = self.slots.pop()
        for sib in seq.siblings:
            sib.slot = self.slots.pop()         # reserved for the fork
        for b in hits:
            self.pool.take(b)
        seq.blocks = list(hits)
        seq.n_computed = len(hits) * self.bs
        seq.n_registered = len(hits)
        self.kv.set_blocks(seq.slot, 0, hits)
        self.pool.queries += len(seq.tokens)
        self.pool.hits += seq.n_computed
        if seq.n_cached is None:
            seq.n_cached = min(seq.n_computed, seq.n_prompt)
        seq.state = RUNNING
        seq.admitted = next(self._admissions)
        self.running.append(seq)

    # ---- apply ----

    def apply(self, plan: StepPlan, logits, hidden=None) -> list[Outcome]:
        """Advance every planned sequence; sample those whose last token was computed (logits
        row w.row), fork siblings, finish and free. Returns what each sampled sequence did.
        `hidden(lo, hi)`: the final hidden states of batch tokens lo..hi-1 (embeddings)."""
        out = []
        drawn = self._sample_plain(plan, logits)
        for w in plan.work:
            seq = w.seq
            if seq.state != RUNNING:            # aborted meanwhile
                continue
            if w.draft:
                out += self._verify(w, logits)
                continue
            seq.n_computed += w.n
            self._register_full(seq)
            if seq.pooling is not None:
                done = self._pool(seq, w, hidden)
                if done is not None:
                    out.append(Outcome(seq, done))
                    self.finish(seq)
                continue
            if w.row < 0:
                continue
            row = logits[w.row]
            group = [seq] + self._fork(seq)
            for s in group:
                out.append(self._sample(s, row, drawn.get(id(s))))
        return out

    @staticmethod
    def _sample_plain(plan: StepPlan, logits) -> dict:
        """The tokens of the step's sequences that sample with nothing but a temperature (no
        grammar, penalty, truncation or logprobs), drawn at once (sampling.sample_rows: the
        tokens their own samplers would draw one by one): id(seq) -> Sampled. Drafts are
        verified position by position, forked choices sample their first token alone, and so
        does a row sample_rows gives None for (no finite weights: its request fails alone)."""
        from .sampling import sample_rows
        seqs, rows = [], []
        for w in plan.work:
            s = w.seq
            sampler = getattr(s.gen, "sampler", None)       # (a Generation's; fakes have none)
            if (w.row >= 0 and not w.draft and s.state == RUNNING and s.pooling is None
                    and sampler is not None and sampler.plain and s.gen.constraint is None
                    and not s.gen.finished):
                seqs.append(s)
                rows.append(logits[w.row])
        if len(seqs) < 2:
            return {}
        try:
            drawn = sample_rows([s.gen.sampler for s in seqs], rows)
        except Exception:   # (none known) sampled one by one, so that the error is that
            return {}       # sequence's request's alone
        return {id(s): d for s, d in zip(seqs, drawn) if d is not None}

    def _sample(self, s: Seq, row, drawn=None) -> Outcome:
        """s samples its next token from a logits row (or advances with `drawn`, the token
        already drawn from it): appended, or s finishes; a sampling bug is an Outcome with
        the error (it fails this sequence's request)."""
        try:
            step = s.gen.step(row) if drawn is None else s.gen.step(row, drawn)
        except Exception as e:
            return Outcome(s, error=e)
        if step.finish_reason:
            self.finish(s)
        else:
            s.tokens.append(step.token)
        return Outcome(s, step)

    def _verify(self, w: Work, logits) -> list[Outcome]:
        """Sample the positions of a verified draft in order, as plain decoding would, while
        the sampled token is the drafted one; then keep the K/V of the accepted positions only:
        the rejected ones are past n_computed (never read: attention is causal, and they are
        overwritten when computed for real), their blocks are released, and the prefix cache
        registers only blocks full of accepted tokens."""
        seq, k = w.seq, len(w.draft)
        out, accepted = [], 0
        for i in range(k + 1):
            o = self._sample(seq, logits[w.row + i])
            out.append(o)
            if o.error is not None or o.step.finish_reason:
                break
            if i == k or o.step.token != w.draft[i]:
                break
            accepted += 1
        self.speculator.verified(seq, w.draft, accepted, len(out))
        if seq.state == RUNNING:
            seq.n_computed = w.start + 1 + accepted
            self._register_full(seq)
            keep = -(-(seq.n_computed + 1) // self.bs)     # the blocks the next token needs
            for b in reversed(seq.blocks[keep:]):
                self.pool.release(b)
            del seq.blocks[keep:]
        return out

    @staticmethod
    def _pool(seq: Seq, w: Work, hidden):
        """Add this chunk's hidden states to an embedding; the unit-length vector once the
        whole prompt is in, else None."""
        h = np.asarray(hidden(w.offset, w.offset + w.n), np.float64)
        if seq.pooling == "mean":
            seq.pooled = h.sum(0) if seq.pooled is None else seq.pooled + h.sum(0)
        else:
            seq.pooled = h[-1]
        if seq.n_computed < len(seq.tokens):
            return None
        v = seq.pooled / (len(seq.tokens) if seq.pooling == "mean" else 1)
        norm = np.linalg.norm(v)
        return (v / norm if norm > 0 else v).astype(np.float32)

    def _register_full(self, seq: Seq) -> None:
        full = seq.n_computed // self.bs
        if full <= seq.n_registered:
            return
        if len(seq.hashes) < full:
            parent = seq.hashes[-1] if seq.hashes else ROOT
            seq.hashes += self.pool.hashes(seq.tokens[:full * self.bs], parent, len(seq.hashes))
        for j in range(seq.n_registered, full):
            self.pool.register(seq.blocks[j], seq.hashes[j])
        seq.n_registered = full

    def _fork(self, seq: Seq) -> list[Seq]:
        """seq's prompt is computed: its siblings share its full blocks and get a copy of the
        partial last one (without a block for the copy, a sibling recomputes it later)."""
        forked = []
        siblings, seq.siblings = seq.siblings, []
        full = seq.n_computed // self.bs
        for sib in siblings:
            sib.blocks = seq.blocks[:full]
            for b in sib.blocks:
                self.pool.take(b)
            if full < len(seq.blocks):
                try:
                    b = self.pool.allocate()
                except IndexError:
                    for b in sib.blocks:
                        self.pool.release(b)
                    sib.blocks = []
                    self.slots.append(sib.slot)
                    sib.slot = -1
                    sib.state = WAITING
                    self.waiting.appendleft(sib)
                    forked.append(sib)          # still samples from this row
                    continue
                self.kv.copy_block(seq.blocks[full], b)
                sib.blocks.append(b)
            self.kv.set_blocks(sib.slot, 0, sib.blocks)
            sib.hashes, sib.n_registered = list(seq.hashes[:full]), full
            sib.n_computed = seq.n_computed
            sib.n_cached = seq.n_cached
            sib.state = RUNNING
            sib.admitted = next(self._admissions)
            self.running.append(sib)
            forked.append(sib)
        return forked

    # ---- ending and preempting ----

    def _release(self, seq: Seq) -> None:
        for b in reversed(seq.blocks):          # the tail first: LRU evicts a chain's tail first
            self.pool.release(b)
        seq.blocks = []
        if seq.slot >= 0:
            self.slots.append(seq.slot)
            seq.slot = -1
        for sib in seq.siblings:
            if sib.slot >= 0:
                self.slots.append(sib.slot)
                sib.slot = -1
        if seq in self.running:
            self.running.remove(seq)

    def finish(self, seq: Seq) -> None:
        """seq is done (finished, cancelled or failed): free everything it holds; its siblings
        that never forked end with it."""
        if seq.state == DONE:
            return
        if self.speculator is not None and seq.pooling is None:
            self.speculator.finished(seq)
        if seq.state == WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)
        seq.state = DONE
        for sib in seq.siblings:
            sib.state = DONE
        seq.siblings = []

    def preempt(self, seq: Seq) -> None:
        """Free seq's blocks and slot; it waits again at the head of the queue and recomputes
        its tokens when readmitted (its full blocks most likely still cached)."""
        self._release(seq)
        seq.n_computed = seq.n_registered = 0
        seq.pooled = None
        seq.state = WAITING
        seq.n_preempted += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def check(self) -> None:
        """Consistency of blocks, references and slots (tests)."""
        self.pool.check()
        refs = [0] * self.pool.n_blocks
        slots = []
        for seq in self.running:
            assert seq.state == RUNNING
            for b in seq.blocks:
                refs[b] += 1
            slots += [seq.slot] + [s.slot for s in seq.siblings]
            assert len(seq.blocks) * self.bs >= seq.n_computed
            assert list(self.kv.tables[seq.slot, :len(seq.blocks)]) == seq.blocks
        for seq in self.waiting:
            assert seq.state == WAITING and not seq.blocks and seq.slot == -1
        assert refs == self.pool.ref, "block references do not match the sequences holding them"
        assert sorted(slots + self.slots) == list(range(self.kv.max_seqs))
