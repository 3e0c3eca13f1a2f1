"""The `reame` command: info, generate, plan, tokenize, serve, codegen."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import ReameError


MODEL_HELP = ("a .gguf file, or a model on the Hugging Face Hub: org/repo[:QUANT] or "
              "hf://org/repo/FILE.gguf (downloaded into its cache; needs the 'hub' extra)")


def resolve_model_arg(args) -> None:
    """args.model: a path, or a Hub name resolved (downloaded if needed) to its local path."""
    from .hub import resolve_model
    args.model = resolve_model(args.model)


def cmd_info(args) -> int:
    from .model import load_model
    resolve_model_arg(args)
    info = load_model(args.model).info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    mix = ", ".join(f"{k} {v['tensors']} tensors / {v['bytes'] / 2**20:.1f} MiB"
                    for k, v in info["quant_mix"].items())
    rope = info["rope"]
    lines = [
        ("file", info["file"]),
        ("name", info["name"]),
        ("architecture", info["architecture"]),
        ("parameters", f"{info['parameters']:,} ({info['parameters'] / 1e6:.2f} M)"),
        ("file size", f"{info['file_size'] / 2**20:.1f} MiB"),
        ("quant mix", mix),
        ("context length", info["context_length"]),
        ("layers", info["layers"]),
        ("embedding", info["embedding_length"]),
        ("heads / kv heads", f"{info['heads']} / {info['kv_heads']} (head dim {info['head_dim']})"),
        ("feed-forward", info["feed_forward_length"] if not info["experts"] else
         "{count} experts, {used} per token, {length} wide".format(**info["experts"])
         + (f", a shared one {info['experts']['shared_length']} wide"
            if info["experts"]["shared_length"] else "")),
        ("vocabulary", info["vocab_size"]),
        ("rope", f"{rope['style']}, theta {rope['theta']:g}, {rope['dims']} dims, "
                 f"scaling {rope['scaling']}"),
        *([("sliding window", "{window} tokens on {layers} of {n} layers".format(
            n=info["layers"], **info["sliding_window"]))] if info["sliding_window"] else []),
        *([("soft-capping", "scores {attention:g}, logits {logits:g}".format(
            **info["softcap"]))] if info["softcap"] else []),
        ("tied embeddings", "yes" if info["tied_embeddings"] else "no"),
        ("tokenizer", info["tokenizer"] + (f" (pre: {info['tokenizer_pre']})"
                                           if info["tokenizer_pre"] else "")),
        ("chat template", "present" if info["chat_template"] else "absent"),
    ]
    for k, v in lines:
        print(f"{k + ':':<18}{v}")
    return 0


def cmd_generate(args) -> int:
    from .engines import DEFAULT_KV_TYPE, context_size, create_engine
    from .generate import Generation, generate_stream
    from .model import load_model
    from .sampling import SamplingParams
    from .tokenizer import Tokenizer

    if args.max_tokens < 1:
        raise ReameError(f"--max-tokens must be >= 1 (got {args.max_tokens})")
    if args.ctx_size is not None and args.ctx_size < 0:
        raise ReameError(f"--ctx-size must be >= 0 (0: the default; got {args.ctx_size})")
    from . import progress
    progress.configure("off" if args.quiet else None)
    resolve_model_arg(args)
    model = load_model(args.model)
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            min_p=args.min_p, repetition_penalty=args.repeat_penalty,
                            seed=args.seed)
    try:
        params.validate(model.config.n_vocab)
    except ValueError as e:
        raise ReameError(str(e)) from None
    tok = Tokenizer.from_metadata(model.metadata)
    if args.chat:
        from .chat_template import ChatTemplate
        tpl = ChatTemplate.from_metadata(model.metadata, args.chat_template_file)
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        prompt_ids = tpl.encode(tok, messages, add_generation_prompt=True)
    else:
        prompt_ids = tok.encode(args.prompt, add_special=True, parse_special=args.special)
    # the request is checked (a prompt longer than the context) before kernels are compiled
    n_ctx = context_size(model, args.ctx_size)
    gen = Generation(tok, prompt_ids, params, max_tokens=args.max_tokens, stop=args.stop or [],
                     n_ctx=n_ctx, ignore_eos=args.ignore_eos)
    engine = create_engine(model, args.engine, n_ctx=n_ctx, max_seqs=1,
                           kv_type=args.kv_type or DEFAULT_KV_TYPE, threads=args.threads,
                           act_type=args.act_type,
                           attn_type=args.attn_type)
    out = sys.stdout
    if args.echo:
        out.write(args.prompt)
    t0 = time.perf_counter()
    t_first = None
    n = 0
    reason = None
    for step in generate_stream(engine, gen):
        if t_first is None:
            t_first = time.perf_counter()
        n += 1
        out.write(step.text)
        out.flush()
        reason = step.finish_reason
    t1 = time.perf_counter()
    out.write("\n")
    if not args.quiet:
        decode = (n - 1) / (t1 - t_first) if n > 1 and t1 > t_first else 0.0
        print(f"[{len(prompt_ids)} prompt tokens, {n} generated ({reason}); prefill "
              f"{len(prompt_ids) / (t_first - t0):.1f} tok/s, decode {decode:.1f} tok/s; "
              f"engine {args.engine}]", file=sys.stderr)
    return 0


def cmd_plan(args) -> int:
    """The JIT's step programs as planned for this model and CPU (reame/jit/plan.py): every op
    site with the kernel it starts with, program by program (--tokens N: the program steps of
    N tokens run)."""
    from .engines import DEFAULT_KV_TYPE, context_size, create_engine
    from .model import load_model
    from . import progress
    progress.configure("off")
    resolve_model_arg(args)
    model = load_model(args.model)
    if args.tokens is not None and args.tokens < 1:
        raise ReameError(f"--tokens must be >= 1 (got {args.tokens})")
    engine = create_engine(model, "jit", n_ctx=context_size(model, args.ctx_size),
                           max_seqs=args.max_seqs, kv_type=args.kv_type or DEFAULT_KV_TYPE,
                           threads=1,
                           act_type=args.act_type, attn_type=args.attn_type)
    try:
        plan = engine.kernel_plan
        if args.tokens is not None and args.tokens > engine.max_tokens:
            raise ReameError(f"--tokens {args.tokens}: a step holds at most {engine.max_tokens}")
        want = plan.program_of(args.tokens) if args.tokens is not None else None
        for bucket, steps in engine.plans.items():
            if want is None or bucket == want:
                print(f"# steps of up to {bucket} tokens: {len(steps.ops)} ops")
                print("\n".join(steps.describe()))
    finally:
        engine.close()
    return 0


def add_engine_args(p: argparse.ArgumentParser) -> None:
    from .engines import ACT_TYPES, ATTN_TYPES, DEFAULT_ENGINE, ENGINES, KV_TYPES
    p.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                   help=f"forward-pass engine (default: {DEFAULT_ENGINE})")
    p.add_argument("--threads", type=int, default=None,
                   help="compute threads (default: the physical cores this process may use)")
    p.add_argument("--ctx-size", type=int, default=None,
                   help="context per sequence (default: min(model's context, 4096))")
    p.add_argument("--kv-type", choices=KV_TYPES, default=None,
                   help="KV cache type (bf16: every row's attention in bf16, on AMX-BF16 "
                        "tiles or AVX512_BF16 dot products, in the layout they read, "
                        "docs/kernels-attention.md; auto, the default: bf16 where the jit "
                        "engine can keep it, else f16 on x86 from AVX2 up, else f32)")
    p.add_argument("--act-type", choices=ACT_TYPES, default=None,
                   help="activations of quantised-weight products: q8 = 8-bit integer dot "
                        "products as llama.cpp (fastest), f32 = float activations, matching the "
                        "f32 reference (slower) (default: q8 for jit, f32 for reference)")
    p.add_argument("--attn-type", choices=ATTN_TYPES, default=None,
                   help="attention precision of prompt chunks: bf16 = AMX-BF16 tiles (q, k, v "
                        "and softmax weights rounded to bf16; faster at long contexts; jit "
                        "engine, CPUs with AMX, else f32 with a warning), f32, or auto = bf16 "
                        "where the CPU has AMX-BF16 and --act-type is q8, else f32, or "
                        "invariant = prompt chunks through the decode attention kernel (f32): "
                        "a token's numbers then do not depend on which step or batch it is "
                        "computed in, so greedy outputs do not change with concurrency or "
                        "speculation (slower prompts at long contexts) (default: auto)")
    p.add_argument("--isa", default=None, metavar="LEVEL",
                   help="build kernels for a lower ISA level (generic, avx2, avx512, ...; "
                        "default: this CPU's highest, or $REAME_ISA)")


def apply_isa(args) -> None:
    """--isa LEVEL: checked now, then passed to every engine (and gunicorn's workers) through
    $REAME_ISA, the one place codegen reads a forced level from."""
    level = getattr(args, "isa", None)
    if level is None or getattr(args, "command", None) == "codegen":
        return
    from .codegen.isa import detect
    try:
        detect(level)
    except ValueError as e:
        raise ReameError(str(e)) from None
    os.environ["REAME_ISA"] = level
    detect.cache_clear()


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line `reame: error: ...` and exit code 2, like every other error
    (subcommand parsers inherit the class)."""

    def error(self, message):
        self.exit(2, f"reame: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reame", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", help="describe a GGUF model")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("generate", help="generate text from a prompt, streamed to stdout")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--prompt", "-p", required=True, help="prompt text")
    p.add_argument("--max-tokens", "-n", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", help="stop sequence (repeatable)")
    p.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-generation")
    p.add_argument("--chat", action="store_true", help="apply the model's chat template")
    p.add_argument("--system", default=None, help="system message (with --chat)")
    p.add_argument("--chat-template-file", default=None, help="override the chat template")
    p.add_argument("--special", action="store_true",
                   help="parse special tokens written in the prompt")
    p.add_argument("--echo", action="store_true", help="print the prompt first")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no timing line or progress on stderr")
    add_engine_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("plan", help="the JIT's step programs: each op site and its kernel",
                       description=cmd_plan.__doc__)
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--tokens", type=int, default=None, help="only the program for N-token steps")
    p.add_argument("--max-seqs", type=int, default=4, help="sequences per step (default: 4)")
    add_engine_args(p)
    p.set_defaults(func=cmd_plan)

    for module, fn in (("reame.tokenizer.cli", "add_tokenize_command"),
                       ("reame.server.cli", "add_serve_command"),
                       ("reame.codegen.cli", "add_codegen_command")):
        try:
            mod = __import__(module, fromlist=[fn])
        except ModuleNotFoundError as e:
            if not module.startswith(e.name or "?"):
                raise
            continue
        getattr(mod, fn)(sub)
    return parser


def _version() -> str:
    from . import __version__
    return f"reame {__version__}"


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        apply_isa(args)
        return args.func(args) or 0
    except ReameError as e:
        print(f"reame: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
