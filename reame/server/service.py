"""The model a worker serves: engine, tokenizer, chat template, names and the engine thread.

`ModelService` turns validated requests into prompt token ids (checking them against the
context) and submits them to the scheduler. The registry (registry.py) builds services in a
background thread after the worker has forked, so `/health` can answer 503 while the first
model loads, and others load on demand.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from ..errors import ReameError, TemplateError
from ..generate import Generation
from ..scheduler import QueueFull, Scheduler, SchedulerStopped
from ..tokenizer import TokenLimit
from .config import ServerConfig
from .schemas import APIError, GenerationRequest, invalid

log = logging.getLogger("reame.server")


def model_names(engine, config: ServerConfig) -> list[str]:
    """Names clients may use: the file's basename without extension first (the id we report),
    then the file name, general.name and a configured alias (engine None: a model not loaded
    yet, named from its configuration)."""
    names = []
    path = (engine.model.path if engine is not None else None) or config.model
    if path:
        base = os.path.basename(str(path))
        names += [os.path.splitext(base)[0], base]
    cfg_name = engine.config.name if engine is not None else None
    if isinstance(cfg_name, str) and cfg_name:
        names.append(cfg_name)
    if config.model_alias:
        names.insert(0, config.model_alias)
    # a file name that is not UTF-8 comes back with surrogate escapes: JSON could not carry it
    names = [n.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for n in names]
    names = [n for i, n in enumerate(names) if n and n not in names[:i]]
    return names or ["reame"]


def model_identity(engine) -> bytes:
    """What salts the prefix cache's block hashes: the model file (path, size, time) and the
    engine's numerics, so equal hashes can only mean equal keys and values."""
    import hashlib
    path = engine.model.path
    try:
        st = os.stat(path) if path else None
        file_id = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}" if st else ""
    except OSError:
        file_id = str(path)
    ident = f"{file_id}|{engine.name}|{engine.kv.kv_type}"
    if engine.attn_type != "f32":                  # bf16 attention: other keys and values
        ident += f"|attn={engine.attn_type}"
    return hashlib.sha256(ident.encode()).digest()


@dataclass
class OutputPlan:
    grammar: object = None               # reame.structured.Grammar
    keep: set = field(default_factory=set)   # control token ids kept in the text
    think: bool = False                  # split reasoning_content
    started_in_think: bool = False
    tool_format: object = None           # reame.toolcalls.ToolFormat: parse tool calls
    # the grammar is the tool-call format: once a call is complete, another follows only if
    # the model itself writes it (Generation.end_outside_grammar)
    end_outside_grammar: bool = False


class ModelService:
    def __init__(self, engine, tokenizer, config: ServerConfig, chat_template=None,
                 template_error: str | None = None, turns=None, served_as: str | None = None):
        """`turns`: the reame.turns.Turns of the process's models (None: this one alone);
        `served_as`: a name that keeps this model's learned strategy apart from the same
        file's served under another name."""
        self.engine, self.tok, self.config = engine, tokenizer, config
        self.template = chat_template
        self.template_error = template_error
        self.names = model_names(engine, config)
        self.id = self.names[0]
        path = engine.model.path
        try:
            self.created = int(os.path.getmtime(path)) if path else int(time.time())
        except OSError:
            self.created = int(time.time())
        self.n_ctx = engine.n_ctx
        self.n_vocab = tokenizer.n_vocab
        from ..scheduler import default_params
        params = default_params(engine, max_waiting=config.queue_size,
                                max_batch=min(config.batch_limits()[0], engine.kv.max_seqs))
        self.adaptive = None
        if engine.kernel_plan is not None:              # kernels that can be tuned
            from ..adaptive import AdaptiveRuntime
            self.adaptive = AdaptiveRuntime(engine, params, enabled=config.adaptive_mode == "on",
                                            state_dir=config.adaptive_dir,
                                            report_every=config.adaptive_report,
                                            tpot_limit=config.tpot_limit,
                                            exact_kernels=config.kernel_tuning == "exact",
                                            served_as=served_as)
            self.adaptive.model_name = self.id
        self.speculator = None
        if config.speculating:
            from ..speculate import Speculator
            self.speculator = Speculator(tokenizer.n_vocab, max_tokens=config.speculate_tokens,
                                         margin=config.speculate_guard)
            if self.adaptive is not None:       # reported and saved with the strategy
                self.adaptive.speculator = self.speculator
        self.scheduler = Scheduler(engine, params, salt=model_identity(engine),
                                   adaptive=self.adaptive, speculator=self.speculator,
                                   turns=turns)
        self.n_embd = engine.config.n_embd
        self.warmer = None                          # computes saved hot prefixes (start)
        self.pooling, self.pooling_error = embedding_pooling(engine, config)

    def start(self) -> "ModelService":
        """Before serving, by --adaptive: on, the saved strategy for this CPU, model and version
        if there is one, else the start-up micro-benchmark is planned (time-boxed; the engine
        thread runs it a step at a time while no request is there, so the server answers as
        soon as its kernels are compiled, on the defaults); frozen, the saved strategy (or
        --strategy FILE), unchanged; off, nothing: the built-in defaults. Then the engine
        thread."""
        a = self.adaptive
        mode = self.config.adaptive_mode
        if a is not None and mode == "on":
            if a.load() is None and self.config.adaptive_boot > 0:
                a.schedule_boot(self.config.adaptive_boot)
        elif a is not None and mode == "frozen":
            if self.speculator is not None:      # drafts from what was learned, adds nothing
                self.speculator.learn = False
            where = self.config.strategy or a.path
            if a.load(self.config.strategy) is None:
                log.warning("adaptive: --adaptive frozen: no valid strategy at %s for this CPU, "
                            "model and version: running the built-in defaults", where)
        from ..sampling import prepare
        # the sampling kernel for the logits rows, so the first temperature request waits for none
        prepare(self.engine.config.n_vocab or self.n_vocab)
        self.scheduler.start()
        if a is not None and a.saved_prefixes:    # the hot prefixes a saved strategy lists,
            from .warmup import PrefixWarmer      # computed while no request runs
            self.warmer = PrefixWarmer(self.scheduler, a.saved_prefixes,
                                       self.engine.kv.block_size).start()
        return self

    def stop(self) -> None:
        if self.warmer is not None:
            self.warmer.stop()
        self.scheduler.stop()
        if self.adaptive is not None:
            self.adaptive.save()

    @property
    def busy(self) -> bool:
        """A request of this model is in the scheduler (it must not be unloaded)."""
        return self.scheduler.busy

    def close(self) -> None:
        """After stop(): let go of the engine's memory (weights, KV pool, buffers) now, not when
        the last reference to this service goes (a finished response may still hold it for
        its tokenizer)."""
        self.engine.close()
        self.scheduler.turns.forget(self.scheduler)
        self.engine = self.scheduler.engine = None
        self.scheduler.planner = None
        if self.adaptive is not None:
            self.adaptive.engine = None
        self.warmer = None

    @property
    def max_n(self) -> int:
        return min(self.scheduler.max_seqs, 128)

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in self.names:
            from .registry import shown
            raise APIError(404, f"The model `{shown(name)}` does not exist. This server serves "
                           f"`{self.id}`.", "invalid_request_error", "model", "model_not_found")

    # ---- prompts ----

    def chat_prompt(self, req: GenerationRequest) -> list[int]:
        if self.template is None:
            raise invalid("messages", "This model has no chat template"
                          + (f" ({self.template_error})" if self.template_error else "")
                          + "; use /v1/completions or start the server with a chat template file.",
                          "chat_template_missing")
        kwargs = {k: v for k, v in req.chat_template_kwargs.items()
                  if k not in ("messages", "add_generation_prompt", "tools")}
        if req.reasoning_effort is not None:    # onto the template's switch; kwargs win
            from ..reasoning import effort_kwargs
            kwargs = {**effort_kwargs(getattr(self.template, "source", None),
                                      req.reasoning_effort), **kwargs}
        tools = req.tools.tools if req.tools is not None and req.tools.choice != "none" else None
        if tools is not None:
            kwargs["tools"] = tools
        limit = self.n_ctx - 1                  # tokenizing stops past it (room for one more)
        try:
            if hasattr(self.template, "encode"):    # special tokens parsed in template text only
                ids = self.template.encode(self.tok, req.messages, limit,
                                           add_generation_prompt=True, **kwargs)
            else:
                text = self.template.render(req.messages, add_generation_prompt=True, **kwargs)
                ids = self.tok.encode(text, add_special=True, parse_special=True, limit=limit)
        except TemplateError as e:
            raise invalid("messages", f"The chat template could not render these messages: {e}",
                          "invalid_messages") from None
        except TokenLimit as e:
            raise self._too_long("messages", e) from None
        self._check_context(ids, req, "messages")
        return ids

    def completion_prompts(self, req: GenerationRequest) -> list[list[int]]:
        out = []
        for p in req.prompts:
            if isinstance(p, str):
                ids = self.encode(p, "prompt", self.n_ctx - 1, add_special=True,
                                  parse_special=False)
            else:
                ids = list(p)
            self._check_context(ids, req, "prompt")
            out.append(ids)
        return out

    def encode(self, text: str, param: str, limit: int, what: str = "your prompt",
               **kw) -> list[int]:
        """`text`'s token ids (Tokenizer.encode's keywords `kw`), tokenized no further than
        `limit` tokens: a longer text is a 400 context_length_exceeded naming `param`, at once
        when it has more characters than `limit` tokens can spell, else within a word of the
        limit. So a prompt costs the tokenizer what the context holds, not what was sent."""
        try:
            return self.tok.encode(text, limit=limit, **kw)
        except TokenLimit as e:
            raise self._too_long(param, e, what) from None

    def _too_long(self, param: str, e: TokenLimit, what: str = "your prompt") -> APIError:
        room = ("; it must leave room for at least one generated token"
                if e.limit < self.n_ctx else "")
        return invalid(param, f"This model's maximum context length is {self.n_ctx} tokens. "
                       f"However, {what} has more than {e.limit} tokens (at least "
                       f"{e.at_least}){room}.", "context_length_exceeded")

    def _check_context(self, ids: list[int], req: GenerationRequest, param: str) -> None:
        if not ids:
            raise invalid(param, "The prompt is empty (it encodes to no tokens).")
        n = len(ids)
        if n >= self.n_ctx:
            raise invalid(param, f"This model's maximum context length is {self.n_ctx} tokens. "
                          f"However, your prompt has {n} tokens; it must leave room for at "
                          "least one generated token.", "context_length_exceeded")
        if req.max_tokens is not None and n + req.max_tokens > self.n_ctx:
            name = "max_tokens"
            raise invalid(name, f"This model's maximum context length is {self.n_ctx} tokens. "
                          f"However, you requested {n + req.max_tokens} tokens ({n} in the "
                          f"prompt, {req.max_tokens} for the completion). Please reduce the "
                          "prompt or the completion length.", "context_length_exceeded")

    # ---- what the output is made of ----

    @property
    def open_objects(self) -> bool:
        """--additional-properties open: JSON-schema objects keep JSON Schema's open default."""
        return self.config.additional_properties == "open"

    def output_plan(self, req: GenerationRequest, prompts: list[list[int]]) -> OutputPlan:
        """The grammar constraining the output (an output constraint of the request, or the
        tool-call format for tool_choice 'required' / a function), the control tokens whose
        text must reach the response (tool-call and reasoning markers), and how a chat
        response is split (reasoning_content, tool_calls). 400 for a grammar that cannot be
        used."""
        from .. import reasoning, structured, toolcalls
        from .guided import closed_tools, compile_guided
        plan = OutputPlan()
        if req.guided is not None:
            plan.grammar = compile_guided(req.guided, self.tok, self.open_objects)
        if req.kind != "chat" or self.template is None:
            return plan
        source = getattr(self.template, "source", None)
        if self.config.reasoning_format == "auto" and reasoning.detect(source):
            tail = self.tok.decode(prompts[0][-16:], skip_special=False)
            plan.think, plan.started_in_think = True, reasoning.starts_in_think(tail)
            plan.keep |= {t for t in (self.tok.token_to_id(x) for x in reasoning.TAGS)
                          if t is not None}
        t = req.tools
        if t is not None and t.choice != "none":
            fmt = self.template.tool_format
            plan.tool_format = fmt
            specials = fmt.special_token_ids(self.tok)
            plan.keep |= set(specials.values())
            thinking = ("open" if plan.started_in_think else
                        "optional" if plan.think else None)
            try:
                choice = t.choice if t.choice in ("auto", "required") else \
                    {"type": "function", "function": {"name": t.choice}}
                tools = t.tools if self.open_objects else closed_tools(t.tools)
                lark = fmt.grammar(tools, choice, t.parallel, special_tokens=specials,
                                   thinking=thinking)
                if lark is not None:
                    plan.grammar = structured.compile_grammar(structured.lark(lark), self.tok,
                                                              "tool-call grammar")
                    plan.end_outside_grammar = True
            except (toolcalls.ToolChoiceError, structured.GrammarError) as e:
                raise invalid("tool_choice", f"The tools could not be used: {e}",
                              "invalid_tools") from None
        return plan

    # ---- submission ----

    def generations(self, req: GenerationRequest, prompts: list[list[int]],
                    plan: OutputPlan | None = None) -> list[list[Generation]]:
        """n Generations per prompt; choice k samples with seed + k when a seed is given; each
        has its own matcher of the plan's grammar."""
        from dataclasses import replace

        from ..structured import Constraint
        plan = plan or OutputPlan()
        # Predicted Outputs: the speculator may draft from the predicted tokens (after the
        # prompt's last tokens, so that the first output token can be drafted already)
        predicted = (self.encode(req.prediction, "prediction", self.n_ctx, "the prediction",
                                 add_special=False, parse_special=False)
                     if req.prediction and self.speculator is not None else None)
        out, k = [], 0
        for ids in prompts:
            gens = []
            for _ in range(req.n):
                p = req.params
                if p.seed is not None:
                    p = replace(p, seed=(p.seed + k) % 2**64)
                else:
                    p = replace(p)
                # no text on the engine thread: the request's Job makes it (and finds the
                # stop strings) from the tokens, reame/server/responses.py
                gens.append(Generation(
                    self.tok, ids, p, max_tokens=req.max_tokens, n_ctx=self.n_ctx,
                    ignore_eos=req.ignore_eos, detokenize=False,
                    end_outside_grammar=plan.end_outside_grammar,
                    constraint=Constraint(plan.grammar, self.tok) if plan.grammar else None))
                if predicted:
                    gens[-1].prediction = ids[-3:] + predicted
                k += 1
            out.append(gens)
        return out

    def submit(self, req: GenerationRequest, prompts: list[list[int]],
               plan: OutputPlan | None = None, client=None):
        gens = self.generations(req, prompts, plan)
        return self._submit(lambda timeout: self.scheduler.submit(prompts, gens, timeout=timeout,
                                                                  client=client))

    # ---- embeddings ----

    def embedding_prompts(self, inputs: list) -> list[list[int]]:
        """Token ids of each input (text with BOS/EOS as the GGUF asks, special tokens not
        parsed); each must fit the context whole."""
        if self.pooling is None:
            raise APIError(400, f"This model cannot give embeddings: {self.pooling_error}",
                           "invalid_request_error", None, "unsupported_model")
        out = []
        for i, x in enumerate(inputs):
            ids = self.encode(x, "input", self.n_ctx, f"input[{i}]", add_special=True,
                              parse_special=False) if isinstance(x, str) else list(x)
            if not ids:
                raise invalid("input", f"input[{i}] encodes to no tokens.")
            if len(ids) > self.n_ctx:
                raise invalid("input", f"This model's maximum context length is {self.n_ctx} "
                              f"tokens. However, input[{i}] has {len(ids)} tokens.",
                              "context_length_exceeded")
            out.append(ids)
        return out

    def submit_embeddings(self, prompts: list[list[int]], client=None):
        return self._submit(lambda timeout: self.scheduler.submit_embeddings(
            prompts, self.pooling, timeout=timeout, client=client), "input")

    def _submit(self, fn, value_param: str = "n"):
        """Submit to the scheduler; its refusals as HTTP errors."""
        timeout = self.config.request_timeout or None
        try:
            return fn(timeout)
        except QueueFull:
            raise APIError(429, "The server is at capacity: too many requests are waiting. "
                           "Retry shortly.", "rate_limit_error", None, "queue_full",
                           {"Retry-After": str(self.config.retry_after)}) from None
        except SchedulerStopped as e:
            raise APIError(503, f"The server cannot generate: {e}.", "server_error", None,
                           "shutting_down", {"Retry-After": str(self.config.retry_after)}) from None
        except ValueError as e:
            raise invalid(value_param, str(e)) from None


POOLING_TYPES = {1: "mean", 2: "cls", 3: "last", 4: "rank"}   # GGUF {arch}.pooling_type


def embedding_pooling(engine, config: ServerConfig) -> tuple[str | None, str | None]:
    """How /v1/embeddings pools the final hidden states: --pooling, else the GGUF's
    `{arch}.pooling_type` (mean or last), else the last token (what decoder-only embedding
    models use). (None, why) when the model asks for a pooling Reame does not do."""
    if config.pooling:
        return config.pooling, None
    metadata = engine.model.metadata or {}
    arch = engine.config.arch
    kind = POOLING_TYPES.get(metadata.get(f"{arch}.pooling_type"), "last")
    if kind in ("mean", "last"):
        return kind, None
    return None, (f"its GGUF asks for {kind} pooling (only mean and last are done; "
                  "--pooling chooses one)")


def build_service(engine, config: ServerConfig, tokenizer=None, chat_template=None, *,
                  turns=None, served_as: str | None = None) -> ModelService:
    """A started service over an engine; tokenizer and template default to the model's own
    (`turns`, `served_as`: ModelService's)."""
    metadata = engine.model.metadata
    if tokenizer is None:
        from ..tokenizer import Tokenizer
        if metadata is None:
            raise ReameError("the engine has no model metadata: pass a tokenizer")
        tokenizer = Tokenizer.from_metadata(metadata)
    template_error = None
    if chat_template is None and metadata is not None:
        try:
            from ..chat_template import ChatTemplate
            chat_template = ChatTemplate.from_metadata(metadata, config.chat_template_file)
        except (ReameError, OSError, ImportError) as e:
            if config.chat_template_file:           # asked for explicitly: that is an error
                raise ReameError(f"chat template {config.chat_template_file}: {e}") from e
            template_error = str(e)
            log.warning("chat completions disabled: %s", e)
    return ModelService(engine, tokenizer, config, chat_template, template_error, turns=turns,
                        served_as=served_as).start()


def kv_plan(config: ServerConfig, model_config) -> tuple[int, int]:
    """(KV blocks, context per sequence) of the configured pool for this model."""
    from ..engines import kv_budget
    from ..kv_cache import DEFAULT_MAX_CTX
    c = model_config
    n_ctx = config.ctx_size or min(c.n_ctx_train, DEFAULT_MAX_CTX)
    start, _ = config.batch_limits()
    # the default pool: a whole context for each sequence of the starting batch (a bigger
    # batch the adaptive runtime picks shares it: sequences hold what they use)
    return kv_budget(c, n_ctx, start, kv_type_of(config, c), config.block_size,
                     config.kv_cache_mb, config.workers)


def kv_type_of(config: ServerConfig, model_config) -> str:
    """The configured KV cache type for this model ("auto" resolved: engines.kv_type_for)."""
    from ..engines import DEFAULT_ENGINE, kv_type_for
    return kv_type_for(model_config, config.kv_type, config.engine or DEFAULT_ENGINE,
                       config.act_type, config.attn_type, config.block_size)


SPECULATOR_BYTES_PER_TOKEN = 200   # the speculator's index, per position kept (memory_need)


class Footprint(NamedTuple):
    need: int           # bytes the model takes once loaded
    size: int           # bytes of its file
    name: str           # general.name (the architecture's when the file has none)


def memory_need(config: ServerConfig) -> Footprint:
    """What the model takes once loaded, from the GGUF header (no weight is read): its
    weights, its KV pool (kv_plan), the engine's step buffers (activations of the largest
    step and its logits rows, float32) and the speculator's index at its bound. What a server
    of several models budgets for it."""
    from ..jit.engine import MAX_BATCH_TOKENS
    from ..kv_cache import bytes_per_token
    from ..model import load_model
    model = load_model(config.model)        # the header and the tensor table, no weight read
    c = model.config
    weights = sum(t.data.nbytes for t in model.tensors.values())
    blocks, _ = kv_plan(config, c)
    kv = blocks * config.block_size * bytes_per_token(c.n_layer, c.n_head_kv, c.head_dim,
                                                      c.head_dim_v, kv_type_of(config, c))
    _, slots = config.batch_limits()
    width = 6 * c.n_embd + 2 * (c.n_head * max(c.head_dim, c.head_dim_v)) \
        + 2 * max(c.n_ff, getattr(c, "n_ff_shexp", 0) or 0)
    buffers = 4 * (MAX_BATCH_TOKENS * width + max(slots, 16) * c.n_vocab)
    size = os.path.getsize(config.model)
    # the speculator's index of earlier traffic, at its bound (~51 MB for 262,144 positions,
    # docs/speculation.md)
    drafts = SPECULATOR_BYTES_PER_TOKEN * config.speculate_tokens if config.speculating else 0
    return Footprint(weights + kv + buffers + drafts, size, c.name)


def engine_factory(config: ServerConfig, shared_pools: bool = False) -> Callable[[], object]:
    """A factory that loads the GGUF file and builds the configured engine (call it after fork).
    `shared_pools`: the JIT runs on the process's compute threads (several models)."""
    def build():
        from ..engines import DEFAULT_ENGINE, create_engine
        from ..model import load_model
        if not config.model:
            raise ReameError("no model: pass MODEL.gguf to `reame serve` or set REAME_MODEL")
        from ..topology import Topology, bind_process
        topo = Topology.read() if config.pin != "off" else None
        cpus, threads = config.placement(topo), config.threads
        if cpus:                         # before the weights are read: their pages on our node
            bind_process(cpus)
            threads = threads or topo.physical_cores(cpus)
            log.info("bound to CPUs %s (--pin %s): %d compute threads, one per core",
                     ",".join(map(str, sorted(cpus))), config.pin, threads)
        model = load_model(config.model)
        start, slots = config.batch_limits()
        blocks, n_ctx = kv_plan(config, model.config)
        engine = create_engine(model, config.engine or DEFAULT_ENGINE, n_ctx=n_ctx,
                               max_seqs=slots, kv_type=config.kv_type,
                               threads=threads, act_type=config.act_type,
                               attn_type=config.attn_type,
                               block_size=config.block_size, kv_blocks=blocks, cpus=cpus,
                               shared_pools=shared_pools)
        kv = engine.kv
        log.info("KV cache: %.0f MiB, %d blocks of %d positions (%d tokens, %s)%s; context %d "
                 "per sequence, %s sequences at once", blocks * kv.block_bytes / 2**20,
                 blocks, kv.block_size, blocks * kv.block_size, kv.kv_type,
                 "" if config.kv_cache_mb else " (default: --kv-cache-mb to change)", n_ctx,
                 str(start) if start == slots else
                 f"{start} to start with, up to {slots} (the adaptive runtime grows the batch "
                 "while requests wait)" if config.adaptive == "on" else str(start))
        log.info("prompt attention: %s (--attn-type %s)", engine.attn_type,
                 config.attn_type)
        return engine
    return build
