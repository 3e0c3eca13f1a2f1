"""bench/kv_types.py: a whole forward pass (a chunked prompt, then decode steps) per KV type."""

import json

from bench import kv_types


def test_each_type_is_measured_on_its_own_cache(stories_path, tmp_path, capsys):
    """Every type asked for gets its own engine and cache (the layout reported is the engine's:
    catches a bench that measures the default cache under every name), with positive times, a
    1.00x base row and the JSON record of each."""
    out = tmp_path / "kv.json"
    kv_types.main(["--gguf", str(stories_path), "--kv-types", "f32,f16", "--prompt", "48",
                   "--chunk", "16", "--decode", "3", "--threads", "1", "--rounds", "2",
                   "--json", str(out)])
    res = json.loads(out.read_text())["results"]
    assert {k: r["layout"] for k, r in res.items()} == {"f32": "f32", "f16": "f16"}
    assert all(r["prefill_s"] > 0 and r["decode_s"] > 0 for r in res.values())
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| f")]
    assert rows[0].startswith("| f32 | f32 |") and rows[0].count("1.00x") == 2
    assert rows[1].startswith("| f16 | f16 |")
