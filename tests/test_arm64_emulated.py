"""The emulated ARM64 check (bench/arm64_check.py --quick) as a test, for CI to opt in to with
REAME_ARM64_CHECK=1: an arm64 Debian root filesystem under qemu-aarch64 (built once, cached in
~/.cache/reame/arm64 or $REAME_ARM64_CACHE), ARM level detection, the ARM kernel families at
their levels, stories260K greedy with the JIT engine at neon, dotprod, i8mm, sve and with the
reference engine, bench.engine's worker with nonzero timings. docs/kernels-arm.md has its
times."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(os.environ.get("REAME_ARM64_CHECK") != "1",
                    reason="the emulated ARM64 check takes minutes: set REAME_ARM64_CHECK=1")
@pytest.mark.skipif(platform.machine() in ("aarch64", "arm64"),
                    reason="an ARM64 host runs the ARM tests natively")
def test_emulated_arm64_quick_check():
    r = subprocess.run([sys.executable, "-m", "bench.arm64_check", "--quick"], cwd=REPO,
                       capture_output=True, text=True, timeout=3600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "summary (emulated aarch64" in out and " 0 failed" in out, out[-6000:]
