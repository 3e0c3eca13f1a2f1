"""An emulated ARM64 check: Reame's AArch64 kernels and engines under qemu-aarch64 (issue 14).

    nice -n 10 python -m bench.arm64_check [--quick] [--no-smollm2] [--cache-dir DIR] [--no-apt]
    python -m bench.arm64_check --exec -m pytest -q tests/test_kernels_arm.py   # any guest python

On an x86-64 (or any) Linux host with qemu-user-static, without binfmt_misc or a chroot:

1. a Debian arm64 root filesystem (debootstrap's first stage, minbase + python3 + libstdc++6,
   every downloaded package unpacked with dpkg-deb) in the cache directory
   (~/.cache/reame/arm64, or $REAME_ARM64_CACHE), built once per version stamp (ROOT_STAMP);
   qemu-user-static and debootstrap are installed with apt-get when missing (as root, or
   through `sudo -n`; --no-apt forbids it);
2. Reame's dependencies (pyproject's, with the `test` extra), pip and the build backend
   (build-system.requires) as aarch64 wheels, installed by the host's pip (`--platform
   manylinux..._aarch64 --target`, the host's CA bundle) into a site directory keyed by
   the requirements, the guest's Python and glibc; Reame itself is this
   checkout, mapped as `pip install -e .` maps it (a finder imported by a .pth in a
   virtual environment of the guest's Python);
3. the guest's Python (`qemu-aarch64-static -L <root> <boot>/bin/python3.X`, a venv of the
   root's /usr/bin/python3.X) runs:
   - detection: the levels must include neon, dotprod, i8mm and sve (qemu's default CPU reports
     asimddp, i8mm, sve, sve2 in HWCAP/HWCAP2);
   - kernels: tests/test_kernels_arm.py (every ARM family x type x tile at its own level) and,
     unless --quick, tests/test_kernels_matmul_q8a.py / _q8k.py at the native (sve) level, neon
     and generic;
   - stories260K: the JIT engine at each level neon, dotprod, i8mm, sve (REAME_ISA) against
     llama.cpp's greedy tokens and first-step logits (tests/test_jit_engine.py), and unless
     --quick the integer-dot path on stories260K requantised to Q4_0 and Q4_1 against the
     reference engine; the reference engine against llama.cpp (tests/test_reference.py);
   - bench.engine's worker once on stories260K: its timings (prefill, decode, the kernel time
     the runtime's counter sampled over 32 decode steps) must be nonzero;
   - unless --quick or --no-smollm2: SmolLM2-135M-Instruct Q4_1 (from the shared folder; when
     it is absent the check fails) at each level, teacher-forced on llama.cpp's greedy continuations of its 3 prompts: a
     multi-token prefill then decode steps; every position where llama.cpp's top-2 logit gap
     is >= --smollm2-gap must pick llama.cpp's token.
   A summary table; the exit status is 1 when any check failed, 2 when the setup failed.

Test data: $REAME_SHARED or ../shared (as tests/conftest.py). Kernels compiled in the guest are
cached in <cache>/kernels (--cold-kernels: a fresh directory). Logs of every check:
<cache>/logs/. Emulated times say nothing about speed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SUITE = "bookworm"                     # Debian 12: python3.11, glibc 2.36
ROOT_STAMP = "1"                       # bump to rebuild every cached root filesystem
SITE_STAMP = "1"                       # bump to reinstall every cached site directory
DEFAULT_MIRROR = "http://deb.debian.org/debian"
LEVELS = ("neon", "dotprod", "i8mm", "sve")
QEMU = ("qemu-aarch64-static", "qemu-aarch64")


class SetupError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[arm64_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def shared_dir() -> Path:
    return Path(os.environ.get("REAME_SHARED") or REPO.parent / "shared").resolve()


def cache_root(arg: str | None) -> Path:
    d = Path(arg or os.environ.get("REAME_ARM64_CACHE")
             or Path.home() / ".cache" / "reame" / "arm64")
    d.mkdir(parents=True, exist_ok=True)
    return d.resolve()


# ------------------------------------------------------------------------------- host tools
def _privileged() -> list[str] | None:
    """The prefix that runs a command as root: [] as root, ["sudo", "-n"] where sudo needs no
    password, None otherwise."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"],
                                               capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def qemu_binary() -> str | None:
    for name in QEMU:
        p = shutil.which(name)
        if p:
            return p
    return None


def ensure_tools(allow_apt: bool) -> str:
    """qemu-aarch64(-static), debootstrap and dpkg-deb on the host; apt-get installs what is
    missing when allowed and possible. Returns the qemu binary."""
    missing = [pkg for pkg, ok in (("qemu-user-static", qemu_binary()),
                                   ("debootstrap", shutil.which("debootstrap")
                                    or os.path.exists("/usr/sbin/debootstrap")))
               if not ok]
    if missing:
        sudo = _privileged()
        if not allow_apt or sudo is None or not shutil.which("apt-get"):
            why = ("--no-apt" if not allow_apt else "no apt-get" if not shutil.which("apt-get")
                   else "not root and no password-less sudo")
            raise SetupError(f"missing {', '.join(missing)} ({why}): install them, e.g. "
                             f"`sudo apt-get install -y {' '.join(missing)}`")
        log(f"apt-get install {' '.join(missing)}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            r = subprocess.run([*sudo, *cmd], env=env, capture_output=True, text=True)
            if r.returncode:
                raise SetupError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    if not shutil.which("dpkg-deb"):
        raise SetupError("dpkg-deb is missing (a Debian/Ubuntu host is assumed)")
    return qemu_binary()


# -------------------------------------------------------------------------- root filesystem
def build_root(cache: Path, mirror: str, rebuild: bool) -> tuple[Path, dict]:
    """The arm64 root filesystem in cache/root-<suite>-v<stamp>, built when absent. Returns it
    and its facts (python version, glibc version)."""
    root = cache / f"root-{SUITE}-v{ROOT_STAMP}"
    marker = root / ".reame-arm64.json"
    if marker.exists() and not rebuild:
        return root, json.loads(marker.read_text())
    sudo = _privileged()
    if sudo is None:
        raise SetupError("building the arm64 root filesystem runs debootstrap, which needs root "
                         "(or password-less sudo)")
    if root.exists():                  # --rebuild (its files belong to root)
        subprocess.run([*sudo, "rm", "-rf", str(root)], check=True)
    tmp = cache / f"root-{SUITE}-v{ROOT_STAMP}.tmp"
    if tmp.exists():
        subprocess.run([*sudo, "rm", "-rf", str(tmp)], check=True)
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    log(f"debootstrap --foreign --arch=arm64 {SUITE} (minbase + python3) from {mirror}")
    t = time.perf_counter()
    r = subprocess.run([*sudo, debootstrap, "--foreign", "--arch=arm64", "--variant=minbase",
                        "--include=python3,libstdc++6", SUITE, str(tmp), mirror],
                       capture_output=True, text=True)
    if r.returncode:
        raise SetupError(f"debootstrap failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    # the first stage unpacks only the required packages: unpack every one (no second stage,
    # which would need the emulated dpkg)
    debs = sorted(glob.glob(str(tmp / "var/cache/apt/archives/*.deb")))
    glibc = ""
    for deb in debs:
        subprocess.run([*sudo, "dpkg-deb", "-x", deb, str(tmp)], check=True)
        m = re.match(r"libc6_(\d+\.\d+)", os.path.basename(deb))
        if m:
            glibc = m.group(1)
    subprocess.run([*sudo, "rm", "-f", *debs], check=True)
    pys = sorted(p for p in glob.glob(str(tmp / "usr/bin/python3.*"))
                 if re.fullmatch(r"python3\.\d+", os.path.basename(p)))
    if not pys or not glibc:
        raise SetupError(f"the root filesystem in {tmp} has no python3.X or no libc6")
    facts = {"suite": SUITE, "mirror": mirror, "python": os.path.basename(pys[-1])[6:],
             "glibc": glibc, "packages": len(debs), "built_s": round(time.perf_counter() - t)}
    subprocess.run([*sudo, "sh", "-c", f"cat > {marker.relative_to(root)}"], cwd=tmp,
                   input=json.dumps(facts), text=True, check=True)
    subprocess.run([*sudo, "mv", str(tmp), str(root)], check=True)
    log(f"root filesystem ready: {root} ({len(debs)} packages, {facts['built_s']} s)")
    return root, facts


# ------------------------------------------------------------------------- aarch64 packages
def requirements() -> list[str]:
    """pyproject's dependencies with the `test` extra, and the guest's own packaging tools:
    pip and the build backend (build-system.requires; Debian's python3 in the root has
    neither, and tests/test_install.py runs `python -m pip wheel` / `pip install --target`).
    Pure-Python wheels, installed like the rest by the host's pip into the site directory, so
    a cached root filesystem needs no rebuild (the site directory's key changes with this
    list) and the root needs no python3-pip (whose Debian packages would want their
    maintainer scripts run in the guest)."""
    import tomllib
    t = tomllib.loads((REPO / "pyproject.toml").read_text())
    p = t["project"]
    tools = ["pip", *t["build-system"]["requires"]]
    return sorted(p["dependencies"] + p["optional-dependencies"]["test"] + tools)


def platform_tags(glibc: str) -> list[str]:
    major, minor = (int(x) for x in glibc.split("."))
    return ["manylinux2014_aarch64",
            *(f"manylinux_{major}_{m}_aarch64" for m in range(17, minor + 1))]


def ca_bundle() -> str | None:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(var) and os.path.exists(os.environ[var]):
            return os.environ[var]
    for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if os.path.exists(p):
            return p
    return None


def build_site(cache: Path, facts: dict, reinstall: bool) -> Path:
    """aarch64 wheels of the requirements, installed by the host's pip into
    cache/site-<key>."""
    reqs = requirements()
    py = facts["python"]
    tags = platform_tags(facts["glibc"])
    key = hashlib.sha256(json.dumps([SITE_STAMP, reqs, py, tags]).encode()).hexdigest()[:12]
    site = cache / f"site-{key}"
    marker = site / ".reame-arm64.json"
    if reinstall and site.exists():
        shutil.rmtree(site)
    if marker.exists():
        return site
    tmp = cache / f"site-{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-warn-script-location", "--target", str(tmp), "--only-binary=:all:",
           "--implementation", "cp", "--python-version", py,
           *(a for t in tags for a in ("--platform", t))]
    ca = ca_bundle()
    if ca:
        cmd += ["--cert", ca]
    log(f"pip install (aarch64 wheels for Python {py}) {' '.join(reqs)}")
    t = time.perf_counter()
    r = subprocess.run(cmd + reqs, capture_output=True, text=True)
    if r.returncode:
        raise SetupError(f"pip failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    (tmp / ".reame-arm64.json").write_text(json.dumps(
        {"requirements": reqs, "python": py, "platforms": tags,
         "installed_s": round(time.perf_counter() - t)}))
    tmp.rename(site)
    log(f"site ready: {site} ({round(time.perf_counter() - t)} s)")
    return site


BOOT_MODULE = '''\
# written by bench/arm64_check.py, imported by _reame_arm64.pth in the guest's virtual
# environment (so also under `python -I`, as a venv's site-packages are): the aarch64 wheels,
# and Reame from {repo!r} mapped as `pip install -e .` maps it (pyproject's package-dir:
# reame.codegen is codegen/, ...; like setuptools' editable finder, after the path finders,
# so a reame installed elsewhere on sys.path wins)
import os, site, sys
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import spec_from_file_location

site.addsitedir({site!r})
_MAPPING = {mapping!r}


class _ReameFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name in _MAPPING:
            d = _MAPPING[name]
            init = os.path.join(d, "__init__.py")
            if os.path.exists(init):
                return spec_from_file_location(name, init, submodule_search_locations=[d])
            spec = ModuleSpec(name, None, is_package=True)   # a namespace package
            spec.submodule_search_locations = [d]
            return spec
        parent = name.rpartition(".")[0]
        if parent in _MAPPING:
            return PathFinder.find_spec(name, [_MAPPING[parent]])
        return None


if not any(getattr(f, "__name__", "") == "_ReameFinder" for f in sys.meta_path):
    sys.meta_path.append(_ReameFinder)

# a guest process that starts Python (subprocess, multiprocessing) runs it under qemu too:
# without binfmt_misc the guest's own binary cannot be exec'd ("Exec format error")
sys.executable = {python!r}
'''

PYTHON_WRAPPER = """#!/bin/sh
# written by bench/arm64_check.py: the guest's Python (its virtual environment) under
# qemu-aarch64
exec {qemu} -L {root} {python} "$@"
"""


def write_boot(cache: Path, site: Path, qemu: str, root: Path, facts: dict) -> Path:
    """cache/boot-<key>: a virtual environment of the guest's Python (pyvenv.cfg, bin/python3.X
    a link to the root's, lib/python3.X/site-packages with _reame_arm64.pth and its module:
    the wheels' site directory, Reame mapped from this checkout, sys.executable) and
    `python`, a host script that starts it under qemu (the guest's sys.executable). Keyed by
    this checkout, the site directory, the root and qemu: checkouts sharing a cache each get
    their own."""
    import tomllib
    pkg_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    mapping = {name: str(REPO / d) for name, d in pkg_dirs.items()}
    py = facts["python"]
    key = hashlib.sha256(json.dumps([str(REPO), str(site), str(root), qemu]).encode()
                         ).hexdigest()[:12]
    boot = cache / f"boot-{key}"
    pkgs = boot / f"lib/python{py}/site-packages"
    pkgs.mkdir(parents=True, exist_ok=True)
    (boot / "bin").mkdir(exist_ok=True)
    python = boot / f"bin/python{py}"
    base = root / f"usr/bin/python{py}"
    if not python.is_symlink() or os.readlink(python) != str(base):
        python.unlink(missing_ok=True)
        python.symlink_to(base)
    wrapper = boot / "python"
    files = {wrapper: PYTHON_WRAPPER.format(qemu=shlex.quote(qemu), root=shlex.quote(str(root)),
                                            python=shlex.quote(str(python))),
             boot / "pyvenv.cfg": f"home = {base.parent}\ninclude-system-site-packages = false\n"
                                  f"version = {py}\n",
             pkgs / "_reame_arm64.pth": "import _reame_arm64\n",
             pkgs / "_reame_arm64.py": BOOT_MODULE.format(
                 repo=str(REPO), site=str(site), mapping=mapping, python=str(wrapper))}
    for f, text in files.items():
        if not f.exists() or f.read_text() != text:
            f.write_text(text)
    wrapper.chmod(0o755)
    return boot


# ------------------------------------------------------------------------------ the guest
class Guest:
    def __init__(self, qemu: str, root: Path, facts: dict, boot: Path, kernels: Path,
                 logs: Path):
        self.qemu, self.root, self.boot, self.kernels, self.logs = qemu, root, boot, kernels, logs
        self.python = boot / f"bin/python{facts['python']}"     # the venv's

    def env(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE",
                            "VIRTUAL_ENV", "REAME_ISA", "PYTHONEXECUTABLE")}
        env.update(PYTHONPATH=str(REPO), PYTHONNOUSERSITE="1",
                   REAME_CACHE_DIR=str(self.kernels), REAME_SHARED=str(shared_dir()),
                   QEMU_LD_PREFIX=str(self.root),
                   # tests scale their absolute wall-time bounds (tests/conftest.py)
                   REAME_EMULATED="qemu-user")
        env.update(extra or {})
        return env

    def argv(self, args) -> list[str]:
        return [self.qemu, "-L", str(self.root), str(self.python), *map(str, args)]

    def run(self, name: str, args, extra_env: dict | None = None, timeout: float = 3600,
            echo: bool = False) -> tuple[int, str, float]:
        """Run the guest python with args in the repository; output to logs/<name>.log.
        Returns (exit status, output, seconds); exit status -9 on a timeout."""
        path = self.logs / f"{name}.log"
        t = time.perf_counter()
        with open(path, "w") as out:
            p = subprocess.Popen(self.argv(args), cwd=REPO, env=self.env(extra_env),
                                 stdout=subprocess.PIPE if echo else out,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                if echo:
                    for line in p.stdout:
                        out.write(line)
                        print(line, end="", flush=True)
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = -9
                out.write(f"\n[arm64_check] timed out after {timeout} s\n")
            except BaseException:       # interrupted (SIGINT, SIGTERM): no orphaned qemu
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise
        return rc, path.read_text(), time.perf_counter() - t


# ------------------------------------------------------------------------------ the checks
PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def last_json(output: str) -> dict | None:
    """The last line of output that is a JSON object (progress lines go to stderr, merged)."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def pytest_counts(output: str) -> dict:
    tail = [ln for ln in output.strip().splitlines() if PYTEST_COUNT.search(ln)]
    if not tail:
        return {}
    return {k.rstrip("s") if k.startswith("error") else k: int(n)
            for n, k in PYTEST_COUNT.findall(tail[-1])}


class Checks:
    def __init__(self, guest: Guest):
        self.guest = guest
        self.rows: list[tuple[str, bool, float, str]] = []

    def add(self, name: str, ok: bool, seconds: float, detail: str, output: str = "") -> bool:
        self.rows.append((name, ok, seconds, detail))
        log(f"{'ok  ' if ok else 'FAIL'} {name} ({seconds:.0f} s): {detail}")
        if not ok and output:
            print("    " + "\n    ".join(output.strip().splitlines()[-40:]), flush=True)
        return ok

    def pytest(self, name: str, args: list[str], env: dict | None = None,
               timeout: float = 3600, min_passed: int = 1) -> bool:
        rc, out, s = self.guest.run(name, ["-m", "pytest", "-q", "-p", "no:cacheprovider",
                                           "--durations=10", *args],
                                    {"CI": "1", **(env or {})}, timeout)
        c = pytest_counts(out)
        detail = ", ".join(f"{n} {k}" for k, n in c.items()) or f"exit {rc}"
        ok = rc == 0 and c.get("passed", 0) >= min_passed and not c.get("failed")
        return self.add(name, ok, s, detail + (" (timed out)" if rc == -9 else ""), out)

    def detection(self) -> bool:
        rc, out, s = self.guest.run("detect", ["-m", "bench.arm64_check", "--guest", "detect"])
        d = last_json(out)
        if d is None:
            return self.add("detect", False, s, f"exit {rc}", out)
        missing = [lv for lv in LEVELS if lv not in d["levels"]]
        forced = {lv: d["at"][lv]["level"] for lv in LEVELS if lv in d["at"]}
        ok = (rc == 0 and d["arch"] == "aarch64" and not missing
              and all(forced.get(lv) == lv for lv in LEVELS))
        return self.add("detect", ok, s,
                        f"{d['arch']} levels {','.join(d['levels'])}, level {d['level']}, "
                        f"SVE {d['sve_bits']} bits, OS {','.join(d['os_features'])}"
                        + (f"; missing {','.join(missing)}" if missing else ""), out)

    def worker(self, model: Path) -> bool:
        rc, out, s = self.guest.run("bench-engine-worker", [
            "-m", "bench.engine", "--worker", "reame", "--model", model, "--threads", "2",
            "--prompt", "16", "--gen", "8", "--batches", "1", "--rounds", "1", "--validate"])
        w = last_json(out)
        if w is None:
            return self.add("bench.engine worker", False, s, f"exit {rc}", out)
        kernel_share = 1.0 - w["out_of_kernel_share"]
        ok = (rc == 0 and w["prefill_tps"] > 0 and w["decode_tps"] > 0
              and w["decode_step_ms"] > 0 and kernel_share > 0
              and w.get("validate_cos", 0) >= 0.999)
        return self.add("bench.engine worker", ok, s,
                        f"isa {w['isa']}, {w['kernels']} kernels, prefill {w['prefill_tps']:.1f} "
                        f"tok/s, decode {w['decode_tps']:.2f} tok/s, step {w['decode_step_ms']:.0f}"
                        f" ms, in kernels {kernel_share:.1%} of the step's thread-time, "
                        f"cos {w.get('validate_cos', 0):.6f}", out)

    def smollm2(self, model: Path, expected: Path, level: str, gap: float) -> bool:
        rc, out, s = self.guest.run(f"smollm2-{level}", [
            "-m", "bench.arm64_check", "--guest", "smollm2", "--level", level, "--model", model,
            "--expected", expected, "--smollm2-gap", gap])
        r = last_json(out)
        if r is None:
            return self.add(f"smollm2 jit@{level}", False, s, f"exit {rc}", out)
        ok = rc == 0 and r["isa"] == level and r["wrong_clear"] == 0
        return self.add(f"smollm2 jit@{level}", ok, s,
                        f"llama.cpp's token at {r['agree']}/{r['positions']} positions "
                        f"(prefill {r['prefill_agree']}/{r['prefill']}, decode "
                        f"{r['decode_agree']}/{r['decode']}); where its top-2 gap >= {gap}: "
                        f"{r['clear'] - r['wrong_clear']}/{r['clear']}", out)

    def summary(self) -> bool:
        w = max(len(r[0]) for r in self.rows)
        print("\nsummary (emulated aarch64, qemu-user):")
        for name, ok, s, detail in self.rows:
            print(f"  {'ok  ' if ok else 'FAIL'} {name:<{w}} {s:7.0f} s  {detail}")
        bad = sum(not r[1] for r in self.rows)
        print(f"  {len(self.rows) - bad} ok, {bad} failed", flush=True)
        return bad == 0


def run_checks(guest: Guest, a) -> bool:
    shared = shared_dir()
    stories = shared / "models/stories260K.gguf"
    smol = shared / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    smol_exp = shared / "testdata/smollm2-135m.expected.json"
    for p in (stories, shared / "testdata/stories260K.expected.json"):
        if not p.exists():
            raise SetupError(f"test data {p} is missing (set REAME_SHARED to the shared folder)")
    c = Checks(guest)
    if not c.detection():
        c.summary()
        return False
    # (a) kernels: the ARM families at their levels; the q8/q8k modules at the host's levels
    # (native = sve, neon, generic), which cover the families at sve and the generic ones
    kernel_tests = ["tests/test_kernels_arm.py"]
    if not a.quick:
        kernel_tests += ["tests/test_kernels_matmul_q8a.py", "tests/test_kernels_matmul_q8k.py"]
    c.pytest("kernels", kernel_tests, min_passed=100)
    # (b) stories260K greedy at each level, and the reference engine
    # (not test_every_kernel_is_timed: qemu-user's CNTVCT_EL0 moves in 1 us steps, so a kernel
    # faster than that, e.g. a 128-wide add split between 2 threads, often reads 0 ticks)
    # unless --quick, the integer-dot path end to end on Q4_0 (zero points) and Q4_1 (mins):
    # the families run (kernel tests cover every type); its reference engines take most of it
    jit_k = ("test_stories_matches_llama_cpp" if a.quick else
             "test_stories_matches_llama_cpp or (test_trained_model_quantised_integer_path"
             " and (Q4_0 or Q4_1))")
    for level in LEVELS:
        c.pytest(f"stories260K jit@{level}", ["tests/test_jit_engine.py", "-k", jit_k],
                 {"REAME_ISA": level})
    c.pytest("stories260K reference", ["tests/test_reference.py", "-k",
                                       "test_stories_matches_llama_cpp"])
    # (c) the runtime's counter: bench.engine's worker
    c.worker(stories)
    if not a.quick and a.smollm2:
        if smol.exists() and smol_exp.exists():
            for level in LEVELS:
                c.smollm2(smol, smol_exp, level, a.smollm2_gap)
        else:
            c.add("smollm2", False, 0, f"{smol} or {smol_exp} missing (--no-smollm2 skips it)")
    return c.summary()


# ---------------------------------------------------------------- guest-side entry points
def guest_detect() -> None:
    from reame.codegen.isa import detect
    isa = detect()
    at = {}
    for lv in LEVELS:
        if lv in isa.levels:
            i = detect(lv)
            at[lv] = {"level": i.level, "cpu": i.cpu_name, "features": i.features}
    print(json.dumps({"arch": isa.arch, "level": isa.level, "levels": list(isa.levels),
                      "host_cpu": isa.host_cpu, "os_features": list(isa.os_features),
                      "sve_bits": isa.sve_bits, "at": at}))


def guest_smollm2(a) -> None:
    """SmolLM2 teacher-forced on llama.cpp's greedy continuations: per case, the prompt and
    the first half of the continuation in one prefill step (all logits: the multi-token
    kernels), then the rest one decode step at a time (the decode kernels); the argmax at each
    position against llama.cpp's next token."""
    import numpy as np

    from reame.batch import Batch
    from reame.codegen.isa import detect
    from reame.jit.engine import JITEngine
    from reame.model import load_model
    exp = json.loads(Path(a.expected).read_text())
    eng = JITEngine(load_model(a.model), n_ctx=128, max_seqs=len(exp["cases"]), threads=2,
                    max_logits=128, isa=detect(a.level))
    r = dict(isa=eng.isa.level, positions=0, agree=0, prefill=0, prefill_agree=0, decode=0,
             decode_agree=0, clear=0, wrong_clear=0, wrong=[])
    try:
        for slot, case in enumerate(exp["cases"]):
            prompt, want, gaps = case["prompt_tokens"], case["greedy_tokens"], case["top2_gaps"]
            n_pf = len(want) // 2
            toks = prompt + want[:n_pf]
            logits = eng.forward(Batch.build(toks, np.arange(len(toks)), slot,
                                             np.arange(len(prompt) - 1, len(toks))))
            got = [int(x) for x in logits.argmax(-1)]
            for i, t in enumerate(want[n_pf:-1], start=n_pf):
                row = eng.forward(Batch.decode([t], [len(prompt) + i], [slot]))[0]
                got.append(int(row.argmax()))
            for i, (g, w) in enumerate(zip(got, want)):
                kind = "prefill" if i <= n_pf else "decode"
                r["positions"] += 1
                r[kind] += 1
                r["agree"] += g == w
                r[f"{kind}_agree"] += g == w
                if gaps[i] >= a.smollm2_gap:
                    r["clear"] += 1
                    r["wrong_clear"] += g != w
                if g != w:
                    r["wrong"].append([slot, i, g, w, gaps[i]])
    finally:
        eng.close()
    print(json.dumps(r))


# ------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="detection, tests/test_kernels_arm.py, stories260K at each level with "
                        "the JIT engine and the reference engine, the worker")
    p.add_argument("--cache-dir", help="default $REAME_ARM64_CACHE or ~/.cache/reame/arm64")
    p.add_argument("--mirror", default=os.environ.get("REAME_ARM64_MIRROR", DEFAULT_MIRROR))
    p.add_argument("--no-apt", dest="apt", action="store_false",
                   help="never install qemu-user-static / debootstrap with apt-get")
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild the root filesystem and reinstall the packages")
    p.add_argument("--cold-kernels", action="store_true",
                   help="compile every kernel (a fresh kernel cache) instead of "
                        "<cache>/kernels")
    p.add_argument("--no-smollm2", dest="smollm2", action="store_false")
    p.add_argument("--smollm2-gap", type=float, default=0.5,
                   help="positions where llama.cpp's top-2 gap is at least this must agree")
    p.add_argument("--exec", nargs=argparse.REMAINDER,
                   help="run the guest python with these arguments (in the repository) and "
                        "exit with its status, instead of the checks")
    # inside the guest
    p.add_argument("--guest", choices=("detect", "smollm2"), help=argparse.SUPPRESS)
    p.add_argument("--level", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--expected", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.guest == "detect":
        guest_detect()
        return 0
    if a.guest == "smollm2":
        guest_smollm2(a)
        return 0

    t0 = time.perf_counter()
    # SIGTERM (CI stopping a background check) unwinds like SIGINT: Guest.run kills its guest
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    cache = cache_root(a.cache_dir)
    try:
        qemu = ensure_tools(a.apt)
        root, facts = build_root(cache, a.mirror, a.rebuild)
        site = build_site(cache, facts, a.rebuild)
    except SetupError as e:
        print(f"arm64_check: setup failed: {e}", file=sys.stderr)
        return 2
    boot = write_boot(cache, site, qemu, root, facts)
    kernels = (Path(tempfile.mkdtemp(prefix="reame-arm64-kernels-")) if a.cold_kernels
               else cache / "kernels")
    logs = cache / "logs"
    for d in (kernels, logs):
        d.mkdir(parents=True, exist_ok=True)
    guest = Guest(qemu, root, facts, boot, kernels, logs)
    setup_s = time.perf_counter() - t0
    log(f"setup {setup_s:.0f} s; guest python {facts['python']} (glibc {facts['glibc']}), "
        f"kernel cache {kernels}, logs {logs}")
    if a.exec is not None:
        # replaced by qemu: signals (a timeout's SIGINT: pytest's summary) reach the guest
        args = a.exec[1:] if a.exec[:1] == ["--"] else a.exec
        sys.stdout.flush()
        os.chdir(REPO)
        os.execve(qemu, guest.argv(args), guest.env())
    try:
        ok = run_checks(guest, a)
    except SetupError as e:
        print(f"arm64_check: {e}", file=sys.stderr)
        return 2
    finally:
        if a.cold_kernels:
            shutil.rmtree(kernels, ignore_errors=True)
    log(f"total {time.perf_counter() - t0:.0f} s (setup {setup_s:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
