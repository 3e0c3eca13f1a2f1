"""The vocabulary as the GGUF `tokenizer.*` fields describe it: token texts, scores, attributes,
special token ids, the add-BOS/EOS flags and the end-of-generation set.

The rules follow llama.cpp's `llama_vocab::impl::load` so that a GGUF behaves the same here as
there: the same defaults when a key is absent, the same out-of-range handling, the same
text-based detection of end-of-turn tokens that converters forgot to flag.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TokenizerError
from ..pace import checkpoint

log = logging.getLogger(__name__)

# GGUF token types (tokenizer.ggml.token_type)
TYPE_UNDEFINED, TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, \
    TYPE_BYTE = range(7)

# token attributes (bit flags, llama.cpp's llama_token_attr)
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8

_TYPE_TO_ATTR = np.array([0, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED,
                          ATTR_UNUSED, ATTR_BYTE, 0], dtype=np.int32)

K = "tokenizer.ggml."
# tokenizer.ggml.model values that are BPE vocabularies ("gemma4": SPM-style BPE, spaces as "▁")
BPE_MODELS = ("gpt2", "gemma4")

# texts that mark an end-of-turn token (llama.cpp's list), used when the GGUF has no eot id
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
              "<end_of_utterance>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# texts of tokens that end generation (llama.cpp's list)
_EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["))


@dataclass
class Vocab:
    model: str                      # "llama" (SPM) or "gpt2" (byte-level BPE)
    pre: str                        # tokenizer.ggml.pre ("" when absent)
    tokens: list[str]
    token_to_id: dict[str, int]
    scores: np.ndarray | None       # float32 [n_vocab], SPM only
    attrs: list[int]                # ATTR_* bit flags per token
    special: dict[str, int | None]  # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: set[int] = field(default_factory=set)
    # ids of control / user-defined / unknown tokens, longest text first (the order in which
    # text is searched for them)
    special_cache: list[int] = field(default_factory=list)

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def _get(md: dict, key: str, default=None):
    return md.get(key, default)


def load_vocab(md: dict[str, Any], default_flags: tuple[bool, bool] | None = None,
               force_bos: bool = False, no_bos: bool = False) -> Vocab:
    """Vocabulary from GGUF metadata. `default_flags` = (add_bos, add_eos) the tokenizer model
    implies when the GGUF has no flags (decided by the caller, which knows the pre-tokenizer);
    `force_bos`: add BOS whatever the GGUF says (llama.cpp's Gemma 4 rule); `no_bos`: no default
    BOS id (ChatGLM/GLM pre-tokenizers)."""
    model = _get(md, K + "model")
    if model is None:
        raise TokenizerError("GGUF has no tokenizer.ggml.model: this model file carries no "
                             "tokenizer")
    tokens = _get(md, K + "tokens")
    if not isinstance(tokens, list) or not tokens:
        raise TokenizerError("GGUF has no tokenizer.ggml.tokens (the vocabulary)")
    tokens = list(tokens)
    n = len(tokens)

    scores = _get(md, K + "scores")
    if scores is not None:
        scores = np.asarray(scores, dtype=np.float32)
        if scores.ndim != 1 or len(scores) < n:
            raise TokenizerError(f"tokenizer.ggml.scores has {np.size(scores)} entries for "
                                 f"{n} tokens")
    types = _get(md, K + "token_type")
    if types is not None:
        types = np.asarray(types)
        if types.ndim != 1 or len(types) < n or types.dtype.kind not in "iu":
            raise TokenizerError(f"tokenizer.ggml.token_type is malformed ({np.size(types)} "
                                 f"entries for {n} tokens)")
        attrs = _TYPE_TO_ATTR[np.clip(types[:n], 0, 7)].tolist()
    else:
        attrs = [ATTR_NORMAL] * n

    for i, t in enumerate(tokens):
        if not t:
            tokens[i] = f"[EMPTY_{i}]"
        if not i & 8191:
            checkpoint()                # a model loading beside others: let them step
    token_to_id = {t: i for i, t in enumerate(tokens)}
    checkpoint()
    if len(token_to_id) != n:
        seen: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in seen:
                raise TokenizerError(f"duplicate token in vocabulary: {t!r} has ids "
                                     f"{seen[t]} and {i}")
            seen[t] = i

    # defaults per tokenizer model (llama.cpp's)
    if model == "llama":
        special = {"bos": 1, "eos": 2, "unk": 0}
        add_space_prefix = True
        add_bos, add_eos = True, False
    elif model in BPE_MODELS:
        special = ({"bos": 11, "eos": 11, "unk": None} if model == "gpt2"
                   else {"bos": None, "eos": None, "unk": None})
        if no_bos:
            special["bos"] = None
        add_space_prefix = False
        add_bos, add_eos = default_flags or (False, False)
    else:
        raise TokenizerError(f"tokenizer model {model!r} is not supported "
                             "(supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE, "
                             "'gemma4' = SentencePiece-style BPE)")
    add_space_prefix = bool(_get(md, K + "add_space_prefix", add_space_prefix))

    keys = {"bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id",
            "eom": "eom_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
            "pad": "padding_token_id", "mask": "mask_token_id",
            "fim_pre": ("fim_pre_token_id", "prefix_token_id"),
            "fim_suf": ("fim_suf_token_id", "suffix_token_id"),
            "fim_mid": ("fim_mid_token_id", "middle_token_id"),
            "fim_pad": "fim_pad_token_id", "fim_rep": "fim_rep_token_id",
            "fim_sep": "fim_sep_token_id"}
    for name, key in keys.items():
        tid = special.get(name)
        if tid is not None and not 0 <= tid < n:
            tid = None
        for k in (key if isinstance(key, tuple) else (key,)):
            v = _get(md, K + k)
            if v is None:
                continue
            v = int(v)
            if 0 <= v < n:
                tid = v
            else:
                log.debug("ignoring out-of-range %s = %d", k, v)
        special[name] = tid

    if _get(md, K + "add_bos_token") is not None:
        add_bos = bool(md[K + "add_bos_token"])
    if _get(md, K + "add_eos_token") is not None:
        add_eos = bool(md[K + "add_eos_token"])
    if force_bos:
        add_bos = True
    if add_bos and special["bos"] is None:
        raise TokenizerError("tokenizer.ggml.add_bos_token is true, but the BOS token id is "
                             "not set")
    if add_eos and special["eos"] is None:
        raise TokenizerError("tokenizer.ggml.add_eos_token is true, but the EOS token id is "
                             "not set")

    # text-based detection of end-of-turn / FIM tokens the converter did not flag
    def detect(name: str, texts) -> None:
        if special.get(name) is not None:
            return
        for t in texts:
            tid = token_to_id.get(t)
            if tid is not None:
                special[name] = tid
                attrs[tid] |= ATTR_CONTROL
                return

    detect("eot", _EOT_TEXTS)
    detect("eom", _EOM_TEXTS)
    for name, texts in _FIM_TEXTS.items():
        detect(name, texts)

    # end-of-generation set
    eog: set[int] = set()
    for name in ("fim_pad", "fim_rep", "fim_sep"):
        if special[name] is not None:
            eog.add(special[name])
    for t in _EOG_TEXTS:
        tid = token_to_id.get(t)
        if tid is not None and t == "</s>" and attrs[tid] & ATTR_NORMAL and model in BPE_MODELS:
            continue   # an ordinary BPE word in Qwen-style vocabularies, not an end marker
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= ATTR_CONTROL
    # gpt-oss: these are message delimiters, not control tokens
    for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        tid = token_to_id.get(t)
        if tid is not None:
            attrs[tid] = ATTR_USER_DEFINED
    for name in ("eos", "eot", "eom"):
        if special[name] is not None:
            eog.add(special[name])
    texts = {tokens[i] for i in eog}
    end = token_to_id.get("<|end|>")
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if end in eog and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(end)                       # o200k_harmony / solar-open: <|end|> is not EOG
        attrs[end] = ATTR_USER_DEFINED
    s_id = token_to_id.get("</s>")
    if "<|tool_response>" in texts and s_id in eog:
        eog.discard(s_id)                      # gemma4: </s> is not EOG
        attrs[s_id] = ATTR_NORMAL

    special_cache = [i for i, a in enumerate(attrs)
                     if a & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)]
    special_cache.sort(key=lambda i: -len(tokens[i]))

    # per-model attributes llama.cpp sets by name: Phi-3 strips whitespace after its special tokens
    name = str(_get(md, "general.name", "")).lower()
    if "phi-3" in name or "phi3" in name:
        for i in special_cache:
            attrs[i] |= ATTR_RSTRIP
        for t, on in (("</s>", True), ("<unk>", False), ("<s>", False),
                      ("<|endoftext|>", False)):
            tid = token_to_id.get(t)
            if tid is not None:
                attrs[tid] = attrs[tid] | ATTR_RSTRIP if on else attrs[tid] & ~ATTR_RSTRIP

    return Vocab(model=model, pre=str(_get(md, K + "pre", "") or ""), tokens=tokens,
                 token_to_id=token_to_id, scores=scores, attrs=attrs, special=special,
                 add_bos=add_bos, add_eos=add_eos, add_space_prefix=add_space_prefix,
                 eog_ids=eog, special_cache=special_cache)
