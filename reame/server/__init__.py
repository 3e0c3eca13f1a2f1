"""The OpenAI-compatible HTTP server: a Falcon WSGI app run by gunicorn (see docs/server.md)."""

from .app import create_app
from .config import ServerConfig

__all__ = ["create_app", "ServerConfig"]
