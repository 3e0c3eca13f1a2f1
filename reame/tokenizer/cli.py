"""`reame tokenize MODEL.gguf TEXT`: print the token ids and pieces of a text (MODEL may also be a
Hugging Face model name, see reame/hub.py).

TEXT "-" reads standard input exactly as given (no newline stripped). Special-token parsing and
BOS/EOS are off unless asked for (--parse-special, --add-special), so the ids match llama.cpp's
test vectors. --json prints {"ids": [...], "pieces": [...]} (pieces are the tokens' stored texts).
"""

from __future__ import annotations

import json
import sys


def add_tokenize_command(subparsers) -> None:
    p = subparsers.add_parser("tokenize", help="print the token ids and pieces of a text",
                              description=__doc__.split("\n\n", 1)[1].strip())
    from ..cli import MODEL_HELP
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("text", help='text to tokenize ("-" reads standard input)')
    p.add_argument("--json", action="store_true", help='print {"ids": [...], "pieces": [...]}')
    p.add_argument("--parse-special", action="store_true",
                   help="turn special tokens written in the text (<|im_start|>) into tokens")
    p.add_argument("--add-special", action="store_true",
                   help="add BOS/EOS as the model's tokenizer flags say")
    p.add_argument("--ids-only", action="store_true", help="print only the ids, on one line")
    p.set_defaults(func=cmd_tokenize)


def _read_text(arg: str) -> str:
    if arg != "-":
        return arg
    data = sys.stdin.buffer.read()
    return data.decode("utf-8", errors="replace")


def cmd_tokenize(args) -> int:
    from ..gguf_file import GGUFFile
    from .tokenizer import Tokenizer

    from ..cli import resolve_model_arg
    text = _read_text(args.text)
    resolve_model_arg(args)
    tok = Tokenizer.from_metadata(GGUFFile(args.model).metadata)
    ids = tok.encode(text, add_special=bool(args.add_special),
                     parse_special=bool(args.parse_special))
    out = sys.stdout
    if args.json:
        out.write(json.dumps({"ids": ids, "pieces": [tok.piece(i) for i in ids]},
                             ensure_ascii=False) + "\n")
    elif args.ids_only:
        out.write(" ".join(map(str, ids)) + "\n")
    else:
        for i in ids:
            out.write(f"{i:>8}  {json.dumps(tok.piece(i), ensure_ascii=False)}\n")
    return 0
