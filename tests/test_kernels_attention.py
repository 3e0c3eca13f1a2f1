"""Attention kernels (attn_decode, attn_prefill) against the float64 reference of reame's
attention loop: every variant x tile at the native, avx2|neon and generic levels; f32 and f16
caches; paged caches with blocks of 16, 32 and 64 positions (scattered blocks, one shared by two
slots) and the contiguous layout; GQA ratios 1, 2 and 7; head sizes 8, 20/12 (D != Dv), 32, 64,
80, 128; 1/2/3 threads.
Decode: random positions and slots (including position 0 and the last cache row). Prefill:
chunks starting at 0 and at an offset (earlier positions already cached), mixed batches.
Sliding window (dim swa) and soft-capping (dim softcap), Gemma 2 / 3: the tests at the end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops.attn_decode import case_reference, make_attention_case, reference
from reame.codegen.registry import get_op
from conftest import host_levels, isa_at as _isa

LEVELS = host_levels()

# (H, Hkv, D, Dv, kv): GQA ratio 7, 2, 1, 7, 1 (D != Dv), 2
SHAPES = [(14, 2, 64, 64, "f16"), (4, 2, 32, 32, "f32"), (2, 2, 8, 8, "f16"),
          (7, 1, 80, 80, "f32"), (3, 3, 20, 12, "f16"), (2, 1, 128, 128, "f32")]


# (C, BS): the contiguous layout, and paged pools of 16-, 32- and 64-position blocks
LAYOUTS = ((100, 0), (96, 16), (96, 32), (128, 64))


def _params(op_name):
    """Every spec at every level, on every shape, in every layout; at the native level with both
    cache types."""
    op = get_op(op_name)
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for si, (H, Hkv, D, Dv, kv) in enumerate(SHAPES):
            kvs = (kv, "f32" if kv == "f16" else "f16") if level == "native" else (kv,)
            for kvt in kvs:
                for C, BS in LAYOUTS if level == "native" else LAYOUTS[si % 2::2]:
                    dims = dict(H=H, Hkv=Hkv, D=D, Dv=Dv, C=C, BS=BS, kv=kvt,
                                scale=1 / math.sqrt(D))
                    for spec in op.specs("F32", isa, **dims):
                        tiles = ",".join(f"{k}={v}" for k, v in spec.params if k not in dims)
                        out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}[{tiles}]-"
                                                f"H{H}/{Hkv}-D{D}/{Dv}-{kvt}-BS{BS}"))
    return out


def _run(op, kernel, case, nth, what):
    want = case_reference(kernel.spec, case)["out"]
    case.buffers["out"][:] = np.nan
    kernel.run_threads(case.args, nth)
    got = case.buffers["out"]
    rtol, atol = op.tolerance("F32")
    assert np.all(np.isfinite(got)), f"{what}: rows left unwritten"
    err = np.abs(got - want) / (atol + rtol * np.abs(want))
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err.max() <= 1.0, (f"{what}: out{list(worst)} = {got[worst]!r}, want {want[worst]!r} "
                              f"({err.max():.3g} x tolerance)")


@pytest.mark.parametrize("spec,isa", _params("attn_decode"))
def test_attn_decode(spec, isa):
    op = get_op("attn_decode")
    k = build(spec, isa)
    for n in (1, 5):
        rng = np.random.default_rng(n)
        case = make_attention_case(op, spec, rng, n)           # random slots and positions
        for nth in (1, 2, 3):
            _run(op, k, case, nth, f"{spec.label()} n={n} nth={nth}")


def _prefill_batches(rng, C):
    """(positions, slots) of prefill-shaped batches."""
    yield list(range(0, 37)), [0] * 37                      # a chunk from position 0
    yield list(range(23, 52)), [1] * 29                     # a chunk after 23 cached positions
    pos = [5, 9] + list(range(40, 58)) + [70] + list(range(0, 13)) + [C - 1]
    seq = [2, 0] + [1] * 18 + [0] + [2] * 13 + [1]          # decode tokens + two chunks
    yield pos, seq
    yield [int(rng.integers(0, C))], [0]                   # a single token


@pytest.mark.parametrize("spec,isa", _params("attn_prefill"))
def test_attn_prefill(spec, isa):
    op = get_op("attn_prefill")
    k = build(spec, isa)
    rng = np.random.default_rng(11)
    for b, (pos, seq) in enumerate(_prefill_batches(rng, spec.p["C"])):
        case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
        for nth in (1, 2, 3):
            _run(op, k, case, nth, f"{spec.label()} batch {b} nth={nth}")


@pytest.mark.parametrize("BS", (0, 32))
@pytest.mark.parametrize("kv", ("f16", "f32"))
@pytest.mark.parametrize("op_name", ("attn_decode", "attn_prefill"))
def test_long_context(op_name, kv, BS):
    """Many key blocks and tiles, the last one partial; a long and a short sequence together
    (the cost-balanced split gives them to different threads)."""
    op = get_op(op_name)
    isa = detect()
    C = 1024 if BS else 1000
    spec = op.specs("F32", isa, H=14, Hkv=2, D=64, Dv=64, C=C, BS=BS, kv=kv, scale=0.125)[-1]
    k = build(spec, isa)
    rng = np.random.default_rng(12)
    if op_name == "attn_decode":
        pos, seq = [999, 3, 517], [0, 1, 2]
    else:
        pos, seq = list(range(900, 1000)) + [4], [0] * 100 + [1]
    case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
    for nth in (1, 2, 3):
        _run(op, k, case, nth, f"{spec.label()} nth={nth}")


@pytest.mark.parametrize("BS", (0, 16, 64))
def test_prefill_matches_decode(BS):
    """The two kernels compute the same function: a prefill chunk and the same tokens through
    decode agree to rounding."""
    isa = detect()
    dims = dict(H=8, Hkv=2, D=64, Dv=64, C=128, BS=BS, kv="f32", scale=0.125)
    pre = get_op("attn_prefill")
    dec = get_op("attn_decode")
    kp = build(pre.specs("F32", isa, **dims)[-1], isa)
    kd = build(dec.specs("F32", isa, **dims)[-1], isa)
    rng = np.random.default_rng(13)
    case = make_attention_case(pre, kp.spec, rng, 60, positions=list(range(60, 120)),
                               seq_ids=[1] * 60)
    kp.run_threads(case.args, 2)
    a = case.buffers["out"].copy()
    kd.run_threads(case.args, 2)
    np.testing.assert_allclose(a, case.buffers["out"], rtol=1e-5, atol=1e-5)


def test_reference_matches_reame_reference():
    """Our float64 oracle is reame.reference's attention loop (same cache, same math)."""
    rng = np.random.default_rng(14)
    H, Hkv, D, C = 6, 2, 16, 20
    q = rng.standard_normal((3, H, D)).astype(np.float32)
    kc = rng.standard_normal((2, Hkv, C, D)).astype(np.float32)
    vc = rng.standard_normal((2, Hkv, C, D)).astype(np.float32)
    pos, seq = np.array([0, 7, 19]), np.array([1, 0, 1])
    ours = reference(q, kc, vc, pos, seq, 0.25)
    for i in range(3):                          # reame/reference.py, ReferenceEngine.forward
        keys, vals = kc[seq[i], :, :pos[i] + 1], vc[seq[i], :, :pos[i] + 1]
        for hq in range(H):
            s = keys[hq // (H // Hkv)] @ q[i, hq] * 0.25
            s = np.exp(s - s.max())
            np.testing.assert_allclose(ours[i, hq], (s / s.sum()) @ vals[hq // (H // Hkv)],
                                       rtol=1e-5, atol=1e-6)


# ---- sliding window (dim swa) and soft-capping (dim softcap): Gemma 2 / Gemma 3 ----

# (swa, softcap): windows of 5 and 37 (neither divides a key block), 32 (one that does: the first
# visible key starts a block exactly); a cap alone; a window and a cap together
WINDOW_CAP = ((5, 0.0), (37, 0.0), (32, 0.0), (0, 2.0), (5, 3.0), (37, 1.5))
WIN_DIMS = dict(H=6, Hkv=2, D=40, Dv=24)                  # G = 3: rows of several tokens per vector
WIN_LAYOUTS = ((100, 0), (128, 64))                        # contiguous; paged, key blocks < BS


def _extra(swa, cap):
    """The optional dims as callers pass them: only when nonzero."""
    return {**({"swa": swa} if swa else {}), **({"softcap": cap} if cap else {})}


def _window_params(op_name, configs=WINDOW_CAP):
    """Every spec at every host level x {contiguous, paged} x {f32, f16} x (swa, softcap)."""
    op = get_op(op_name)
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for C, BS in WIN_LAYOUTS:
            for kv in ("f32", "f16"):
                for swa, cap in configs:
                    dims = dict(WIN_DIMS, C=C, BS=BS, kv=kv, scale=1 / math.sqrt(WIN_DIMS["D"]),
                                **_extra(swa, cap))
                    for spec in op.specs("F32", isa, **dims):
                        tiles = ",".join(f"{k}={v}" for k, v in spec.params if k not in dims)
                        out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}[{tiles}]-"
                                                f"{kv}-BS{BS}-swa{swa}-cap{cap:g}"))
    return out


def _assert_bites(spec, case):
    """The case exercises the window / cap: the output without them differs by far more than
    the tolerance (else a kernel ignoring them would pass)."""
    plain = case_reference(spec.with_params(swa=0, softcap=0.0), case)["out"]
    want = case_reference(spec, case)["out"]
    assert np.abs(plain - want).max() > 0.05, "the window / cap does not change this case"


def _window_batches(spec):
    """(what, positions, slots) of prefill batches for a window swa (0: none) in a context C."""
    C, swa = spec.p["C"], spec.p.get("swa", 0)
    yield "chunk from 0", list(range(0, 50)), [0] * 50     # the window starts biting in the chunk
    p0 = max(swa, 1) + 20                                   # a chunk starting past the window
    yield "chunk past the window", list(range(p0, min(C, p0 + 45))), [1] * min(C - p0, 45)
    # first visible key of the first row = 31 (the last key of a 16- or 32-key tile): every
    # other row's window starts after that tile, so its whole first tile is masked
    p0 = 30 + swa
    n = min(40, C - p0)
    yield "rows with a fully masked first tile", list(range(p0, p0 + n)), [2] * n
    pos = [3, 9, C - 1] + list(range(40, 58)) + [70] + list(range(0, 13)) + [swa, swa - 1]
    seq = [2, 0, 1] + [1] * 18 + [0] + [2] * 13 + [0, 2]   # decode tokens + two chunks
    yield "mixed", [max(p, 0) for p in pos], seq
    yield "one token", [C - 2], [1]


@pytest.mark.parametrize("spec,isa", _window_params("attn_decode"))
def test_attn_decode_window_softcap(spec, isa):
    """Decode with a sliding window and/or soft-capping against the float64 reference, at the
    window's edge (positions swa - 1, swa, swa + 1), at 0 and C - 1, on 1-3 threads.
    Catches: the window ignored (all keys seen); the window off by one (key pos - swa seen, or
    key pos - swa + 1 dropped: positions swa and swa + 1 differ by one key of a 5-key window);
    the first block not masked below max(t0, T - swa) (it starts inside the block for 5 and 37);
    soft-capping applied after masking (masked keys become -softcap, not -inf, and get weight)
    or not at all; a unit's cost estimate left at pos + 1 while the total uses the window's
    (units skipped: rows left NaN; the reverse only unbalances the threads, which
    test_window_cost_balances_threads catches)."""
    op = get_op("attn_decode")
    k = build(spec, isa)
    C, swa = spec.p["C"], spec.p.get("swa", 0)
    rng = np.random.default_rng(21)
    edge = [swa - 1, swa, swa + 1] if swa else [7, 8, 9]
    pos = [0, C - 1] + edge + [int(x) for x in rng.integers(0, C, 4)]
    case = make_attention_case(op, spec, rng, len(pos), positions=pos,
                               seq_ids=rng.integers(0, 3, len(pos)))
    _assert_bites(spec, case)
    for nth in (1, 2, 3):
        _run(op, k, case, nth, f"{spec.label()} nth={nth}")


@pytest.mark.parametrize("spec,isa", _window_params("attn_prefill"))
def test_attn_prefill_window_softcap(spec, isa):
    """Prefill with a sliding window and/or soft-capping against the float64 reference: a chunk
    from 0, a chunk starting past the window, a chunk whose rows (all but the first) see no key
    of the first key tile, a mixed batch (decode tokens, two chunks), one token; 1-3 threads.
    Catches: the window ignored or off by one; one lower bound for the whole tile instead of one
    per row (rows of a tile are at different positions); soft-capping after masking or missing;
    NaN from a fully masked tile (running max still -inf: -inf - -inf) when the subtraction is
    not guarded (rows left non-finite); the key-tile loop starting past the first row's first
    visible key (keys missing)."""
    op = get_op("attn_prefill")
    k = build(spec, isa)
    rng = np.random.default_rng(22)
    for what, pos, seq in _window_batches(spec):
        case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
        if len(pos) > 1:
            _assert_bites(spec, case)
        for nth in (1, 2, 3):
            _run(op, k, case, nth, f"{spec.label()} {what} nth={nth}")


def _poison_unread(spec, case):
    """Fill with NaN every cache row a windowed kernel has no reason to read: for each slot,
    positions before the key block (decode: vl * kb keys; prefill: bk) holding the first visible
    key of its lowest token, or, contiguous, before the shifted last block too. A kernel that
    reads them anyway multiplies NaN values by a weight 0 and writes NaN."""
    p, b = spec.p, case.buffers
    BS, swa = p["BS"], p["swa"]
    BK = p.get("bk", p.get("vl", 1) * p.get("kb", 1))
    keep = {}                                               # slot -> first position it may read
    for s in set(b["seq"].tolist()):
        lowest = int(b["pos"][b["seq"] == s].min())
        start = max(0, lowest + 1 - swa) // BK * BK
        if not BS:
            start = min(start, max(0, lowest + 1 - BK))    # the last block moved back
        keep[s] = start
    C = p["C"]
    if not BS:
        for s, start in keep.items():
            b["kc"][s, :, :start] = np.nan
            b["vc"][s, :, :start] = np.nan
        return sum(keep.values())
    live = {(int(b["bt"][s, t // BS]), t % BS) for s, st in keep.items() for t in range(st, C)}
    dead = {(int(b["bt"][s, t // BS]), t % BS) for s, st in keep.items()
            for t in range(st)} - live
    for blk, row in dead:
        b["kc"][blk, :, row] = np.nan
        b["vc"][blk, :, row] = np.nan
    return len(dead)


@pytest.mark.parametrize("op_name", ("attn_decode", "attn_prefill"))
@pytest.mark.parametrize("BS", (0, 64))
@pytest.mark.parametrize("kv", ("f32", "f16"))
@pytest.mark.parametrize("swa", (5, 37))
def test_window_skips_keys_before_it(op_name, swa, kv, BS):
    """The key loop starts at the block (decode) / tile (prefill) holding the first visible key,
    not at 0: every cache row before that block is NaN, so a kernel still walking the keys from
    0 (correct through the mask, but slow: O(pos) instead of O(swa) per token) reads them and
    writes NaN. Every spec at every host level."""
    op = get_op(op_name)
    C = 256 if BS else 250
    if op_name == "attn_decode":
        pos, seq = [200, 230, 150, 249], [0, 0, 1, 2]
    else:
        pos, seq = list(range(150, 200)) + [230], [1] * 50 + [2]
    n = 0
    for level in LEVELS:
        isa = _isa(level)
        for spec in op.specs("F32", isa, **WIN_DIMS, C=C, BS=BS, kv=kv, scale=0.15, swa=swa):
            k = build(spec, isa)
            rng = np.random.default_rng(23)
            case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
            assert _poison_unread(spec, case) > 0
            for nth in (1, 2):
                _run(op, k, case, nth, f"{spec.label()} nth={nth} (cache rows before the window "
                                       "are NaN)")
            n += 1
    assert n


@pytest.mark.parametrize("op_name", ("attn_decode", "attn_prefill"))
@pytest.mark.parametrize("kv", ("f32", "f16"))
def test_softcap_saturates(op_name, kv):
    """Scores far beyond the cap (|s / softcap| up to ~1e3: e^(2x) overflows to inf or
    underflows to 0) give tanh = +-1 exactly, not NaN - and a Gemma 2-like cap of 50 on scores
    of std ~20 stays within the tolerance. Every spec at every host level. Catches a tanh that
    overflows, e.g. (e^2x - 1) / (e^2x + 1) = inf / inf (checked: rows NaN)."""
    op = get_op(op_name)
    pos = list(range(40, 72)) + [5]
    seq = [0] * 32 + [1]
    for level in LEVELS:
        isa = _isa(level)
        for cap, qmul in ((1.0, 300.0), (50.0, 10.0)):
            for spec in op.specs("F32", isa, **WIN_DIMS, C=96, BS=32, kv=kv, scale=0.15,
                                 softcap=cap):
                k = build(spec, isa)
                rng = np.random.default_rng(24)
                case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
                case.buffers["q"] *= qmul
                _run(op, k, case, 2, f"{spec.label()} q*{qmul:g}")


@pytest.mark.parametrize("op_name", ("attn_decode", "attn_prefill"))
def test_window_cost_balances_threads(op_name):
    """With a window a token costs min(pos + 1, swa) (+ overhead), not pos + 1: one token at
    position 999 and nine at position 4 are ten equal units per kv head, so thread 0 of 2 takes
    about half of them (with pos + 1, the long token alone would be half the total and thread 0
    would take only its two units). Catches the cost estimate left at pos + 1."""
    op = get_op(op_name)
    isa = detect()
    spec = op.specs("F32", isa, H=4, Hkv=2, D=32, Dv=32, C=1024, BS=64, kv="f32", scale=0.2,
                    swa=5)[-1]
    k = build(spec, isa)
    rng = np.random.default_rng(25)
    pos, seq = [999] + [4] * 9, [0] + list(range(1, 10))    # no runs: prefill does token tiles
    case = make_attention_case(op, spec, rng, 10, seqs=10, positions=pos, seq_ids=seq)
    want = case_reference(spec, case)["out"]
    case.buffers["out"][:] = np.nan
    k(case.args, 0, 2)                                      # thread 0's share alone
    done = np.isfinite(case.buffers["out"]).all(axis=2)     # [token, head]
    units = done.reshape(10, 2, -1).all(axis=2).sum()       # (token, kv head) units written
    assert 8 <= units <= 12, f"thread 0 of 2 did {units} of 20 equal units"
    np.testing.assert_allclose(case.buffers["out"][done], want[done], rtol=2e-5, atol=2e-5)


def test_window_dims_absent_render_unchanged():
    """swa and softcap are passed only when nonzero: a spec without them renders as before
    (the golden test pins that text); with them the IR differs, and the decode key loop starts
    at the window's block (%b0) rather than 0."""
    from reame.codegen.spec import render
    isa = detect()
    for name in ("attn_decode", "attn_prefill"):
        op = get_op(name)
        dims = dict(H=8, Hkv=2, D=64, Dv=64, C=256, BS=64, kv="f32", scale=0.125)
        base = op.specs("F32", isa, **dims)[0]
        _, plain = render(base, isa)
        assert "swa" not in plain and "softcap" not in plain
        assert render(base.with_params(swa=0, softcap=0.0), isa)[1] == plain
        _, win = render(base.with_params(swa=5), isa)
        _, cap = render(base.with_params(softcap=2.0), isa)
        assert win != plain and cap != plain
        start = "phi i64 [ %tileB.b0, %tileB.blocks ]" if name == "attn_prefill" else \
            "phi i64 [ %b0, %blocks ]"
        assert start in win and start not in plain


# ---- attn_prefill family amx: AMX-BF16 tiles, reduced precision (dtype BF16, opt-in) ----

def _amx_missing() -> str | None:
    """Why the amx family cannot run here (None: it can)."""
    from reame.codegen.ops.matmul_q8k import amx_permitted
    isa = detect()
    if isa.arch != "x86_64":
        return f"attn_prefill amx needs x86-64 AMX-BF16 (this is {isa.arch})"
    if not isa.has("amx"):
        return f"attn_prefill amx needs AMX-BF16 (ISA level amx; this CPU: {isa.level})"
    if not amx_permitted():
        return "attn_prefill amx: the OS does not grant AMX tile data (arch_prctl)"
    return None


def _amx_params():
    """Every amx tile on every shape, layout and cache type (only the native level has it)."""
    why = _amx_missing()
    if why:
        return [pytest.param(None, id="amx-absent", marks=pytest.mark.skip(reason=why))]
    op = get_op("attn_prefill")
    isa = detect()
    out = []
    for H, Hkv, D, Dv, kv0 in SHAPES:
        for kv in ("f32", "f16", "bf16"):       # bf16 (tile layout): shapes with D % 32 == 0
            for C, BS in LAYOUTS:
                dims = dict(H=H, Hkv=Hkv, D=D, Dv=Dv, C=C, BS=BS, kv=kv, scale=1 / math.sqrt(D))
                for spec in op.specs("BF16", isa, **dims):
                    out.append(pytest.param(spec, id=f"amx[mb={spec.p['mb']},bk={spec.p['bk']}]-"
                                            f"H{H}/{Hkv}-D{D}/{Dv}-{kv}-BS{BS}"))
    return out


def _run_bf16(kernel, case, nth, what):
    """The amx kernel against bf16_reference (its own roundings: BF16_TIGHT plus the slack of
    the P at bf16 rounding ties) and against the float64 reference (BF16_VS_F64)."""
    from reame.codegen.ops import attn_prefill as ap
    from reame.codegen.ops.kv_layout import as_float
    spec, b = kernel.spec, case.buffers
    kc, vc = as_float(b["kc"], b["vc"], b["bt"], spec.p["BS"], spec.p["kv"])
    want, slack = ap.bf16_reference(b["q"], kc, vc, b["pos"], b["seq"], spec.p["scale"],
                                    spec.p["bk"], slack=True)
    f64 = case_reference(spec, case)["out"]
    b["out"][:] = np.nan
    kernel.run_threads(case.args, nth)
    got = b["out"]
    assert np.all(np.isfinite(got)), f"{what}: rows left unwritten"
    rt, at = ap.BF16_TIGHT
    vr, va = ap.BF16_VS_F64
    for name, e, ref in (("bf16_reference", np.abs(got - want) / (at + rt * np.abs(want) + slack),
                          want),
                         ("the float64 reference", np.abs(got - f64) / (va + vr * np.abs(f64)),
                          f64)):
        worst = np.unravel_index(np.argmax(e), e.shape)
        assert e.max() <= 1.0, (f"{what}: out{list(worst)} = {got[worst]!r}, {name} "
                                f"{ref[worst]!r} ({e.max():.3g} x tolerance)")


@pytest.mark.parametrize("spec", _amx_params())
def test_attn_prefill_amx(spec):
    """Every amx tile x shape (GQA 1/2/7, D 8..128, D != Dv) x layout (contiguous, paged
    32/64; 16-position blocks are refused: bk is 32 or 64) x f32/f16 cache, on the prefill
    batches of test_attn_prefill (chunks from 0 and after cached positions, a mixed batch of
    decode tokens and chunks, one token), 1-3 threads."""
    k = build(spec, detect())
    rng = np.random.default_rng(11)
    for b, (pos, seq) in enumerate(_prefill_batches(rng, spec.p["C"])):
        case = make_attention_case(get_op("attn_prefill"), spec, rng, len(pos), positions=pos,
                                   seq_ids=seq)
        for nth in (1, 2, 3):
            _run_bf16(k, case, nth, f"{spec.label()} batch {b} nth={nth}")


@pytest.mark.parametrize("BS", (0, 64))
@pytest.mark.parametrize("kv", ("f16", "f32", "bf16"))
def test_attn_prefill_amx_long_context(kv, BS):
    """Many key tiles (the running max grows, then mostly not: the skipped rescale), the last
    partial; 100 tokens after 900 cached and one lone token (its own 1-block tile)."""
    why = _amx_missing()
    if why:
        pytest.skip(why)
    op = get_op("attn_prefill")
    isa = detect()
    C = 1024 if BS or kv == "bf16" else 1000     # (a bf16 cache: whole key tiles)
    pos, seq = list(range(900, 1000)) + [4], [0] * 100 + [1]
    specs = op.specs("BF16", isa, H=14, Hkv=2, D=64, Dv=64, C=C, BS=BS, kv=kv, scale=0.125)
    assert specs
    for spec in specs:
        k = build(spec, isa)
        rng = np.random.default_rng(12)
        case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
        for nth in (1, 2):
            _run_bf16(k, case, nth, f"{spec.label()} nth={nth}")


def test_attn_prefill_amx_refuses():
    """The amx family is dtype BF16 only (the f32 specs never include it), and refuses what it
    does not implement, so those layers keep the f32 kernels: sliding windows, soft-capping,
    16-position KV blocks (bk is 32 or 64), G > 16 mb query heads per kv head."""
    why = _amx_missing()
    if why:
        pytest.skip(why)
    op = get_op("attn_prefill")
    isa = detect()
    dims = dict(H=8, Hkv=2, D=64, Dv=64, C=256, BS=64, kv="f32", scale=0.125)
    assert op.specs("BF16", isa, **dims)
    assert all(s.family != "amx" for s in op.specs("F32", isa, **dims))
    assert not op.specs("BF16", isa, **{**dims, "swa": 32})
    assert not op.specs("BF16", isa, **{**dims, "softcap": 30.0})
    assert not op.specs("BF16", isa, **{**dims, "BS": 16})
    assert {s.p["mb"] for s in op.specs("BF16", isa, **{**dims, "H": 96, "Hkv": 2})} == {4, 8}
    assert {s.p["mb"] for s in op.specs("BF16", isa, **{**dims, "H": 160, "Hkv": 2})} == {8}


# ---- attn_decode family bf16dp: AVX512_BF16 dot products over the pair-layout bf16 cache ----

def _bf16dp_params():
    """Every bf16dp tile on the shapes it serves (GQA 7, 2, 1 with D 32..128, D != Dv, a group of
    heads split in two: G = 7 with Dv 80) in every paged layout (16-, 32-, 64-position blocks)."""
    from conftest import bf16dp_missing
    why = bf16dp_missing()
    if why:
        return [pytest.param(None, id="bf16dp-absent", marks=pytest.mark.skip(reason=why))]
    op, isa, out = get_op("attn_decode"), detect(), []
    for H, Hkv, D, Dv in ((14, 2, 64, 64), (4, 2, 32, 32), (7, 1, 80, 80), (2, 1, 128, 128),
                          (6, 2, 40, 48)):
        for C, BS in LAYOUTS[1:]:
            dims = dict(H=H, Hkv=Hkv, D=D, Dv=Dv, C=C, BS=BS, kv="bf16p", scale=1 / math.sqrt(D))
            for spec in op.specs("BF16", isa, **dims):
                out.append(pytest.param(spec, id=f"bf16dp[bk={spec.p['bk']}]-H{H}/{Hkv}-"
                                        f"D{D}/{Dv}-BS{BS}"))
    assert out
    return out


@pytest.mark.parametrize("spec", _bf16dp_params())
def test_attn_decode_bf16dp(spec):
    """Every bf16dp tile x shape x paged layout against bf16_reference with its key blocks (the
    tight tolerance plus the slack of P at rounding ties) and the float64 reference: random
    tokens (positions 0 and C - 1 included: one key, a whole cache), the runs of a verify step
    (consecutive positions of one sequence), 1-3 threads. Catches a wrong pair stride, a key
    block aligned elsewhere than key 0, a head group that skips a head, P.V over the wrong key
    pair."""
    op = get_op("attn_decode")
    k = build(spec, detect())
    rng = np.random.default_rng(21)
    C = spec.p["C"]
    for b, (n, pos, seq) in enumerate(((9, None, None), (1, [C - 1], [0]),
                                       (12, list(range(C - 40, C - 28)), [1] * 12))):
        case = make_attention_case(op, spec, rng, n, positions=pos, seq_ids=seq)
        for nth in (1, 2, 3):
            _run_bf16(k, case, nth, f"{spec.label()} batch {b} nth={nth}")


def test_attn_decode_bf16dp_reads_nothing_past_pos():
    """The cache rows past a token's position (in its last key block and KV block) hold other
    data: here NaN and inf bits. The output is still the reference's. Catches a last block whose
    values are used with P = 0 but not zeroed (0 x NaN = NaN) and scores past pos not masked."""
    from conftest import bf16dp_missing
    why = bf16dp_missing()
    if why:
        pytest.skip(why)
    op, isa = get_op("attn_decode"), detect()
    for spec in op.specs("BF16", isa, H=6, Hkv=2, D=64, Dv=64, C=128, BS=64, kv="bf16p",
                         scale=0.125):
        k = build(spec, isa)
        for p in (0, 1, 16, 37, 70, 95):
            case = make_attention_case(op, spec, np.random.default_rng(p), 1, positions=[p],
                                       seq_ids=[0], seqs=1)
            b = case.buffers
            want = case_reference(spec, case)["out"]
            kc, vc, bt = b["kc"], b["vc"], b["bt"]
            for t in range(p + 1, 128):         # every row past p: NaN keys, +-inf / NaN values
                blk, r = bt[0, t // 64], t % 64
                kc[blk, :, :, r, :] = 0x7FC0
                vc[blk, :, r // 2, :, r % 2] = (0x7F80, 0xFF80, 0x7FC0)[t % 3]
            b["out"][:] = np.nan
            k.run_threads(case.args, 2)
            got = b["out"]
            assert np.all(np.isfinite(got)), f"{spec.label()} pos {p}: {np.isnan(got).sum()} NaN"
            vr, va = op.tolerance("BF16")
            assert np.all(np.abs(got - want) <= va + vr * np.abs(want)), f"{spec.label()} pos {p}"


def test_attn_decode_bf16dp_row_bits_do_not_depend_on_the_batch():
    """A token's output is bit for bit the same computed alone and among the 16 rows of a verify
    step and other sequences' tokens, at any thread count: what lets a bf16 cache keep greedy
    outputs identical with and without speculation. Catches key blocks aligned to a run's
    start or a batch-dependent split of a row's work."""
    from conftest import bf16dp_missing
    why = bf16dp_missing()
    if why:
        pytest.skip(why)
    op, isa = get_op("attn_decode"), detect()
    spec = op.specs("BF16", isa, H=9, Hkv=3, D=64, Dv=64, C=256, BS=64, kv="bf16p",
                    scale=0.125)[0]
    k = build(spec, isa)
    pos = list(range(150, 166)) + [3, 200, 77]
    case = make_attention_case(op, spec, np.random.default_rng(5), len(pos), positions=pos,
                               seq_ids=[0] * 16 + [1, 2, 1])
    k.run_threads(case.args, 2)
    together = case.buffers["out"].copy()
    for i, p in enumerate(pos):
        one = make_attention_case(op, spec, np.random.default_rng(0), 1, positions=[p],
                                  seq_ids=[case.buffers["seq"][i]])
        for name in ("kc", "vc", "bt"):
            one.buffers[name][...] = case.buffers[name]
        one.buffers["q"][0] = case.buffers["q"][i]
        k.run_threads(one.args, 1 + i % 2)
        assert np.array_equal(one.buffers["out"][0], together[i]), f"row {i} (pos {p})"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_attn_decode_row_bits_do_not_depend_on_the_batch(level, kv):
    """The f32 families: a token's output is bit for bit the same computed alone and among a
    verify step's 16 rows (over an f16 cache each staged key block is shared by a run of up to
    8 of them, units in kv-head-major order), next to another sequence's rows that continue its
    positions and a lone row, at 1, 2 and 3 threads, and within tolerance of the reference.
    Catches a run's rows masked at the run's last position instead of their own, a run that
    takes in the next sequence's rows (their positions continue it), and rows of a run written
    to the wrong output rows."""
    op, isa = get_op("attn_decode"), _isa(level)
    pos = list(range(150, 166)) + [166, 167, 3, 200]
    seqs = [0] * 16 + [1, 1, 2, 1]
    for H, Hkv, D in ((9, 3, 64), (14, 2, 64), (2, 2, 8)):
        dims = dict(H=H, Hkv=Hkv, D=D, Dv=D, C=256, BS=64, kv=kv, scale=1 / math.sqrt(D))
        for spec in op.specs("F32", isa, **dims):
            k = build(spec, isa)
            case = make_attention_case(op, spec, np.random.default_rng(5), len(pos),
                                       positions=pos, seq_ids=seqs)
            want = case_reference(spec, case)["out"]
            rtol, atol = op.tolerance("F32")
            for nth in (1, 2, 3):
                case.buffers["out"][:] = np.nan
                k.run_threads(case.args, nth)
                together = case.buffers["out"].copy()
                assert np.all(np.abs(together - want) <= atol + rtol * np.abs(want)), \
                    f"{spec.label()} nth {nth}"
                for i, p in enumerate(pos):
                    one = make_attention_case(op, spec, np.random.default_rng(0), 1,
                                              positions=[p], seq_ids=[seqs[i]])
                    for name in ("kc", "vc", "bt"):
                        one.buffers[name][...] = case.buffers[name]
                    one.buffers["q"][0] = case.buffers["q"][i]
                    k.run_threads(one.args, 1)
                    assert np.array_equal(one.buffers["out"][0], together[i]), \
                        f"{spec.label()} nth {nth}: row {i} (pos {p})"


@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("level", LEVELS)
def test_attn_decode_shared_rows_keep_each_heads_bits(level, kv):
    """Where a unit's G heads share each key and value row they load (the default, tile share = 1:
    every head's scores from one pass over a block's keys, every head's P.V from one pass over
    its values, where their vectors fit the registers), each output is bit for bit the per-head
    loop's (share = 0): paged and contiguous caches, a verify step's runs, a window and
    soft-capping, 1 and 2 threads; and at the AVX-512 levels the shared passes are rendered.
    Catches a head reading another head's scores, weights or rescaling factor, P.V accumulated
    in another order than the per-head loop's (keys in order, two alternating sums), and a
    score tree combining its nodes in another order."""
    from reame.codegen.spec import render
    op, isa = get_op("attn_decode"), _isa(level)
    pos = list(range(150, 158)) + [3, 200, 255]
    seqs = [0] * 8 + [1, 2, 1]
    shared = 0
    for H, Hkv, D, extra in ((9, 3, 64, {}), (14, 2, 64, {}), (4, 2, 64, {}), (6, 2, 32, {}),
                             (9, 3, 64, {"BS": 0}), (9, 3, 64, {"swa": 40}),
                             (9, 3, 64, {"softcap": 30.0})):
        dims = dict(H=H, Hkv=Hkv, D=D, Dv=D, C=256, BS=64, kv=kv, scale=1 / math.sqrt(D))
        for spec in op.specs("F32", isa, **{**dims, **extra}):
            alone = spec.with_params(share=0)
            shared += render(spec, isa)[1] != render(alone, isa)[1]
            k, k0 = build(spec, isa), build(alone, isa)
            case = make_attention_case(op, spec, np.random.default_rng(7), len(pos),
                                       positions=pos, seq_ids=seqs)
            for nth in (1, 2):
                case.buffers["out"][:] = np.nan
                k0.run_threads(case.args, nth)
                want = case.buffers["out"].copy()
                case.buffers["out"][:] = np.nan
                k.run_threads(case.args, nth)
                assert np.array_equal(case.buffers["out"], want, equal_nan=True), \
                    f"{spec.label()} nth {nth}"
    if isa.f32_lanes >= 16:
        assert shared, "no spec rendered the shared passes"


def test_attn_decode_bf16dp_refuses():
    """bf16dp is dtype BF16 over the pair layout only; the f32 families never take a bf16p cache
    and attn_prefill takes none (every row of a bf16p engine runs bf16dp); windows, caps, an
    odd D, Dv not a multiple of 16, a contiguous cache and blocks smaller than bk are
    refused."""
    from conftest import bf16dp_missing
    why = bf16dp_missing()
    if why:
        pytest.skip(why)
    op, isa = get_op("attn_decode"), detect()
    dims = dict(H=8, Hkv=2, D=64, Dv=64, C=256, BS=64, kv="bf16p", scale=0.125)
    assert {s.p["bk"] for s in op.specs("BF16", isa, **dims)} == {16, 32, 64}
    assert not op.specs("F32", isa, **dims)
    assert not get_op("attn_prefill").specs("F32", isa, **dims)
    assert not op.specs("BF16", isa, **{**dims, "kv": "f32"})
    for bad in ({"swa": 32}, {"softcap": 30.0}, {"D": 63}, {"Dv": 40}, {"BS": 0}):
        assert not op.specs("BF16", isa, **{**dims, **bad}), bad
    assert {s.p["bk"] for s in op.specs("BF16", isa, **{**dims, "BS": 16})} == {16}
    assert {s.p["bk"] for s in op.specs("BF16", isa, **{**dims, "BS": 32})} == {16, 32}


def test_bf16_reference_rounds():
    """bf16_round rounds to nearest, ties to even; bf16_reference with exact bf16 inputs and one
    key tile is float64 attention with P rounded."""
    from reame.codegen.ops.attn_prefill import bf16_reference, bf16_round
    x = np.array([1.0, 1 + 2**-8, 1 + 2**-7 + 2**-8, 1 + 2**-9, -3.0, 1 + 3 * 2**-9],
                 np.float32)
    np.testing.assert_array_equal(bf16_round(x), [1.0, 1.0, 1 + 2**-6, 1.0, -3.0, 1 + 2**-7])
    rng = np.random.default_rng(5)
    q = bf16_round(rng.standard_normal((2, 2, 8)))
    kc = bf16_round(rng.standard_normal((1, 1, 8, 8)))
    vc = bf16_round(rng.standard_normal((1, 1, 8, 8)))
    pos, seq = np.array([3, 7]), np.array([0, 0])
    got = bf16_reference(q, kc, vc, pos, seq, 1.0, 64)
    for i in range(2):
        for h in range(2):
            s = kc[0, 0, :pos[i] + 1].astype(np.float64) @ q[i, h]
            p = np.exp(s - s.max())
            pb = bf16_round(p.astype(np.float32)).astype(np.float64)
            np.testing.assert_allclose(got[i, h], pb @ vc[0, 0, :pos[i] + 1] / p.sum(),
                                       rtol=1e-12)
