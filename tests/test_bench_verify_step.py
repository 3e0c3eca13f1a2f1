"""bench/verify_step.py: the cost of a verify step by its rows, decode rows against prompt rows."""

from bench import verify_step


def test_op_groups():
    """Catches a matmul family or an attention op counted as "other" (the split would hide where
    a verify step's time goes)."""
    assert verify_step.op_group("attn_decode/F32/simd@amx[C=4096]") == "attention"
    assert verify_step.op_group("attn_prefill/BF16/amx@amx[bk=64]") == "attention"
    for label in ("matmul_q8a/Q4_1/panel@amx[nt=4]", "matmul_q8k_rp/Q4_K/panel@amx[nt=8]",
                  "matmul/F32/gemm@amx[nr=8]"):
        assert verify_step.op_group(label) == "matmul"
    assert verify_step.op_group("rms_norm/F32/simd@amx[K=576]") == "other"


def test_rows_run_the_kernel_their_kind_says(stories_path):
    """Decode rows (a verify step's) run attn_decode, the same rows as prompt rows attn_prefill:
    catches a bench that leaves Batch.n_decode unset (the engine then picks by step size and
    both kinds time the same kernel) or swaps the kinds."""
    res = verify_step.measure(str(stories_path), ctx=40, rows=[1, 4], threads=1, rounds=1,
                              as_prompt=True)
    by = {(r["as"], r["rows"]): r for r in res["rows"]}
    assert set(by) == {("decode", 1), ("decode", 4), ("prompt", 1), ("prompt", 4)}
    assert by["decode", 1]["ratio"] == 1.0 and all(r["ms"] > 0 for r in res["rows"])
    for r in (1, 4):
        assert by["decode", r]["thread_ms"]["attention_op"] == "attn_decode"
        assert by["prompt", r]["thread_ms"]["attention_op"] == "attn_prefill"
    lines = verify_step.table(res)
    assert len(lines) == 2 + 4 and lines[2].startswith("| decode | 1 |")


def test_a_kv_type_is_resolved_for_this_cpu(stories_path):
    """--kv-type auto (and bf16) name what the engine keeps on this CPU (bf16 tiles, the bf16
    pair layout, or f32): catches the name passed to the engine as given (it accepts only the
    layouts, so "auto" failed with a ValueError, and "bf16" did on CPUs without AMX)."""
    from reame.engines import kv_type_for
    from reame.model import load_model
    res = verify_step.measure(str(stories_path), ctx=40, rows=[1], threads=1, rounds=1,
                              kv_type="auto")
    assert res["kv_type"] == kv_type_for(load_model(str(stories_path)).config, "auto")
