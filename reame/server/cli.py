"""`reame serve MODEL.gguf`: the OpenAI-compatible API under gunicorn (see docs/deploy.md)."""

from __future__ import annotations

import gc
import os

from ..errors import ReameError


def add_serve_command(subparsers) -> None:
    from ..cli import add_engine_args                    # --engine, --threads, --ctx-size, --kv-type
    p = subparsers.add_parser(
        "serve", help="serve the OpenAI-compatible HTTP API",
        description="Serve the OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
                    "/v1/models, /v1/embeddings, /tokenize, /detokenize, /health, /metrics) with "
                    "gunicorn "
                    "threaded workers that read each request whole before a thread takes it. "
                    "Each worker loads its own replica of the model after the fork; with "
                    "several models (--model repeated, --models-dir) each is loaded on its "
                    "first request under --memory-budget-mb (docs/server.md).",
        epilog="REAME_* environment variables (see docs/deploy.md) fill in the flags not given, "
               "except --engine and --kv-type.")
    p.add_argument("model", nargs="?", default=None,
                   help="a .gguf file, or a model name: org/repo[:QUANT] or "
                   "hf://org/repo/FILE.gguf (downloaded with the 'hub' extra)")
    p.add_argument("--model", dest="model_flag", action="append", default=None,
                   metavar="[NAME=]MODEL[,key=value...]",
                   help="a model to serve (repeat for several: a request's `model` picks one, "
                        "the first is the default). NAME= names it (else its file's name); "
                        "keys set this model's own pooling, ctx-size, kv-cache-mb, kv-type, "
                        "max-seqs, threads, chat-template-file, keep-alive")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="serve every .gguf file in DIR too, named by its file "
                        "(default: $REAME_MODELS_DIR)")
    p.add_argument("--memory-budget-mb", type=int, default=None, metavar="MIB",
                   help="memory per worker that the loaded models share (weights, KV caches, "
                        "buffers); the least recently used idle model is unloaded to load "
                        "another (default: $REAME_MEMORY_BUDGET_MB, else 90%% of what the "
                        "host or container leaves at start)")
    p.add_argument("--keep-alive", default=None, metavar="DURATION",
                   help="how long an idle model stays loaded: seconds or 30s, 5m, 1h; "
                        "negative: forever; a request's `keep_alive` overrides it for its "
                        "model (default: $REAME_KEEP_ALIVE, else 5m with several models, "
                        "forever with one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes, each holding a model replica (default: one per NUMA "
                        "node with --pin auto, else 1)")
    p.add_argument("--pin", choices=("auto", "cores", "off"), default=None,
                   help="auto: with several NUMA nodes, bind each worker to a node and its "
                        "threads to physical cores; cores: also on one node; off: the OS places "
                        "threads (default: $REAME_PIN or auto)")
    p.add_argument("--http-threads", type=int, default=None,
                   help="HTTP threads per worker (default: max(16, max-seqs + queue-size + 8))")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $REAME_API_KEY, else none)")
    p.add_argument("--max-seqs", type=int, default=None,
                   help="sequences generating at once per worker: the largest batch "
                        "(default: $REAME_MAX_SEQS, else 16 to start with, grown by the "
                        "adaptive runtime up to 64 while requests wait)")
    p.add_argument("--queue-size", type=int, default=None,
                   help="sequences that may wait to be admitted; beyond that: 429 with "
                        "Retry-After (default: $REAME_QUEUE_SIZE or 256)")
    p.add_argument("--kv-cache-mb", type=int, default=None,
                   help="KV-cache memory per worker in MiB: running sequences and the prefix "
                        "cache share it (default: $REAME_KV_CACHE_MB, else max-seqs x ctx-size "
                        "tokens, at most a quarter of the available memory; printed at start)")
    p.add_argument("--block-size", type=int, default=None, choices=(16, 32, 64, 128, 256),
                   help="positions per KV-cache block, the prefix cache's unit "
                        "(default: $REAME_BLOCK_SIZE or 64)")
    p.add_argument("--timeout", type=float, default=None,
                   help="per-request timeout in seconds, 0: none "
                        "(default: $REAME_REQUEST_TIMEOUT or 600)")
    p.add_argument("--cors-origins", default=None, metavar="ORIGINS",
                   help="answer browsers from these origins with CORS headers: '*' or a comma "
                        "list like https://app.example.com (default: $REAME_CORS_ORIGINS, "
                        "else off)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open connections per worker; more wait in the listen backlog "
                        "(default: $REAME_MAX_CONNECTIONS or 1000)")
    p.add_argument("--header-timeout", type=float, default=None, metavar="SEC",
                   help="seconds a client has to send a request's head, then 408 "
                        "(default: $REAME_HEADER_TIMEOUT or 10)")
    p.add_argument("--body-timeout", type=float, default=None, metavar="SEC",
                   help="seconds a client has to send a request's body after its head, then "
                        "408 (default: $REAME_BODY_TIMEOUT or 60)")
    p.add_argument("--send-timeout", type=float, default=None, metavar="SEC",
                   help="seconds a client may read nothing of its answer before it is "
                        "disconnected, 0: never (default: $REAME_SEND_TIMEOUT or 60)")
    p.add_argument("--send-buffer", type=int, default=None, metavar="BYTES",
                   help="the kernel's send buffer per connection (SO_SNDBUF, as nginx's "
                        "listen sndbuf=): bounds the memory a slow reader holds and how much "
                        "of an answer it can leave unread before --send-timeout runs; 0: the "
                        "OS's autotuned default (default: $REAME_SEND_BUFFER or 0)")
    p.add_argument("--pooling", default=None, choices=("mean", "last"),
                   help="how /v1/embeddings pools the final hidden states (default: "
                        "$REAME_POOLING, else the GGUF's pooling_type, else last)")
    p.add_argument("--reasoning-format", default=None, choices=("auto", "none"),
                   help="auto: the <think> block of reasoning models goes to "
                        "'reasoning_content'; none: it stays in 'content' "
                        "(default: $REAME_REASONING_FORMAT or auto)")
    p.add_argument("--additional-properties", default=None, choices=("closed", "open"),
                   help="closed: a JSON-schema object (response_format, guided_json, tool "
                        "arguments) with 'properties' gets no other key unless its schema has "
                        "'additionalProperties'; open: JSON Schema's default, any key "
                        "(default: $REAME_ADDITIONAL_PROPERTIES or closed)")
    p.add_argument("--adaptive", default=None, choices=("on", "off", "frozen"),
                   help="on: tune kernels, batch and speculation on live traffic and keep what "
                        "wins (a saved strategy is the starting point); off: the built-in "
                        "defaults, nothing measured at start and nothing loaded; frozen: the "
                        "strategy saved for this CPU, model and version, unchanged "
                        "(default: $REAME_ADAPTIVE or on)")
    p.add_argument("--strategy", default=None, metavar="FILE",
                   help="run this saved strategy file (strategy-*.json) frozen (implies "
                        "--adaptive frozen)")
    p.add_argument("--adaptive-dir", default=None, metavar="DIR",
                   help="where learned strategies are saved, per CPU, model and version "
                        "(default: $REAME_ADAPTIVE_DIR or ~/.cache/reame/adaptive)")
    p.add_argument("--adaptive-boot", type=float, default=None, metavar="SEC",
                   help="seconds of start-up kernel micro-benchmark (--adaptive on, no saved "
                        "strategy), run while the engine is idle, after serving starts; 0: none "
                        "(default: $REAME_ADAPTIVE_BOOT or 10)")
    p.add_argument("--adaptive-report", type=float, default=None, metavar="SEC",
                   help="seconds between the adaptive runtime's report lines, 0: none "
                        "(default: $REAME_ADAPTIVE_REPORT or 300)")
    p.add_argument("--tpot-limit", type=float, default=None, metavar="SEC",
                   help="latency target of --adaptive on: the p95 decode step the adaptive "
                        "batch may grow to and the step time each step's prompt budget is "
                        "sized for (default: $REAME_TPOT_LIMIT or 0.25)")
    p.add_argument("--speculate", default=None, choices=("auto", "on", "off"),
                   help="speculative decoding drafted from the request's own text and earlier "
                        "requests, verified in the batch (outputs unchanged): auto speculates "
                        "under --adaptive on, never under off (default: $REAME_SPECULATE or "
                        "auto)")
    p.add_argument("--speculate-tokens", type=int, default=None, metavar="N",
                   help="token positions of earlier requests kept to draft from, least useful "
                        "evicted first (default: $REAME_SPECULATE_TOKENS or 262144, ~51 MB)")
    p.add_argument("--speculate-guard", type=float, default=None, metavar="SHARE",
                   help="how much a request's time per token may grow through other requests' "
                        "drafts: 0.03 keeps every stream within 3%%; 0.25 lets streams that echo "
                        "earlier text speed up more beside ones that do not (default: "
                        "$REAME_SPECULATE_GUARD or 0.03)")
    p.add_argument("--kernel-tuning", default=None, choices=("exact", "any"),
                   help="kernel variants the adaptive runtime may put live: exact, only those "
                        "whose outputs are bit-identical to the live kernel's (tuning changes "
                        "speed, never a token); any, every variant within the op's tolerance "
                        "(other summation orders and families too) (default: "
                        "$REAME_KERNEL_TUNING or exact)")
    p.add_argument("--chat-template-file", default=None, help="override the chat template")
    p.add_argument("--alias", default=None, help="another model name clients may use")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error", "critical"),
                   help="(default: %(default)s)")
    p.add_argument("--access-log", action="store_true", help="log every request to stderr")
    add_engine_args(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    from .config import ServerConfig
    from .gunicorn_app import run

    pin = args.pin or os.environ.get("REAME_PIN") or "auto"
    from ..topology import Topology
    nodes = len(Topology.read().nodes)
    bound = pin == "cores" or (pin == "auto" and nodes > 1)    # workers get pools of CPUs
    if args.workers is None:
        args.workers = nodes if pin == "auto" else 1
    if args.workers < 1:
        raise ReameError("--workers must be >= 1")
    if not 0 < args.port < 65536:
        raise ReameError("--port must be in 1..65535")
    from ..hub import resolve_model
    from .model_specs import parse_duration, parse_spec
    specs = ([args.model] if args.model else []) + list(args.model_flag or [])
    models_dir = args.models_dir or os.environ.get("REAME_MODELS_DIR") or None
    if not specs and not models_dir and not os.environ.get("REAME_MODELS"):
        raise ReameError("give a model: reame serve MODEL, --model MODEL (repeatable) or "
                         "--models-dir DIR")
    first, more = None, []
    for text in specs:
        spec = parse_spec(text)
        if spec.name is None and not spec.options and first is None:
            first = os.path.abspath(resolve_model(text))   # a name: downloaded into the cache
        else:
            more.append(text)
    keep_alive = None
    if args.keep_alive is not None:
        try:
            keep_alive = parse_duration(args.keep_alive)
        except ValueError as e:
            raise ReameError(f"--keep-alive: {e}") from None
    if args.chat_template_file and not os.path.isfile(args.chat_template_file):
        raise ReameError(f"{args.chat_template_file}: no such chat template file")
    threads = args.threads
    if threads is None and args.workers > 1 and not bound:    # share the cores (bound
        threads = max(1, len(os.sched_getaffinity(0)) // args.workers)   # workers: their pool's)
    config = ServerConfig.from_env(
        model=first, models=tuple(more) or None, models_dir=models_dir,
        memory_budget_mb=args.memory_budget_mb, keep_alive=keep_alive,
        engine=args.engine, threads=threads,
        ctx_size=args.ctx_size, kv_type=args.kv_type, act_type=args.act_type,
        attn_type=args.attn_type,
        max_seqs=args.max_seqs, kv_cache_mb=args.kv_cache_mb, block_size=args.block_size,
        queue_size=args.queue_size, request_timeout=args.timeout,
        api_key=args.api_key, chat_template_file=args.chat_template_file,
        model_alias=args.alias, workers=args.workers, cors_origins=args.cors_origins,
        max_connections=args.max_connections, header_timeout=args.header_timeout,
        body_timeout=args.body_timeout, send_timeout=args.send_timeout,
        send_buffer=args.send_buffer, pooling=args.pooling,
        reasoning_format=args.reasoning_format, adaptive=args.adaptive, strategy=args.strategy,
        additional_properties=args.additional_properties,
        adaptive_dir=args.adaptive_dir, adaptive_boot=args.adaptive_boot,
        adaptive_report=args.adaptive_report, tpot_limit=args.tpot_limit, pin=pin,
        speculate=args.speculate, speculate_tokens=args.speculate_tokens,
        speculate_guard=args.speculate_guard,
        kernel_tuning=args.kernel_tuning)
    from .model_specs import plan_models
    # every file's header read once, here: a missing or unreadable file, two models with one
    # name, fail fast before forking; the workers inherit the plan
    planned = plan_models(config)
    gc.collect()                        # the headers' mmaps, before the fork
    run(config, host=args.host, port=args.port, workers=args.workers, planned=planned,
        http_threads=args.http_threads, log_level=args.log_level, access_log=args.access_log)
    return 0
