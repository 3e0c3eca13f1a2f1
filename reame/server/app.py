"""The Falcon WSGI app: thin resources over a `ModelService`, OpenAI-shaped errors everywhere.

`create_app(engine_or_factory, config)` builds it. Tests inject an engine (used at once) or a
factory (called in a background thread: `/health` says 503 until it returns); `reame serve` and
`reame.wsgi` pass a factory that loads the GGUF model in the worker process, after the fork.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import time

import falcon
from gunicorn.http.errors import ParseException

from ..turns import Turns
from .config import ServerConfig
from .messages_api import Messages
from .messages_models import anthropic_error, is_messages_path
from .metrics import Metrics
from .model_metrics import register_model_series
from .responses import (ClosingStream, answer, client_connected, client_key, embeddings_result,
                        start_job)
from .schemas import (APIError, error_body, parse_chat, parse_completion, parse_detokenize,
                      parse_embeddings, parse_json, parse_tokenize)
from .model_specs import parse_duration
from .registry import ModelEntry, ModelRegistry
from .service import ModelService, build_service, model_names

log = logging.getLogger("reame.server")

OPEN_PATHS = {"/health"}
ENDPOINTS = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{model_id}",
             "/health", "/metrics", "/tokenize", "/detokenize", "/v1/embeddings",
             "/v1/adaptive", "/v1/adaptive/freeze", "/v1/adaptive/unfreeze",
             "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
             "/v1/responses/{response_id}", "/v1/responses/{response_id}/input_items"}
# headers a browser script may read on a cross-origin answer (besides the CORS-safelisted ones)
CORS_EXPOSE = ("Retry-After", "WWW-Authenticate")


# ---- middleware ----

class Auth:
    """API-key authentication, `Authorization: Bearer KEY` or (Anthropic's) `x-api-key: KEY`,
    with a constant-time comparison; /health stays open."""

    def __init__(self, api_key: str):
        self.key = api_key.encode()

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource,
                         params) -> None:
        if req.path in OPEN_PATHS or req.method == "OPTIONS":
            return
        header = req.get_header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        tokens = [token.strip()] if scheme.lower() == "bearer" and token.strip() else []
        tokens += [t.strip() for t in [req.get_header("X-Api-Key") or ""] if t.strip()]
        if not tokens:
            raise APIError(401, "You didn't provide an API key. You need to provide your API key "
                           "in an Authorization header using Bearer auth (i.e. Authorization: "
                           "Bearer YOUR_KEY) or an x-api-key header.", "invalid_request_error",
                           None, "invalid_api_key",
                           {"WWW-Authenticate": "Bearer"})
        if not any(hmac.compare_digest(t.encode(), self.key) for t in tokens):
            raise APIError(401, "Incorrect API key provided.", "invalid_request_error", None,
                           "invalid_api_key", {"WWW-Authenticate": "Bearer"})


class RequestMetrics:
    """Counts every response by endpoint (the route template, never the raw path) and status.

    A stream is counted when it ends, not when its headers go out: 200 if the client received
    it whole, 499 if the client went away before its end, the error's status if it failed on the
    way (see ClosingStream)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def process_request(self, req, resp):
        req.context.t_arrival = time.monotonic()

    def process_response(self, req, resp, resource, req_succeeded):
        route = req.uri_template if req.uri_template in ENDPOINTS else "other"
        if isinstance(resp.stream, ClosingStream) and req.method != "HEAD":
            resp.stream.on_end = lambda status: self.metrics.inc(
                "reame_requests_total", 1, (route, str(status)))
            return
        self.metrics.inc("reame_requests_total", 1, (route, str(resp.status_code)))


# ---- resources ----

class Generate:
    """POST /v1/chat/completions and POST /v1/completions."""

    def __init__(self, kind: str, models: "ServedModels", config: ServerConfig,
                 metrics: Metrics):
        self.kind, self.models, self.config, self.metrics = kind, models, config, metrics
        self.endpoint = "/v1/chat/completions" if kind == "chat" else "/v1/completions"

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_json(_read_body(req, self.config.max_body_bytes))
        service = self.models.get(req, body)
        if self.kind == "chat":
            r = parse_chat(body, service.n_vocab, service.max_n)
        else:
            r = parse_completion(body, service.n_vocab, service.max_n)
        service.check_model(r.model)
        prompts = [service.chat_prompt(r)] if self.kind == "chat" else service.completion_prompts(r)
        job = start_job(req, service, r, prompts, self.metrics, self.endpoint)
        answer(resp, job, r.stream)


class Models:
    """GET /v1/models: every model the server serves, with its state (loaded, loading,
    unloaded, unloading, failed), its file's size and the memory it is budgeted."""

    def __init__(self, models: "ServedModels", config: ServerConfig):
        self.models, self.config = models, config

    def _card(self, e: ModelEntry) -> dict:
        s = e.service
        card = {"id": e.id, "object": "model", "owned_by": "reame",
                "aliases": self.models.registry.aliases(e), **e.card()}
        if s is not None:
            card.update(created=s.created, max_model_len=s.n_ctx)
        else:
            try:
                card["created"] = int(os.path.getmtime(e.config.model))
            except (OSError, TypeError):
                card["created"] = 0
        return card

    def on_get(self, req, resp):
        reg = self.models.registry
        if not reg.several:         # one model: as before, 503 while it first loads
            self.models.ready_default()
        resp.media = {"object": "list", "data": [self._card(e) for e in reg.entries]}

    def on_get_item(self, req, resp, model_id):
        reg = self.models.registry
        if not reg.several:
            self.models.ready_default()
        resp.media = self._card(reg.find(model_id))

    on_head = on_get                    # HEAD wherever GET is served: same status and headers
    on_head_item = on_get_item


class Embeddings:
    """POST /v1/embeddings: each input's final hidden states pooled (mean or last token, per
    the model's metadata or --pooling) into a unit vector, computed through the scheduler
    beside the generating requests."""

    def __init__(self, models: "ServedModels", config: ServerConfig, metrics: Metrics):
        self.models, self.config, self.metrics = models, config, metrics

    def on_post(self, req, resp):
        body = parse_json(_read_body(req, self.config.max_body_bytes))
        service = self.models.get(req, body)
        r = parse_embeddings(body, service.n_vocab, service.n_embd)
        service.check_model(r.model)
        prompts = service.embedding_prompts(r.inputs)
        request = service.submit_embeddings(prompts, client=client_key(req.env))
        t0 = getattr(req.context, "t_arrival", time.monotonic())
        resp.media = embeddings_result(service, request, len(prompts), prompts,
                                       r.encoding_format, self.metrics, t0,
                                       connected=client_connected(req.env))


class Tokenize:
    """POST /tokenize and POST /detokenize, in llama-server's shapes (vLLM's names accepted)."""

    def __init__(self, models: "ServedModels", config: ServerConfig):
        self.models, self.config = models, config

    def _body_and_service(self, req):
        body = parse_json(_read_body(req, self.config.max_body_bytes))
        return body, self.models.get(req, body)

    def on_post(self, req, resp):
        body, service = self._body_and_service(req)
        t = parse_tokenize(body)
        service.check_model(t.model)
        ids = service.encode(t.content, "content", service.n_ctx, "the text",
                             add_special=t.add_special, parse_special=t.parse_special)
        tokens = ids
        if t.with_pieces:
            tokens = [{"id": i, "piece": _piece(service.tok.token_bytes(i))} for i in ids]
        resp.media = {"tokens": tokens, "count": len(ids), "max_model_len": service.n_ctx}

    def on_post_detokenize(self, req, resp):
        body, service = self._body_and_service(req)
        model, ids = parse_detokenize(body, service.n_vocab)
        service.check_model(model)
        text = service.tok.decode(ids)
        resp.media = {"content": text, "prompt": text}


def _piece(b: bytes):
    """A token's piece as llama-server shows it: its text when the bytes are valid UTF-8, else
    the list of byte values."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)


class Health:
    def __init__(self, models: "ServedModels"):
        self.models = models

    def on_get(self, req, resp):
        self.models.registry.start()
        state, error = self.models.registry.health()
        resp.media = {"status": "ok" if state == "ready" else state}
        if state != "ready":
            resp.status = falcon.HTTP_503
            resp.set_header("Retry-After", "1")
            if error:
                resp.media["error"] = error

    on_head = on_get


class Adaptive:
    """GET /v1/adaptive: the adaptive runtime's report. POST /v1/adaptive/freeze and /unfreeze:
    stop or resume exploring (what was learned stays live); they change how the server runs,
    so they need --api-key to be set (and the key, checked by the Auth middleware)."""

    def __init__(self, models: "ServedModels", config: ServerConfig):
        self.models, self.config = models, config

    def _runtime(self, req):
        """The runtime of ?model=NAME (default: the first model), which must be loaded."""
        reg = self.models.registry
        if not reg.several:
            self.models.ready_default()
        service = reg.peek(req.get_param("model"), self.config.retry_after)
        if service.adaptive is None:
            raise APIError(404, "This engine has no adaptive runtime (the reference engine).",
                           "invalid_request_error", None, "not_adaptive")
        return service.adaptive

    def on_get(self, req, resp):
        resp.media = self._runtime(req).report()

    on_head = on_get

    def _control(self, req, resp, freeze: bool):
        if not self.config.api_key:
            raise APIError(403, "Freezing and unfreezing the adaptive runtime needs the server "
                           "to run with --api-key.", "permission_error", None, "api_key_required")
        rt = self._runtime(req)
        if freeze:
            rt.freeze()
        else:
            rt.unfreeze()
        resp.media = {"frozen": rt.frozen, "enabled": rt.enabled}

    def on_post_freeze(self, req, resp):
        self._control(req, resp, True)

    def on_post_unfreeze(self, req, resp):
        self._control(req, resp, False)


class MetricsResource:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def on_get(self, req, resp):
        resp.content_type = "text/plain; version=0.0.4; charset=utf-8"
        resp.text = self.metrics.render()

    on_head = on_get


def _read_body(req: falcon.Request, limit: int) -> bytes:
    """The request body, at most `limit` bytes (else 413): by its Content-Length, or to its end
    when it is sent chunked (the WSGI server decodes the chunks; wsgi.input then ends with the
    body, where Falcon's bounded_stream, knowing no length, would read nothing)."""
    n = req.content_length
    if n is not None and n > limit:
        raise APIError(413, f"The request body is larger than {limit} bytes.",
                       "invalid_request_error", None, "request_too_large")
    try:
        if n is None and "chunked" in (req.get_header("Transfer-Encoding") or "").lower():
            data = req.stream.read(limit + 1)
        else:
            data = req.bounded_stream.read(limit + 1)
    except (ValueError, OSError, ParseException) as e:
        # a body cut short or mis-framed (gunicorn's NoMoreData, ChunkMissingTerminator...);
        # Reame's worker reads bodies whole first, so this comes from another worker class
        raise APIError(400, f"The request body could not be read ({type(e).__name__}).",
                       "invalid_request_error", None, None) from None
    if len(data) > limit:
        raise APIError(413, f"The request body is larger than {limit} bytes.",
                       "invalid_request_error", None, "request_too_large")
    return data


# ---- error handlers: every error leaves as OpenAI's error body ----

def _send(resp: falcon.Response, status: int, body: dict, headers=None, req=None) -> None:
    if req is not None and is_messages_path(req.path):      # Anthropic's API, its error shape
        body = anthropic_error(status, body["error"]["message"])
    resp.status = status
    resp.media = body
    resp.content_type = falcon.MEDIA_JSON
    for k, v in (headers or {}).items():
        resp.set_header(k, v)


def handle_api_error(req, resp, ex: APIError, params):
    _send(resp, ex.status, ex.body(), ex.headers, req)


def handle_http_error(req, resp, ex: falcon.HTTPError, params):
    status = ex.status_code
    if status == 404:
        msg = f"Invalid URL ({req.method} {req.path})"
    elif status == 405:
        msg = f"Method {req.method} is not allowed on {req.path}."
    else:
        msg = ex.description or ex.title or "Bad request"
    kind = "invalid_request_error" if status < 500 else "server_error"
    _send(resp, status, error_body(msg, kind, None, None), dict(ex.headers or {}), req)


def handle_unexpected(req, resp, ex: Exception, params):
    log.exception("unhandled error on %s %s", req.method, req.path)
    _send(resp, 500, error_body(f"Internal server error ({type(ex).__name__}).", "server_error"),
          req=req)


# ---- the factory ----

def single_registry(engine_or_factory, config: ServerConfig, tokenizer=None,
                    chat_template=None) -> ModelRegistry:
    """A registry of one model over an engine (its service built at once) or a zero-argument
    factory returning one (built in a background thread of the serving process)."""
    turns = Turns()

    def build(e=None) -> ModelService:
        engine = engine_or_factory() if _is_factory(engine_or_factory) else engine_or_factory
        return build_service(engine, config, tokenizer=tokenizer, chat_template=chat_template,
                             turns=turns)

    keep = math.inf if config.keep_alive is None else config.keep_alive
    entry = ModelEntry(config, model_names(None, config), 0, 0, keep)
    if config.model:
        try:
            entry.size = os.path.getsize(config.model)
        except OSError:
            pass
    registry = ModelRegistry([entry], build, 2**62, turns=turns)
    if not _is_factory(engine_or_factory):
        registry.loaded_with(entry, build())
    return registry


class ServedModels:
    """The registry as the resources use it: `get(req, body)` the service of the body's
    `model` (loaded if needed), leased until the response leaves (ReleaseModels)."""

    def __init__(self, registry: ModelRegistry, config: ServerConfig):
        self.registry, self.config = registry, config

    def get(self, req, body=None) -> ModelService:
        name = requested_model(body)
        keep = take_keep_alive(req, body)
        service, release = self.registry.acquire(
            name, keep, timeout=self.config.request_timeout or None,
            retry_after=self.config.retry_after, connected=client_connected(req.env))
        releases = getattr(req.context, "model_releases", None)
        if releases is None:
            releases = req.context.model_releases = []
        releases.append(release)
        return service

    def ready_default(self) -> None:
        """503 while the (only) model first loads or after it failed: as /health."""
        state, error = self.registry.health()
        if state == "failed":
            raise APIError(503, f"The model failed to load: {error}", "server_error", None,
                           "model_load_failed")
        if state != "ready":
            raise APIError(503, "The model is loading; retry shortly.", "server_error", None,
                           "model_loading", {"Retry-After": str(self.config.retry_after)})

    @property
    def service(self) -> ModelService | None:
        """The first model's service, when loaded."""
        e = self.registry.default
        return e.service if e.state == "loaded" else None


def requested_model(body) -> str | None:
    """A request body's `model` (None when absent or not a string: the first model, and the
    body's own check reports a bad value)."""
    name = body.get("model") if isinstance(body, dict) else None
    return name if isinstance(name, str) else None


def take_keep_alive(req, body) -> float | None:
    """The body's `keep_alive` (Ollama's: seconds or a duration string; 400 when malformed),
    taken out of the body (the API's own schema does not know it) and kept on the request, so
    that a resource may take it before validating the body and get() still finds it."""
    if isinstance(body, dict) and "keep_alive" in body:
        raw = body.pop("keep_alive")
        try:
            req.context.keep_alive = None if raw is None else parse_duration(raw)
        except ValueError as e:
            raise APIError(400, f"Invalid 'keep_alive': {e}.", "invalid_request_error",
                           "keep_alive", "invalid_value") from None
    return getattr(req.context, "keep_alive", None)


class ReleaseModels:
    """Releases the models a request leased (ServedModels.get) once its response is made: a
    generation is in the scheduler by then, which keeps its model loaded until it ends."""

    def process_response(self, req, resp, resource, req_succeeded):
        ok = req_succeeded and resp.status_code < 400
        for release in getattr(req.context, "model_releases", ()):
            release(ok)


def create_app(engine_or_factory=None, config: ServerConfig | None = None, *, tokenizer=None,
               chat_template=None, metrics: Metrics | None = None,
               registry: ModelRegistry | None = None) -> falcon.App:
    """The Reame app over an engine, or over a zero-argument factory returning one, or over a
    registry of several models (reame/server/registry.py: server_registry).

    An engine is wrapped at once; a factory runs in a background thread of the process that
    serves (call `app.reame.start()` to begin, or the first request does).
    """
    config = config or ServerConfig()
    metrics = metrics or Metrics(config.metrics_dir)
    if registry is None:
        registry = single_registry(engine_or_factory, config, tokenizer, chat_template)
    models = ServedModels(registry, config)

    register_model_series(metrics)
    metrics.models = registry.loaded                   # every model's id -> service or None

    middleware = [RequestMetrics(metrics), ReleaseModels()]
    origins = config.cors_allow_origins()
    if origins is not None:             # before Auth: a 401 must carry CORS headers to be read
        middleware.append(falcon.CORSMiddleware(allow_origins=origins,
                                                expose_headers=list(CORS_EXPOSE)))
    if config.api_key:
        middleware.append(Auth(config.api_key))
    app = ReameApp(middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = True
    app.add_route("/v1/chat/completions", Generate("chat", models, config, metrics))
    app.add_route("/v1/completions", Generate("completion", models, config, metrics))
    messages = Messages(models, config, metrics, _read_body)
    app.add_route("/v1/messages", messages)
    app.add_route("/v1/messages/count_tokens", messages, suffix="count_tokens")
    cards = Models(models, config)
    app.add_route("/v1/models", cards)
    app.add_route("/v1/models/{model_id}", cards, suffix="item")
    app.add_route("/health", Health(models))
    app.add_route("/metrics", MetricsResource(metrics))
    app.add_route("/v1/embeddings", Embeddings(models, config, metrics))
    tokenize = Tokenize(models, config)
    app.add_route("/tokenize", tokenize)
    app.add_route("/detokenize", tokenize, suffix="detokenize")
    adaptive = Adaptive(models, config)
    app.add_route("/v1/adaptive", adaptive)
    app.add_route("/v1/adaptive/freeze", adaptive, suffix="freeze")
    app.add_route("/v1/adaptive/unfreeze", adaptive, suffix="unfreeze")
    from .responses_api import Responses
    responses = Responses(models, config, metrics)
    app.add_route("/v1/responses", responses)
    app.add_route("/v1/responses/{response_id}", responses, suffix="item")
    app.add_route("/v1/responses/{response_id}/input_items", responses, suffix="input_items")
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_http_error)
    app.add_error_handler(APIError, handle_api_error)
    app.reame = AppHandle(models, metrics, config)
    return app


class ReameApp(falcon.App):
    """falcon.App plus `.reame`, the handle on its models, metrics and config."""

    reame: "AppHandle"


class AppHandle:
    """What the runner and tests reach through `app.reame`."""

    def __init__(self, models: ServedModels, metrics: Metrics, config: ServerConfig):
        self.served, self.metrics, self.config = models, metrics, config
        self.models = models.registry

    def start(self) -> None:
        """Begin loading the first model in this process and publishing metrics to the shared
        dir."""
        self.models.start()
        if self.config.metrics_dir:
            self.metrics.start_publishing()

    def stop(self) -> None:
        """Stop every model's engine thread (saving what it learned)."""
        self.models.stop()

    @property
    def service(self) -> ModelService | None:
        """The first model's service, when loaded."""
        return self.served.service


def _is_factory(x) -> bool:
    return callable(x) and not hasattr(x, "forward")
