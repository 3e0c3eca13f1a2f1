"""Malformed models: load_model raises ModelError with one line naming the file and the problem.

Also checks our GGUF header parser against gguf.GGUFReader (the format's own reader)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from bench.synth import synth_model, write_model
from conftest import shared_path
from reame.errors import ModelError
from reame.gguf_file import GGUFFile
from reame.model import load_model


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """A small valid model (no tokenizer keys needed for loading)."""
    return synth_model(tmp_path_factory, "tiny-qwen2", "Q4_K_M", vocab="none", n_vocab=300)


def load_error(path) -> str:
    with pytest.raises(ModelError) as ei:
        load_model(path)
    msg = str(ei.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"{path}: "), msg
    assert ei.value.path == str(path)
    return msg[len(f"{path}: "):]


def test_valid_file_loads(valid):
    assert load_model(valid).config.arch == "qwen2"


# ---- metadata -----------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gpt2", "gemma", "mamba"])
def test_unsupported_architecture(tmp_path, arch):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none", arch=arch)
    msg = load_error(p)
    assert f"unsupported architecture {arch!r}" in msg and "llama, qwen2, qwen3, phi3" in msg


def test_missing_architecture(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none",
                    metadata={"general.architecture": None})
    assert "missing general.architecture" in load_error(p)


@pytest.mark.parametrize("key", ["llama.embedding_length", "llama.block_count",
                                 "llama.feed_forward_length", "llama.attention.head_count"])
def test_missing_required_key(tmp_path, key):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none", metadata={key: None})
    assert f"missing metadata key {key}" in load_error(p)


@pytest.mark.parametrize("key,value", [
    ("llama.embedding_length", "256"),
    ("llama.block_count", 2.5),
    ("llama.attention.head_count_kv", "two"),
    ("llama.rope.freq_base", "fast"),
    ("llama.attention.layer_norm_rms_epsilon", [1.0, 2.0]),
])
def test_wrongly_typed_key(tmp_path, key, value):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none", metadata={key: value})
    msg = load_error(p)
    assert key in msg and "expected" in msg


def test_bad_head_counts(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none",
                    metadata={"llama.attention.head_count_kv": 3})
    assert "not a multiple of head_count_kv 3" in load_error(p)


@pytest.mark.parametrize("arch,metadata,want", [
    ("llama", {"llama.expert_count": 8}, "expert_used_count 0 does not fit expert_count 8"),
    ("llama", {"llama.expert_count": 8, "llama.expert_used_count": 9},
     "expert_used_count 9 does not fit expert_count 8"),
    ("phi3", {"phi3.expert_count": 8, "phi3.expert_used_count": 2},
     "mixture-of-experts phi3 models are not supported"),
    # an expert count on a file with a dense FFN: its experts' tensors are missing
    ("llama", {"llama.expert_count": 8, "llama.expert_used_count": 2},
     "missing tensor blk.0.ffn_gate_inp.weight"),
])
def test_mixture_of_experts_errors(tmp_path, arch, metadata, want):
    shape = "tiny-phi3" if arch == "phi3" else "tiny-llama"
    p = write_model(tmp_path / "m.gguf", shape, vocab="none", metadata=metadata)
    assert want in load_error(p)


@pytest.mark.parametrize("pattern,want", [
    (None, (True, True, True, True, True, False)),        # Gemma 3's default: 5 of every 6
    (2, (True, False, True, False, True, False)),
    (np.array([0, 1, 0, 1, 1, 0], np.uint8), (False, True, False, True, True, False)),
    (np.array([1, 1], np.uint8), "has 2 entries for 6 layers"),
    ("every other", "expected an integer or a per-layer array"),
])
def test_gemma_window_pattern(tmp_path, pattern, want):
    """The windowed layers as llama.cpp's load_swa_pattern reads them (a count n: of every n
    layers the last is global; or a per-layer array); a pattern that does not fit is one line."""
    p = write_model(tmp_path / "m.gguf", "tiny-gemma3", vocab="none",
                    metadata={"gemma3.attention.sliding_window_pattern": pattern})
    if isinstance(want, str):
        assert want in load_error(p)
    else:
        c = load_model(p).config
        assert c.swa_layers == want and c.swa == 8
        assert c.rope_config(True).rope_theta == 10000.0 and c.rope_config(False).rope_theta == 1e6


def test_gemma_needs_its_post_norms(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-gemma2", vocab="none",
                    drop_tensors=["blk.1.post_ffw_norm.weight"])
    assert "missing tensor blk.1.post_ffw_norm.weight" in load_error(p)


def test_unsupported_rope_scaling(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none",
                    rope_scaling="longrope", rope_scaling_factor=4.0)
    assert "unsupported rope scaling type 'longrope'" in load_error(p)


@pytest.mark.parametrize("align", [0, 3, 48])
def test_bad_alignment(tmp_path, align):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", vocab="none",
                    metadata={"general.alignment": align})
    assert f"general.alignment {align}" in load_error(p)


# ---- tensors ------------------------------------------------------------------------------

@pytest.mark.parametrize("ttype", ["IQ2_XXS", "IQ3_S", "IQ1_S", "TQ1_0", "Q8_1", "I8"])
def test_unsupported_tensor_type(tmp_path, ttype):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", "Q8_0", vocab="none",
                    type_overrides={"blk.1.attn_q.weight": ttype})
    msg = load_error(p)
    assert f"'blk.1.attn_q.weight' has type {ttype}" in msg and "not support" in msg
    assert "supported: F32, F16, BF16, Q8_0" in msg


def test_unknown_tensor_type_id(tmp_path, valid):
    p = tmp_path / "m.gguf"
    data = bytearray(valid.read_bytes())
    name = b"blk.0.attn_q.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 200)        # the type id
    p.write_bytes(data)
    assert "'blk.0.attn_q.weight' has type #200" in load_error(p)


@pytest.mark.parametrize("shape,mix,drop", [
    ("tiny-llama", "F32", "blk.1.ffn_up.weight"),
    ("tiny-llama", "Q4_0", "output_norm.weight"),
    ("tiny-llama", "F16", "output.weight"),        # untied Llama without a head: tied instead
    ("tiny-qwen2", "F32", "token_embd.weight"),
    ("tiny-qwen2", "Q8_0", "blk.0.attn_k.bias"),
    ("tiny-qwen3", "F32", "blk.1.attn_q_norm.weight"),
])
def test_missing_tensor(tmp_path, shape, mix, drop):
    p = write_model(tmp_path / "m.gguf", shape, mix, vocab="none", drop_tensors=[drop])
    if drop == "output.weight":
        assert load_model(p).config.tied_embeddings      # a missing head means a tied one
        return
    assert f"missing tensor {drop}" in load_error(p)


@pytest.mark.parametrize("name,shape,expect", [
    ("blk.0.attn_k.weight", (256, 256), "tensor blk.0.attn_k.weight has shape [256, 256], "
                                        "expected [256, 128]"),
    ("blk.1.ffn_down.weight", (352, 256, 1), "expected [352, 256]"),
    ("output.weight", (256, 511), "has shape [256, 511], expected [256, 512]"),
    ("blk.0.attn_norm.weight", (128,), "has shape [128], expected [256]"),
    ("token_embd.weight", (128, 512), "token_embd.weight has shape [128, 512], "
                                      "expected [256, 512]"),
    ("token_embd.weight", (256 * 512,), "token_embd.weight has shape [131072], expected 2"),
])
def test_wrong_shape(tmp_path, name, shape, expect):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", "F32", vocab="none", n_vocab=512,
                    shape_overrides={name: shape})
    assert expect in load_error(p)


def test_quantised_norm(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", "Q8_0", vocab="none",
                    type_overrides={"blk.0.ffn_norm.weight": "Q8_0"})
    assert ("blk.0.ffn_norm.weight is Q8_0; norms and biases must be F32, F16 or BF16"
            in load_error(p))


def test_row_not_a_multiple_of_the_block(tmp_path):
    p = write_model(tmp_path / "m.gguf", "tiny-llama", "Q8_0", vocab="none",
                    type_overrides={"blk.0.ffn_down.weight": "Q4_K"})
    assert "'blk.0.ffn_down.weight': row length 352 is not a multiple of the Q4_K block (256)" \
        in load_error(p)


# ---- damaged files --------------------------------------------------------------------------

def _cut_points(path):
    """Byte offsets inside each part of a GGUF file: header, KV pairs, tensor infos, data."""
    r = GGUFReader(path)
    kv = [f.offset for name, f in r.fields.items() if not name.startswith("GGUF.")]
    ti = [t.field.offset for t in r.tensors]
    data = sorted((t.data_offset, t.n_bytes) for t in r.tensors)
    size = path.stat().st_size
    return {
        "in the magic": 2,
        "after the magic": 4,
        "in the version": 6,
        "in the tensor count": 12,
        "in the KV count": 20,
        "at the first key": kv[0] + 3,
        "in a KV value": kv[len(kv) // 2] + 11,
        "at the last key": kv[-1] + 1,
        "in the first tensor info": ti[0] + 5,
        "in a tensor info": ti[len(ti) // 2] + 17,
        "at the data start": data[0][0],
        "in the first tensor": data[0][0] + data[0][1] // 2,
        "in a middle tensor": data[len(data) // 2][0] + 1,
        "one byte short": size - 1,
    }


def test_truncated_file(tmp_path, valid):
    blob = valid.read_bytes()
    for where, n in _cut_points(valid).items():
        p = tmp_path / f"cut-{n}.gguf"
        p.write_bytes(blob[:n])
        msg = load_error(p)
        assert "truncated" in msg, (where, n, msg)


def test_truncated_data_names_the_tensor(tmp_path, valid):
    p = tmp_path / "cut.gguf"
    gf = GGUFFile(valid)
    last = max(gf.tensors.values(), key=lambda t: t.offset)
    p.write_bytes(valid.read_bytes()[:last.offset + 10])
    msg = load_error(p)
    assert f"truncated file: tensor {last.name!r} needs bytes up to" in msg


@pytest.mark.parametrize("patch,expect", [
    ((4, "<I", 7), "unsupported GGUF version 7"),
    ((4, ">I", 3), "big-endian GGUF files are not supported"),
    ((8, "<Q", 1 << 60), "corrupt GGUF header"),
    ((16, "<Q", 1 << 60), "corrupt GGUF header"),
])
def test_corrupt_header(tmp_path, valid, patch, expect):
    data = bytearray(valid.read_bytes())
    at, fmt, value = patch
    struct.pack_into(fmt, data, at, value)
    p = tmp_path / "m.gguf"
    p.write_bytes(data)
    assert expect in load_error(p)


def test_corrupt_value_type(tmp_path, valid):
    data = bytearray(valid.read_bytes())
    first_key = GGUFReader(valid).fields["general.architecture"]
    at = first_key.offset + 8 + len("general.architecture")           # its value type
    struct.pack_into("<I", data, at, 99)
    p = tmp_path / "m.gguf"
    p.write_bytes(data)
    assert "unknown GGUF value type 99" in load_error(p)


def test_too_many_dimensions(tmp_path, valid):
    data = bytearray(valid.read_bytes())
    name = b"blk.0.attn_q.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    struct.pack_into("<I", data, at, 7)
    p = tmp_path / "m.gguf"
    p.write_bytes(data)
    assert "tensor 'blk.0.attn_q.weight' has 7 dimensions" in load_error(p)


@pytest.mark.parametrize("content,expect", [
    (b"", "empty file"),
    (b"GGU", "truncated"),
    (b"hello, this is a text file\n", "not a GGUF file"),
    (b"\x7fELF\x02\x01\x01" + bytes(100), "not a GGUF file"),
    (b"PK\x03\x04" + bytes(100), "not a GGUF file"),
])
def test_not_gguf(tmp_path, content, expect):
    p = tmp_path / "model.gguf"
    p.write_bytes(content)
    assert expect in load_error(p)


def test_missing_file(tmp_path):
    assert "No such file" in load_error(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    assert "directory" in load_error(tmp_path).lower()


# ---- our parser against gguf.GGUFReader ----------------------------------------------------

def _reader_value(field):
    """A GGUFReader field as GGUFFile represents it."""
    if field.types[0] == GGUFValueType.ARRAY and field.types[-1] != GGUFValueType.STRING:
        return np.concatenate([field.parts[i] for i in field.data])      # keeps the element type
    return field.contents()


def _same_as_reader(path):
    ours, ref = GGUFFile(path), GGUFReader(path)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.metadata) == list(fields)
    for k, f in fields.items():
        mine, theirs = ours.metadata[k], _reader_value(f)
        if isinstance(theirs, np.ndarray):
            assert isinstance(mine, np.ndarray) and mine.dtype == theirs.dtype, k
            assert np.array_equal(mine, theirs), k
        else:
            assert type(mine) is type(theirs) and mine == theirs, k
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.type.ggml == t.tensor_type, t.name
        assert list(mine.shape) == [int(d) for d in t.shape], t.name
        assert mine.offset == t.data_offset and mine.data.nbytes == t.n_bytes, t.name
        assert mine.data.tobytes() == np.asarray(t.data).tobytes(), t.name
    return ours


def test_parser_matches_reader_stories():
    gf = _same_as_reader(shared_path("models/stories260K.gguf"))
    assert len(gf.tensors) == 48


def test_parser_matches_reader_vocab():
    gf = _same_as_reader(shared_path("testdata/vocab/ggml-vocab-llama-spm.gguf"))
    assert len(gf.metadata["tokenizer.ggml.tokens"]) == 32000 and not gf.tensors


@pytest.mark.parametrize("mix", ["Q4_K_M", "BF16"])
def test_parser_matches_reader_synthetic(tmp_path_factory, mix):
    shared_path("models/stories260K.gguf")
    gf = _same_as_reader(synth_model(tmp_path_factory, "tiny-qwen3", mix))
    assert gf.metadata["reame.synth.mix"] == mix


def test_zero_dimension_tensor(tmp_path):
    """A 0-d tensor (legal GGUF: one element) parses; the model then lacks its tensors."""
    from gguf import GGUFWriter
    p = tmp_path / "m.gguf"
    w = GGUFWriter(p, "llama")
    w.add_tensor("scalar", np.array(2.5, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = GGUFFile(p).tensors["scalar"]
    assert t.shape == (1,) and t.dequantize().tolist() == [2.5]
    assert "missing metadata key llama.embedding_length" in load_error(p)
