"""Reame: a CPU inference server for GGUF language models that tunes itself on its own traffic."""

__version__ = "0.1.0"
