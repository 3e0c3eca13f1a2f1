"""Tokenizers built from GGUF metadata (SentencePiece-style and byte-level BPE), conformant with
llama.cpp's test vectors, and the streaming detokenizer. See docs/tokenizers.md."""

from .detokenize import IncrementalDecoder
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "IncrementalDecoder"]
