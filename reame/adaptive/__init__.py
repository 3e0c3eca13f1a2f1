"""The adaptive runtime: the server tuning itself on its own traffic (runtime.AdaptiveRuntime).

decide.py: the paired sequential test that promotes or rejects a candidate; tuner.py: online A/B
of kernel variants through the dispatch table; profile.py: the request profile; store.py: the
learned strategy on disk.
"""

from .runtime import AdaptiveRuntime

__all__ = ["AdaptiveRuntime"]
