"""Speculation learned from traffic: drafts without a draft model, verified inside the batch.

The planner (reame/planner.py) asks, once a step's decode tokens, prompt chunks and admissions
are planned, which draft tokens each decoding sequence should add:

    drafts = speculator.propose(seqs, caps, base_tokens, max_total)
    ... the step computes [last token, *draft] for each, with a logits row for every position ...
    speculator.verified(seq, draft, accepted)      # after sampling, position by position
    speculator.step_done(n_tokens, seconds)        # the step's measured cost
    speculator.finished(seq)                       # the request's text joins the global index

Drafts come from the sequence's own prompt and output and from earlier requests
(index.TokenIndex); how many tokens each sequence drafts follows the measured step-cost curve
and the acceptance its request class has shown (control.py). Verification is plain sampling:
each position's logits go through the request's own Generation (penalties, grammar, bias,
temperature, top-k/p, stop strings exactly as without speculation), and the draft token is
accepted when the sampled token equals it. For a drafted token x this accepts with probability
p(x) and otherwise yields a token drawn from p with x excluded, renormalised: the speculative
sampling rule for a deterministic draft, so the output distribution is the model's, and with
a seed the very tokens of plain decoding (the random stream is used the same way).

Counters (Prometheus, vLLM's names), the report section and the saved state are here too; the
adaptive runtime (reame/adaptive/runtime.py) reports and saves them with its strategy.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from .control import MAX_DRAFT, TPOT_MARGIN, Acceptance, StepCost, allocate
from .index import CHUNK, Candidate, TokenIndex

MODES = ("auto", "on", "off")
EXPLORE_EVERY = 32      # one in this many steps that could draft more drafts one token more
MIN_CONF = 0.5          # a draft stops where fewer than half of its sources agree
SLACK_STEPS = 32        # a sequence's slack is kept within +-this many one-step costs
MISS_SKIP = 4           # after n lookups in a row that found nothing, skip the next min(n, this)...
SKIP_FROM = 9           # ...in steps of at least this many decoding sequences
GUARD_SEQS = 256        # finished sequences whose time per token the report summarises


class SeqState:
    """What the speculator keeps for one running sequence."""

    def __init__(self, seq, cls: str):
        self.cls = cls
        self.local = TokenIndex(local=True)
        self.local.add(seq.tokens)              # the sequence's own token list, as it grows
        predicted = getattr(seq.gen, "prediction", None)
        if predicted:                           # Predicted Outputs: the request's own guess
            self.local.add(list(predicted))
        self.follow: list[tuple[TokenIndex, Candidate]] = []
        self.follow_len = 0                     # len(seq.tokens) when `follow` was made
        self.match = 0                          # the last draft's match length
        self.sources: list[tuple[TokenIndex, int]] = []   # documents behind the last draft
        self.misses = 0                         # lookups in a row that found nothing...
        self.skip = 0                           # ...and the lookups still to skip after them
        self.slack = 0.0                        # seconds ahead of the time-per-token guard
        self.emitted = 1                        # tokens the last verify step emitted for it
        self.spent = 0.0                        # the curve's cost of the steps it was in...
        self.fair = 0.0                         # ...and of its tokens on steps without drafts


def _summary(ratios) -> dict | None:
    """The finished sequences' time per token relative to steps without drafts: p50, p95, the
    least and the most (None before any)."""
    if not ratios:
        return None
    r = sorted(ratios)
    return {"sequences": len(r), "min": round(r[0], 4), "p50": round(r[len(r) // 2], 4),
            "p95": round(r[min(len(r) - 1, int(0.95 * len(r)))], 4), "max": round(r[-1], 4)}


def request_class(seq) -> str:
    """Acceptance is kept per class: the prompt's first chunk (its system prompt or template)
    and the sampling mode (greedy or by temperature, constrained or free)."""
    g = seq.gen
    p = getattr(g, "params", None)
    t = getattr(p, "temperature", 0.0) or 0.0
    mode = "greedy" if t == 0 else f"t{min(2.0, round(t * 4) / 4):g}"
    if getattr(g, "constraint", None) is not None:
        mode += "+grammar"
    head = hash(tuple(seq.tokens[:min(CHUNK, seq.n_prompt)])) & 0xFFFFFFFF
    return f"{head:08x}:{mode}"


class Speculator:
    def __init__(self, n_vocab: int, *, max_tokens: int = 1 << 18, learn: bool = True,
                 margin: float = TPOT_MARGIN):
        """`max_tokens`: the global index's bound (token positions of earlier requests);
        `learn`: finished requests join the global index (False: each request drafts from
        itself only); `margin`: the time-per-token guard's share (control.TPOT_MARGIN)."""
        self.n_vocab = n_vocab
        self.learn = learn
        self.margin = margin
        self.global_ = TokenIndex(max_tokens)
        self.cost = StepCost()
        self.accept = Acceptance()
        self.states: dict[int, SeqState] = {}
        self.lock = threading.Lock()            # the engine thread writes; reports read
        self._declined = 0
        self._checks = 0
        self._pending = None                    # (cost without drafts, with, states) of a step
        # steps whose drafts the guard cut, by the state of the sequence whose bound did: behind
        # its bound (in_debt), with nothing to draft (no_draft), or drafting too little to pay
        # for the step's growth itself (draft)
        self.held_by = {"in_debt": 0, "no_draft": 0, "draft": 0}
        # counters since start (vLLM: spec_decode_num_drafts / _draft_tokens / _accepted_tokens)
        self.drafts = self.draft_tokens = self.accepted_tokens = 0
        self.accepted_per_pos = [0] * MAX_DRAFT
        self.emitted = 0                        # tokens emitted by sequences that verified
        # per finished sequence: its time per token relative to steps without drafts, on the
        # curve (the guard's own accounting): < 1 gained from drafts, <= 1 + margin when
        # only others' drafts lengthened its steps
        self.tpot_ratios: deque = deque(maxlen=GUARD_SEQS)
        self.loaded_docs = 0
        self.t0 = time.monotonic()

    # ---- the planner's calls (engine thread) ----

    def propose(self, seqs, caps: list[int], base_tokens: int,
                max_total: int) -> list[list[int]]:
        """Draft tokens for each decoding sequence (at most caps[i] for seqs[i], max_total in
        all); [] where the controller finds drafting loses."""
        self._settle()
        if not self._may_pay(len(seqs), base_tokens, max_total):
            c0 = self.cost(base_tokens)          # a step without drafts: one token each
            for seq in seqs:
                st = self.states.get(id(seq))
                if st is not None:
                    st.spent += c0
                    st.fair += c0
            return [[] for _ in seqs]
        offers, cands = [], []
        crowded = len(seqs) >= SKIP_FROM
        for seq, cap in zip(seqs, caps):
            draft, conf, st = (self._draft(seq, min(cap, MAX_DRAFT), crowded) if cap > 0
                               else ([], [], None))
            cands.append(draft)
            if draft:
                rates = self.accept.rates(st.cls, st.match, len(draft))
                offers.append([r * c for r, c in zip(rates, conf)])
            else:
                offers.append([])
        states = [self._state(seq) for seq in seqs]
        ks, binder = allocate(offers, base_tokens, self.cost, max_total,
                              [st.slack for st in states], self.margin)
        if binder is not None:                  # why: the sequence whose bound held the drafts
            st = states[binder]
            why = "in_debt" if st.slack < 0 else "no_draft" if not offers[binder] else "draft"
            self.held_by[why] += 1
        # exploration, now and then: one draft token more than chosen (a declined draft gets
        # verified, a larger step gets measured), so that neither a class's acceptance nor a
        # step size is judged once for good
        if sum(ks) < max_total and any(len(d) > k for d, k in zip(cands, ks)):
            self._declined += 1
            if self._declined % EXPLORE_EVERY == 0:
                i = max(range(len(cands)), key=lambda i: len(cands[i]) - ks[i])
                ks[i] += 1
        for st in states:
            st.emitted = 1
        c0 = self.cost(base_tokens)
        self._pending = (c0, self.cost.priced(base_tokens, sum(ks), c0), states)
        return [d[:k] for d, k in zip(cands, ks)]

    def _may_pay(self, n_seqs: int, base_tokens: int, max_total: int) -> bool:
        """Whether drafts that were all accepted could beat this step without any (if not, as
        at saturation, no sequence is even looked up), but for one step in EXPLORE_EVERY * 4."""
        c = self.cost
        if not c.known():
            return True
        self._checks += 1
        if self._checks % (EXPLORE_EVERY * 4) == 0:
            return True
        c0 = c(base_tokens)
        rate = base_tokens / c0
        for per_seq in (1, 2, 4, 8, MAX_DRAFT):
            k = min(max_total, per_seq * n_seqs)
            if (base_tokens + k) / c.priced(base_tokens, k, c0) > rate:
                return True
        return False

    def _state(self, seq) -> SeqState:
        st = self.states.get(id(seq))
        if st is None:
            st = self.states[id(seq)] = SeqState(seq, request_class(seq))
        return st

    def _draft(self, seq, limit: int, crowded: bool = False):
        """(tokens, confidence of each, state): the continuation most sources agree on after
        the sequence's longest earlier match."""
        st = self._state(seq)
        ctx = seq.tokens
        cands = self._advance(st, ctx)
        if not cands and st.skip and crowded:
            # in a crowded step a sequence whose last lookups found nothing (a unique chat) is
            # looked up again after 1, 2, .. MISS_SKIP tokens: with 16 unique chats the lookups
            # of every sequence every step took 2.8% of the engine thread (2026-12-06); a copy
            # that starts meanwhile is drafted at most MISS_SKIP tokens late. With fewer
            # sequences a lookup costs little beside the step, and a late copy much more.
            st.skip -= 1
            cands = []
        elif not cands:
            st.local.extend(0)
            found = [(st.local, c) for c in st.local.candidates(ctx)]
            found += [(self.global_, c) for c in self.global_.candidates(ctx)]
            found.sort(key=lambda x: (-x[1].match, not x[1].local, -x[1].weight))
            cands = found[:4]
            st.misses = 0 if cands else st.misses + 1
            st.skip = min(st.misses, MISS_SKIP)
        st.follow, st.follow_len = cands, len(ctx)
        if not cands:
            st.match = 0
            return [], [], st
        best = cands[0][1].match
        n = min(limit, max(2, 2 * best))
        conts = [(ix, c, ix.continuation(c, n)) for ix, c in cands]
        draft, conf = [], []
        alive = conts
        for j in range(n):
            votes: dict[int, float] = {}
            for _, c, cont in alive:
                if j < len(cont):
                    votes[cont[j]] = votes.get(cont[j], 0.0) + c.match + (0.5 if c.local else 0)
            if not votes:
                break
            tok = max(votes, key=votes.get)
            share = votes[tok] / sum(votes.values())
            if share < MIN_CONF:
                break
            draft.append(tok)
            conf.append(share)
            alive = [a for a in alive if j < len(a[2]) and a[2][j] == tok]
        st.match = best
        st.sources = [(ix, c.doc) for ix, c, _ in alive]
        return draft, conf, st

    @staticmethod
    def _advance(st: SeqState, ctx) -> list:
        """The last draft's sources still agreeing with the tokens since (an echo goes on)."""
        new = ctx[st.follow_len:]
        if not st.follow or not new:
            return []
        out = []
        for ix, c in st.follow:
            if ix.continuation(c, len(new)) == list(new):
                out.append((ix, Candidate(c.doc, c.pos + len(new),
                                          c.match + len(new), c.weight, c.local)))
        return out

    def verified(self, seq, draft: list[int], accepted: int, emitted: int) -> None:
        """seq verified `draft` in a step: its first `accepted` tokens were sampled;
        `emitted` tokens came out of the step for it."""
        if not draft:
            return
        st = self.states.get(id(seq))
        if st is not None:
            st.emitted = emitted
        with self.lock:
            self.drafts += 1
            self.draft_tokens += len(draft)
            self.accepted_tokens += accepted
            self.emitted += emitted
            for j in range(accepted):
                self.accepted_per_pos[j] += 1
        if st is not None:
            self.accept.observe(st.cls, st.match, len(draft), accepted)
            if accepted:
                for ix, doc in st.sources:
                    ix.credit(doc, accepted / max(1, len(st.sources)))

    def step_done(self, n_tokens: int, seconds: float) -> None:
        """After a step's forward pass (before its tokens are sampled): its measured cost."""
        self.cost.observe(n_tokens, seconds)

    def _settle(self) -> None:
        """Once the last proposing step's tokens are sampled (verified() ran): each sequence it
        saw moves ahead of the time-per-token guard by what its emitted tokens would have cost
        without drafts (1 + margin base steps each) less what the step cost (the curve's
        estimates, as the choice used)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        c0, c, states = pending
        bound = SLACK_STEPS * c0
        for st in states:
            st.slack = max(-bound, min(bound, st.slack + (1 + self.margin) * st.emitted * c0 - c))
            st.spent += c
            st.fair += st.emitted * c0

    def finished(self, seq) -> None:
        """seq is done: forget its state; its prompt and output join the global index."""
        st = self.states.pop(id(seq), None)
        out = seq.tokens[seq.n_prompt:]
        with self.lock:
            if st is not None and st.fair > 0:
                self.tpot_ratios.append(st.spent / st.fair)
            if self.learn and (out or st is not None):
                self.global_.add_request(seq.tokens[:seq.n_prompt], out)

    # ---- report and persistence ----

    def report(self) -> dict:
        with self.lock:
            d, t, a = self.drafts, self.draft_tokens, self.accepted_tokens
            per_pos = list(self.accepted_per_pos)
            g = self.global_
            out = {
                "draft_tokens": t, "accepted_tokens": a, "verify_steps": d,
                "acceptance_rate": round(a / t, 4) if t else None,
                "accepted_per_verify": round(a / d, 3) if d else None,
                "tokens_per_verify": round(self.emitted / d, 3) if d else None,
                "steps_held_for_tpot": sum(self.held_by.values()),
                "held_by": dict(self.held_by),
                "accepted_per_position": per_pos,
                "index": {"documents": len(g.docs), "tokens": g.n_tokens,
                          "max_tokens": g.max_tokens, "evictions": g.evictions,
                          "loaded_documents": self.loaded_docs},
                "step_cost_s": self.cost.curve(),
                "tpot_vs_no_drafts": _summary(self.tpot_ratios),
            }
        return out

    def state(self) -> dict:
        """A snapshot to save (copies: `jsonable(state)` may run on another thread)."""
        with self.lock:
            return {"index": self.global_.state(), "acceptance": self.accept.state(),
                    "step_cost": {str(k): v for k, v in self.cost.curve().items()}}

    @staticmethod
    def jsonable(state: dict) -> dict:
        return {**state, "index": TokenIndex.jsonable(state["index"])}

    def load(self, state: dict) -> int:
        """Restore state(); returns the documents loaded. ValueError when malformed (then
        nothing is kept)."""
        if not isinstance(state, dict):
            raise ValueError("an object expected")
        fresh = TokenIndex(self.global_.max_tokens)
        n = fresh.load(state.get("index") or {}, self.n_vocab)
        acc = Acceptance()
        acc.load(state.get("acceptance") or [])
        cost = StepCost()
        for k, v in (state.get("step_cost") or {}).items():
            if not (str(k).isdigit() and isinstance(v, (int, float)) and v > 0):
                raise ValueError("step_cost: token count -> seconds expected")
            cost.observe(int(k), float(v))
        with self.lock:
            self.global_, self.accept, self.cost = fresh, acc, cost
            self.loaded_docs = n
        return n
