"""Compilation with llvmlite, and the on-disk object cache.

One `Compiler` per (process, target): a host-tuned target machine and one MCJIT engine that all
compiled objects are added to. Every LLVM call goes through one process-wide lock (LLVM gains
nothing from compiling on several threads); `submit()` compiles on one background thread.

Objects are cached on disk, keyed by the rendered IR, CPU name, CPU features, optimisation
settings and the llvmlite/LLVM versions. A cache file records the key it was written for and the
symbols it defines, under a SHA-256 of that record and the object bytes; a truncated, tampered
or stale file, or one that holds another kernel (a file copied over another's name, digest and
all: its recorded key is not the key it was looked up by), is detected, reported with a warning
naming it and recompiled, never loaded. An entry whose object loads but does not define the
symbols asked for is evicted and recompiled too. Writes go to a temporary file that is renamed
into place (atomic).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from .isa import ISA

log = logging.getLogger("reame.codegen")

LLVM_LOCK = threading.RLock()
# an entry: the magic, the SHA-256 of everything after it, the length of the record (4 bytes,
# little-endian), the record (JSON: the key and symbols it was compiled for), the object file
CACHE_MAGIC = b"REAMEOBJ2\n"
KERNEL_CFUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)

# Measured by `python -m bench.compile_opts` on this machine (6 representative kernels): the
# backend at opt 3 alone compiles in 129 ms in all, against 327 ms with LLVM's O2 IR pipeline
# first and 373 ms with O3, and the kernels run as fast (O2: 1.02x, O3: 1.08x the time, geomean):
# template IR is already vectorised and unrolled.
DEFAULT_IR_OPT = 0
DEFAULT_BACKEND_OPT = 3
# Relocation model of the emitted objects. Not "pic": with the JIT's large code model, PIC code
# reaches external symbols (libm calls such as fmaf/expf) through R_X86_64_GOT64/GOTPC64
# relocations that MCJIT's RuntimeDyld resolves wrongly once several objects are loaded (the
# second kernel calling fmaf jumped to garbage). "static" uses absolute 64-bit addresses that
# RuntimeDyld patches when the object is loaded, so cached objects stay relocatable.
RELOC = "static"


# LLVM triple of an architecture when it is not the host's (cross-building)
TRIPLES = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}


def host_arch() -> str:
    return _arch_of(llvm.get_default_triple())


def _arch_of(triple: str) -> str:
    from .isa import normalize_arch
    return normalize_arch(triple.split("-", 1)[0])


def target_machine(isa: ISA, backend_opt: int = DEFAULT_BACKEND_OPT) -> "llvm.TargetMachine":
    """A target machine for `isa`: the host's own triple when `isa` is of the host's
    architecture, else that architecture's Linux triple (an AArch64 ISA built on x86: object
    code and assembly to inspect, never run)."""
    with LLVM_LOCK:
        if isa.arch == host_arch() or isa.arch not in TRIPLES:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            target = llvm.Target.from_default_triple()
        else:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            target = llvm.Target.from_triple(TRIPLES[isa.arch])
        return target.create_target_machine(cpu=isa.cpu_name, features=isa.features,
                                            opt=backend_opt, codemodel="jitdefault",
                                            reloc=RELOC)


def default_cache_dir() -> Path | None:
    """$REAME_CACHE_DIR (off/none/empty disables), else $XDG_CACHE_HOME/reame/kernels."""
    env = os.environ.get("REAME_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "none", "0") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "reame" / "kernels"


@dataclass
class CompileStats:
    compiled: int = 0
    cache_hits: int = 0
    cache_rejects: int = 0
    compile_seconds: float = 0.0
    load_seconds: float = 0.0
    log: list = field(default_factory=list)     # (symbol, "compiled"|"cache", seconds)


class Compiler:
    def __init__(self, isa: ISA, cache_dir: Path | None | str = "default",
                 ir_opt: int = DEFAULT_IR_OPT, backend_opt: int = DEFAULT_BACKEND_OPT):
        self.isa = isa
        self.ir_opt, self.backend_opt = ir_opt, backend_opt
        self.cache_dir = default_cache_dir() if cache_dir == "default" else (
            Path(cache_dir) if cache_dir else None)
        self.stats = CompileStats()
        self._symbols: dict[str, int] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        with LLVM_LOCK:
            self.tm = target_machine(isa, backend_opt)
            # cross-building (an aarch64 ISA on an x86 host, tests and llvm-mca figures): object
            # code and assembly only; nothing of another architecture is ever loaded
            self.cross = _arch_of(self.tm.triple) != host_arch()
            self.engine = None
            if not self.cross:
                empty = llvm.parse_assembly("")
                empty.triple = self.tm.triple
                self.engine = llvm.create_mcjit_compiler(empty, self.tm)

    # ---- stages (also what `reame codegen --dump` prints) ----
    def parse(self, ir: str) -> "llvm.ModuleRef":
        with LLVM_LOCK:
            mod = llvm.parse_assembly(ir)
            mod.triple = self.tm.triple
            mod.data_layout = str(self.tm.target_data)
            mod.verify()
            if self.ir_opt > 0:
                pto = llvm.create_pipeline_tuning_options(speed_level=self.ir_opt)
                pb = llvm.create_pass_builder(self.tm, pto)
                pb.getModulePassManager().run(mod, pb)
            return mod

    def optimized_ir(self, ir: str, level: int = 3) -> str:
        with LLVM_LOCK:
            mod = llvm.parse_assembly(ir)
            mod.triple = self.tm.triple
            mod.data_layout = str(self.tm.target_data)
            pto = llvm.create_pipeline_tuning_options(speed_level=level)
            pb = llvm.create_pass_builder(self.tm, pto)
            pb.getModulePassManager().run(mod, pb)
            return str(mod)

    def assembly(self, ir: str) -> str:
        with LLVM_LOCK:
            return self.tm.emit_assembly(self.parse(ir))

    # ---- compile + cache ----
    def cache_key(self, ir: str) -> str:
        h = hashlib.sha256()
        for part in (ir, self.isa.cpu_name, self.isa.features, self.tm.triple,
                     f"ir{self.ir_opt}/be{self.backend_opt}/{RELOC}", llvmlite.__version__,
                     ".".join(map(str, llvm.llvm_version_info))):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return self.cache_dir / key[:2] / f"{key}.o" if self.cache_dir else None

    def _cache_read(self, path: Path | None, key: str, symbols: list[str]) -> bytes | None:
        """The cached object for `key` defining `symbols`; None (a warning naming the file when
        there is one) when there is no entry or it cannot be trusted."""
        if path is None or not path.exists():
            return None
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        try:
            return entry_object(blob, key, symbols)
        except ValueError as e:
            self.stats.cache_rejects += 1
            log.warning("kernel cache entry %s %s; recompiling", path, e)
            return None

    def _cache_write(self, path: Path | None, key: str, symbols: list[str],
                     obj: bytes) -> None:
        if path is None:
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(entry_bytes(key, symbols, obj))
            os.replace(tmp, path)
        except OSError as e:            # a read-only or full cache must not stop the server
            log.warning("cannot write kernel cache %s: %s", path, e)
            if tmp is not None:         # no partial file left behind (e.g. disk full)
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def object_code(self, ir: str) -> bytes:
        """The object file of a module (no cache, not loaded): what a cross build checks."""
        with LLVM_LOCK:
            return self.tm.emit_object(self.parse(ir))

    def compile(self, ir: str, symbols: list[str]) -> dict[str, int]:
        """Compile (or load from the cache) a module and return the addresses of `symbols`."""
        if self.cross:
            raise RuntimeError(f"cannot load {self.tm.triple} code on this {host_arch()} host "
                               "(a cross compiler: object_code() and assembly() only)")
        with LLVM_LOCK:
            if all(s in self._symbols for s in symbols):
                return {s: self._symbols[s] for s in symbols}
            t0 = time.perf_counter()
            key = self.cache_key(ir)
            path = self._cache_path(key)
            obj = self._cache_read(path, key, symbols)
            source = "cache"
            out = None
            if obj is not None:
                try:
                    out = self._load(obj, symbols)
                    why = "does not define the symbols it records"
                except RuntimeError as e:           # LLVM refused the object
                    why = f"does not load ({e})"
                if out is None:
                    self._evict(path, why)
            if out is None:
                obj = self.tm.emit_object(self.parse(ir))
                source = "compiled"
                out = self._load(obj, symbols)
                if out is None:
                    missing = [s for s in symbols if not self.engine.get_function_address(s)]
                    raise RuntimeError(f"symbol {missing[0]} not found after compiling")
                self._cache_write(path, key, symbols, obj)
            self._symbols.update(out)
            dt = time.perf_counter() - t0
            if source == "compiled":
                self.stats.compiled += 1
                self.stats.compile_seconds += dt
            else:
                self.stats.cache_hits += 1
                self.stats.load_seconds += dt
            self.stats.log.append((symbols[0] if symbols else "?", source, dt))
            return out

    def _load(self, obj: bytes, symbols: list[str]) -> dict[str, int] | None:
        """Add an object to the engine; the addresses of `symbols`, None if one is missing."""
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        out = {s: self.engine.get_function_address(s) for s in symbols}
        return out if all(out.values()) else None

    def _evict(self, path: Path | None, why: str) -> None:
        self.stats.cache_rejects += 1
        log.warning("kernel cache entry %s %s; evicted, recompiling", path, why)
        try:
            path.unlink()
        except OSError:
            pass

    def submit(self, ir: str, symbols: list[str]) -> concurrent.futures.Future:
        """Compile on the background compiler thread."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="reame-compile")
        return self._executor.submit(self.compile, ir, symbols)


def entry_bytes(key: str, symbols: list[str], obj: bytes) -> bytes:
    """A cache file: the object with the key and symbols it was compiled for, under a digest."""
    record = json.dumps({"key": key, "symbols": list(symbols)}).encode()
    body = len(record).to_bytes(4, "little") + record + obj
    return CACHE_MAGIC + hashlib.sha256(body).digest() + body


def entry_object(blob: bytes, key: str, symbols: list[str]) -> bytes:
    """The object of a cache file read for `key` and `symbols`. ValueError (the end of a
    sentence: "kernel cache entry PATH <why>") when it is damaged or of another format, or was
    written for another key (a file copied over another's name keeps a valid digest), or does
    not define the symbols."""
    head = len(CACHE_MAGIC)
    body = blob[head + 32:]
    if (blob[:head] != CACHE_MAGIC or len(body) < 4
            or hashlib.sha256(body).digest() != blob[head:head + 32]):
        raise ValueError("is corrupt or stale")
    n = int.from_bytes(body[:4], "little")
    try:
        record = json.loads(body[4:4 + n])
        theirs, defined = record["key"], record["symbols"]
    except (ValueError, TypeError, KeyError):
        raise ValueError("is corrupt or stale") from None
    obj = body[4 + n:]
    if theirs != key:
        raise ValueError(f"holds another kernel (written for key {str(theirs)[:16]}..., looked "
                         f"up by {key[:16]}...)")
    missing = [s for s in symbols if s not in defined or s.encode() + b"\0" not in obj]
    if missing:
        raise ValueError(f"does not define {missing[0]}")
    return obj


_COMPILERS: dict[tuple, Compiler] = {}


def get_compiler(isa: ISA, cache_dir="default") -> Compiler:
    """The process's compiler for a target (one per ISA level and cache directory)."""
    key = (isa, str(cache_dir))
    with LLVM_LOCK:
        if key not in _COMPILERS:
            _COMPILERS[key] = Compiler(isa, cache_dir)
        return _COMPILERS[key]
