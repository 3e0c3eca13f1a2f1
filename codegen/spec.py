"""Kernel specs and rendering: a pure, deterministic function from a spec to LLVM IR text.

A `KernelSpec` names everything that changes the generated code: the op, the tensor type, the
template family, the ISA level, the tile sizes and the model dimensions baked in as constants.
`render(spec, isa)` fills `templates/{op}_{family}.ll.j2` with jinja2's StrictUndefined (a
missing parameter is an error, never an empty string) and names the kernel with a symbol that
hashes the rendered text, so a re-rendered variant can never shadow a live one.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from . import panel_layout
from .isa import ISA
from .types import IQ4_LEVELS

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"
SYMBOL_PLACEHOLDER = "@__KERNEL__"


@dataclass(frozen=True)
class KernelSpec:
    op: str                                   # "matmul", "rms_norm", ...
    dtype: str                                # GGUF type name of the weights ("F32" for float ops)
    family: str                               # template family: "generic", "avx512", "vnni", ...
    level: str                                # ISA level it is built for
    params: tuple[tuple[str, Any], ...] = ()  # tiles and dimensions, sorted by name

    @classmethod
    def make(cls, op: str, dtype: str, family: str, level: str, **params) -> "KernelSpec":
        return cls(op, dtype, family, level, tuple(sorted(params.items())))

    @property
    def p(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def template(self) -> str:
        return f"{self.op}_{self.family}.ll.j2"

    def with_params(self, **changes) -> "KernelSpec":
        return KernelSpec.make(self.op, self.dtype, self.family, self.level, **{**self.p, **changes})

    def label(self) -> str:
        tiles = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.op}/{self.dtype}/{self.family}@{self.level}" + (f"[{tiles}]" if tiles else "")


def f32_hex(x: float) -> str:
    """An LLVM IR float constant: the float32 value written as a hex double (always exact)."""
    (f,) = struct.unpack("<f", struct.pack("<f", float(x)))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", f))[0]


def f64_hex(x: float) -> str:
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def _vec(n: int, ty: str) -> str:
    return f"<{n} x {ty}>" if n > 1 else ty


def _splat(n: int, ty: str, value) -> str:
    """A constant vector of n copies of `value` (already formatted)."""
    return "<" + ", ".join(f"{ty} {value}" for _ in range(n)) + ">" if n > 1 else str(value)


def _seq(n: int, ty: str = "i32", start: int = 0, step: int = 1) -> str:
    return "<" + ", ".join(f"{ty} {start + i * step}" for i in range(n)) + ">"


_SSA_STEM = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*")


def ssa(stem: str, *parts: str | int) -> str:
    """`{{ ssa(o, "I", i, g) }}`: an SSA value name made from its parts, instead of joining strings
    with `~` (o ~ ".I" ~ i ~ "_" ~ g). A pure function: the same parts give the same name, so a
    value is named by one call where it is defined and by the same call wherever it is used.
    `stem` is a name or a name prefix (`%` added when missing); a string part adds `.part`, an
    int its decimal digits, after `_` when the name so far ends in a digit:

        ssa("%k.t3", "I", 0, 5) = "%k.t3.I0_5"    ssa("%k.W", 3) = "%k.W3"
        ssa("%k.W3", 5) = "%k.W3_5"

    so a macro handed ssa("%k.W", j) names its values ssa(W, g), the same as ssa("%k.W", j, g).
    The result is checked against LLVM's syntax for local names."""
    return "%" + stem_of(stem, *parts)


def stem_of(stem: str, *parts: str | int) -> str:
    """`{{ stem(tag, "u", u) }}`: ssa()'s name without the `%`, for the prefixes templates write as
    `%{{ P }}.x` and for block labels (`{{ P }}.row:`)."""
    name = stem[1:] if stem.startswith("%") else stem
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, (int, str)):
            raise ValueError(f"ssa: part {part!r} of {stem!r} is not a string or an int")
        if isinstance(part, int):
            name += ("_" if name[-1:].isdigit() else "") + str(part)
        else:
            name += "." + part
    if not _SSA_STEM.fullmatch(name):
        raise ValueError(f"ssa: %{name!r} is not an LLVM local name")
    return name


def hx(v: int, bits: int = 64) -> str:
    """`{{ hx(v, bits) }}`: the bit pattern v as an LLVM hex integer constant, `u0x...` (zero-padded
    to bits / 4 digits). LLVM reads u0x as the raw bits of the operand's type (i8 u0x80 is -128,
    i32 u0xC0C0C0C0 is -1061109568) and silently truncates wider ones, hence the range check.
    Masks and other bit patterns in templates are written this way, literal ones as plain IR
    text: `and i32 %x, u0x3F3F3F3F`, `splat(16, "i32", "u0x0F0F0F0F")`. (Never s0x: LLVM sizes
    it by its significant bits, so s0x3F3F3F3F is negative.)"""
    if not 0 <= v < 1 << bits:
        raise ValueError(f"hx: {v} is not a {bits}-bit pattern")
    return "u0x%0*X" % ((bits + 3) // 4, v)


def _fail(msg: str):
    """`{{ fail("...") }}` in a template: a spec the template cannot render is an error."""
    raise ValueError(msg)


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                                 undefined=jinja2.StrictUndefined, trim_blocks=True,
                                 lstrip_blocks=True, keep_trailing_newline=True,
                                 autoescape=False)
        env.globals.update(vec=_vec, splat=_splat, seq=_seq, f32=f32_hex, f64=f64_hex,
                           range=range, min=min, max=max, len=len, enumerate=enumerate,
                           fail=_fail, hx=hx, ssa=ssa, stem=stem_of,
                           panel_offsets=panel_layout.record_offsets,
                           panel_segments=lambda dtype: panel_layout.SEGMENTS[dtype],
                           panel_f16_segments=lambda dtype: panel_layout.F16_SEGMENTS.get(dtype, ()),
                           panel_record=panel_layout.record_bytes,
                           iq4_levels=IQ4_LEVELS)
        env.filters.update(f32=f32_hex, f64=f64_hex)
        _ENV = env
    return _ENV


def template_source(spec: KernelSpec) -> str:
    return (TEMPLATE_DIR / spec.template).read_text()


def render(spec: KernelSpec, isa: ISA) -> tuple[str, str]:
    """(symbol, IR text) of a spec. Deterministic: the same spec and ISA give the same text."""
    from .types import type_info
    env = environment()
    try:
        tpl = env.get_template(spec.template)
    except jinja2.TemplateNotFound:
        raise ValueError(f"no template {spec.template} for {spec.label()}") from None
    ir = tpl.render(spec=spec, p=spec.p, t=type_info(spec.dtype), isa=isa,
                    lanes=isa.f32_lanes, level=spec.level, kernel=SYMBOL_PLACEHOLDER)
    digest = hashlib.sha256(ir.encode()).hexdigest()[:12]
    symbol = f"reame_{spec.op}_{spec.dtype}_{spec.family}_{spec.level}_{digest}"
    return symbol, ir.replace(SYMBOL_PLACEHOLDER, "@" + symbol)
