"""Server settings: one dataclass, filled from `reame serve` flags or REAME_* environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from ..errors import ReameError
from ..speculate.control import TPOT_MARGIN

_CLAIMED: dict = {}    # (pid, directory) -> the pool slot this worker claimed
DEFAULT_BATCH = 16     # sequences running at once to start with (measured: docs/benchmarks.md)
AUTO_SLOTS = 64        # how far the adaptive runtime may grow it when --max-seqs is not given


@dataclass
class ServerConfig:
    model: str | None = None            # path of the .gguf file (REAME_MODEL)
    engine: str | None = None           # None: reame.engines.DEFAULT_ENGINE
    threads: int | None = None          # compute threads per worker (None: the engine decides)
    ctx_size: int | None = None         # context per sequence (None: min(trained, 4096))
    kv_type: str = "auto"
    act_type: str | None = None         # q8 | f32 (None: the engine's default, see reame.engines)
    attn_type: str = "auto"             # engines.ATTN_TYPES: prompt attention (reame.engines)
    # sequences generating at once per worker (the batch): None starts at DEFAULT_BATCH and lets
    # the adaptive runtime grow it up to AUTO_SLOTS while requests wait; a number fixes both
    max_seqs: int | None = None
    queue_size: int = 256               # sequences that may wait for admission before a 429
    kv_cache_mb: int | None = None      # KV pool per worker (None: reame.engines.kv_budget)
    block_size: int = 64                # positions per KV block (a power of two, 16..256)
    request_timeout: float = 600.0      # seconds from arrival to the end of generation (0: none)
    api_key: str | None = None          # bearer token; None: no authentication
    chat_template_file: str | None = None
    model_alias: str | None = None      # another name clients may use for the model
    max_body_bytes: int = 16 * 2**20
    metrics_dir: str | None = None      # shared by the workers of one server: /metrics sums them
    workers: int = 1                    # worker processes (they split the default KV budget)
    retry_after: int = 1                # seconds, sent with 429 and 503
    # the HTTP layer (reame/server/worker.py): slow clients hold a connection, never a thread
    header_timeout: float = 10.0        # seconds for a request's head to arrive (then 408)
    body_timeout: float = 60.0          # seconds for its body to arrive after the head (then 408)
    send_timeout: float = 60.0          # seconds a client may read nothing of its answer (0: none)
    send_buffer: int = 0                # bytes the kernel buffers per connection's answer
                                        # (SO_SNDBUF; 0: the OS's autotuned default)
    max_connections: int = 1000         # open connections per worker (gunicorn worker_connections)
    cors_origins: str | None = None     # "*" or a comma list of origins allowed by CORS; None: off
    pooling: str | None = None          # /v1/embeddings: mean | last (None: the model's metadata)
    reasoning_format: str = "auto"      # auto: <think> blocks -> reasoning_content; none: kept
    # JSON schemas (and tool parameters): closed = an object with properties has no other key
    # unless its schema allows them (llama.cpp's, vLLM's default); open = JSON Schema's rule
    additional_properties: str = "closed"
    # on: tune on live traffic, starting from the saved strategy (or a start-up benchmark);
    # off: the built-in defaults, nothing measured or loaded; frozen: the saved strategy (or
    # `strategy`, a file) unchanged
    adaptive: str = "on"
    strategy: str | None = None         # a strategy file to run frozen (implies frozen)
    adaptive_dir: str | None = None     # where learned strategies are kept (None: ~/.cache/...)
    adaptive_boot: float = 10.0         # seconds of start-up micro-benchmark (0: none)
    adaptive_report: float = 300.0      # seconds between adaptive report log lines (0: none)
    tpot_limit: float = 0.25            # the p95 decode step the batch tuner may grow up to and
                                        # the step the token budget is sized for (s)
    # speculative decoding from earlier traffic (reame/speculate): auto speculates under
    # --adaptive on and never under off; on / off regardless
    speculate: str = "auto"
    speculate_tokens: int = 1 << 18     # token positions of earlier requests kept to draft from
    # the time-per-token guard: neighbours' drafts may lengthen a sequence's time per token by
    # this share at most (reame/speculate/control.py TPOT_MARGIN)
    speculate_guard: float = TPOT_MARGIN
    # which kernel variants the tuner may put live: exact (outputs bit-identical to the live
    # variant's: tuning never changes a computed bit) or any (within the op's tolerance)
    kernel_tuning: str = "exact"
    # where compute threads run (reame/topology.py): auto binds each worker to a NUMA node and
    # its threads to physical cores when there are several nodes; cores does so on one node
    # too; off lets the OS place them. `reame serve` defaults to auto; under a gunicorn you run
    # yourself (reame.wsgi:app, which does not know how many workers there are) only REAME_PIN
    # turns it on
    pin: str = "off"
    # several models in one server (reame/server/registry.py): specs of more models than
    # `model` ("[NAME=]PATH[,key=value...]"), a directory whose .gguf files are served too, the
    # memory they share, and how long an idle model stays loaded
    models: tuple = ()
    models_dir: str | None = None
    memory_budget_mb: int | None = None  # None: what the host or container leaves at start
    keep_alive: float | None = None     # seconds; < 0: forever; None: 300 with several models,
                                        # forever with one

    ENV = {  # field -> environment variable
        "model": "REAME_MODEL", "engine": "REAME_ENGINE", "threads": "REAME_THREADS",
        "ctx_size": "REAME_CTX_SIZE", "kv_type": "REAME_KV_TYPE",
        "act_type": "REAME_ACT_TYPE", "attn_type": "REAME_ATTN_TYPE",
        "max_seqs": "REAME_MAX_SEQS",
        "queue_size": "REAME_QUEUE_SIZE", "request_timeout": "REAME_REQUEST_TIMEOUT",
        "kv_cache_mb": "REAME_KV_CACHE_MB", "block_size": "REAME_BLOCK_SIZE",
        "api_key": "REAME_API_KEY", "chat_template_file": "REAME_CHAT_TEMPLATE_FILE",
        "model_alias": "REAME_MODEL_ALIAS", "max_body_bytes": "REAME_MAX_BODY_BYTES",
        "metrics_dir": "REAME_METRICS_DIR", "header_timeout": "REAME_HEADER_TIMEOUT",
        "body_timeout": "REAME_BODY_TIMEOUT", "send_timeout": "REAME_SEND_TIMEOUT",
        "send_buffer": "REAME_SEND_BUFFER",
        "max_connections": "REAME_MAX_CONNECTIONS", "cors_origins": "REAME_CORS_ORIGINS",
        "pooling": "REAME_POOLING", "reasoning_format": "REAME_REASONING_FORMAT",
        "additional_properties": "REAME_ADDITIONAL_PROPERTIES",
        "adaptive": "REAME_ADAPTIVE", "adaptive_dir": "REAME_ADAPTIVE_DIR",
        "strategy": "REAME_STRATEGY",
        "adaptive_boot": "REAME_ADAPTIVE_BOOT", "adaptive_report": "REAME_ADAPTIVE_REPORT",
        "tpot_limit": "REAME_TPOT_LIMIT", "pin": "REAME_PIN",
        "speculate": "REAME_SPECULATE", "speculate_tokens": "REAME_SPECULATE_TOKENS",
        "speculate_guard": "REAME_SPECULATE_GUARD",
        "kernel_tuning": "REAME_KERNEL_TUNING",
        "models": "REAME_MODELS", "models_dir": "REAME_MODELS_DIR",
        "memory_budget_mb": "REAME_MEMORY_BUDGET_MB", "keep_alive": "REAME_KEEP_ALIVE",
    }

    @classmethod
    def from_env(cls, environ=None, **overrides) -> "ServerConfig":
        """Settings from REAME_* variables (typed by the field defaults); overrides win."""
        environ = os.environ if environ is None else environ
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for name, var in cls.ENV.items():
            raw = environ.get(var)
            if raw is None or raw == "":
                continue
            kind = types[name]
            try:
                if name == "models":             # specs separated by ';'
                    values[name] = tuple(x.strip() for x in raw.split(";") if x.strip())
                elif name == "keep_alive":       # seconds, or a duration: 30s, 5m, 1h, -1
                    from .model_specs import parse_duration
                    values[name] = parse_duration(raw)
                elif "int" in kind:
                    values[name] = int(raw)
                elif "float" in kind:
                    values[name] = float(raw)
                else:
                    values[name] = raw
            except ValueError:
                raise ReameError(f"{var}={raw!r} is not a number") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls(**values)
        cfg.check()
        return cfg

    @property
    def adaptive_mode(self) -> str:
        """on, off or frozen (a --strategy file runs frozen)."""
        return "frozen" if self.strategy and self.adaptive != "off" else self.adaptive

    @property
    def speculating(self) -> bool:
        """auto: under --adaptive on (learning) and frozen (what was learned), never off."""
        return self.speculate == "on" or (self.speculate == "auto"
                                          and self.adaptive_mode != "off")

    def batch_limits(self) -> tuple[int, int]:
        """(the batch to start with, the most sequences ever running: the engine's KV slots)."""
        if self.max_seqs is not None:
            return self.max_seqs, self.max_seqs
        return DEFAULT_BATCH, AUTO_SLOTS

    def placement(self, topo=None) -> list[int] | None:
        """The CPUs this worker's engine runs on (its threads pinned in this order), or None
        (the OS places them). With several NUMA nodes (or pin=cores), the workers take one
        pool each of Topology.pools(workers), claimed by lock files next to the metrics."""
        if self.pin == "off":
            return None
        from ..topology import Topology, claim_slot
        topo = topo or Topology.read()
        if len(topo.nodes) < 2 and self.pin != "cores":
            return None
        pools = topo.pools(self.workers)
        if self.workers == 1:
            return pools[0]
        import tempfile
        where = os.path.join(self.metrics_dir or tempfile.gettempdir(), "reame-pools")
        key = (os.getpid(), where)          # one slot per worker, whatever models it loads
        if key not in _CLAIMED:
            _CLAIMED[key] = claim_slot(where, self.workers)
        i = _CLAIMED[key]
        return None if i is None else pools[i]

    def check(self) -> None:
        if self.max_seqs is not None and self.max_seqs < 1:
            raise ReameError("max_seqs must be >= 1")
        if self.queue_size < 0:
            raise ReameError("queue_size must be >= 0")
        if self.kv_cache_mb is not None and self.kv_cache_mb < 1:
            raise ReameError("kv_cache_mb must be >= 1")
        if self.block_size not in (16, 32, 64, 128, 256):
            raise ReameError("block_size must be 16, 32, 64, 128 or 256")
        if self.request_timeout < 0:
            raise ReameError("request_timeout must be >= 0")
        from ..engines import KV_TYPES
        if self.kv_type not in KV_TYPES:
            raise ReameError(f"kv_type must be one of {', '.join(KV_TYPES)}")
        if self.act_type not in (None, "q8", "f32"):
            raise ReameError("act_type must be q8 or f32")
        from ..engines import ATTN_TYPES
        if self.attn_type not in ATTN_TYPES:
            raise ReameError(f"attn_type must be one of {', '.join(ATTN_TYPES)}")
        if not (self.header_timeout > 0 and self.body_timeout > 0):
            raise ReameError("header_timeout and body_timeout must be > 0")
        if self.send_timeout < 0:
            raise ReameError("send_timeout must be >= 0")
        if self.send_buffer < 0:
            raise ReameError("send_buffer must be >= 0")
        if self.max_connections < 1:
            raise ReameError("max_connections must be >= 1")
        if self.pin not in ("auto", "cores", "off"):
            raise ReameError("pin must be auto, cores or off")
        if self.pooling not in (None, "mean", "last"):
            raise ReameError("pooling must be mean or last")
        if self.reasoning_format not in ("auto", "none"):
            raise ReameError("reasoning_format must be auto or none")
        if self.additional_properties not in ("closed", "open"):
            raise ReameError("additional_properties must be closed or open")
        if self.adaptive not in ("on", "off", "frozen"):
            raise ReameError("adaptive must be on, off or frozen")
        if self.strategy:
            if self.adaptive == "off":
                raise ReameError("--strategy runs a learned strategy: not with --adaptive off")
            if not os.path.isfile(self.strategy):
                raise ReameError(f"{self.strategy}: no such strategy file")
        if self.adaptive_boot < 0 or self.adaptive_report < 0:
            raise ReameError("adaptive_boot and adaptive_report must be >= 0")
        if not self.tpot_limit > 0:
            raise ReameError("tpot_limit must be > 0")
        if self.speculate not in ("auto", "on", "off"):
            raise ReameError("speculate must be auto, on or off")
        if self.kernel_tuning not in ("exact", "any"):
            raise ReameError("kernel_tuning must be exact or any")
        if self.speculate_tokens < 1024:
            raise ReameError("speculate_tokens must be >= 1024")
        if not 0 <= self.speculate_guard <= 10:          # NaN fails too
            raise ReameError("speculate_guard must be a share between 0 and 10")
        if self.memory_budget_mb is not None and self.memory_budget_mb < 1:
            raise ReameError("memory_budget_mb must be >= 1")
        if self.models_dir is not None and not os.path.isdir(self.models_dir):
            raise ReameError(f"{self.models_dir}: no such directory (--models-dir)")
        self.cors_allow_origins()

    def cors_allow_origins(self):
        """None (CORS off), "*" or the list of allowed origins (scheme://host[:port])."""
        raw = (self.cors_origins or "").strip()
        if not raw:
            return None
        if raw == "*":
            return "*"
        origins = [o.strip() for o in raw.split(",") if o.strip()]
        for o in origins:
            scheme, sep, rest = o.partition("://")
            if o == "*" or not sep or scheme not in ("http", "https") or not rest \
                    or "/" in rest:
                raise ReameError(f"CORS origin {o!r}: expected '*' alone, or origins like "
                                 "https://app.example.com (scheme://host[:port], no path)")
        return origins
