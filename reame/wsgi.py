"""`gunicorn reame.wsgi:app`: the Reame app configured from REAME_* environment variables.

    REAME_MODEL=/srv/models/qwen.gguf gunicorn -c python:reame.server.gunicorn_conf reame.wsgi:app

Importing this module is cheap: `app` builds the real Falcon app on first use, in the worker
process, and the model then loads in a background thread of that worker (`/health` says 503
until it is ready). With `reame.server.gunicorn_conf` the load starts as soon as the worker
boots; without it, the first request (typically a health check) starts it. Variables:
REAME_MODEL (or REAME_MODELS, specs separated by ';', or REAME_MODELS_DIR), REAME_ENGINE, REAME_THREADS, REAME_CTX_SIZE, REAME_KV_TYPE,
REAME_MAX_SEQS, REAME_QUEUE_SIZE, REAME_REQUEST_TIMEOUT, REAME_API_KEY,
REAME_CHAT_TEMPLATE_FILE, REAME_MODEL_ALIAS, REAME_MAX_BODY_BYTES, REAME_METRICS_DIR,
REAME_CORS_ORIGINS, REAME_POOLING, REAME_MEMORY_BUDGET_MB, REAME_KEEP_ALIVE; for Reame's gunicorn worker (set by that config file) REAME_HEADER_TIMEOUT,
REAME_BODY_TIMEOUT, REAME_SEND_TIMEOUT and REAME_MAX_CONNECTIONS.
"""

from __future__ import annotations

import threading


class LazyApp:
    """A WSGI callable that builds `create_app(...)` from the environment on first use."""

    def __init__(self):
        self._app = None
        self._lock = threading.Lock()

    def get(self):
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from .server.app import create_app
                    from .server.config import ServerConfig
                    from .server.model_specs import server_registry
                    config = ServerConfig.from_env()
                    self._app = create_app(config=config, registry=server_registry(config))
        return self._app

    def start(self) -> None:
        """Build the app and start loading the model in this process."""
        self.get().reame.start()

    def __call__(self, environ, start_response):
        app = self.get()
        app.reame.start()                  # no-op once loading has begun in this process
        return app(environ, start_response)


app = LazyApp()
