"""The step's token budget, chosen for a latency target (issue 27 item 3).

A decoding sequence gets one token per step, so its time per output token (TPOT) is the time
of the steps it is in. A step that also computes prompt chunks is as long as its prompt tokens
make it: with the fixed budget of 512 tokens, a long document being computed beside 16
decoding sequences makes every one of their tokens wait for a step of ~500 prompt tokens
(1.6 s p95 TPOT in the documents phase of docs/benchmarks.md). Chunked prefill with a budget
sized for a latency target (vLLM's `max_num_batched_tokens` under chunked prefill, Sarathi-Serve's
token budget derived from the TBT SLO) bounds those steps; here the budget is measured, not
configured:

- `StepFit`: the live cost of a step that carries prompt tokens, fitted on this server's own
  steps: seconds ~ a + b * decode tokens + c * prompt tokens (least squares, coefficients kept
  non-negative, older steps forgotten with a half-life of `HALF_LIFE` such steps, and at once
  when the median of its last 16 predictions misses by more than -15%/+18%: another load on
  the machine, longer contexts). Steps of decode tokens only are left out: they run in smaller
  step programs of their own and no budget changes them.
- the margin: observed / predicted seconds of the recent steps carrying both decode and prompt
  tokens (each predicted before it was observed); its 95th percentile (1.0-2.0) scales the
  prediction, so that the target is held at p95 and not on average (a noisy machine gets a
  smaller budget).
- `BudgetController.choose`: before each step, for the decode tokens it will carry (`d`, known
  from the step just applied), the largest prompt budget P with margin * (a + b d + c P) <=
  `tpot_limit`, never above the configured chunk and never below two floors that keep prompts
  progressing: `floor` tokens (a 1,400-token document in at most 22 steps at the default 64,
  however heavy the decode) and `throughput_floor`: a step's fixed cost `a` is paid per step,
  so where prompts, not decoding, set how many steps run, smaller steps cost throughput; the
  budget gives up at most `max_loss` (5%) of the modelled throughput on the traffic's mix
  (R, prompt tokens computed per generated token, measured). Measured without it on a 2-vCPU
  VM, where a step's fixed cost was ~95 ms live: 64-token steps, long documents at 0.62x
  the throughput. So the limit holds where it is cheap to hold, and where the machine's fixed
  cost per step makes it dear, the budget stops at the 5%. With no sequence decoding, the
  full budget (there is no token to protect).
  It sets `SchedulerParams.prefill_chunk = P` and `token_budget = d + P` (within
  [max(max_batch, running sequences), the configured budget]: every decoding sequence still
  gets its token), which the planner reads at every step.

Only under `--adaptive on` (the runtime calls it); `--adaptive off` keeps the built-in 512 and
`frozen` the saved values (`typical()`: the medians chosen lately). The fitted model and margin
are saved with the strategy, so a restarted server budgets from its first step.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque

import numpy as np

from ..planner import RUNNING
from .profile import percentile

HALF_LIFE = 200          # prompt-carrying steps: older ones weigh half as much
MIN_STEPS = 8            # prompt-carrying steps observed before the fit is used
MARGIN0 = 1.1            # the margin before MIN_RATIOS predictions were checked
MIN_RATIOS = 16
MARGIN_MAX = 2.0
MAX_LOSS = 0.05          # of the modelled throughput, the most the budget may cost
MIX_DECAY = 0.5 ** (1 / 100)    # R over the last ~100 steps (a half-life)
CHANGE_STEPS = 16        # a median miss of the last 16 predictions outside CHANGE: refit
CHANGE = (0.85, 1.18)
RIDGE = 1e-6             # relative: keeps a collinear fit (every step d + p = 512) solvable


class StepFit:
    """seconds ~ a + b * decode + c * prompt, weighted least squares with exponential
    forgetting (normal equations kept as sums), coefficients constrained >= 0."""

    def __init__(self, half_life: float = HALF_LIFE):
        self.decay = 0.5 ** (1.0 / half_life)
        self.xtx = np.zeros((3, 3))
        self.xty = np.zeros(3)
        self.yty = 0.0
        self.weight = 0.0           # sum of the (decayed) weights
        self.count = 0              # steps observed
        self._coef: tuple[float, float, float] | None = None

    def observe(self, decode: int, prompt: int, seconds: float) -> None:
        x = np.array([1.0, float(decode), float(prompt)])
        k = self.decay
        self.xtx = k * self.xtx + np.outer(x, x)
        self.xty = k * self.xty + x * seconds
        self.yty = k * self.yty + seconds * seconds
        self.weight = k * self.weight + 1.0
        self.count += 1
        self._coef = None

    def forget(self, keep: float) -> None:
        """Keep only `keep` of the weight of every step so far (the cost changed)."""
        self.xtx *= keep
        self.xty *= keep
        self.yty *= keep
        self.weight *= keep
        self._coef = None

    def coef(self) -> tuple[float, float, float]:
        """(a, b, c), the least-squares fit among non-negative coefficients (every subset of
        free coefficients solved, the feasible one of least squared error kept: exact for
        three)."""
        if self._coef is not None:
            return self._coef
        A = self.xtx + RIDGE * np.diag(np.maximum(np.diag(self.xtx), 1e-12))
        best, best_sse = (0.0, 0.0, 0.0), self.yty
        for mask in range(1, 8):
            idx = [i for i in range(3) if mask >> i & 1]
            sub = A[np.ix_(idx, idx)]
            try:
                sol = np.linalg.solve(sub, self.xty[idx])
            except np.linalg.LinAlgError:
                sol = np.linalg.lstsq(sub, self.xty[idx], rcond=None)[0]
            if (sol < 0).any():
                continue
            beta = np.zeros(3)
            beta[idx] = sol
            sse = self.yty - 2 * beta @ self.xty + beta @ self.xtx @ beta
            if sse < best_sse - 1e-15:
                best, best_sse = tuple(float(v) for v in beta), sse
        self._coef = best
        return best

    def predict(self, decode: int, prompt: int) -> float:
        a, b, c = self.coef()
        return a + b * decode + c * prompt

    def per_token(self) -> float:
        """Seconds per token of the steps observed (a cold start: every token alike, nothing
        fixed), 0 before any."""
        tokens = self.xtx[0, 1] + self.xtx[0, 2]
        return float(self.xty[0] / tokens) if tokens > 0 else 0.0


class BudgetController:
    def __init__(self, params, *, tpot_limit: float = 0.25, engine_tokens: int | None = None,
                 floor: int = 64, max_loss: float = MAX_LOSS):
        self.params = params
        self.tpot_limit = tpot_limit
        self.full_budget = params.token_budget        # the configured (built-in) values
        self.full_chunk = params.prefill_chunk
        self.engine_tokens = engine_tokens or params.token_budget
        self.floor = max(1, min(floor, self.full_chunk))
        self.max_loss = max_loss
        self._prompt_sum = self._out_sum = 0.0      # decayed: prompt tokens, generated tokens
        self.fit = StepFit()
        self.prior: tuple[float, float, float] | None = None   # a saved fit
        self.saved_margin: float | None = None
        self.ratios: deque[float] = deque(maxlen=128)           # observed / predicted
        # steps carrying decode tokens: (seconds, prompt tokens, prefill_chunk it ran with)
        self.recent: deque[tuple[float, int, int, int]] = deque(maxlen=512)
        self.steps = self.shrunk = 0
        self.changes = 0                # times the fit forgot its past (the cost changed)
        self._since_change = 0
        self._lock = threading.Lock()

    # ---- the model ----

    @property
    def ready(self) -> bool:
        return self.coef() is not None

    def coef(self) -> tuple[float, float, float] | None:
        """(a, b, c): the fit once MIN_STEPS prompt-carrying steps were seen; before, the saved
        fit, or from the first such step on, its seconds per token for every token (a
        proportional cold start: it overrates large steps and underrates small ones, and the
        steps it shrinks to are what the fit then learns from)."""
        if self.fit.count >= MIN_STEPS:
            return self.fit.coef()
        if self.prior is not None:
            return self.prior
        if self.fit.count:
            r = self.fit.per_token()
            return (0.0, r, r)
        return None

    def predict(self, decode: int, prompt: int) -> float | None:
        c = self.coef()
        return None if c is None else c[0] + c[1] * decode + c[2] * prompt

    @property
    def margin(self) -> float:
        if len(self.ratios) < MIN_RATIOS:
            return self.saved_margin or MARGIN0
        return min(MARGIN_MAX, max(1.0, percentile(self.ratios, 0.95)))

    def prompt_budget(self, decode: int) -> int:
        """Prompt tokens a step carrying `decode` decode tokens may take (see the module
        docstring); the configured chunk when nothing decodes or nothing is measured yet."""
        coef = self.coef()
        if decode <= 0 or coef is None:
            return self.full_chunk
        a, b, c = coef
        if c <= 0:
            return self.full_chunk
        room = self.tpot_limit / self.margin - a - b * decode
        p = max(math.floor(room / c), self.throughput_floor(decode))
        return max(self.floor, min(self.full_chunk, p))

    @property
    def prompt_per_output(self) -> float | None:
        """R: prompt tokens computed per generated token, over the recent steps (the traffic's
        mix: 2 for short chats, 50 for long documents with short answers); None before any
        token was generated."""
        return self._prompt_sum / self._out_sum if self._out_sum > 0.5 else None

    def throughput_floor(self, decode: int = 0) -> int:
        """The fewest prompt tokens per step whose modelled throughput on this traffic is at
        least 1 - max_loss of the configured budget's. Every token costs its work whatever the
        budget; a step also costs its fixed `a`, and a generated token needs
        s(P) = max(1 / max_batch, R / P) steps: one per max_batch tokens while decoding sets
        the number of steps, R / P once prompts do. So a token costs s(P) a + b + R c, and the
        budget may shrink until that is 1 / (1 - max_loss) of the configured budget's: without
        cost while P >= R x max_batch (the prompts keep a full batch fed), at most max_loss of
        the throughput when prompts set the pace (long documents with short answers)."""
        coef, r = self.coef(), self.prompt_per_output
        if coef is None or r is None or not self.max_loss < 1:
            return 0
        a, b, c = coef
        if a <= 0:
            return 0
        per_batch = 1.0 / max(1, self.params.max_batch)
        work = b + r * c
        full = max(per_batch, r / self.full_chunk) * a + work
        steps = (full / (1 - self.max_loss) - work) / a      # the most steps per token
        return 0 if steps <= 0 else min(self.full_chunk, math.ceil(r / steps))

    # ---- every step (the engine thread) ----

    def observe(self, decode: int, prompt: int, seconds: float, prefill_chunk: int = 0,
                trial: bool = False, sampled: float | None = None) -> None:
        """One step: its decode tokens (drafts included), prompt tokens and seconds, and the
        tokens it generated (`sampled`, default: one per decode token); `trial`: a kernel
        candidate ran (not this server's usual cost: left out of the fit)."""
        self._prompt_sum = MIX_DECAY * self._prompt_sum + prompt
        self._out_sum = MIX_DECAY * self._out_sum + (decode if sampled is None else sampled)
        if decode:
            with self._lock:
                self.recent.append((seconds, prompt, prefill_chunk, self.params.token_budget))
                self.steps += 1
                self.shrunk += prefill_chunk < self.full_chunk
        if trial or prompt <= 0 or not seconds > 0:
            return
        if decode:
            pred = self.predict(decode, prompt)
            if pred:
                self.ratios.append(seconds / pred)
                self._since_change += 1
                recent = list(self.ratios)[-CHANGE_STEPS:]
                if (self._since_change >= CHANGE_STEPS and self.fit.count >= MIN_STEPS
                        and not CHANGE[0] <= statistics.median(recent) <= CHANGE[1]):
                    # the cost changed (another load on the machine, longer contexts): the
                    # old steps would hold the fit between the two costs for a half-life
                    self.fit.forget(0.05)
                    self.changes += 1
                    self._since_change = 0
        self.fit.observe(decode, prompt, seconds)

    def choose(self, decode: int, running: int = 0) -> None:
        """Set the next step's prompt chunk and token budget for `decode` decode tokens, with
        `running` sequences holding a batch place."""
        p = self.params
        chunk = self.prompt_budget(decode)
        budget = self.full_budget if chunk >= self.full_chunk else decode + chunk
        budget = min(self.full_budget, budget)
        # every decoding sequence gets its token (the planner's budget less the decode tokens
        # must stay >= 0; SchedulerParams.check: max_batch <= token_budget <= engine tokens)
        budget = min(self.engine_tokens, max(budget, p.max_batch, running))
        p.prefill_chunk, p.token_budget = chunk, budget

    def after_step(self, plan, seconds: float, running: int = 0, trial: bool = False,
                   sampled: int | None = None) -> None:
        """The step `plan` took `seconds` (its logits applied) and generated `sampled` tokens:
        observed, then the next step's budget chosen for the sequences that now decode."""
        decode = sum(w.n for w in plan.work[:plan.n_decode])
        prompt = sum(w.n for w in plan.work[plan.n_decode:])
        self.observe(decode, prompt, seconds, self.params.prefill_chunk, trial, sampled)
        nxt = sum(1 for w in plan.work if w.seq.state == RUNNING and w.seq.remaining == 1)
        self.choose(nxt, running)

    # ---- saved, loaded, reported ----

    def typical(self) -> tuple[int, int] | None:
        """(token_budget, prefill_chunk): the medians chosen for the recent steps that carried
        decode and prompt tokens (what `--adaptive frozen` runs), None before any."""
        with self._lock:
            xs = [(tb, ch) for _, p, ch, tb in self.recent if p]
        if not xs:
            return None
        return (int(np.median([t for t, _ in xs])), int(np.median([c for _, c in xs])))

    def state(self) -> dict | None:
        coef = self.coef()
        if coef is None:
            return None
        return {"model": [round(v, 9) for v in coef], "margin": round(self.margin, 4)}

    def load(self, state) -> bool:
        """A saved fit as the prior until this run has its own; False when not usable (three
        non-negative seconds, each under a minute, and a margin within its bounds)."""
        def number(v, lo, hi) -> bool:
            return (isinstance(v, (int, float)) and not isinstance(v, bool)
                    and lo <= v <= hi)                      # (False for NaN)
        model = state.get("model") if isinstance(state, dict) else None
        margin = state.get("margin", MARGIN0) if isinstance(state, dict) else None
        if not (isinstance(model, list) and len(model) == 3
                and all(number(v, 0.0, 60.0) for v in model)
                and number(margin, 1.0, MARGIN_MAX)):
            return False
        coef, margin = tuple(float(v) for v in model), float(margin)
        self.prior, self.saved_margin = coef, margin
        return True

    def report(self) -> dict:
        coef = self.coef()
        with self._lock:
            rec = list(self.recent)
            steps, shrunk = self.steps, self.shrunk
        mixed = [(s, p) for s, p, _, _ in rec if p]
        return {
            "tpot_limit_s": self.tpot_limit, "floor_tokens": self.floor,
            "configured": {"token_budget": self.full_budget, "prefill_chunk": self.full_chunk},
            "token_budget": self.params.token_budget,
            "prefill_chunk": self.params.prefill_chunk,
            "model": None if coef is None else {
                "step_ms": round(coef[0] * 1e3, 3),
                "per_decode_token_ms": round(coef[1] * 1e3, 4),
                "per_prompt_token_ms": round(coef[2] * 1e3, 4),
                "fitted_steps": self.fit.count, "from_saved": self.fit.count < MIN_STEPS},
            "margin": round(self.margin, 3),
            "cost_changes": self.changes,
            "prompt_per_output": (None if self.prompt_per_output is None
                                  else round(self.prompt_per_output, 2)),
            "max_loss": self.max_loss,
            "throughput_floor_tokens": self.throughput_floor() if coef else None,
            # the prompt tokens a step may carry beside a full batch of decoding sequences
            "prompt_budget_at_max_batch": (self.prompt_budget(self.params.max_batch) if coef
                                           else None),
            "decode_steps": steps,
            "shrunk_share": round(shrunk / steps, 4) if steps else None,
            # the steps the budget shapes: decode tokens with prompt tokens, last 512
            "mixed_step_p95_s": round(percentile([s for s, _ in mixed], 0.95), 5) if mixed
            else None,
            "mixed_prompt_tokens_p50": int(np.median([p for _, p in mixed])) if mixed else None,
            "decode_step_p95_s": round(percentile([s for s, *_ in rec], 0.95), 5) if rec
            else None,
        }
