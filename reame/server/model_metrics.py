"""The series read at scrape time from a loaded model's service: its scheduler's queue and
batch, its KV pool, its speculator and its adaptive runtime. `register_model_series(metrics)`
gives them to a `Metrics`, which reads them for every loaded model of `metrics.models()` and
labels each sample with the model's id (see metrics.py)."""

from __future__ import annotations

from .metrics import Metrics


def _pool(s):
    return s.scheduler.pool


def _spec(key):
    return lambda s: getattr(s.speculator, key) if s.speculator is not None else 0


def _adapt(key, read=None):
    """A value of the adaptive runtime: read(runtime), else its report's kernels[key]; 0
    without one (the reference engine, --adaptive off)."""
    def fn(s):
        if s.adaptive is None:
            return 0
        if read is not None:
            return read(s.adaptive)
        return (s.adaptive.report().get("kernels") or {}).get(key) or 0
    return fn


def _ratio(a, b):
    return a / b if b else 0


MODEL_GAUGES = {
    "reame_queue_depth": lambda s: s.scheduler.queue_depth,
    "reame_running_requests": lambda s: s.scheduler.running,
    "reame_running_sequences": lambda s: s.scheduler.running_seqs,
    "reame_model_loaded": lambda s: 1 if s.scheduler.alive else 0,
    "reame_kv_blocks_used": lambda s: _pool(s).used,
    "reame_kv_blocks_cached": lambda s: _pool(s).cached,
    "reame_kv_blocks_capacity": lambda s: _pool(s).n_blocks,
    "reame_kv_cache_usage_ratio": lambda s: _ratio(_pool(s).used, _pool(s).n_blocks),
    "reame_adaptive_frozen": _adapt(None, lambda a: 1 if a.frozen else 0),
    "reame_adaptive_exploration_ratio": _adapt("exploration_share"),
    "reame_adaptive_tokens_per_second": _adapt(None, lambda a: a.report()["tok_s_last_minute"]),
    "reame_adaptive_throughput_change_ratio": _adapt(
        None, lambda a: a.report()["tok_s_change"] or 0),
    "reame_adaptive_tpot_p95_seconds": _adapt(None, lambda a: a.report()["tpot_p95_s"]),
    "reame_adaptive_tpot_p95_change_ratio": _adapt(
        None, lambda a: a.report()["tpot_p95_change"] or 0),
    "reame_adaptive_max_batch": lambda s: s.scheduler.params.max_batch,
    "reame_adaptive_prefix_hit_ratio": lambda s: _ratio(_pool(s).hits, _pool(s).queries),
}

MODEL_COUNTERS = {
    "reame_prefix_cache_queries_total": lambda s: _pool(s).queries,
    "reame_prefix_cache_hits_total": lambda s: _pool(s).hits,
    "reame_kv_evictions_total": lambda s: _pool(s).evictions,
    "reame_preemptions_total": lambda s: s.scheduler.planner.preemptions,
    "reame_spec_decode_drafts_total": _spec("drafts"),
    "reame_spec_decode_draft_tokens_total": _spec("draft_tokens"),
    "reame_spec_decode_accepted_tokens_total": _spec("accepted_tokens"),
    "reame_adaptive_candidates_tried_total": _adapt("candidates_tried"),
    "reame_adaptive_promoted_total": _adapt("promoted"),
    "reame_adaptive_rolled_back_total": _adapt("rolled_back"),
    "reame_adaptive_refused_total": _adapt("refused"),
}


def register_model_series(metrics: Metrics) -> Metrics:
    """Give `metrics` the scrape-time gauges and counters of a model's service."""
    metrics.model_gauges.update(MODEL_GAUGES)
    metrics.model_counters.update(MODEL_COUNTERS)
    return metrics
