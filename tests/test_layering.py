"""Dependencies point one way (docs/design.md): the reference engine is an oracle independent of
the JIT, the JIT takes the reference's numerics only through op files, and codegen knows of
reame/ only its type table and errors. Read from the sources' import statements (function-level
imports included), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def imports(path: Path, package: str) -> set[str]:
    """Every module `path` imports, as absolute names (`package`: the file's package, for
    relative imports)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def reaches(names: set[str], prefix: str) -> set[str]:
    return {n for n in names if n == prefix or n.startswith(prefix + ".")}


def test_the_reference_engine_imports_nothing_of_the_jit():
    # catches: the oracle re-deriving its numerics from the engine it checks (it imported
    # reame.jit.select.prompt_q8k before: a wrong JIT choice would have been copied, not caught)
    got = imports(REPO / "reame" / "reference.py", "reame")
    assert not reaches(got, "reame.jit"), reaches(got, "reame.jit")


def test_the_jit_never_imports_the_reference_engine():
    # catches: the JIT borrowing the oracle's code (it imported reame.reference.rope_angles:
    # a bug there would have been in both, and the comparison blind to it)
    for path in sorted((REPO / "reame" / "jit").glob("*.py")):
        got = imports(path, "reame.jit")
        assert not reaches(got, "reame.reference"), (path.name, reaches(got, "reame.reference"))


def test_codegen_knows_only_the_type_table_and_errors_of_reame():
    # catches: a kernel's reference reaching into the server-side modules (sample_temp's
    # reference imported reame.sampling before; its numerics now live in its op file, and
    # reame.sampling imports them from there)
    allowed = {"reame.tensor_types", "reame.errors"}
    for path in sorted((REPO / "codegen").rglob("*.py")):
        parts = path.relative_to(REPO / "codegen").parent.parts
        pkg = ".".join(("reame", "codegen", *parts))
        got = imports(path, pkg)
        outside = {n for n in reaches(got, "reame") if not n.startswith("reame.codegen")
                   and not any(n == a or n.startswith(a + ".") for a in allowed)}
        assert not outside, (str(path.relative_to(REPO)), outside)


def test_the_adaptive_runtime_and_the_server_use_the_kernel_plan_not_engine_internals():
    # catches: engine._bucket_of, engine.time_next = True, engine.table.stats[...] or
    # hasattr(engine, "table") creeping back (the runtime and the server reached into the JIT
    # engine this way before reame/kernel_plan.py; a change of the engine's insides broke
    # them silently)
    import re
    banned = [r"\._bucket_of\b", r"\.time_next\b(?!_)", r"\bengine\.table\b",
              r"\bengine\.kernels\b", r"\beng\.programs\b", r"hasattr\(\w*engine, \"table\"\)"]
    for d in ("adaptive", "server"):
        for path in sorted((REPO / "reame" / d).glob("*.py")):
            text = path.read_text()
            found = [b for b in banned if re.search(b, text)]
            assert not found, (str(path.relative_to(REPO)), found)
