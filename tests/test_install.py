"""`pip install .` works outside the source tree: every package and template is in the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import REPO


def test_wheel_installs_and_runs_outside_the_tree(tmp_path):
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(wheels), str(REPO)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (wheel,) = wheels.glob("reame-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    sources = [p for p in (REPO / "reame").rglob("*.py")] + list((REPO / "codegen").rglob("*.py"))
    for p in sources:
        rel = p.relative_to(REPO)
        inside = ("reame/codegen/" + str(rel)[len("codegen/"):] if rel.parts[0] == "codegen"
                  else str(rel))
        assert inside in names, f"{rel} is missing from the wheel"
    for t in (REPO / "templates").glob("*.ll.j2"):
        assert f"reame/templates/{t.name}" in names, f"template {t.name} is missing"

    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                        str(target), str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import reame, reame.codegen.spec as s; "
            "assert reame.__file__.startswith(sys.argv[1]), reame.__file__; "
            "from reame.codegen import registry; from reame.codegen.isa import detect; "
            "spec = registry.variants('rms_norm', 'F32', detect('generic'))[0]; "
            "print(len(s.render(spec, detect('generic'))[1]))")
    r = subprocess.run([sys.executable, "-I", "-c", code, str(target)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 500
