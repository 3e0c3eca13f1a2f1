"""`reame codegen`: list the kernels for this machine, or dump one at any stage."""

from __future__ import annotations

import json

from reame.errors import ReameError


def _parse_kv(text: str | None) -> dict:
    out = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise ReameError(f"expected NAME=VALUE in {text!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v.strip()
    return out


def cmd_codegen(args) -> int:
    import jinja2

    from . import registry
    from .ops.base import ANY_TOKENS
    from .compiler import get_compiler
    from .isa import detect
    from .spec import render, template_source

    try:
        isa = detect(args.isa)
    except ValueError as e:
        raise ReameError(str(e)) from None
    if args.list or not args.dump:
        d = isa.describe()
        print(f"CPU: {d['model']} ({d['host_cpu']}), levels: {', '.join(d['levels'])}; "
              f"building for {isa.level} ({isa.vector_bits}-bit vectors)")
        if isa.arch == "aarch64":
            sve = f"SVE {d['sve_bits']}-bit" if d["sve_bits"] else "no SVE"
            print(f"OS features: {' '.join(d['os_features']) or '-'}; {sve}; LLVM target "
                  f"features: {','.join(d['target_features']) or '-'}")
        for name, op in registry.ops().items():
            print(f"\n{name}: {op.doc}")
            for v in op.variants:
                mark = "" if v.usable(isa) else "   (not on this CPU level)"
                tiles = " | ".join(",".join(f"{k}={x}" for k, x in t.items()) or "-" for t in v.tiles)
                # which programs start on it (select.choose): the rest may still try it
                starts = ""
                if v.max_tokens != ANY_TOKENS:
                    starts = f"   (programs of {v.min_tokens}-{v.max_tokens} tokens start on it)"
                elif v.min_tokens > 1:
                    starts = f"   (programs of {v.min_tokens}+ tokens start on it)"
                print(f"  {v.family:<12} from {v.min_level:<12} {' '.join(v.dtypes)}"
                      f"   tiles: {tiles}{starts}{mark}")
        return 0
    try:
        op = registry.get_op(args.dump)
    except ValueError as e:
        raise ReameError(str(e)) from None
    dtype = args.dtype or op.dtypes()[0]
    dims = {**op.example_dims, **_parse_kv(args.dims)}
    specs = op.specs(dtype, isa, **dims)
    if args.family:
        specs = [s for s in specs if s.family == args.family]
    tile = _parse_kv(args.tile)
    specs = [s for s in specs if all(s.p.get(k) == v for k, v in tile.items())]
    if not specs:
        wanted = " ".join(x for x in (args.family, args.tile) if x)
        shown = ",".join(f"{k}={v}" for k, v in dims.items())
        hint = ("" if any(dtype in v.dtypes and v.usable(isa) for v in op.variants) else
                "; its variants' dtypes here: " + ", ".join(sorted(
                    {d for v in op.variants if v.usable(isa) for d in v.dtypes})))
        raise ReameError(f"no {op.name} variant for {dtype} at level {isa.level}"
                         + (f" matching {wanted}" if wanted else "")
                         + f" that serves {shown} (--dims to change them){hint}")
    spec = specs[-1]      # the most specific variant that matches
    if args.stage == "template":
        print(f"; {spec.label()}")
        print(template_source(spec))
        return 0
    try:                  # dims a template rejects (by name, or a type error) are user errors
        symbol, ir = render(spec, isa)
    except (jinja2.TemplateError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ReameError(f"cannot render {spec.label()}: {e}") from None
    print(f"; {spec.label()}")
    if args.stage == "ir":
        print(ir)
        return 0
    compiler = get_compiler(isa, cache_dir=None)
    print(compiler.optimized_ir(ir) if args.stage == "opt" else compiler.assembly(ir))
    return 0


def add_codegen_command(sub) -> None:
    p = sub.add_parser("codegen", help="list the kernels for this CPU, or dump one",
                       description="List kernel variants for this CPU, or print one variant's "
                                   "template, rendered IR, optimised IR or assembly.")
    p.add_argument("--list", action="store_true", help="list ops, variants and tiles (default)")
    p.add_argument("--dump", metavar="OP", help="dump one kernel of OP")
    p.add_argument("--dtype", help="tensor type (GGUF name, e.g. Q4_K)")
    p.add_argument("--isa", help="ISA level to build for (default: this CPU's highest, or "
                                 "$REAME_ISA)")
    p.add_argument("--family", help="variant family (template) to dump")
    p.add_argument("--tile", help="tile parameters, e.g. rows=4,vl=16")
    p.add_argument("--dims", help="compile-time dimensions, e.g. K=4096,M=4096")
    p.add_argument("--stage", choices=("template", "ir", "opt", "asm"), default="ir")
    p.set_defaults(func=cmd_codegen)
