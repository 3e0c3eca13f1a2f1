"""Prometheus metrics, written by hand in the text exposition format (version 0.0.4).

A handful of counters, histograms and gauges does not need a client library. Every series is
also exposed under vLLM's name and labels where vLLM has one (`VLLM_SERIES`), computed from the
same values at each scrape. Each worker process
keeps its own; when `metrics_dir` is set (it is under `reame serve`), every worker also writes a
JSON snapshot there once a second, and `/metrics` adds the snapshots of the other workers to its
own live values, so a scrape that lands on any worker sees the whole server. Gauges of workers
that have exited are dropped; their counters and histograms are kept (counters never go back).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from typing import Callable

log = logging.getLogger("reame.metrics")

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# name -> (type, help, label names, buckets)
SERIES = {
    "reame_requests_total": ("counter", "HTTP requests by endpoint and status code.",
                             ("endpoint", "status"), None),
    "reame_prompt_tokens_total": ("counter", "Prompt tokens processed.", (), None),
    "reame_generation_tokens_total": ("counter", "Tokens generated.", (), None),
    "reame_time_to_first_token_seconds": ("histogram", "Time from request arrival to the first "
                                          "generated token.", (), TTFT_BUCKETS),
    "reame_time_per_output_token_seconds": ("histogram", "Time between consecutive generated "
                                            "tokens of one sequence.", (), TPOT_BUCKETS),
    "reame_request_duration_seconds": ("histogram", "Time from arrival to the last token of a "
                                       "generation request.", ("endpoint",), E2E_BUCKETS),
    "reame_queue_depth": ("gauge", "Requests waiting for a free sequence slot.", (), None),
    "reame_running_requests": ("gauge", "Requests generating (holding KV-cache slots).", (), None),
    "reame_running_sequences": ("gauge", "Sequences generating (KV-cache slots in use).", (), None),
    "reame_model_loaded": ("gauge", "1 once the model is loaded and the engine thread runs.",
                           (), None),
    "reame_prefix_cache_queries_total": ("counter", "Prompt tokens looked up in the prefix cache "
                                         "(at each admission).", (), None),
    "reame_prefix_cache_hits_total": ("counter", "Prompt tokens whose keys and values came from "
                                      "the prefix cache.", (), None),
    "reame_kv_blocks_used": ("gauge", "KV-cache blocks held by running sequences.", (), None),
    "reame_kv_blocks_cached": ("gauge", "KV-cache blocks findable by the prefix cache (held or "
                               "not).", (), None),
    "reame_kv_blocks_total": ("gauge", "KV-cache blocks in the pool.", (), None),
    "reame_kv_cache_usage_ratio": ("gauge", "Share of the KV-cache blocks held by running "
                                   "sequences (0..1).", (), None),
    "reame_kv_evictions_total": ("counter", "Cached KV blocks evicted to make room.", (), None),
    "reame_preemptions_total": ("counter", "Running sequences preempted (blocks freed, "
                                "recomputed later) because the KV cache was full.", (), None),
    "reame_adaptive_frozen": ("gauge", "1 when the adaptive runtime does not explore (frozen, "
                              "or --adaptive off).", (), None),
    "reame_adaptive_exploration_ratio": ("gauge", "Share of steps that ran an A/B trial of a "
                                         "kernel variant.", (), None),
    "reame_adaptive_candidates_tried_total": ("counter", "Kernel variants compared on live "
                                              "traffic.", (), None),
    "reame_adaptive_promoted_total": ("counter", "Kernel variants made live because they "
                                      "measured faster.", (), None),
    "reame_adaptive_rolled_back_total": ("counter", "Promoted variants rolled back when the "
                                         "previous one measured faster again.", (), None),
    "reame_adaptive_refused_total": ("counter", "Candidate variants refused by the numeric "
                                     "check.", (), None),
    "reame_adaptive_tokens_per_second": ("gauge", "Tokens generated per second over the last "
                                         "minute.", (), None),
    "reame_adaptive_throughput_change_ratio": ("gauge", "Tokens per second over the last minute "
                                               "relative to the first minute of traffic, minus 1 "
                                               "(0 unless both were saturated).", (), None),
    "reame_adaptive_tpot_p95_seconds": ("gauge", "95th percentile of finished requests' time "
                                        "per output token over the last minute.",
                                        (), None),
    "reame_adaptive_tpot_p95_change_ratio": ("gauge", "p95 time per output token relative to "
                                             "the first minute of traffic, minus 1.", (), None),
    "reame_adaptive_max_batch": ("gauge", "Sequences that may run at once now (the adaptive "
                                 "batch; the starting one when it does not tune).", (), None),
    "reame_spec_decode_drafts_total": ("counter", "Drafts verified: a sequence's step that "
                                       "carried drafted tokens.", (), None),
    "reame_spec_decode_draft_tokens_total": ("counter", "Drafted tokens verified.", (), None),
    "reame_spec_decode_accepted_tokens_total": ("counter", "Drafted tokens accepted (emitted "
                                                "without a step of their own).", (), None),
    "reame_adaptive_prefix_hit_ratio": ("gauge", "Prompt tokens found in the prefix cache over "
                                        "prompt tokens looked up, since start.", (), None),
}


# vLLM's names for the same measurements (vllm/v1/metrics/loggers.py), so that dashboards and
# autoscalers written for vLLM read Reame: name -> (type, help, the reame_* series it repeats).
# Labels as vLLM's: model_name (the served model id) and engine ("0": the whole server, every
# worker summed). Histograms keep the reame_* buckets.
VLLM_SERIES = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches.",
                                  "reame_running_requests"),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed.",
                                  "reame_queue_depth"),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage.",
                                 "reame_kv_cache_usage_ratio"),
    "vllm:prompt_tokens_total": ("counter", "Number of prefill tokens processed.",
                                 "reame_prompt_tokens_total"),
    "vllm:generation_tokens_total": ("counter", "Number of generation tokens processed.",
                                     "reame_generation_tokens_total"),
    "vllm:prefix_cache_queries_total": ("counter", "Prefix cache queries, in terms of number of "
                                        "queried tokens.", "reame_prefix_cache_queries_total"),
    "vllm:prefix_cache_hits_total": ("counter", "Prefix cache hits, in terms of number of cached "
                                     "tokens.", "reame_prefix_cache_hits_total"),
    "vllm:num_preemptions_total": ("counter", "Cumulative number of preemption from the engine.",
                                   "reame_preemptions_total"),
    "vllm:spec_decode_num_drafts_total": ("counter", "Number of spec decoding drafts.",
                                          "reame_spec_decode_drafts_total"),
    "vllm:spec_decode_num_draft_tokens_total": ("counter", "Number of draft tokens.",
                                                "reame_spec_decode_draft_tokens_total"),
    "vllm:spec_decode_num_accepted_tokens_total": ("counter", "Number of accepted tokens.",
                                                   "reame_spec_decode_accepted_tokens_total"),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in "
                                         "seconds.", "reame_time_to_first_token_seconds"),
    "vllm:time_per_output_token_seconds": ("histogram", "Histogram of time per output token in "
                                           "seconds.", "reame_time_per_output_token_seconds"),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in "
                                         "seconds.", "reame_time_per_output_token_seconds"),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in "
                                         "seconds.", "reame_request_duration_seconds"),
}
VLLM_LABELS = ("model_name", "engine")


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names, values, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


class Metrics:
    """The metrics of one worker. Thread-safe; `gauges` are read at scrape time."""

    def __init__(self, metrics_dir: str | None = None):
        self._lock = threading.Lock()
        # counters: name -> {label values tuple: value}
        # histograms: name -> {label values tuple: [bucket counts..., sum, count]}
        self._values: dict[str, dict[tuple, object]] = {n: {} for n in SERIES}
        self.gauges: dict[str, Callable[[], float]] = {}   # read at scrape time
        self.counters: dict[str, Callable[[], float]] = {}  # counters kept elsewhere, read alike
        self.metrics_dir = metrics_dir
        self.model_name: Callable[[], str] = lambda: "reame"   # the vllm:* series' model_name
        self._writer: threading.Thread | None = None
        self._writer_pid = None

    # ---- recording ----

    def inc(self, name: str, amount: float = 1.0, labels: tuple = ()) -> None:
        with self._lock:
            d = self._values[name]
            d[labels] = d.get(labels, 0.0) + amount

    def observe(self, name: str, value: float, labels: tuple = ()) -> None:
        buckets = SERIES[name][3]
        with self._lock:
            d = self._values[name]
            h = d.get(labels)
            if h is None:
                h = d[labels] = [0] * (len(buckets) + 2)
            i = bisect.bisect_left(buckets, value)
            if i < len(buckets):
                h[i] += 1                       # per-bucket counts; made cumulative on render
            h[-2] += value
            h[-1] += 1

    # ---- exposition ----

    def snapshot(self) -> dict:
        """JSON-able values: counters, histograms and the current gauges."""
        with self._lock:
            out = {n: [[list(k), v if not isinstance(v, list) else list(v)]
                       for k, v in d.items()] for n, d in self._values.items()}
        for n, fn in (self.gauges | self.counters).items():
            try:
                out[n] = [[[], float(fn())]]
            except Exception:                   # a gauge must never break a scrape
                log.exception("gauge %s failed", n)
        return out

    def render(self) -> str:
        snaps = [self.snapshot()]
        if self.metrics_dir:
            self._ensure_writer()
            snaps += self._other_workers()
        merged: dict[str, dict[tuple, object]] = {n: {} for n in SERIES}
        for snap in snaps:
            for n, items in snap.items():
                if n not in SERIES:
                    continue
                d = merged[n]
                for k, v in items:
                    k = tuple(k)
                    if isinstance(v, list):
                        old = d.get(k)
                        d[k] = list(v) if old is None else [a + b for a, b in zip(old, v)]
                    else:
                        d[k] = d.get(k, 0.0) + v
        # a ratio does not add up across workers: the pool's usage is the summed blocks' ratio
        used = merged["reame_kv_blocks_used"].get((), 0.0)
        total = merged["reame_kv_blocks_total"].get((), 0.0)
        if merged["reame_kv_cache_usage_ratio"] or total:
            merged["reame_kv_cache_usage_ratio"] = {(): used / total if total else 0.0}
        lines: list[str] = []
        for n, (kind, help_, label_names, buckets) in SERIES.items():
            d = merged[n]
            if not d and not label_names:
                d = {(): [0] * (len(buckets) + 2) if buckets else 0.0}
            _family(lines, n, kind, help_, label_names, buckets, d)
        try:
            model = str(self.model_name())
        except Exception:                       # a label must never break a scrape
            log.exception("model name for the metrics")
            model = "reame"
        for n, (kind, help_, source) in VLLM_SERIES.items():
            buckets = SERIES[source][3]
            total = [0] * (len(buckets) + 2) if buckets else 0.0
            for v in merged[source].values():   # every label set of the source, summed
                total = [a + b for a, b in zip(total, v)] if buckets else total + v
            _family(lines, n, kind, help_, VLLM_LABELS, buckets, {(model, "0"): total})
        return "\n".join(lines) + "\n"

    # ---- sharing between the workers of one server ----

    def _ensure_writer(self) -> None:
        """Start (once per process: workers are forked) the thread that publishes snapshots."""
        if self._writer_pid == os.getpid() or not self.metrics_dir:
            return
        self._writer_pid = os.getpid()
        os.makedirs(self.metrics_dir, exist_ok=True)
        self._writer = threading.Thread(target=self._publish_loop, name="reame-metrics",
                                        daemon=True)
        self._writer.start()

    start_publishing = _ensure_writer

    def _publish_loop(self) -> None:
        while True:
            try:
                self.publish()
            except Exception:
                log.exception("could not write metrics snapshot to %s", self.metrics_dir)
            time.sleep(1.0)

    def publish(self) -> None:
        path = os.path.join(self.metrics_dir, f"worker-{os.getpid()}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.snapshot(), f)
        os.replace(tmp, path)

    def _other_workers(self) -> list[dict]:
        out = []
        try:
            names = os.listdir(self.metrics_dir)
        except OSError:
            return out
        me = f"worker-{os.getpid()}.json"
        for name in names:
            if not name.startswith("worker-") or not name.endswith(".json") or name == me:
                continue
            try:
                pid = int(name[len("worker-"):-len(".json")])
                with open(os.path.join(self.metrics_dir, name)) as f:
                    snap = json.load(f)
            except (OSError, ValueError):
                continue
            if not _alive(pid):
                snap = {n: v for n, v in snap.items() if SERIES.get(n, ("gauge",))[0] != "gauge"}
            out.append(snap)
        return out


def _family(lines: list[str], n: str, kind: str, help_: str, label_names, buckets,
            d: dict) -> None:
    """One metric family in the text format: HELP, TYPE and a sample (or histogram) per label
    set."""
    lines.append(f"# HELP {n} {help_}")
    lines.append(f"# TYPE {n} {kind}")
    for k in sorted(d):
        v = d[k]
        if kind == "histogram":
            cum = 0
            for b, c in zip(buckets, v[:len(buckets)]):
                cum += c
                le = 'le="%s"' % b
                lines.append(f"{n}_bucket{_labels(label_names, k, le)} {cum}")
            le = 'le="+Inf"'
            lines.append(f"{n}_bucket{_labels(label_names, k, le)} {_fmt(v[-1])}")
            lines.append(f"{n}_sum{_labels(label_names, k)} {_fmt(v[-2])}")
            lines.append(f"{n}_count{_labels(label_names, k)} {_fmt(v[-1])}")
        else:
            lines.append(f"{n}{_labels(label_names, k)} {_fmt(v)}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
