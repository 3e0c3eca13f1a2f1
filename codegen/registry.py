"""The kernel registry: every op (codegen/ops/*.py) and its variants for this machine."""

from __future__ import annotations

import importlib
import pkgutil

from . import ops as _ops_pkg
from .isa import ISA
from .ops.base import Op
from .spec import KernelSpec

_OPS: dict[str, Op] | None = None


def ops() -> dict[str, Op]:
    """name -> Op, discovered from the modules of codegen/ops."""
    global _OPS
    if _OPS is None:
        found = {}
        for m in pkgutil.iter_modules(_ops_pkg.__path__):
            if m.name == "base":
                continue
            mod = importlib.import_module(f"{_ops_pkg.__name__}.{m.name}")
            op = getattr(mod, "OP", None)
            if isinstance(op, Op):
                found[op.name] = op
        _OPS = dict(sorted(found.items()))
    return _OPS


def get_op(name: str) -> Op:
    try:
        return ops()[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r} (known: {', '.join(ops())})") from None


def variants(op: str, dtype: str, isa: ISA, **dims) -> list[KernelSpec]:
    o = get_op(op)
    return o.specs(dtype, isa, **{**o.example_dims, **dims})
