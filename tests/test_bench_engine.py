"""bench/engine.py's derived figures (issue 30: multi-token step costs, the read roofline)."""

from bench.engine import decode_bytes, markdown, step_costs


def test_step_costs_are_time_ratios_of_steps():
    # catches: the ratio of throughputs reported as a step cost (4 tokens at 2x the 1-token
    # throughput cost 2x a 1-token step, not 0.5x), or the batch size left out
    got = step_costs({"1": 100.0, "2": 160.0, "4": 200.0})
    assert got == {"1": 1.0, "2": 1.25, "4": 2.0}
    assert step_costs({"4": 10.0}) == {}


def test_decode_bytes_reads_one_embedding_row_unless_it_is_the_head(stories_model):
    # catches: the whole embedding table counted per token (a tiny model's roofline would then
    # be overstated by its vocabulary), or the tied head left out
    m = stories_model
    emb = m.tensors["token_embd.weight"].data.nbytes
    rest = sum(t.data.nbytes for n, t in m.tensors.items() if n != "token_embd.weight")
    want = rest + (emb if m.config.tied_embeddings else emb // m.config.n_vocab)
    assert decode_bytes(m) == want


def test_the_table_shows_both_engines_step_costs():
    res = [{"model": "tiny-llama", "mix": "Q8_0", "file_bytes": 2 << 20, "threads": 2,
            "isa": "avx2", "prompt": 64, "gen": 16, "act_type": "q8", "ratio": {},
            "reame": {"prefill_tps": 1.0, "decode_tps": 100.0, "roofline": 0.5,
                      "bandwidth_GBps": 20.0, "out_of_kernel_share": 0.1, "cold_start_s": 1.0,
                      "warm_start_s": 0.5, "peak_rss_bytes": 1 << 20, "rss_budget_bytes": 2 << 20,
                      "batch_decode_tps": {"1": 100.0, "4": 200.0},
                      "step_cost": {"1": 1.0, "4": 2.0}},
            "llama.cpp": {"version": "llama-batched-bench",
                          "batch_decode_tps": {"1": 90.0, "4": 120.0},
                          "step_cost": {"1": 1.0, "4": 3.0}}}]
    text = markdown(res, "today")
    assert "| tiny-llama Q8_0 | Reame | 100.0 (1.00x) | 200.0 (2.00x) |" in text
    assert "| tiny-llama Q8_0 | llama.cpp | 90.0 (1.00x) | 120.0 (3.00x) |" in text
    assert "50% of 20.0 GB/s" in text


def test_decode_bytes_counts_the_picked_experts_only(tmp_path_factory):
    # catches: every expert counted per token (a mixture of experts' decode then looked like
    # 2x the read roofline: 223% in the first run of this column)
    from bench.synth import synth_model
    from reame.model import load_model
    m = load_model(synth_model(tmp_path_factory, "tiny-qwen3moe", "F32"))
    c = m.config
    exps = sum(t.data.nbytes for n, t in m.tensors.items() if "_exps." in n)
    assert exps and c.n_expert_used < c.n_expert
    emb = m.tensors["token_embd.weight"].data.nbytes
    other = sum(t.data.nbytes for n, t in m.tensors.items()
                if "_exps." not in n and n != "token_embd.weight")
    want = other + exps * c.n_expert_used // c.n_expert + (
        emb if c.tied_embeddings else emb // c.n_vocab)
    assert decode_bytes(m) == want
