"""bench/server.py's saturated decode rate: tokens received while every stream decodes."""

from __future__ import annotations

import pytest

from bench.server import saturated_rate


def test_saturated_rate_counts_only_the_window_where_every_stream_decodes():
    """Two streams at 10 tok/s each, the second starting 1 s later (its prompt) and the first
    ending 1 s earlier: 20 tok/s over the overlap, not the 15-ish of tokens / wall time.
    Catches a rate over the whole run (ramp and tail included) or over one stream."""
    a = [0.0 + 0.1 * i for i in range(51)]          # 0 .. 5.0 s
    b = [1.0 + 0.1 * i for i in range(61)]          # 1.0 .. 7.0 s
    assert saturated_rate([a, b]) == pytest.approx(20.0, rel=0.03)
    assert saturated_rate([a, [10.0, 10.1, 10.2]]) == 0.0      # never both decoding
    assert saturated_rate([]) == 0.0
