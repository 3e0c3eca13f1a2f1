"""Running the app under gunicorn in-process (gunicorn's application API).

Threaded workers (`reame.server.worker.ReameWorker`, gunicorn's gthread reading each request
whole in its event loop before a thread takes it, so slow clients cannot hold the threads): the
sync worker cannot stream and kills requests after `timeout` seconds, while a gthread worker
heartbeats from its main loop, so a long stream is fine. The app
(and with it the model) is built in `load()`, which gunicorn calls in each worker after the
fork: one model replica and one engine thread per worker.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import tempfile

from gunicorn.app.base import BaseApplication

from ..errors import ReameError
from .config import ServerConfig

WORKER_CLASS = "reame.server.worker.ReameWorker"
LOGGER_CLASS = "reame.server.worker.AccessLogger"
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"


def default_http_threads(config: ServerConfig) -> int:
    """HTTP threads per worker: every running and waiting request holds one while it streams, and
    the ones beyond that must still reach the app to be told 429 rather than wait unseen."""
    return max(16, config.batch_limits()[1] + config.queue_size + 8)


def gunicorn_options(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000,
                     workers: int = 1, http_threads: int | None = None,
                     log_level: str = "info", access_log: bool = False) -> dict:
    bind = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    return {
        "bind": [bind],
        "workers": workers,
        "worker_class": WORKER_CLASS,    # gthread that reads each request before a thread takes it
        "logger_class": LOGGER_CLASS,    # access lines give a cut stream's 499
        "threads": http_threads or default_http_threads(config),
        "worker_connections": config.max_connections,
        "timeout": 120,                  # worker heartbeat, not a request limit (gthread)
        "graceful_timeout": 30,          # finish in-flight streams on SIGTERM, then exit
        "keepalive": 5,
        "preload_app": False,            # the model is loaded in each worker, after the fork
        "proc_name": "reame",
        "loglevel": log_level,
        "errorlog": "-",
        "accesslog": "-" if access_log else None,
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
        # gunicorn >= 25.1 opens ~/.gunicorn/gunicorn.ctl: one path for every server of the user
        **({"control_socket_disable": True} if _has_setting("control_socket_disable") else {}),
    }


def _has_setting(name: str) -> bool:
    from gunicorn.config import KNOWN_SETTINGS
    return any(s.name == name for s in KNOWN_SETTINGS)


class ReameApplication(BaseApplication):
    def __init__(self, config: ServerConfig, options: dict, owns_metrics_dir: bool = False,
                 planned=None):
        self.config = config
        self.options = options
        self.owns_metrics_dir = owns_metrics_dir
        self.planned = planned          # model_specs.plan_models, done before the fork
        super().__init__(prog="reame serve")

    def load_config(self) -> None:
        for key, value in self.options.items():
            if value is not None:
                self.cfg.set(key, value)
        self.cfg.set("on_exit", self._on_exit)
        self.cfg.set("worker_exit", worker_exit)

    def load(self):
        """Called in each worker after the fork: build the app and start loading the model."""
        from .app import create_app
        from .model_specs import server_registry
        logging.basicConfig(level=self.options.get("loglevel", "info").upper(), format=LOG_FORMAT)
        app = create_app(config=self.config,
                         registry=server_registry(self.config, self.planned))
        app.reame.start()
        return app

    def _on_exit(self, arbiter) -> None:
        if self.config.metrics_dir and self.owns_metrics_dir:
            shutil.rmtree(self.config.metrics_dir, ignore_errors=True)


def worker_exit(server, worker) -> None:
    """In the worker, as it exits: stop every model's engine thread and save what its adaptive
    runtime learned (it is also saved every minute)."""
    handle = getattr(getattr(worker, "wsgi", None), "reame", None)
    if handle is not None:
        try:
            handle.stop()
        except Exception:                    # exiting anyway: never mask the exit
            logging.getLogger("reame.server").exception("stopping the service failed")


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound now as gunicorn binds one (SO_REUSEADDR, TCP_NODELAY, IPv6 for
    an address with a colon), so that a port in use or an address not of this machine is one
    line before anything starts; gunicorn's own bind retries five times a second apart, logging
    each, then exits 1. `run` hands it to gunicorn (bind fd://N): nothing else can take the port
    in between."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = host.strip("[]")
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((addr, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ReameError(f"port {port} on {addr} is in use") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ReameError(f"cannot listen on {addr}: not an address of this machine") from None
        if e.errno == errno.EACCES:
            raise ReameError(f"port {port} on {addr}: permission denied") from None
        raise ReameError(f"cannot listen on {addr} port {port}: "
                         f"{e.strerror or e}") from None
    return sock


def run(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, planned=None,
        **kw) -> None:
    """Serve until SIGINT/SIGTERM on a socket bound first (listen_socket: ReameError when it
    cannot be). Several workers share a metrics directory (see metrics.py). `planned`:
    model_specs.plan_models(config), made before the fork (else each worker makes it)."""
    options = gunicorn_options(config, host=host, port=port, **kw)
    options["bind"] = [f"fd://{listen_socket(host, port).detach()}"]
    owns = False
    if options["workers"] > 1 and not config.metrics_dir:
        config.metrics_dir = tempfile.mkdtemp(prefix="reame-metrics-")
        owns = True
    ReameApplication(config, options, owns, planned).run()
