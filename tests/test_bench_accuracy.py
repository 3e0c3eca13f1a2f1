"""bench/accuracy.py end to end on one model (without llama.cpp): figures, JSON and the Markdown
block between its markers."""

from __future__ import annotations

import json

from bench import accuracy


def test_accuracy_bench_one_model(tmp_path, monkeypatch):
    monkeypatch.setenv("REAME_BENCH_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(accuracy, "llama_python", lambda a: None)
    md = tmp_path / "benchmarks.md"
    md.write_text(f"# Benchmarks\n\nbefore\n\n{accuracy.MARKS[0]}\nold\n{accuracy.MARKS[1]}\n\nafter\n")
    out = tmp_path / "acc.json"
    assert accuracy.main(["--only", "tiny-qwen2 Q4_0", "--json", str(out), "--markdown", str(md)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["tiny-qwen2 Q4_0"]
    f32, q8 = rows[0]["reame f32"], rows[0]["reame q8"]
    assert f32["top1"] == 1.0 and f32["min_cos"] > 0.99999
    assert 0.999 <= q8["min_cos"] < f32["min_cos"] and q8["top1"] >= 0.9
    from reame.codegen.isa import detect
    from reame.jit.select import bf16_attention
    if bf16_attention(detect()):        # the default here: its column is measured, and is bf16
        bf = rows[0][accuracy.BF16]
        assert bf["top1"] >= 0.9 and 0.999 <= bf["min_cos"] < f32["min_cos"]
        assert bf != q8
    text = md.read_text()
    assert "old" not in text and "before" in text and "after" in text
    assert "| tiny-qwen2 Q4_0 | " in text and "llama.cpp top-1" not in text
