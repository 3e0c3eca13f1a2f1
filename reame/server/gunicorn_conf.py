"""A gunicorn config for `reame.wsgi:app`: `gunicorn -c python:reame.server.gunicorn_conf reame.wsgi:app`.

Threaded workers (Reame's gthread, see reame/server/worker.py), timeouts that suit streaming,
and a hook that starts loading the model as soon as each worker boots. Override any setting on gunicorn's command line (it wins over this file)
or with REAME_BIND, REAME_WORKERS and REAME_HTTP_THREADS.
"""

import os

from reame.server.config import ServerConfig
from reame.server.gunicorn_app import LOGGER_CLASS, WORKER_CLASS, default_http_threads

bind = os.environ.get("REAME_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("REAME_WORKERS", "1"))
_config = ServerConfig.from_env()
worker_class = WORKER_CLASS      # gthread reading each request whole before a thread takes it
logger_class = LOGGER_CLASS      # access lines give a cut stream's 499
threads = int(os.environ.get("REAME_HTTP_THREADS") or default_http_threads(_config))
worker_connections = _config.max_connections
timeout = 120
graceful_timeout = 30
keepalive = 5
preload_app = False
proc_name = "reame"


from reame.server.gunicorn_app import worker_exit  # noqa: E402,F401  (a gunicorn hook)


def post_worker_init(worker):
    app = worker.wsgi
    start = getattr(app, "start", None)
    if start is not None:
        start()
control_socket_disable = True   # gunicorn >= 25.1: no ~/.gunicorn/gunicorn.ctl shared by every server
