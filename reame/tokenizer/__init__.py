"""Tokenizers built from GGUF metadata (SentencePiece-style and byte-level BPE), conformant with
llama.cpp's test vectors, and the streaming detokenizer. See docs/tokenizers.md."""

from .detokenize import IncrementalDecoder
from .merge import TokenLimit
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "IncrementalDecoder", "TokenLimit"]
