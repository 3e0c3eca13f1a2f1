"""A gunicorn config for `reame.wsgi:app`: `gunicorn -c python:reame.server.gunicorn_conf reame.wsgi:app`.

Threaded workers, timeouts that suit streaming, and a hook that starts loading the model as soon
as each worker boots. Override any setting on gunicorn's command line (it wins over this file)
or with REAME_BIND, REAME_WORKERS and REAME_HTTP_THREADS.
"""

import os

from reame.server.config import ServerConfig
from reame.server.gunicorn_app import default_http_threads

bind = os.environ.get("REAME_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("REAME_WORKERS", "1"))
worker_class = "gthread"
threads = int(os.environ.get("REAME_HTTP_THREADS") or default_http_threads(ServerConfig.from_env()))
timeout = 120
graceful_timeout = 30
keepalive = 5
preload_app = False
proc_name = "reame"


def post_worker_init(worker):
    app = worker.wsgi
    start = getattr(app, "start", None)
    if start is not None:
        start()
control_socket_disable = True   # gunicorn >= 25.1: no ~/.gunicorn/gunicorn.ctl shared by every server
