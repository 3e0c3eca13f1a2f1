; golden: attn_decode_simd_f16: attn_decode/F32/simd@avx2[BS=32,C=4096,D=64,Dv=64,H=14,Hkv=2,kb=2,kv=f16,pf_loc=2,scale=0.125,vl=8]
; symbol: reame_attn_decode_F32_simd_avx2_b4336b57b7e2
; attn_decode: grouped-query attention of each token over its own KV-cache prefix, with an
; online softmax (one pass over the keys, running max and sum): memory is O(G * Dv).
; args: [0] q: f32 [n, H, D]   [1] kc   [2] vc   [3] out: f32 [n, H, Dv]   [4] pos: i32 [n]
;       [5] seq: i32 [n]   [6] bt: i32 [slots, C / BS] (paged)   [7] n: tokens
; out[i, h] = softmax(scale * q[i, h] . k[seq[i], h / G, 0..pos[i]]) @ v[seq[i], h / G, 0..pos[i]]
; Cache layout (codegen/ops/kv_layout.py): paged when BS > 0, kc f16 [blocks, Hkv, BS, D]
; (vc likewise with Dv), key t of slot s in row t % BS of block bt[s, t / BS]; contiguous when
; BS = 0, kc [slots, Hkv, C, D].
;
; Work unit = (token i, kv head hk): the G = H / Hkv query heads sharing hk read its keys once.
; Units are split between threads in contiguous ranges of equal estimated cost (pos[i] + 1 + 32
; keys per unit), so a long sequence and many short ones balance.
; Keys are processed in blocks of BK = vl * kb: the block's scores for one query head are kb
; vectors of vl keys (a transposing add tree turns vl per-key partial dot products into one
; vector of vl scores), then one online-softmax update per block and head:
;   m' = max(m, max(s)),  l' = l e^(m - m') + sum e^(s - m'),  acc' = acc e^(m - m') + e^(s - m') V.
; A block never reads past the prefix. Contiguous: the last block is moved back to end at key
; T - 1 (its keys already seen are masked out), and when the prefix is shorter than a block the
; block's rows are first copied into a stack buffer, clamped to T - 1. Paged: blocks are aligned
; (BK divides BS, so a block lies in one KV block) and a partial last block is copied, clamped.
; An f16 cache is always copied (converted to f32).
; H = 14, Hkv = 2, D = 64, Dv = 64, C = 4096, BS = 32, scale = 0.125.
; Portable family (KIND "generic": integer f16 conversion, no FMA assumed); attn_decode_simd
; renders this body with KIND avx2/avx512 (vcvtph2ps, FMA, exp with vscalefps).


define void @reame_attn_decode_F32_simd_avx2_b4336b57b7e2(ptr noalias nocapture readonly %args, i32 %ith, i32 %nth) {
entry:
  %arg.q = getelementptr i64, ptr %args, i64 0
  %q = load ptr, ptr %arg.q, align 8
  %arg.kc = getelementptr i64, ptr %args, i64 1
  %kc = load ptr, ptr %arg.kc, align 8
  %arg.vc = getelementptr i64, ptr %args, i64 2
  %vc = load ptr, ptr %arg.vc, align 8
  %arg.out = getelementptr i64, ptr %args, i64 3
  %out = load ptr, ptr %arg.out, align 8
  %arg.pos = getelementptr i64, ptr %args, i64 4
  %pos = load ptr, ptr %arg.pos, align 8
  %arg.seq = getelementptr i64, ptr %args, i64 5
  %seq = load ptr, ptr %arg.seq, align 8
  %arg.bt = getelementptr i64, ptr %args, i64 6
  %bt = load ptr, ptr %arg.bt, align 8
  %arg.n = getelementptr i64, ptr %args, i64 7
  %n = load i64, ptr %arg.n, align 8

  %qs = alloca float, i64 1792, align 64          ; q * scale of the unit's G heads (per row)
  %acc = alloca float, i64 1792, align 64        ; running sum of e^(s - m) v per head
  %ms = alloca float, i64 28, align 4               ; running max per head
  %ls = alloca float, i64 28, align 4               ; running sum of e^(s - m) per head
  %pb = alloca float, i64 16, align 64             ; e^(s - m') of a block (one per head when P.V is shared)
  %kst = alloca float, i64 1024, align 64        ; staged (f32) key rows of a block
  %vst = alloca float, i64 1024, align 64       ; staged (f32) value rows
  %ith64 = sext i32 %ith to i64
  %nth64 = sext i32 %nth to i64
  %nonempty = icmp sgt i64 %n, 0
  br i1 %nonempty, label %tot, label %done

tot:                                              ; total cost: sum over tokens of pos + 1 + OV
  %tt = phi i64 [ 0, %entry ], [ %ttn, %tot ]
  %tc = phi i64 [ 0, %entry ], [ %tcn, %tot ]
  %tprs = phi i32 [ -1, %entry ], [ %tsq, %tot ]  ; the previous token's sequence and position
  %tprp = phi i32 [ -2, %entry ], [ %tp, %tot ]
  %trun = phi i1 [ false, %entry ], [ %trunn, %tot ]
  %tpp = getelementptr i32, ptr %pos, i64 %tt
  %tp = load i32, ptr %tpp, align 4
  %tp64 = sext i32 %tp to i64
  %tcost = add i64 %tp64, 33
  %tcn = add i64 %tc, %tcost
  %tsqp = getelementptr i32, ptr %seq, i64 %tt    ; does a token follow its sequence's previous
  %tsq = load i32, ptr %tsqp, align 4             ; one (a verify step's rows)?
  %tsame = icmp eq i32 %tsq, %tprs
  %tprp1 = add i32 %tprp, 1
  %tnext = icmp eq i32 %tp, %tprp1
  %tpair = and i1 %tsame, %tnext
  %trunn = or i1 %trun, %tpair
  %ttn = add i64 %tt, 1
  %tmore = icmp ult i64 %ttn, %n
  br i1 %tmore, label %tot, label %tot.end

tot.end:
  %total = mul i64 %tcn, 2
  br label %unit

unit:                                             ; unit u = (token u / Hkv, kv head u % Hkv)
  %u = phi i64 [ 0, %tot.end ], [ %un, %next ]
  %pre = phi i64 [ 0, %tot.end ], [ %pren, %next ]    ; cost of the units before u
  ; kv-head-major (a head's tokens in a row) when the step has runs to share blocks; else
  ; token-major, whose units read a sequence's heads' rows of a block one after the other
  ; (an f32 decode step of 16 sequences: ~5% less attention time than kv-head-major)
  %ihm = urem i64 %u, %n
  %hhm = udiv i64 %u, %n
  %itm = udiv i64 %u, 2
  %htm = urem i64 %u, 2
  %i = select i1 %trunn, i64 %ihm, i64 %itm
  %hk = select i1 %trunn, i64 %hhm, i64 %htm
  %ppi = getelementptr i32, ptr %pos, i64 %i
  %pi = load i32, ptr %ppi, align 4
  %pi64 = sext i32 %pi to i64
  %ucost = add i64 %pi64, 33
  %own0 = mul i64 %pre, %nth64
  %own = udiv i64 %own0, %total                    ; the thread whose share starts before u
  %past = icmp sgt i64 %own, %ith64
  br i1 %past, label %done, label %unit.mine

unit.mine:
  %mine = icmp eq i64 %own, %ith64
  br i1 %mine, label %work, label %next

work:
  %sqp = getelementptr i32, ptr %seq, i64 %i
  %sq = load i32, ptr %sqp, align 4
  %sq64 = sext i32 %sq to i64
  br label %run

run:                                              ; the run: tokens i .. i + ruj - 1 of this head
  %ruj = phi i64 [ 1, %work ], [ %rujn, %run.take ]
  %ruc = phi i64 [ %ucost, %work ], [ %rucn, %run.take ]    ; their cost
  %ruend = add i64 %i, %ruj
  %rufull = icmp uge i64 %ruj, 4
  %ruout = icmp uge i64 %ruend, %n
  %rustop = or i1 %rufull, %ruout
  br i1 %rustop, label %run.done, label %run.chk

run.chk:                                          ; token ruend: same sequence, next position, ours
  %rusp = getelementptr i32, ptr %seq, i64 %ruend
  %rus = load i32, ptr %rusp, align 4
  %rusame = icmp eq i32 %rus, %sq
  %rupp = getelementptr i32, ptr %pos, i64 %ruend
  %rup = load i32, ptr %rupp, align 4
  %ruprev = sub i64 %ruend, 1
  %ruqp = getelementptr i32, ptr %pos, i64 %ruprev
  %ruq = load i32, ptr %ruqp, align 4
  %ruq1 = add i32 %ruq, 1
  %runext = icmp eq i32 %rup, %ruq1
  %rupre = add i64 %pre, %ruc                       ; cost of the units before it
  %ruown0 = mul i64 %rupre, %nth64
  %ruown = udiv i64 %ruown0, %total
  %rumine = icmp eq i64 %ruown, %ith64
  %ruok0 = and i1 %rusame, %runext
  %ruok = and i1 %ruok0, %rumine
  br i1 %ruok, label %run.take, label %run.done

run.take:
  %rup64 = sext i32 %rup to i64
  %rucost = add i64 %rup64, 33
  %rucn = add i64 %ruc, %rucost
  %rujn = add i64 %ruj, 1
  br label %run

run.done:
  %rurn = phi i64 [ %ruj, %run ], [ %ruj, %run.chk ]
  %rurc = phi i64 [ %ruc, %run ], [ %ruc, %run.chk ]
  %rulast = add i64 %i, %rurn
  %rulast1 = sub i64 %rulast, 1
  %rulp = getelementptr i32, ptr %pos, i64 %rulast1
  %rulpos = load i32, ptr %rulp, align 4
  %rulpos64 = sext i32 %rulpos to i64
  %T = add i64 %rulpos64, 1                        ; the run's keys 0..its last position
  %T32 = trunc i64 %T to i32
  %btoff = mul i64 %sq64, 128
  %btrow = getelementptr i32, ptr %bt, i64 %btoff  ; the sequence's block table row
  %h0 = mul i64 %hk, 7
  %qrow0 = mul i64 %i, 14
  %qrow = add i64 %qrow0, %h0                     ; q / out row of the first query head
  br label %init

init:                                             ; per query head: q * scale, state = empty
  %ig = phi i64 [ 0, %run.done ], [ %ign, %init ]     ; row ig / G of the run, head ig % G
  %igr = udiv i64 %ig, 7
  %igh = urem i64 %ig, 7
  %igrow = mul i64 %igr, 14
  %igq = add i64 %qrow, %igrow
  %iqr = add i64 %igq, %igh
  %iqo = mul i64 %iqr, 64
  %iqp = getelementptr float, ptr %q, i64 %iqo
  %isqo = mul i64 %ig, 64
  %isqp = getelementptr float, ptr %qs, i64 %isqo
  %iq0p = getelementptr float, ptr %iqp, i64 0
  %iq0 = load <8 x float>, ptr %iq0p, align 4
  %iq0s = fmul <8 x float> %iq0, splat (float 0x3FC0000000000000)
  %iq0d = getelementptr float, ptr %isqp, i64 0
  store <8 x float> %iq0s, ptr %iq0d, align 4
  %iq1p = getelementptr float, ptr %iqp, i64 8
  %iq1 = load <8 x float>, ptr %iq1p, align 4
  %iq1s = fmul <8 x float> %iq1, splat (float 0x3FC0000000000000)
  %iq1d = getelementptr float, ptr %isqp, i64 8
  store <8 x float> %iq1s, ptr %iq1d, align 4
  %iq2p = getelementptr float, ptr %iqp, i64 16
  %iq2 = load <8 x float>, ptr %iq2p, align 4
  %iq2s = fmul <8 x float> %iq2, splat (float 0x3FC0000000000000)
  %iq2d = getelementptr float, ptr %isqp, i64 16
  store <8 x float> %iq2s, ptr %iq2d, align 4
  %iq3p = getelementptr float, ptr %iqp, i64 24
  %iq3 = load <8 x float>, ptr %iq3p, align 4
  %iq3s = fmul <8 x float> %iq3, splat (float 0x3FC0000000000000)
  %iq3d = getelementptr float, ptr %isqp, i64 24
  store <8 x float> %iq3s, ptr %iq3d, align 4
  %iq4p = getelementptr float, ptr %iqp, i64 32
  %iq4 = load <8 x float>, ptr %iq4p, align 4
  %iq4s = fmul <8 x float> %iq4, splat (float 0x3FC0000000000000)
  %iq4d = getelementptr float, ptr %isqp, i64 32
  store <8 x float> %iq4s, ptr %iq4d, align 4
  %iq5p = getelementptr float, ptr %iqp, i64 40
  %iq5 = load <8 x float>, ptr %iq5p, align 4
  %iq5s = fmul <8 x float> %iq5, splat (float 0x3FC0000000000000)
  %iq5d = getelementptr float, ptr %isqp, i64 40
  store <8 x float> %iq5s, ptr %iq5d, align 4
  %iq6p = getelementptr float, ptr %iqp, i64 48
  %iq6 = load <8 x float>, ptr %iq6p, align 4
  %iq6s = fmul <8 x float> %iq6, splat (float 0x3FC0000000000000)
  %iq6d = getelementptr float, ptr %isqp, i64 48
  store <8 x float> %iq6s, ptr %iq6d, align 4
  %iq7p = getelementptr float, ptr %iqp, i64 56
  %iq7 = load <8 x float>, ptr %iq7p, align 4
  %iq7s = fmul <8 x float> %iq7, splat (float 0x3FC0000000000000)
  %iq7d = getelementptr float, ptr %isqp, i64 56
  store <8 x float> %iq7s, ptr %iq7d, align 4
  %iao = mul i64 %ig, 64
  %iap = getelementptr float, ptr %acc, i64 %iao
  %ia0p = getelementptr float, ptr %iap, i64 0
  store <8 x float> zeroinitializer, ptr %ia0p, align 4
  %ia1p = getelementptr float, ptr %iap, i64 8
  store <8 x float> zeroinitializer, ptr %ia1p, align 4
  %ia2p = getelementptr float, ptr %iap, i64 16
  store <8 x float> zeroinitializer, ptr %ia2p, align 4
  %ia3p = getelementptr float, ptr %iap, i64 24
  store <8 x float> zeroinitializer, ptr %ia3p, align 4
  %ia4p = getelementptr float, ptr %iap, i64 32
  store <8 x float> zeroinitializer, ptr %ia4p, align 4
  %ia5p = getelementptr float, ptr %iap, i64 40
  store <8 x float> zeroinitializer, ptr %ia5p, align 4
  %ia6p = getelementptr float, ptr %iap, i64 48
  store <8 x float> zeroinitializer, ptr %ia6p, align 4
  %ia7p = getelementptr float, ptr %iap, i64 56
  store <8 x float> zeroinitializer, ptr %ia7p, align 4
  %imp = getelementptr float, ptr %ms, i64 %ig
  store float 0xFFF0000000000000, ptr %imp, align 4
  %ilp = getelementptr float, ptr %ls, i64 %ig
  store float 0.0, ptr %ilp, align 4
  %ign = add i64 %ig, 1
  %ngs = mul i64 %rurn, 7
  %igm = icmp ult i64 %ign, %ngs
  br i1 %igm, label %init, label %blocks

blocks:
  %nb0 = add i64 %T, 15
  %nblk = udiv i64 %nb0, 16
  %Tm1 = sub i64 %T, 1
  %Tv0 = insertelement <8 x i32> poison, i32 %T32, i64 0
  %Tv = shufflevector <8 x i32> %Tv0, <8 x i32> poison, <8 x i32> zeroinitializer
  br label %blk

blk:                                              ; block b: keys ts .. ts + BK - 1
  %b = phi i64 [ 0, %blocks ], [ %bn, %blk.next ]
  %t0 = mul i64 %b, 16
  %ts = add i64 %t0, 0                            ; aligned: the block lies in one KV block
  %pgi = udiv i64 %t0, 32
  %pgp = getelementptr i32, ptr %btrow, i64 %pgi
  %pg32 = load i32, ptr %pgp, align 4
  %pg = sext i32 %pg32 to i64
  %pgr0 = mul i64 %pg, 2
  %pgr1 = add i64 %pgr0, %hk
  %pgr2 = mul i64 %pgr1, 32
  %pgin = urem i64 %t0, 32
  %pgrow = add i64 %pgr2, %pgin                   ; pool row of key t0
  %kb0o = mul i64 %pgrow, 64
  %kb0 = getelementptr i16, ptr %kc, i64 %kb0o
  %vb0o = mul i64 %pgrow, 64
  %vb0 = getelementptr i16, ptr %vc, i64 %vb0o
  %tend = add i64 %t0, 16
  %staged = icmp eq i64 0, 0
  %slim = sub i64 %Tm1, %ts                       ; rows past this one repeat it
  br i1 %staged, label %stage, label %body

stage:                                            ; copy (f16: convert) rows ts + min(j, T - 1 - ts)
  %sj = phi i64 [ 0, %blk ], [ %sjn, %stage ]
  %stc = icmp ult i64 %sj, %slim
  %st = select i1 %stc, i64 %sj, i64 %slim
  %skso = mul i64 %st, 64
  %sksrc = getelementptr i16, ptr %kb0, i64 %skso
  %skdo = mul i64 %sj, 64
  %skdst = getelementptr float, ptr %kst, i64 %skdo

  %sk0p = getelementptr i16, ptr %sksrc, i64 0
  %sk0h = load <8 x i16>, ptr %sk0p, align 2
  %sk0f.h = bitcast <8 x i16> %sk0h to <8 x half>
  %sk0f = fpext <8 x half> %sk0f.h to <8 x float>

  %sk0d = getelementptr float, ptr %skdst, i64 0
  store <8 x float> %sk0f, ptr %sk0d, align 4
  %sk1p = getelementptr i16, ptr %sksrc, i64 8
  %sk1h = load <8 x i16>, ptr %sk1p, align 2
  %sk1f.h = bitcast <8 x i16> %sk1h to <8 x half>
  %sk1f = fpext <8 x half> %sk1f.h to <8 x float>

  %sk1d = getelementptr float, ptr %skdst, i64 8
  store <8 x float> %sk1f, ptr %sk1d, align 4
  %sk2p = getelementptr i16, ptr %sksrc, i64 16
  %sk2h = load <8 x i16>, ptr %sk2p, align 2
  %sk2f.h = bitcast <8 x i16> %sk2h to <8 x half>
  %sk2f = fpext <8 x half> %sk2f.h to <8 x float>

  %sk2d = getelementptr float, ptr %skdst, i64 16
  store <8 x float> %sk2f, ptr %sk2d, align 4
  %sk3p = getelementptr i16, ptr %sksrc, i64 24
  %sk3h = load <8 x i16>, ptr %sk3p, align 2
  %sk3f.h = bitcast <8 x i16> %sk3h to <8 x half>
  %sk3f = fpext <8 x half> %sk3f.h to <8 x float>

  %sk3d = getelementptr float, ptr %skdst, i64 24
  store <8 x float> %sk3f, ptr %sk3d, align 4
  %sk4p = getelementptr i16, ptr %sksrc, i64 32
  %sk4h = load <8 x i16>, ptr %sk4p, align 2
  %sk4f.h = bitcast <8 x i16> %sk4h to <8 x half>
  %sk4f = fpext <8 x half> %sk4f.h to <8 x float>

  %sk4d = getelementptr float, ptr %skdst, i64 32
  store <8 x float> %sk4f, ptr %sk4d, align 4
  %sk5p = getelementptr i16, ptr %sksrc, i64 40
  %sk5h = load <8 x i16>, ptr %sk5p, align 2
  %sk5f.h = bitcast <8 x i16> %sk5h to <8 x half>
  %sk5f = fpext <8 x half> %sk5f.h to <8 x float>

  %sk5d = getelementptr float, ptr %skdst, i64 40
  store <8 x float> %sk5f, ptr %sk5d, align 4
  %sk6p = getelementptr i16, ptr %sksrc, i64 48
  %sk6h = load <8 x i16>, ptr %sk6p, align 2
  %sk6f.h = bitcast <8 x i16> %sk6h to <8 x half>
  %sk6f = fpext <8 x half> %sk6f.h to <8 x float>

  %sk6d = getelementptr float, ptr %skdst, i64 48
  store <8 x float> %sk6f, ptr %sk6d, align 4
  %sk7p = getelementptr i16, ptr %sksrc, i64 56
  %sk7h = load <8 x i16>, ptr %sk7p, align 2
  %sk7f.h = bitcast <8 x i16> %sk7h to <8 x half>
  %sk7f = fpext <8 x half> %sk7f.h to <8 x float>

  %sk7d = getelementptr float, ptr %skdst, i64 56
  store <8 x float> %sk7f, ptr %sk7d, align 4
  %svso = mul i64 %st, 64
  %svsrc = getelementptr i16, ptr %vb0, i64 %svso
  %svdo = mul i64 %sj, 64
  %svdst = getelementptr float, ptr %vst, i64 %svdo

  %sv0p = getelementptr i16, ptr %svsrc, i64 0
  %sv0h = load <8 x i16>, ptr %sv0p, align 2
  %sv0f.h = bitcast <8 x i16> %sv0h to <8 x half>
  %sv0f = fpext <8 x half> %sv0f.h to <8 x float>

  %sv0d = getelementptr float, ptr %svdst, i64 0
  store <8 x float> %sv0f, ptr %sv0d, align 4
  %sv1p = getelementptr i16, ptr %svsrc, i64 8
  %sv1h = load <8 x i16>, ptr %sv1p, align 2
  %sv1f.h = bitcast <8 x i16> %sv1h to <8 x half>
  %sv1f = fpext <8 x half> %sv1f.h to <8 x float>

  %sv1d = getelementptr float, ptr %svdst, i64 8
  store <8 x float> %sv1f, ptr %sv1d, align 4
  %sv2p = getelementptr i16, ptr %svsrc, i64 16
  %sv2h = load <8 x i16>, ptr %sv2p, align 2
  %sv2f.h = bitcast <8 x i16> %sv2h to <8 x half>
  %sv2f = fpext <8 x half> %sv2f.h to <8 x float>

  %sv2d = getelementptr float, ptr %svdst, i64 16
  store <8 x float> %sv2f, ptr %sv2d, align 4
  %sv3p = getelementptr i16, ptr %svsrc, i64 24
  %sv3h = load <8 x i16>, ptr %sv3p, align 2
  %sv3f.h = bitcast <8 x i16> %sv3h to <8 x half>
  %sv3f = fpext <8 x half> %sv3f.h to <8 x float>

  %sv3d = getelementptr float, ptr %svdst, i64 24
  store <8 x float> %sv3f, ptr %sv3d, align 4
  %sv4p = getelementptr i16, ptr %svsrc, i64 32
  %sv4h = load <8 x i16>, ptr %sv4p, align 2
  %sv4f.h = bitcast <8 x i16> %sv4h to <8 x half>
  %sv4f = fpext <8 x half> %sv4f.h to <8 x float>

  %sv4d = getelementptr float, ptr %svdst, i64 32
  store <8 x float> %sv4f, ptr %sv4d, align 4
  %sv5p = getelementptr i16, ptr %svsrc, i64 40
  %sv5h = load <8 x i16>, ptr %sv5p, align 2
  %sv5f.h = bitcast <8 x i16> %sv5h to <8 x half>
  %sv5f = fpext <8 x half> %sv5f.h to <8 x float>

  %sv5d = getelementptr float, ptr %svdst, i64 40
  store <8 x float> %sv5f, ptr %sv5d, align 4
  %sv6p = getelementptr i16, ptr %svsrc, i64 48
  %sv6h = load <8 x i16>, ptr %sv6p, align 2
  %sv6f.h = bitcast <8 x i16> %sv6h to <8 x half>
  %sv6f = fpext <8 x half> %sv6f.h to <8 x float>

  %sv6d = getelementptr float, ptr %svdst, i64 48
  store <8 x float> %sv6f, ptr %sv6d, align 4
  %sv7p = getelementptr i16, ptr %svsrc, i64 56
  %sv7h = load <8 x i16>, ptr %sv7p, align 2
  %sv7f.h = bitcast <8 x i16> %sv7h to <8 x half>
  %sv7f = fpext <8 x half> %sv7f.h to <8 x float>

  %sv7d = getelementptr float, ptr %svdst, i64 56
  store <8 x float> %sv7f, ptr %sv7d, align 4
  %sjn = add i64 %sj, 1
  %sjm = icmp ult i64 %sjn, 16
  br i1 %sjm, label %stage, label %body

body:
  %kblk = phi ptr [ %kb0, %blk ], [ %kst, %stage ]
  %vblk = phi ptr [ %vb0, %blk ], [ %vst, %stage ]
  %ts32 = trunc i64 %ts to i32
  %t032 = trunc i64 %t0 to i32
  %tsv0 = insertelement <8 x i32> poison, i32 %ts32, i64 0
  %tsv = shufflevector <8 x i32> %tsv0, <8 x i32> poison, <8 x i32> zeroinitializer
  %t0v0 = insertelement <8 x i32> poison, i32 %t032, i64 0
  %t0v = shufflevector <8 x i32> %t0v0, <8 x i32> poison, <8 x i32> zeroinitializer
  %idx0 = add <8 x i32> %tsv, <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7>
  %vlo0 = icmp sge <8 x i32> %idx0, %t0v
  %idx1 = add <8 x i32> %tsv, <i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15>
  %vlo1 = icmp sge <8 x i32> %idx1, %t0v
  %pft = add i64 %ts, 16                    ; prefetch the next block's rows
  %pftc = icmp ult i64 %pft, %Tm1
  %pftl = select i1 %pftc, i64 %pft, i64 %Tm1     ; (the table holds no block past T - 1)
  %pfgi = udiv i64 %pftl, 32
  %pfgp = getelementptr i32, ptr %btrow, i64 %pfgi
  %pfg32 = load i32, ptr %pfgp, align 4
  %pfg = sext i32 %pfg32 to i64
  %pfr0 = mul i64 %pfg, 2
  %pfr1 = add i64 %pfr0, %hk
  %pfr2 = mul i64 %pfr1, 32
  %pfin = urem i64 %pftl, 32
  %pfrow = add i64 %pfr2, %pfin
  %pfko = mul i64 %pfrow, 64
  %pfkb = getelementptr i16, ptr %kc, i64 %pfko
  br label %pfk

pfk:
  %pfki = phi i64 [ 0, %body ], [ %pfkn, %pfk ]
  %pfka0 = add i64 %pfki, 0
  %pfkp0 = getelementptr i8, ptr %pfkb, i64 %pfka0
  call void @llvm.prefetch.p0(ptr %pfkp0, i32 0, i32 2, i32 1)
  %pfka1 = add i64 %pfki, 64
  %pfkp1 = getelementptr i8, ptr %pfkb, i64 %pfka1
  call void @llvm.prefetch.p0(ptr %pfkp1, i32 0, i32 2, i32 1)
  %pfka2 = add i64 %pfki, 128
  %pfkp2 = getelementptr i8, ptr %pfkb, i64 %pfka2
  call void @llvm.prefetch.p0(ptr %pfkp2, i32 0, i32 2, i32 1)
  %pfka3 = add i64 %pfki, 192
  %pfkp3 = getelementptr i8, ptr %pfkb, i64 %pfka3
  call void @llvm.prefetch.p0(ptr %pfkp3, i32 0, i32 2, i32 1)
  %pfkn = add i64 %pfki, 256
  %pfkm = icmp ult i64 %pfkn, 2048
  br i1 %pfkm, label %pfk, label %pfk.end

pfk.end:
  %pfvo = mul i64 %pfrow, 64
  %pfvb = getelementptr i16, ptr %vc, i64 %pfvo
  br label %pfv

pfv:
  %pfvi = phi i64 [ 0, %pfk.end ], [ %pfvn, %pfv ]
  %pfva0 = add i64 %pfvi, 0
  %pfvp0 = getelementptr i8, ptr %pfvb, i64 %pfva0
  call void @llvm.prefetch.p0(ptr %pfvp0, i32 0, i32 2, i32 1)
  %pfva1 = add i64 %pfvi, 64
  %pfvp1 = getelementptr i8, ptr %pfvb, i64 %pfva1
  call void @llvm.prefetch.p0(ptr %pfvp1, i32 0, i32 2, i32 1)
  %pfva2 = add i64 %pfvi, 128
  %pfvp2 = getelementptr i8, ptr %pfvb, i64 %pfva2
  call void @llvm.prefetch.p0(ptr %pfvp2, i32 0, i32 2, i32 1)
  %pfva3 = add i64 %pfvi, 192
  %pfvp3 = getelementptr i8, ptr %pfvb, i64 %pfva3
  call void @llvm.prefetch.p0(ptr %pfvp3, i32 0, i32 2, i32 1)
  %pfvn = add i64 %pfvi, 256
  %pfvm = icmp ult i64 %pfvn, 2048
  br i1 %pfvm, label %pfv, label %pfv.end

pfv.end:
  br label %row

row:                                              ; each row of the run whose keys reach block b
  %ri = phi i64 [ 0, %pfv.end ], [ %rin, %row.next ]
  %rtok = add i64 %i, %ri
  %rpp = getelementptr i32, ptr %pos, i64 %rtok
  %rp = load i32, ptr %rpp, align 4
  %rT32 = add i32 %rp, 1                          ; its keys 0..pos
  %rT = sext i32 %rT32 to i64
  %rlive = icmp ult i64 %t0, %rT                  ; (its own kernel's blocks: b < ceil(T / BK))
  br i1 %rlive, label %row.body, label %row.next

row.body:
  %rTv0 = insertelement <8 x i32> poison, i32 %rT32, i64 0
  %rTv = shufflevector <8 x i32> %rTv0, <8 x i32> poison, <8 x i32> zeroinitializer
  %vhi0 = icmp slt <8 x i32> %idx0, %rTv
  %valid0 = and <8 x i1> %vlo0, %vhi0
  %vhi1 = icmp slt <8 x i32> %idx1, %rTv
  %valid1 = and <8 x i1> %vlo1, %vhi1
  %rbase = mul i64 %ri, 7
  br label %head

head:                                             ; one query head: scores, softmax update, PV
  %g = phi i64 [ 0, %row.body ], [ %gn, %head ]
  %gst = add i64 %rbase, %g                       ; the row's head's state
  %gqo = mul i64 %gst, 64
  %gq = getelementptr float, ptr %qs, i64 %gqo
  %q0p = getelementptr float, ptr %gq, i64 0
  %q0 = load <8 x float>, ptr %q0p, align 4
  %q1p = getelementptr float, ptr %gq, i64 8
  %q1 = load <8 x float>, ptr %q1p, align 4
  %q2p = getelementptr float, ptr %gq, i64 16
  %q2 = load <8 x float>, ptr %q2p, align 4
  %q3p = getelementptr float, ptr %gq, i64 24
  %q3 = load <8 x float>, ptr %q3p, align 4
  %q4p = getelementptr float, ptr %gq, i64 32
  %q4 = load <8 x float>, ptr %q4p, align 4
  %q5p = getelementptr float, ptr %gq, i64 40
  %q5 = load <8 x float>, ptr %q5p, align 4
  %q6p = getelementptr float, ptr %gq, i64 48
  %q6 = load <8 x float>, ptr %q6p, align 4
  %q7p = getelementptr float, ptr %gq, i64 56
  %q7 = load <8 x float>, ptr %q7p, align 4
  %k0p0 = getelementptr float, ptr %kblk, i64 0
  %k0v0 = load <8 x float>, ptr %k0p0, align 4
  %k0p1 = getelementptr float, ptr %kblk, i64 8
  %k0v1 = load <8 x float>, ptr %k0p1, align 4
  %k0p2 = getelementptr float, ptr %kblk, i64 16
  %k0v2 = load <8 x float>, ptr %k0p2, align 4
  %k0p3 = getelementptr float, ptr %kblk, i64 24
  %k0v3 = load <8 x float>, ptr %k0p3, align 4
  %k0p4 = getelementptr float, ptr %kblk, i64 32
  %k0v4 = load <8 x float>, ptr %k0p4, align 4
  %k0p5 = getelementptr float, ptr %kblk, i64 40
  %k0v5 = load <8 x float>, ptr %k0p5, align 4
  %k0p6 = getelementptr float, ptr %kblk, i64 48
  %k0v6 = load <8 x float>, ptr %k0p6, align 4
  %k0p7 = getelementptr float, ptr %kblk, i64 56
  %k0v7 = load <8 x float>, ptr %k0p7, align 4
  %k0a0 = fmul <8 x float> %q0, %k0v0
  %k0a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k0v1, <8 x float> %k0a0)
  %k0a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k0v2, <8 x float> %k0a1)
  %k0a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k0v3, <8 x float> %k0a2)
  %k0a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k0v4, <8 x float> %k0a3)
  %k0a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k0v5, <8 x float> %k0a4)
  %k0a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k0v6, <8 x float> %k0a5)
  %k0a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k0v7, <8 x float> %k0a6)

  %k1p0 = getelementptr float, ptr %kblk, i64 64
  %k1v0 = load <8 x float>, ptr %k1p0, align 4
  %k1p1 = getelementptr float, ptr %kblk, i64 72
  %k1v1 = load <8 x float>, ptr %k1p1, align 4
  %k1p2 = getelementptr float, ptr %kblk, i64 80
  %k1v2 = load <8 x float>, ptr %k1p2, align 4
  %k1p3 = getelementptr float, ptr %kblk, i64 88
  %k1v3 = load <8 x float>, ptr %k1p3, align 4
  %k1p4 = getelementptr float, ptr %kblk, i64 96
  %k1v4 = load <8 x float>, ptr %k1p4, align 4
  %k1p5 = getelementptr float, ptr %kblk, i64 104
  %k1v5 = load <8 x float>, ptr %k1p5, align 4
  %k1p6 = getelementptr float, ptr %kblk, i64 112
  %k1v6 = load <8 x float>, ptr %k1p6, align 4
  %k1p7 = getelementptr float, ptr %kblk, i64 120
  %k1v7 = load <8 x float>, ptr %k1p7, align 4
  %k1a0 = fmul <8 x float> %q0, %k1v0
  %k1a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k1v1, <8 x float> %k1a0)
  %k1a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k1v2, <8 x float> %k1a1)
  %k1a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k1v3, <8 x float> %k1a2)
  %k1a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k1v4, <8 x float> %k1a3)
  %k1a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k1v5, <8 x float> %k1a4)
  %k1a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k1v6, <8 x float> %k1a5)
  %k1a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k1v7, <8 x float> %k1a6)

  %k2p0 = getelementptr float, ptr %kblk, i64 128
  %k2v0 = load <8 x float>, ptr %k2p0, align 4
  %k2p1 = getelementptr float, ptr %kblk, i64 136
  %k2v1 = load <8 x float>, ptr %k2p1, align 4
  %k2p2 = getelementptr float, ptr %kblk, i64 144
  %k2v2 = load <8 x float>, ptr %k2p2, align 4
  %k2p3 = getelementptr float, ptr %kblk, i64 152
  %k2v3 = load <8 x float>, ptr %k2p3, align 4
  %k2p4 = getelementptr float, ptr %kblk, i64 160
  %k2v4 = load <8 x float>, ptr %k2p4, align 4
  %k2p5 = getelementptr float, ptr %kblk, i64 168
  %k2v5 = load <8 x float>, ptr %k2p5, align 4
  %k2p6 = getelementptr float, ptr %kblk, i64 176
  %k2v6 = load <8 x float>, ptr %k2p6, align 4
  %k2p7 = getelementptr float, ptr %kblk, i64 184
  %k2v7 = load <8 x float>, ptr %k2p7, align 4
  %k2a0 = fmul <8 x float> %q0, %k2v0
  %k2a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k2v1, <8 x float> %k2a0)
  %k2a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k2v2, <8 x float> %k2a1)
  %k2a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k2v3, <8 x float> %k2a2)
  %k2a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k2v4, <8 x float> %k2a3)
  %k2a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k2v5, <8 x float> %k2a4)
  %k2a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k2v6, <8 x float> %k2a5)
  %k2a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k2v7, <8 x float> %k2a6)

  %k3p0 = getelementptr float, ptr %kblk, i64 192
  %k3v0 = load <8 x float>, ptr %k3p0, align 4
  %k3p1 = getelementptr float, ptr %kblk, i64 200
  %k3v1 = load <8 x float>, ptr %k3p1, align 4
  %k3p2 = getelementptr float, ptr %kblk, i64 208
  %k3v2 = load <8 x float>, ptr %k3p2, align 4
  %k3p3 = getelementptr float, ptr %kblk, i64 216
  %k3v3 = load <8 x float>, ptr %k3p3, align 4
  %k3p4 = getelementptr float, ptr %kblk, i64 224
  %k3v4 = load <8 x float>, ptr %k3p4, align 4
  %k3p5 = getelementptr float, ptr %kblk, i64 232
  %k3v5 = load <8 x float>, ptr %k3p5, align 4
  %k3p6 = getelementptr float, ptr %kblk, i64 240
  %k3v6 = load <8 x float>, ptr %k3p6, align 4
  %k3p7 = getelementptr float, ptr %kblk, i64 248
  %k3v7 = load <8 x float>, ptr %k3p7, align 4
  %k3a0 = fmul <8 x float> %q0, %k3v0
  %k3a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k3v1, <8 x float> %k3a0)
  %k3a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k3v2, <8 x float> %k3a1)
  %k3a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k3v3, <8 x float> %k3a2)
  %k3a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k3v4, <8 x float> %k3a3)
  %k3a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k3v5, <8 x float> %k3a4)
  %k3a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k3v6, <8 x float> %k3a5)
  %k3a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k3v7, <8 x float> %k3a6)

  %k4p0 = getelementptr float, ptr %kblk, i64 256
  %k4v0 = load <8 x float>, ptr %k4p0, align 4
  %k4p1 = getelementptr float, ptr %kblk, i64 264
  %k4v1 = load <8 x float>, ptr %k4p1, align 4
  %k4p2 = getelementptr float, ptr %kblk, i64 272
  %k4v2 = load <8 x float>, ptr %k4p2, align 4
  %k4p3 = getelementptr float, ptr %kblk, i64 280
  %k4v3 = load <8 x float>, ptr %k4p3, align 4
  %k4p4 = getelementptr float, ptr %kblk, i64 288
  %k4v4 = load <8 x float>, ptr %k4p4, align 4
  %k4p5 = getelementptr float, ptr %kblk, i64 296
  %k4v5 = load <8 x float>, ptr %k4p5, align 4
  %k4p6 = getelementptr float, ptr %kblk, i64 304
  %k4v6 = load <8 x float>, ptr %k4p6, align 4
  %k4p7 = getelementptr float, ptr %kblk, i64 312
  %k4v7 = load <8 x float>, ptr %k4p7, align 4
  %k4a0 = fmul <8 x float> %q0, %k4v0
  %k4a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k4v1, <8 x float> %k4a0)
  %k4a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k4v2, <8 x float> %k4a1)
  %k4a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k4v3, <8 x float> %k4a2)
  %k4a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k4v4, <8 x float> %k4a3)
  %k4a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k4v5, <8 x float> %k4a4)
  %k4a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k4v6, <8 x float> %k4a5)
  %k4a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k4v7, <8 x float> %k4a6)

  %k5p0 = getelementptr float, ptr %kblk, i64 320
  %k5v0 = load <8 x float>, ptr %k5p0, align 4
  %k5p1 = getelementptr float, ptr %kblk, i64 328
  %k5v1 = load <8 x float>, ptr %k5p1, align 4
  %k5p2 = getelementptr float, ptr %kblk, i64 336
  %k5v2 = load <8 x float>, ptr %k5p2, align 4
  %k5p3 = getelementptr float, ptr %kblk, i64 344
  %k5v3 = load <8 x float>, ptr %k5p3, align 4
  %k5p4 = getelementptr float, ptr %kblk, i64 352
  %k5v4 = load <8 x float>, ptr %k5p4, align 4
  %k5p5 = getelementptr float, ptr %kblk, i64 360
  %k5v5 = load <8 x float>, ptr %k5p5, align 4
  %k5p6 = getelementptr float, ptr %kblk, i64 368
  %k5v6 = load <8 x float>, ptr %k5p6, align 4
  %k5p7 = getelementptr float, ptr %kblk, i64 376
  %k5v7 = load <8 x float>, ptr %k5p7, align 4
  %k5a0 = fmul <8 x float> %q0, %k5v0
  %k5a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k5v1, <8 x float> %k5a0)
  %k5a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k5v2, <8 x float> %k5a1)
  %k5a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k5v3, <8 x float> %k5a2)
  %k5a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k5v4, <8 x float> %k5a3)
  %k5a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k5v5, <8 x float> %k5a4)
  %k5a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k5v6, <8 x float> %k5a5)
  %k5a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k5v7, <8 x float> %k5a6)

  %k6p0 = getelementptr float, ptr %kblk, i64 384
  %k6v0 = load <8 x float>, ptr %k6p0, align 4
  %k6p1 = getelementptr float, ptr %kblk, i64 392
  %k6v1 = load <8 x float>, ptr %k6p1, align 4
  %k6p2 = getelementptr float, ptr %kblk, i64 400
  %k6v2 = load <8 x float>, ptr %k6p2, align 4
  %k6p3 = getelementptr float, ptr %kblk, i64 408
  %k6v3 = load <8 x float>, ptr %k6p3, align 4
  %k6p4 = getelementptr float, ptr %kblk, i64 416
  %k6v4 = load <8 x float>, ptr %k6p4, align 4
  %k6p5 = getelementptr float, ptr %kblk, i64 424
  %k6v5 = load <8 x float>, ptr %k6p5, align 4
  %k6p6 = getelementptr float, ptr %kblk, i64 432
  %k6v6 = load <8 x float>, ptr %k6p6, align 4
  %k6p7 = getelementptr float, ptr %kblk, i64 440
  %k6v7 = load <8 x float>, ptr %k6p7, align 4
  %k6a0 = fmul <8 x float> %q0, %k6v0
  %k6a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k6v1, <8 x float> %k6a0)
  %k6a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k6v2, <8 x float> %k6a1)
  %k6a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k6v3, <8 x float> %k6a2)
  %k6a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k6v4, <8 x float> %k6a3)
  %k6a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k6v5, <8 x float> %k6a4)
  %k6a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k6v6, <8 x float> %k6a5)
  %k6a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k6v7, <8 x float> %k6a6)

  %k7p0 = getelementptr float, ptr %kblk, i64 448
  %k7v0 = load <8 x float>, ptr %k7p0, align 4
  %k7p1 = getelementptr float, ptr %kblk, i64 456
  %k7v1 = load <8 x float>, ptr %k7p1, align 4
  %k7p2 = getelementptr float, ptr %kblk, i64 464
  %k7v2 = load <8 x float>, ptr %k7p2, align 4
  %k7p3 = getelementptr float, ptr %kblk, i64 472
  %k7v3 = load <8 x float>, ptr %k7p3, align 4
  %k7p4 = getelementptr float, ptr %kblk, i64 480
  %k7v4 = load <8 x float>, ptr %k7p4, align 4
  %k7p5 = getelementptr float, ptr %kblk, i64 488
  %k7v5 = load <8 x float>, ptr %k7p5, align 4
  %k7p6 = getelementptr float, ptr %kblk, i64 496
  %k7v6 = load <8 x float>, ptr %k7p6, align 4
  %k7p7 = getelementptr float, ptr %kblk, i64 504
  %k7v7 = load <8 x float>, ptr %k7p7, align 4
  %k7a0 = fmul <8 x float> %q0, %k7v0
  %k7a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k7v1, <8 x float> %k7a0)
  %k7a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k7v2, <8 x float> %k7a1)
  %k7a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k7v3, <8 x float> %k7a2)
  %k7a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k7v4, <8 x float> %k7a3)
  %k7a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k7v5, <8 x float> %k7a4)
  %k7a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k7v6, <8 x float> %k7a5)
  %k7a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k7v7, <8 x float> %k7a6)

  %sr0.s0_0.a = shufflevector <8 x float> %k0a7, <8 x float> %k1a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr0.s0_0.b = shufflevector <8 x float> %k0a7, <8 x float> %k1a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr0.s0_0 = fadd <8 x float> %sr0.s0_0.a, %sr0.s0_0.b

  %sr0.s0_1.a = shufflevector <8 x float> %k2a7, <8 x float> %k3a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr0.s0_1.b = shufflevector <8 x float> %k2a7, <8 x float> %k3a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr0.s0_1 = fadd <8 x float> %sr0.s0_1.a, %sr0.s0_1.b

  %sr0.s0_2.a = shufflevector <8 x float> %k4a7, <8 x float> %k5a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr0.s0_2.b = shufflevector <8 x float> %k4a7, <8 x float> %k5a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr0.s0_2 = fadd <8 x float> %sr0.s0_2.a, %sr0.s0_2.b

  %sr0.s0_3.a = shufflevector <8 x float> %k6a7, <8 x float> %k7a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr0.s0_3.b = shufflevector <8 x float> %k6a7, <8 x float> %k7a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr0.s0_3 = fadd <8 x float> %sr0.s0_3.a, %sr0.s0_3.b

  %sr0.s1_0.a = shufflevector <8 x float> %sr0.s0_0, <8 x float> %sr0.s0_1, <8 x i32> <i32 0, i32 1, i32 4, i32 5, i32 8, i32 9, i32 12, i32 13>
  %sr0.s1_0.b = shufflevector <8 x float> %sr0.s0_0, <8 x float> %sr0.s0_1, <8 x i32> <i32 2, i32 3, i32 6, i32 7, i32 10, i32 11, i32 14, i32 15>
  %sr0.s1_0 = fadd <8 x float> %sr0.s1_0.a, %sr0.s1_0.b

  %sr0.s1_1.a = shufflevector <8 x float> %sr0.s0_2, <8 x float> %sr0.s0_3, <8 x i32> <i32 0, i32 1, i32 4, i32 5, i32 8, i32 9, i32 12, i32 13>
  %sr0.s1_1.b = shufflevector <8 x float> %sr0.s0_2, <8 x float> %sr0.s0_3, <8 x i32> <i32 2, i32 3, i32 6, i32 7, i32 10, i32 11, i32 14, i32 15>
  %sr0.s1_1 = fadd <8 x float> %sr0.s1_1.a, %sr0.s1_1.b

  %sr0.s2_0.a = shufflevector <8 x float> %sr0.s1_0, <8 x float> %sr0.s1_1, <8 x i32> <i32 0, i32 2, i32 4, i32 6, i32 8, i32 10, i32 12, i32 14>
  %sr0.s2_0.b = shufflevector <8 x float> %sr0.s1_0, <8 x float> %sr0.s1_1, <8 x i32> <i32 1, i32 3, i32 5, i32 7, i32 9, i32 11, i32 13, i32 15>
  %sr0.s2_0 = fadd <8 x float> %sr0.s2_0.a, %sr0.s2_0.b

  %sr0 = fadd <8 x float> %sr0.s2_0, zeroinitializer

  %s0 = select <8 x i1> %valid0, <8 x float> %sr0, <8 x float> splat (float 0xFFF0000000000000)
  %k8p0 = getelementptr float, ptr %kblk, i64 512
  %k8v0 = load <8 x float>, ptr %k8p0, align 4
  %k8p1 = getelementptr float, ptr %kblk, i64 520
  %k8v1 = load <8 x float>, ptr %k8p1, align 4
  %k8p2 = getelementptr float, ptr %kblk, i64 528
  %k8v2 = load <8 x float>, ptr %k8p2, align 4
  %k8p3 = getelementptr float, ptr %kblk, i64 536
  %k8v3 = load <8 x float>, ptr %k8p3, align 4
  %k8p4 = getelementptr float, ptr %kblk, i64 544
  %k8v4 = load <8 x float>, ptr %k8p4, align 4
  %k8p5 = getelementptr float, ptr %kblk, i64 552
  %k8v5 = load <8 x float>, ptr %k8p5, align 4
  %k8p6 = getelementptr float, ptr %kblk, i64 560
  %k8v6 = load <8 x float>, ptr %k8p6, align 4
  %k8p7 = getelementptr float, ptr %kblk, i64 568
  %k8v7 = load <8 x float>, ptr %k8p7, align 4
  %k8a0 = fmul <8 x float> %q0, %k8v0
  %k8a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k8v1, <8 x float> %k8a0)
  %k8a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k8v2, <8 x float> %k8a1)
  %k8a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k8v3, <8 x float> %k8a2)
  %k8a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k8v4, <8 x float> %k8a3)
  %k8a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k8v5, <8 x float> %k8a4)
  %k8a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k8v6, <8 x float> %k8a5)
  %k8a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k8v7, <8 x float> %k8a6)

  %k9p0 = getelementptr float, ptr %kblk, i64 576
  %k9v0 = load <8 x float>, ptr %k9p0, align 4
  %k9p1 = getelementptr float, ptr %kblk, i64 584
  %k9v1 = load <8 x float>, ptr %k9p1, align 4
  %k9p2 = getelementptr float, ptr %kblk, i64 592
  %k9v2 = load <8 x float>, ptr %k9p2, align 4
  %k9p3 = getelementptr float, ptr %kblk, i64 600
  %k9v3 = load <8 x float>, ptr %k9p3, align 4
  %k9p4 = getelementptr float, ptr %kblk, i64 608
  %k9v4 = load <8 x float>, ptr %k9p4, align 4
  %k9p5 = getelementptr float, ptr %kblk, i64 616
  %k9v5 = load <8 x float>, ptr %k9p5, align 4
  %k9p6 = getelementptr float, ptr %kblk, i64 624
  %k9v6 = load <8 x float>, ptr %k9p6, align 4
  %k9p7 = getelementptr float, ptr %kblk, i64 632
  %k9v7 = load <8 x float>, ptr %k9p7, align 4
  %k9a0 = fmul <8 x float> %q0, %k9v0
  %k9a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k9v1, <8 x float> %k9a0)
  %k9a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k9v2, <8 x float> %k9a1)
  %k9a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k9v3, <8 x float> %k9a2)
  %k9a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k9v4, <8 x float> %k9a3)
  %k9a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k9v5, <8 x float> %k9a4)
  %k9a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k9v6, <8 x float> %k9a5)
  %k9a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k9v7, <8 x float> %k9a6)

  %k10p0 = getelementptr float, ptr %kblk, i64 640
  %k10v0 = load <8 x float>, ptr %k10p0, align 4
  %k10p1 = getelementptr float, ptr %kblk, i64 648
  %k10v1 = load <8 x float>, ptr %k10p1, align 4
  %k10p2 = getelementptr float, ptr %kblk, i64 656
  %k10v2 = load <8 x float>, ptr %k10p2, align 4
  %k10p3 = getelementptr float, ptr %kblk, i64 664
  %k10v3 = load <8 x float>, ptr %k10p3, align 4
  %k10p4 = getelementptr float, ptr %kblk, i64 672
  %k10v4 = load <8 x float>, ptr %k10p4, align 4
  %k10p5 = getelementptr float, ptr %kblk, i64 680
  %k10v5 = load <8 x float>, ptr %k10p5, align 4
  %k10p6 = getelementptr float, ptr %kblk, i64 688
  %k10v6 = load <8 x float>, ptr %k10p6, align 4
  %k10p7 = getelementptr float, ptr %kblk, i64 696
  %k10v7 = load <8 x float>, ptr %k10p7, align 4
  %k10a0 = fmul <8 x float> %q0, %k10v0
  %k10a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k10v1, <8 x float> %k10a0)
  %k10a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k10v2, <8 x float> %k10a1)
  %k10a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k10v3, <8 x float> %k10a2)
  %k10a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k10v4, <8 x float> %k10a3)
  %k10a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k10v5, <8 x float> %k10a4)
  %k10a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k10v6, <8 x float> %k10a5)
  %k10a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k10v7, <8 x float> %k10a6)

  %k11p0 = getelementptr float, ptr %kblk, i64 704
  %k11v0 = load <8 x float>, ptr %k11p0, align 4
  %k11p1 = getelementptr float, ptr %kblk, i64 712
  %k11v1 = load <8 x float>, ptr %k11p1, align 4
  %k11p2 = getelementptr float, ptr %kblk, i64 720
  %k11v2 = load <8 x float>, ptr %k11p2, align 4
  %k11p3 = getelementptr float, ptr %kblk, i64 728
  %k11v3 = load <8 x float>, ptr %k11p3, align 4
  %k11p4 = getelementptr float, ptr %kblk, i64 736
  %k11v4 = load <8 x float>, ptr %k11p4, align 4
  %k11p5 = getelementptr float, ptr %kblk, i64 744
  %k11v5 = load <8 x float>, ptr %k11p5, align 4
  %k11p6 = getelementptr float, ptr %kblk, i64 752
  %k11v6 = load <8 x float>, ptr %k11p6, align 4
  %k11p7 = getelementptr float, ptr %kblk, i64 760
  %k11v7 = load <8 x float>, ptr %k11p7, align 4
  %k11a0 = fmul <8 x float> %q0, %k11v0
  %k11a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k11v1, <8 x float> %k11a0)
  %k11a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k11v2, <8 x float> %k11a1)
  %k11a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k11v3, <8 x float> %k11a2)
  %k11a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k11v4, <8 x float> %k11a3)
  %k11a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k11v5, <8 x float> %k11a4)
  %k11a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k11v6, <8 x float> %k11a5)
  %k11a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k11v7, <8 x float> %k11a6)

  %k12p0 = getelementptr float, ptr %kblk, i64 768
  %k12v0 = load <8 x float>, ptr %k12p0, align 4
  %k12p1 = getelementptr float, ptr %kblk, i64 776
  %k12v1 = load <8 x float>, ptr %k12p1, align 4
  %k12p2 = getelementptr float, ptr %kblk, i64 784
  %k12v2 = load <8 x float>, ptr %k12p2, align 4
  %k12p3 = getelementptr float, ptr %kblk, i64 792
  %k12v3 = load <8 x float>, ptr %k12p3, align 4
  %k12p4 = getelementptr float, ptr %kblk, i64 800
  %k12v4 = load <8 x float>, ptr %k12p4, align 4
  %k12p5 = getelementptr float, ptr %kblk, i64 808
  %k12v5 = load <8 x float>, ptr %k12p5, align 4
  %k12p6 = getelementptr float, ptr %kblk, i64 816
  %k12v6 = load <8 x float>, ptr %k12p6, align 4
  %k12p7 = getelementptr float, ptr %kblk, i64 824
  %k12v7 = load <8 x float>, ptr %k12p7, align 4
  %k12a0 = fmul <8 x float> %q0, %k12v0
  %k12a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k12v1, <8 x float> %k12a0)
  %k12a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k12v2, <8 x float> %k12a1)
  %k12a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k12v3, <8 x float> %k12a2)
  %k12a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k12v4, <8 x float> %k12a3)
  %k12a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k12v5, <8 x float> %k12a4)
  %k12a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k12v6, <8 x float> %k12a5)
  %k12a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k12v7, <8 x float> %k12a6)

  %k13p0 = getelementptr float, ptr %kblk, i64 832
  %k13v0 = load <8 x float>, ptr %k13p0, align 4
  %k13p1 = getelementptr float, ptr %kblk, i64 840
  %k13v1 = load <8 x float>, ptr %k13p1, align 4
  %k13p2 = getelementptr float, ptr %kblk, i64 848
  %k13v2 = load <8 x float>, ptr %k13p2, align 4
  %k13p3 = getelementptr float, ptr %kblk, i64 856
  %k13v3 = load <8 x float>, ptr %k13p3, align 4
  %k13p4 = getelementptr float, ptr %kblk, i64 864
  %k13v4 = load <8 x float>, ptr %k13p4, align 4
  %k13p5 = getelementptr float, ptr %kblk, i64 872
  %k13v5 = load <8 x float>, ptr %k13p5, align 4
  %k13p6 = getelementptr float, ptr %kblk, i64 880
  %k13v6 = load <8 x float>, ptr %k13p6, align 4
  %k13p7 = getelementptr float, ptr %kblk, i64 888
  %k13v7 = load <8 x float>, ptr %k13p7, align 4
  %k13a0 = fmul <8 x float> %q0, %k13v0
  %k13a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k13v1, <8 x float> %k13a0)
  %k13a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k13v2, <8 x float> %k13a1)
  %k13a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k13v3, <8 x float> %k13a2)
  %k13a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k13v4, <8 x float> %k13a3)
  %k13a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k13v5, <8 x float> %k13a4)
  %k13a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k13v6, <8 x float> %k13a5)
  %k13a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k13v7, <8 x float> %k13a6)

  %k14p0 = getelementptr float, ptr %kblk, i64 896
  %k14v0 = load <8 x float>, ptr %k14p0, align 4
  %k14p1 = getelementptr float, ptr %kblk, i64 904
  %k14v1 = load <8 x float>, ptr %k14p1, align 4
  %k14p2 = getelementptr float, ptr %kblk, i64 912
  %k14v2 = load <8 x float>, ptr %k14p2, align 4
  %k14p3 = getelementptr float, ptr %kblk, i64 920
  %k14v3 = load <8 x float>, ptr %k14p3, align 4
  %k14p4 = getelementptr float, ptr %kblk, i64 928
  %k14v4 = load <8 x float>, ptr %k14p4, align 4
  %k14p5 = getelementptr float, ptr %kblk, i64 936
  %k14v5 = load <8 x float>, ptr %k14p5, align 4
  %k14p6 = getelementptr float, ptr %kblk, i64 944
  %k14v6 = load <8 x float>, ptr %k14p6, align 4
  %k14p7 = getelementptr float, ptr %kblk, i64 952
  %k14v7 = load <8 x float>, ptr %k14p7, align 4
  %k14a0 = fmul <8 x float> %q0, %k14v0
  %k14a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k14v1, <8 x float> %k14a0)
  %k14a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k14v2, <8 x float> %k14a1)
  %k14a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k14v3, <8 x float> %k14a2)
  %k14a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k14v4, <8 x float> %k14a3)
  %k14a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k14v5, <8 x float> %k14a4)
  %k14a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k14v6, <8 x float> %k14a5)
  %k14a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k14v7, <8 x float> %k14a6)

  %k15p0 = getelementptr float, ptr %kblk, i64 960
  %k15v0 = load <8 x float>, ptr %k15p0, align 4
  %k15p1 = getelementptr float, ptr %kblk, i64 968
  %k15v1 = load <8 x float>, ptr %k15p1, align 4
  %k15p2 = getelementptr float, ptr %kblk, i64 976
  %k15v2 = load <8 x float>, ptr %k15p2, align 4
  %k15p3 = getelementptr float, ptr %kblk, i64 984
  %k15v3 = load <8 x float>, ptr %k15p3, align 4
  %k15p4 = getelementptr float, ptr %kblk, i64 992
  %k15v4 = load <8 x float>, ptr %k15p4, align 4
  %k15p5 = getelementptr float, ptr %kblk, i64 1000
  %k15v5 = load <8 x float>, ptr %k15p5, align 4
  %k15p6 = getelementptr float, ptr %kblk, i64 1008
  %k15v6 = load <8 x float>, ptr %k15p6, align 4
  %k15p7 = getelementptr float, ptr %kblk, i64 1016
  %k15v7 = load <8 x float>, ptr %k15p7, align 4
  %k15a0 = fmul <8 x float> %q0, %k15v0
  %k15a1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q1, <8 x float> %k15v1, <8 x float> %k15a0)
  %k15a2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q2, <8 x float> %k15v2, <8 x float> %k15a1)
  %k15a3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q3, <8 x float> %k15v3, <8 x float> %k15a2)
  %k15a4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q4, <8 x float> %k15v4, <8 x float> %k15a3)
  %k15a5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q5, <8 x float> %k15v5, <8 x float> %k15a4)
  %k15a6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q6, <8 x float> %k15v6, <8 x float> %k15a5)
  %k15a7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %q7, <8 x float> %k15v7, <8 x float> %k15a6)

  %sr1.s0_0.a = shufflevector <8 x float> %k8a7, <8 x float> %k9a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr1.s0_0.b = shufflevector <8 x float> %k8a7, <8 x float> %k9a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr1.s0_0 = fadd <8 x float> %sr1.s0_0.a, %sr1.s0_0.b

  %sr1.s0_1.a = shufflevector <8 x float> %k10a7, <8 x float> %k11a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr1.s0_1.b = shufflevector <8 x float> %k10a7, <8 x float> %k11a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr1.s0_1 = fadd <8 x float> %sr1.s0_1.a, %sr1.s0_1.b

  %sr1.s0_2.a = shufflevector <8 x float> %k12a7, <8 x float> %k13a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr1.s0_2.b = shufflevector <8 x float> %k12a7, <8 x float> %k13a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr1.s0_2 = fadd <8 x float> %sr1.s0_2.a, %sr1.s0_2.b

  %sr1.s0_3.a = shufflevector <8 x float> %k14a7, <8 x float> %k15a7, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 8, i32 9, i32 10, i32 11>
  %sr1.s0_3.b = shufflevector <8 x float> %k14a7, <8 x float> %k15a7, <8 x i32> <i32 4, i32 5, i32 6, i32 7, i32 12, i32 13, i32 14, i32 15>
  %sr1.s0_3 = fadd <8 x float> %sr1.s0_3.a, %sr1.s0_3.b

  %sr1.s1_0.a = shufflevector <8 x float> %sr1.s0_0, <8 x float> %sr1.s0_1, <8 x i32> <i32 0, i32 1, i32 4, i32 5, i32 8, i32 9, i32 12, i32 13>
  %sr1.s1_0.b = shufflevector <8 x float> %sr1.s0_0, <8 x float> %sr1.s0_1, <8 x i32> <i32 2, i32 3, i32 6, i32 7, i32 10, i32 11, i32 14, i32 15>
  %sr1.s1_0 = fadd <8 x float> %sr1.s1_0.a, %sr1.s1_0.b

  %sr1.s1_1.a = shufflevector <8 x float> %sr1.s0_2, <8 x float> %sr1.s0_3, <8 x i32> <i32 0, i32 1, i32 4, i32 5, i32 8, i32 9, i32 12, i32 13>
  %sr1.s1_1.b = shufflevector <8 x float> %sr1.s0_2, <8 x float> %sr1.s0_3, <8 x i32> <i32 2, i32 3, i32 6, i32 7, i32 10, i32 11, i32 14, i32 15>
  %sr1.s1_1 = fadd <8 x float> %sr1.s1_1.a, %sr1.s1_1.b

  %sr1.s2_0.a = shufflevector <8 x float> %sr1.s1_0, <8 x float> %sr1.s1_1, <8 x i32> <i32 0, i32 2, i32 4, i32 6, i32 8, i32 10, i32 12, i32 14>
  %sr1.s2_0.b = shufflevector <8 x float> %sr1.s1_0, <8 x float> %sr1.s1_1, <8 x i32> <i32 1, i32 3, i32 5, i32 7, i32 9, i32 11, i32 13, i32 15>
  %sr1.s2_0 = fadd <8 x float> %sr1.s2_0.a, %sr1.s2_0.b

  %sr1 = fadd <8 x float> %sr1.s2_0, zeroinitializer

  %s1 = select <8 x i1> %valid1, <8 x float> %sr1, <8 x float> splat (float 0xFFF0000000000000)
  %smc1 = fcmp ogt <8 x float> %s1, %s0
  %smx1 = select <8 x i1> %smc1, <8 x float> %s1, <8 x float> %s0
  %bmax.l0 = shufflevector <8 x float> %smx1, <8 x float> poison, <4 x i32> <i32 0, i32 1, i32 2, i32 3>
  %bmax.h0 = shufflevector <8 x float> %smx1, <8 x float> poison, <4 x i32> <i32 4, i32 5, i32 6, i32 7>
  %bmax.g0 = fcmp ogt <4 x float> %bmax.l0, %bmax.h0
  %bmax.s0 = select <4 x i1> %bmax.g0, <4 x float> %bmax.l0, <4 x float> %bmax.h0
  %bmax.l1 = shufflevector <4 x float> %bmax.s0, <4 x float> poison, <2 x i32> <i32 0, i32 1>
  %bmax.h1 = shufflevector <4 x float> %bmax.s0, <4 x float> poison, <2 x i32> <i32 2, i32 3>
  %bmax.g1 = fcmp ogt <2 x float> %bmax.l1, %bmax.h1
  %bmax.s1 = select <2 x i1> %bmax.g1, <2 x float> %bmax.l1, <2 x float> %bmax.h1
  %bmax.l2 = shufflevector <2 x float> %bmax.s1, <2 x float> poison, <1 x i32> <i32 0>
  %bmax.h2 = shufflevector <2 x float> %bmax.s1, <2 x float> poison, <1 x i32> <i32 1>
  %bmax.g2 = fcmp ogt <1 x float> %bmax.l2, %bmax.h2
  %bmax.s2 = select <1 x i1> %bmax.g2, <1 x float> %bmax.l2, <1 x float> %bmax.h2
  %bmax = extractelement <1 x float> %bmax.s2, i64 0

  %gmp = getelementptr float, ptr %ms, i64 %gst
  %mo = load float, ptr %gmp, align 4
  %mgt = fcmp ogt float %bmax, %mo
  %mn = select i1 %mgt, float %bmax, float %mo
  store float %mn, ptr %gmp, align 4
  %dm = fsub float %mo, %mn
  %dmv = insertelement <1 x float> poison, float %dm, i64 0
  %corrv.lo = fcmp olt <1 x float> %dmv, splat (float 0xC055D58A00000000)
  %corrv.hi = fcmp ogt <1 x float> %dmv, splat (float 0x40562E4300000000)
  %corrv.c0 = select <1 x i1> %corrv.lo, <1 x float> splat (float 0xC055D58A00000000), <1 x float> %dmv
  %corrv.hi1 = fcmp ogt <1 x float> %corrv.c0, splat (float 0x40561814A0000000)
  %corrv.c = select <1 x i1> %corrv.hi1, <1 x float> splat (float 0x40561814A0000000), <1 x float> %corrv.c0
  %corrv.t = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.c, <1 x float> splat (float 0x3FF7154760000000), <1 x float> splat (float 0x4168000000000000))
  %corrv.k = fsub <1 x float> %corrv.t, splat (float 0x4168000000000000)
  %corrv.r0 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.k, <1 x float> splat (float 0xBFE6300000000000), <1 x float> %corrv.c)
  %corrv.r = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.k, <1 x float> splat (float 0x3F2BD01060000000), <1 x float> %corrv.r0)
  %corrv.p1 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> splat (float 0x3F2A0D2CE0000000), <1 x float> %corrv.r, <1 x float> splat (float 0x3F56E879C0000000))
  %corrv.p2 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.p1, <1 x float> %corrv.r, <1 x float> splat (float 0x3F81112100000000))
  %corrv.p3 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.p2, <1 x float> %corrv.r, <1 x float> splat (float 0x3FA5553820000000))
  %corrv.p4 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.p3, <1 x float> %corrv.r, <1 x float> splat (float 0x3FC5555540000000))
  %corrv.p5 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.p4, <1 x float> %corrv.r, <1 x float> splat (float 0x3FE0000000000000))
  %corrv.r2 = fmul <1 x float> %corrv.r, %corrv.r
  %corrv.y0 = call <1 x float> @llvm.fmuladd.v1f32(<1 x float> %corrv.p5, <1 x float> %corrv.r2, <1 x float> %corrv.r)
  %corrv.y = fadd <1 x float> %corrv.y0, splat (float 0x3FF0000000000000)
  %corrv.tb = bitcast <1 x float> %corrv.t to <1 x i32>
  %corrv.e0 = add <1 x i32> %corrv.tb, splat (i32 127)
  %corrv.e = shl <1 x i32> %corrv.e0, splat (i32 23)
  %corrv.pw = bitcast <1 x i32> %corrv.e to <1 x float>
  %corrv.m = fmul <1 x float> %corrv.y, %corrv.pw
  %corrv.z = select <1 x i1> %corrv.lo, <1 x float> zeroinitializer, <1 x float> %corrv.m
  %corrv = select <1 x i1> %corrv.hi, <1 x float> splat (float 0x7FF0000000000000), <1 x float> %corrv.z

  %corr = extractelement <1 x float> %corrv, i64 0
  %mnv0 = insertelement <8 x float> poison, float %mn, i64 0
  %mnv = shufflevector <8 x float> %mnv0, <8 x float> poison, <8 x i32> zeroinitializer
  %sd0 = fsub <8 x float> %s0, %mnv
  %pe0.lo = fcmp olt <8 x float> %sd0, splat (float 0xC055D58A00000000)
  %pe0.hi = fcmp ogt <8 x float> %sd0, splat (float 0x40562E4300000000)
  %pe0.c0 = select <8 x i1> %pe0.lo, <8 x float> splat (float 0xC055D58A00000000), <8 x float> %sd0
  %pe0.hi1 = fcmp ogt <8 x float> %pe0.c0, splat (float 0x40561814A0000000)
  %pe0.c = select <8 x i1> %pe0.hi1, <8 x float> splat (float 0x40561814A0000000), <8 x float> %pe0.c0
  %pe0.t = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.c, <8 x float> splat (float 0x3FF7154760000000), <8 x float> splat (float 0x4168000000000000))
  %pe0.k = fsub <8 x float> %pe0.t, splat (float 0x4168000000000000)
  %pe0.r0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.k, <8 x float> splat (float 0xBFE6300000000000), <8 x float> %pe0.c)
  %pe0.r = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.k, <8 x float> splat (float 0x3F2BD01060000000), <8 x float> %pe0.r0)
  %pe0.p1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> splat (float 0x3F2A0D2CE0000000), <8 x float> %pe0.r, <8 x float> splat (float 0x3F56E879C0000000))
  %pe0.p2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.p1, <8 x float> %pe0.r, <8 x float> splat (float 0x3F81112100000000))
  %pe0.p3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.p2, <8 x float> %pe0.r, <8 x float> splat (float 0x3FA5553820000000))
  %pe0.p4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.p3, <8 x float> %pe0.r, <8 x float> splat (float 0x3FC5555540000000))
  %pe0.p5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.p4, <8 x float> %pe0.r, <8 x float> splat (float 0x3FE0000000000000))
  %pe0.r2 = fmul <8 x float> %pe0.r, %pe0.r
  %pe0.y0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe0.p5, <8 x float> %pe0.r2, <8 x float> %pe0.r)
  %pe0.y = fadd <8 x float> %pe0.y0, splat (float 0x3FF0000000000000)
  %pe0.tb = bitcast <8 x float> %pe0.t to <8 x i32>
  %pe0.e0 = add <8 x i32> %pe0.tb, splat (i32 127)
  %pe0.e = shl <8 x i32> %pe0.e0, splat (i32 23)
  %pe0.pw = bitcast <8 x i32> %pe0.e to <8 x float>
  %pe0.m = fmul <8 x float> %pe0.y, %pe0.pw
  %pe0.z = select <8 x i1> %pe0.lo, <8 x float> zeroinitializer, <8 x float> %pe0.m
  %pe0 = select <8 x i1> %pe0.hi, <8 x float> splat (float 0x7FF0000000000000), <8 x float> %pe0.z

  %pbp0 = getelementptr float, ptr %pb, i64 0
  store <8 x float> %pe0, ptr %pbp0, align 4
  %sd1 = fsub <8 x float> %s1, %mnv
  %pe1.lo = fcmp olt <8 x float> %sd1, splat (float 0xC055D58A00000000)
  %pe1.hi = fcmp ogt <8 x float> %sd1, splat (float 0x40562E4300000000)
  %pe1.c0 = select <8 x i1> %pe1.lo, <8 x float> splat (float 0xC055D58A00000000), <8 x float> %sd1
  %pe1.hi1 = fcmp ogt <8 x float> %pe1.c0, splat (float 0x40561814A0000000)
  %pe1.c = select <8 x i1> %pe1.hi1, <8 x float> splat (float 0x40561814A0000000), <8 x float> %pe1.c0
  %pe1.t = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.c, <8 x float> splat (float 0x3FF7154760000000), <8 x float> splat (float 0x4168000000000000))
  %pe1.k = fsub <8 x float> %pe1.t, splat (float 0x4168000000000000)
  %pe1.r0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.k, <8 x float> splat (float 0xBFE6300000000000), <8 x float> %pe1.c)
  %pe1.r = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.k, <8 x float> splat (float 0x3F2BD01060000000), <8 x float> %pe1.r0)
  %pe1.p1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> splat (float 0x3F2A0D2CE0000000), <8 x float> %pe1.r, <8 x float> splat (float 0x3F56E879C0000000))
  %pe1.p2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.p1, <8 x float> %pe1.r, <8 x float> splat (float 0x3F81112100000000))
  %pe1.p3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.p2, <8 x float> %pe1.r, <8 x float> splat (float 0x3FA5553820000000))
  %pe1.p4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.p3, <8 x float> %pe1.r, <8 x float> splat (float 0x3FC5555540000000))
  %pe1.p5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.p4, <8 x float> %pe1.r, <8 x float> splat (float 0x3FE0000000000000))
  %pe1.r2 = fmul <8 x float> %pe1.r, %pe1.r
  %pe1.y0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %pe1.p5, <8 x float> %pe1.r2, <8 x float> %pe1.r)
  %pe1.y = fadd <8 x float> %pe1.y0, splat (float 0x3FF0000000000000)
  %pe1.tb = bitcast <8 x float> %pe1.t to <8 x i32>
  %pe1.e0 = add <8 x i32> %pe1.tb, splat (i32 127)
  %pe1.e = shl <8 x i32> %pe1.e0, splat (i32 23)
  %pe1.pw = bitcast <8 x i32> %pe1.e to <8 x float>
  %pe1.m = fmul <8 x float> %pe1.y, %pe1.pw
  %pe1.z = select <8 x i1> %pe1.lo, <8 x float> zeroinitializer, <8 x float> %pe1.m
  %pe1 = select <8 x i1> %pe1.hi, <8 x float> splat (float 0x7FF0000000000000), <8 x float> %pe1.z

  %pbp1 = getelementptr float, ptr %pb, i64 8
  store <8 x float> %pe1, ptr %pbp1, align 4
  %ps1 = fadd <8 x float> %pe0, %pe1
  %psum.l0 = shufflevector <8 x float> %ps1, <8 x float> poison, <4 x i32> <i32 0, i32 1, i32 2, i32 3>
  %psum.h0 = shufflevector <8 x float> %ps1, <8 x float> poison, <4 x i32> <i32 4, i32 5, i32 6, i32 7>
  %psum.s0 = fadd <4 x float> %psum.l0, %psum.h0
  %psum.l1 = shufflevector <4 x float> %psum.s0, <4 x float> poison, <2 x i32> <i32 0, i32 1>
  %psum.h1 = shufflevector <4 x float> %psum.s0, <4 x float> poison, <2 x i32> <i32 2, i32 3>
  %psum.s1 = fadd <2 x float> %psum.l1, %psum.h1
  %psum.l2 = shufflevector <2 x float> %psum.s1, <2 x float> poison, <1 x i32> <i32 0>
  %psum.h2 = shufflevector <2 x float> %psum.s1, <2 x float> poison, <1 x i32> <i32 1>
  %psum.s2 = fadd <1 x float> %psum.l2, %psum.h2
  %psum = extractelement <1 x float> %psum.s2, i64 0

  %glp = getelementptr float, ptr %ls, i64 %gst
  %lo = load float, ptr %glp, align 4
  %ln = call float @llvm.fmuladd.f32(float %lo, float %corr, float %psum)
  store float %ln, ptr %glp, align 4
  %cv0 = insertelement <8 x float> poison, float %corr, i64 0
  %cv = shufflevector <8 x float> %cv0, <8 x float> poison, <8 x i32> zeroinitializer
  %gao = mul i64 %gst, 64
  %ga = getelementptr float, ptr %acc, i64 %gao
  %a0p = getelementptr float, ptr %ga, i64 0
  %a0o = load <8 x float>, ptr %a0p, align 4
  %a0_0_init = fmul <8 x float> %a0o, %cv
  %a1p = getelementptr float, ptr %ga, i64 8
  %a1o = load <8 x float>, ptr %a1p, align 4
  %a1_0_init = fmul <8 x float> %a1o, %cv
  %a2p = getelementptr float, ptr %ga, i64 16
  %a2o = load <8 x float>, ptr %a2p, align 4
  %a2_0_init = fmul <8 x float> %a2o, %cv
  %a3p = getelementptr float, ptr %ga, i64 24
  %a3o = load <8 x float>, ptr %a3p, align 4
  %a3_0_init = fmul <8 x float> %a3o, %cv
  %a4p = getelementptr float, ptr %ga, i64 32
  %a4o = load <8 x float>, ptr %a4p, align 4
  %a4_0_init = fmul <8 x float> %a4o, %cv
  %a5p = getelementptr float, ptr %ga, i64 40
  %a5o = load <8 x float>, ptr %a5p, align 4
  %a5_0_init = fmul <8 x float> %a5o, %cv
  %a6p = getelementptr float, ptr %ga, i64 48
  %a6o = load <8 x float>, ptr %a6p, align 4
  %a6_0_init = fmul <8 x float> %a6o, %cv
  %a7p = getelementptr float, ptr %ga, i64 56
  %a7o = load <8 x float>, ptr %a7p, align 4
  %a7_0_init = fmul <8 x float> %a7o, %cv
  %v0_0p = getelementptr float, ptr %vblk, i64 0
  %v0_0 = load <8 x float>, ptr %v0_0p, align 4
  %v0_1p = getelementptr float, ptr %vblk, i64 8
  %v0_1 = load <8 x float>, ptr %v0_1p, align 4
  %v0_2p = getelementptr float, ptr %vblk, i64 16
  %v0_2 = load <8 x float>, ptr %v0_2p, align 4
  %v0_3p = getelementptr float, ptr %vblk, i64 24
  %v0_3 = load <8 x float>, ptr %v0_3p, align 4
  %v0_4p = getelementptr float, ptr %vblk, i64 32
  %v0_4 = load <8 x float>, ptr %v0_4p, align 4
  %v0_5p = getelementptr float, ptr %vblk, i64 40
  %v0_5 = load <8 x float>, ptr %v0_5p, align 4
  %v0_6p = getelementptr float, ptr %vblk, i64 48
  %v0_6 = load <8 x float>, ptr %v0_6p, align 4
  %v0_7p = getelementptr float, ptr %vblk, i64 56
  %v0_7 = load <8 x float>, ptr %v0_7p, align 4
  %ap0p = getelementptr float, ptr %pb, i64 0
  %ap0 = load float, ptr %ap0p, align 4
  %ap0v0 = insertelement <8 x float> poison, float %ap0, i64 0
  %ap0v = shufflevector <8 x float> %ap0v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_0, <8 x float> %a0_0_init)
  %a1_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_1, <8 x float> %a1_0_init)
  %a2_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_2, <8 x float> %a2_0_init)
  %a3_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_3, <8 x float> %a3_0_init)
  %a4_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_4, <8 x float> %a4_0_init)
  %a5_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_5, <8 x float> %a5_0_init)
  %a6_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_6, <8 x float> %a6_0_init)
  %a7_0 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap0v, <8 x float> %v0_7, <8 x float> %a7_0_init)
  %v1_0p = getelementptr float, ptr %vblk, i64 64
  %v1_0 = load <8 x float>, ptr %v1_0p, align 4
  %v1_1p = getelementptr float, ptr %vblk, i64 72
  %v1_1 = load <8 x float>, ptr %v1_1p, align 4
  %v1_2p = getelementptr float, ptr %vblk, i64 80
  %v1_2 = load <8 x float>, ptr %v1_2p, align 4
  %v1_3p = getelementptr float, ptr %vblk, i64 88
  %v1_3 = load <8 x float>, ptr %v1_3p, align 4
  %v1_4p = getelementptr float, ptr %vblk, i64 96
  %v1_4 = load <8 x float>, ptr %v1_4p, align 4
  %v1_5p = getelementptr float, ptr %vblk, i64 104
  %v1_5 = load <8 x float>, ptr %v1_5p, align 4
  %v1_6p = getelementptr float, ptr %vblk, i64 112
  %v1_6 = load <8 x float>, ptr %v1_6p, align 4
  %v1_7p = getelementptr float, ptr %vblk, i64 120
  %v1_7 = load <8 x float>, ptr %v1_7p, align 4
  %ap1p = getelementptr float, ptr %pb, i64 1
  %ap1 = load float, ptr %ap1p, align 4
  %ap1v0 = insertelement <8 x float> poison, float %ap1, i64 0
  %ap1v = shufflevector <8 x float> %ap1v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_0, <8 x float> %a0_0)
  %a1_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_1, <8 x float> %a1_0)
  %a2_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_2, <8 x float> %a2_0)
  %a3_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_3, <8 x float> %a3_0)
  %a4_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_4, <8 x float> %a4_0)
  %a5_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_5, <8 x float> %a5_0)
  %a6_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_6, <8 x float> %a6_0)
  %a7_1 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap1v, <8 x float> %v1_7, <8 x float> %a7_0)
  %v2_0p = getelementptr float, ptr %vblk, i64 128
  %v2_0 = load <8 x float>, ptr %v2_0p, align 4
  %v2_1p = getelementptr float, ptr %vblk, i64 136
  %v2_1 = load <8 x float>, ptr %v2_1p, align 4
  %v2_2p = getelementptr float, ptr %vblk, i64 144
  %v2_2 = load <8 x float>, ptr %v2_2p, align 4
  %v2_3p = getelementptr float, ptr %vblk, i64 152
  %v2_3 = load <8 x float>, ptr %v2_3p, align 4
  %v2_4p = getelementptr float, ptr %vblk, i64 160
  %v2_4 = load <8 x float>, ptr %v2_4p, align 4
  %v2_5p = getelementptr float, ptr %vblk, i64 168
  %v2_5 = load <8 x float>, ptr %v2_5p, align 4
  %v2_6p = getelementptr float, ptr %vblk, i64 176
  %v2_6 = load <8 x float>, ptr %v2_6p, align 4
  %v2_7p = getelementptr float, ptr %vblk, i64 184
  %v2_7 = load <8 x float>, ptr %v2_7p, align 4
  %ap2p = getelementptr float, ptr %pb, i64 2
  %ap2 = load float, ptr %ap2p, align 4
  %ap2v0 = insertelement <8 x float> poison, float %ap2, i64 0
  %ap2v = shufflevector <8 x float> %ap2v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_0, <8 x float> %a0_1)
  %a1_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_1, <8 x float> %a1_1)
  %a2_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_2, <8 x float> %a2_1)
  %a3_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_3, <8 x float> %a3_1)
  %a4_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_4, <8 x float> %a4_1)
  %a5_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_5, <8 x float> %a5_1)
  %a6_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_6, <8 x float> %a6_1)
  %a7_2 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap2v, <8 x float> %v2_7, <8 x float> %a7_1)
  %v3_0p = getelementptr float, ptr %vblk, i64 192
  %v3_0 = load <8 x float>, ptr %v3_0p, align 4
  %v3_1p = getelementptr float, ptr %vblk, i64 200
  %v3_1 = load <8 x float>, ptr %v3_1p, align 4
  %v3_2p = getelementptr float, ptr %vblk, i64 208
  %v3_2 = load <8 x float>, ptr %v3_2p, align 4
  %v3_3p = getelementptr float, ptr %vblk, i64 216
  %v3_3 = load <8 x float>, ptr %v3_3p, align 4
  %v3_4p = getelementptr float, ptr %vblk, i64 224
  %v3_4 = load <8 x float>, ptr %v3_4p, align 4
  %v3_5p = getelementptr float, ptr %vblk, i64 232
  %v3_5 = load <8 x float>, ptr %v3_5p, align 4
  %v3_6p = getelementptr float, ptr %vblk, i64 240
  %v3_6 = load <8 x float>, ptr %v3_6p, align 4
  %v3_7p = getelementptr float, ptr %vblk, i64 248
  %v3_7 = load <8 x float>, ptr %v3_7p, align 4
  %ap3p = getelementptr float, ptr %pb, i64 3
  %ap3 = load float, ptr %ap3p, align 4
  %ap3v0 = insertelement <8 x float> poison, float %ap3, i64 0
  %ap3v = shufflevector <8 x float> %ap3v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_0, <8 x float> %a0_2)
  %a1_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_1, <8 x float> %a1_2)
  %a2_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_2, <8 x float> %a2_2)
  %a3_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_3, <8 x float> %a3_2)
  %a4_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_4, <8 x float> %a4_2)
  %a5_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_5, <8 x float> %a5_2)
  %a6_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_6, <8 x float> %a6_2)
  %a7_3 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap3v, <8 x float> %v3_7, <8 x float> %a7_2)
  %v4_0p = getelementptr float, ptr %vblk, i64 256
  %v4_0 = load <8 x float>, ptr %v4_0p, align 4
  %v4_1p = getelementptr float, ptr %vblk, i64 264
  %v4_1 = load <8 x float>, ptr %v4_1p, align 4
  %v4_2p = getelementptr float, ptr %vblk, i64 272
  %v4_2 = load <8 x float>, ptr %v4_2p, align 4
  %v4_3p = getelementptr float, ptr %vblk, i64 280
  %v4_3 = load <8 x float>, ptr %v4_3p, align 4
  %v4_4p = getelementptr float, ptr %vblk, i64 288
  %v4_4 = load <8 x float>, ptr %v4_4p, align 4
  %v4_5p = getelementptr float, ptr %vblk, i64 296
  %v4_5 = load <8 x float>, ptr %v4_5p, align 4
  %v4_6p = getelementptr float, ptr %vblk, i64 304
  %v4_6 = load <8 x float>, ptr %v4_6p, align 4
  %v4_7p = getelementptr float, ptr %vblk, i64 312
  %v4_7 = load <8 x float>, ptr %v4_7p, align 4
  %ap4p = getelementptr float, ptr %pb, i64 4
  %ap4 = load float, ptr %ap4p, align 4
  %ap4v0 = insertelement <8 x float> poison, float %ap4, i64 0
  %ap4v = shufflevector <8 x float> %ap4v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_0, <8 x float> %a0_3)
  %a1_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_1, <8 x float> %a1_3)
  %a2_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_2, <8 x float> %a2_3)
  %a3_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_3, <8 x float> %a3_3)
  %a4_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_4, <8 x float> %a4_3)
  %a5_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_5, <8 x float> %a5_3)
  %a6_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_6, <8 x float> %a6_3)
  %a7_4 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap4v, <8 x float> %v4_7, <8 x float> %a7_3)
  %v5_0p = getelementptr float, ptr %vblk, i64 320
  %v5_0 = load <8 x float>, ptr %v5_0p, align 4
  %v5_1p = getelementptr float, ptr %vblk, i64 328
  %v5_1 = load <8 x float>, ptr %v5_1p, align 4
  %v5_2p = getelementptr float, ptr %vblk, i64 336
  %v5_2 = load <8 x float>, ptr %v5_2p, align 4
  %v5_3p = getelementptr float, ptr %vblk, i64 344
  %v5_3 = load <8 x float>, ptr %v5_3p, align 4
  %v5_4p = getelementptr float, ptr %vblk, i64 352
  %v5_4 = load <8 x float>, ptr %v5_4p, align 4
  %v5_5p = getelementptr float, ptr %vblk, i64 360
  %v5_5 = load <8 x float>, ptr %v5_5p, align 4
  %v5_6p = getelementptr float, ptr %vblk, i64 368
  %v5_6 = load <8 x float>, ptr %v5_6p, align 4
  %v5_7p = getelementptr float, ptr %vblk, i64 376
  %v5_7 = load <8 x float>, ptr %v5_7p, align 4
  %ap5p = getelementptr float, ptr %pb, i64 5
  %ap5 = load float, ptr %ap5p, align 4
  %ap5v0 = insertelement <8 x float> poison, float %ap5, i64 0
  %ap5v = shufflevector <8 x float> %ap5v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_0, <8 x float> %a0_4)
  %a1_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_1, <8 x float> %a1_4)
  %a2_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_2, <8 x float> %a2_4)
  %a3_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_3, <8 x float> %a3_4)
  %a4_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_4, <8 x float> %a4_4)
  %a5_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_5, <8 x float> %a5_4)
  %a6_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_6, <8 x float> %a6_4)
  %a7_5 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap5v, <8 x float> %v5_7, <8 x float> %a7_4)
  %v6_0p = getelementptr float, ptr %vblk, i64 384
  %v6_0 = load <8 x float>, ptr %v6_0p, align 4
  %v6_1p = getelementptr float, ptr %vblk, i64 392
  %v6_1 = load <8 x float>, ptr %v6_1p, align 4
  %v6_2p = getelementptr float, ptr %vblk, i64 400
  %v6_2 = load <8 x float>, ptr %v6_2p, align 4
  %v6_3p = getelementptr float, ptr %vblk, i64 408
  %v6_3 = load <8 x float>, ptr %v6_3p, align 4
  %v6_4p = getelementptr float, ptr %vblk, i64 416
  %v6_4 = load <8 x float>, ptr %v6_4p, align 4
  %v6_5p = getelementptr float, ptr %vblk, i64 424
  %v6_5 = load <8 x float>, ptr %v6_5p, align 4
  %v6_6p = getelementptr float, ptr %vblk, i64 432
  %v6_6 = load <8 x float>, ptr %v6_6p, align 4
  %v6_7p = getelementptr float, ptr %vblk, i64 440
  %v6_7 = load <8 x float>, ptr %v6_7p, align 4
  %ap6p = getelementptr float, ptr %pb, i64 6
  %ap6 = load float, ptr %ap6p, align 4
  %ap6v0 = insertelement <8 x float> poison, float %ap6, i64 0
  %ap6v = shufflevector <8 x float> %ap6v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_0, <8 x float> %a0_5)
  %a1_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_1, <8 x float> %a1_5)
  %a2_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_2, <8 x float> %a2_5)
  %a3_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_3, <8 x float> %a3_5)
  %a4_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_4, <8 x float> %a4_5)
  %a5_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_5, <8 x float> %a5_5)
  %a6_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_6, <8 x float> %a6_5)
  %a7_6 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap6v, <8 x float> %v6_7, <8 x float> %a7_5)
  %v7_0p = getelementptr float, ptr %vblk, i64 448
  %v7_0 = load <8 x float>, ptr %v7_0p, align 4
  %v7_1p = getelementptr float, ptr %vblk, i64 456
  %v7_1 = load <8 x float>, ptr %v7_1p, align 4
  %v7_2p = getelementptr float, ptr %vblk, i64 464
  %v7_2 = load <8 x float>, ptr %v7_2p, align 4
  %v7_3p = getelementptr float, ptr %vblk, i64 472
  %v7_3 = load <8 x float>, ptr %v7_3p, align 4
  %v7_4p = getelementptr float, ptr %vblk, i64 480
  %v7_4 = load <8 x float>, ptr %v7_4p, align 4
  %v7_5p = getelementptr float, ptr %vblk, i64 488
  %v7_5 = load <8 x float>, ptr %v7_5p, align 4
  %v7_6p = getelementptr float, ptr %vblk, i64 496
  %v7_6 = load <8 x float>, ptr %v7_6p, align 4
  %v7_7p = getelementptr float, ptr %vblk, i64 504
  %v7_7 = load <8 x float>, ptr %v7_7p, align 4
  %ap7p = getelementptr float, ptr %pb, i64 7
  %ap7 = load float, ptr %ap7p, align 4
  %ap7v0 = insertelement <8 x float> poison, float %ap7, i64 0
  %ap7v = shufflevector <8 x float> %ap7v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_0, <8 x float> %a0_6)
  %a1_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_1, <8 x float> %a1_6)
  %a2_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_2, <8 x float> %a2_6)
  %a3_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_3, <8 x float> %a3_6)
  %a4_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_4, <8 x float> %a4_6)
  %a5_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_5, <8 x float> %a5_6)
  %a6_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_6, <8 x float> %a6_6)
  %a7_7 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap7v, <8 x float> %v7_7, <8 x float> %a7_6)
  %v8_0p = getelementptr float, ptr %vblk, i64 512
  %v8_0 = load <8 x float>, ptr %v8_0p, align 4
  %v8_1p = getelementptr float, ptr %vblk, i64 520
  %v8_1 = load <8 x float>, ptr %v8_1p, align 4
  %v8_2p = getelementptr float, ptr %vblk, i64 528
  %v8_2 = load <8 x float>, ptr %v8_2p, align 4
  %v8_3p = getelementptr float, ptr %vblk, i64 536
  %v8_3 = load <8 x float>, ptr %v8_3p, align 4
  %v8_4p = getelementptr float, ptr %vblk, i64 544
  %v8_4 = load <8 x float>, ptr %v8_4p, align 4
  %v8_5p = getelementptr float, ptr %vblk, i64 552
  %v8_5 = load <8 x float>, ptr %v8_5p, align 4
  %v8_6p = getelementptr float, ptr %vblk, i64 560
  %v8_6 = load <8 x float>, ptr %v8_6p, align 4
  %v8_7p = getelementptr float, ptr %vblk, i64 568
  %v8_7 = load <8 x float>, ptr %v8_7p, align 4
  %ap8p = getelementptr float, ptr %pb, i64 8
  %ap8 = load float, ptr %ap8p, align 4
  %ap8v0 = insertelement <8 x float> poison, float %ap8, i64 0
  %ap8v = shufflevector <8 x float> %ap8v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_0, <8 x float> %a0_7)
  %a1_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_1, <8 x float> %a1_7)
  %a2_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_2, <8 x float> %a2_7)
  %a3_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_3, <8 x float> %a3_7)
  %a4_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_4, <8 x float> %a4_7)
  %a5_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_5, <8 x float> %a5_7)
  %a6_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_6, <8 x float> %a6_7)
  %a7_8 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap8v, <8 x float> %v8_7, <8 x float> %a7_7)
  %v9_0p = getelementptr float, ptr %vblk, i64 576
  %v9_0 = load <8 x float>, ptr %v9_0p, align 4
  %v9_1p = getelementptr float, ptr %vblk, i64 584
  %v9_1 = load <8 x float>, ptr %v9_1p, align 4
  %v9_2p = getelementptr float, ptr %vblk, i64 592
  %v9_2 = load <8 x float>, ptr %v9_2p, align 4
  %v9_3p = getelementptr float, ptr %vblk, i64 600
  %v9_3 = load <8 x float>, ptr %v9_3p, align 4
  %v9_4p = getelementptr float, ptr %vblk, i64 608
  %v9_4 = load <8 x float>, ptr %v9_4p, align 4
  %v9_5p = getelementptr float, ptr %vblk, i64 616
  %v9_5 = load <8 x float>, ptr %v9_5p, align 4
  %v9_6p = getelementptr float, ptr %vblk, i64 624
  %v9_6 = load <8 x float>, ptr %v9_6p, align 4
  %v9_7p = getelementptr float, ptr %vblk, i64 632
  %v9_7 = load <8 x float>, ptr %v9_7p, align 4
  %ap9p = getelementptr float, ptr %pb, i64 9
  %ap9 = load float, ptr %ap9p, align 4
  %ap9v0 = insertelement <8 x float> poison, float %ap9, i64 0
  %ap9v = shufflevector <8 x float> %ap9v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_0, <8 x float> %a0_8)
  %a1_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_1, <8 x float> %a1_8)
  %a2_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_2, <8 x float> %a2_8)
  %a3_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_3, <8 x float> %a3_8)
  %a4_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_4, <8 x float> %a4_8)
  %a5_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_5, <8 x float> %a5_8)
  %a6_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_6, <8 x float> %a6_8)
  %a7_9 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap9v, <8 x float> %v9_7, <8 x float> %a7_8)
  %v10_0p = getelementptr float, ptr %vblk, i64 640
  %v10_0 = load <8 x float>, ptr %v10_0p, align 4
  %v10_1p = getelementptr float, ptr %vblk, i64 648
  %v10_1 = load <8 x float>, ptr %v10_1p, align 4
  %v10_2p = getelementptr float, ptr %vblk, i64 656
  %v10_2 = load <8 x float>, ptr %v10_2p, align 4
  %v10_3p = getelementptr float, ptr %vblk, i64 664
  %v10_3 = load <8 x float>, ptr %v10_3p, align 4
  %v10_4p = getelementptr float, ptr %vblk, i64 672
  %v10_4 = load <8 x float>, ptr %v10_4p, align 4
  %v10_5p = getelementptr float, ptr %vblk, i64 680
  %v10_5 = load <8 x float>, ptr %v10_5p, align 4
  %v10_6p = getelementptr float, ptr %vblk, i64 688
  %v10_6 = load <8 x float>, ptr %v10_6p, align 4
  %v10_7p = getelementptr float, ptr %vblk, i64 696
  %v10_7 = load <8 x float>, ptr %v10_7p, align 4
  %ap10p = getelementptr float, ptr %pb, i64 10
  %ap10 = load float, ptr %ap10p, align 4
  %ap10v0 = insertelement <8 x float> poison, float %ap10, i64 0
  %ap10v = shufflevector <8 x float> %ap10v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_0, <8 x float> %a0_9)
  %a1_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_1, <8 x float> %a1_9)
  %a2_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_2, <8 x float> %a2_9)
  %a3_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_3, <8 x float> %a3_9)
  %a4_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_4, <8 x float> %a4_9)
  %a5_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_5, <8 x float> %a5_9)
  %a6_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_6, <8 x float> %a6_9)
  %a7_10 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap10v, <8 x float> %v10_7, <8 x float> %a7_9)
  %v11_0p = getelementptr float, ptr %vblk, i64 704
  %v11_0 = load <8 x float>, ptr %v11_0p, align 4
  %v11_1p = getelementptr float, ptr %vblk, i64 712
  %v11_1 = load <8 x float>, ptr %v11_1p, align 4
  %v11_2p = getelementptr float, ptr %vblk, i64 720
  %v11_2 = load <8 x float>, ptr %v11_2p, align 4
  %v11_3p = getelementptr float, ptr %vblk, i64 728
  %v11_3 = load <8 x float>, ptr %v11_3p, align 4
  %v11_4p = getelementptr float, ptr %vblk, i64 736
  %v11_4 = load <8 x float>, ptr %v11_4p, align 4
  %v11_5p = getelementptr float, ptr %vblk, i64 744
  %v11_5 = load <8 x float>, ptr %v11_5p, align 4
  %v11_6p = getelementptr float, ptr %vblk, i64 752
  %v11_6 = load <8 x float>, ptr %v11_6p, align 4
  %v11_7p = getelementptr float, ptr %vblk, i64 760
  %v11_7 = load <8 x float>, ptr %v11_7p, align 4
  %ap11p = getelementptr float, ptr %pb, i64 11
  %ap11 = load float, ptr %ap11p, align 4
  %ap11v0 = insertelement <8 x float> poison, float %ap11, i64 0
  %ap11v = shufflevector <8 x float> %ap11v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_0, <8 x float> %a0_10)
  %a1_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_1, <8 x float> %a1_10)
  %a2_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_2, <8 x float> %a2_10)
  %a3_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_3, <8 x float> %a3_10)
  %a4_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_4, <8 x float> %a4_10)
  %a5_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_5, <8 x float> %a5_10)
  %a6_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_6, <8 x float> %a6_10)
  %a7_11 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap11v, <8 x float> %v11_7, <8 x float> %a7_10)
  %v12_0p = getelementptr float, ptr %vblk, i64 768
  %v12_0 = load <8 x float>, ptr %v12_0p, align 4
  %v12_1p = getelementptr float, ptr %vblk, i64 776
  %v12_1 = load <8 x float>, ptr %v12_1p, align 4
  %v12_2p = getelementptr float, ptr %vblk, i64 784
  %v12_2 = load <8 x float>, ptr %v12_2p, align 4
  %v12_3p = getelementptr float, ptr %vblk, i64 792
  %v12_3 = load <8 x float>, ptr %v12_3p, align 4
  %v12_4p = getelementptr float, ptr %vblk, i64 800
  %v12_4 = load <8 x float>, ptr %v12_4p, align 4
  %v12_5p = getelementptr float, ptr %vblk, i64 808
  %v12_5 = load <8 x float>, ptr %v12_5p, align 4
  %v12_6p = getelementptr float, ptr %vblk, i64 816
  %v12_6 = load <8 x float>, ptr %v12_6p, align 4
  %v12_7p = getelementptr float, ptr %vblk, i64 824
  %v12_7 = load <8 x float>, ptr %v12_7p, align 4
  %ap12p = getelementptr float, ptr %pb, i64 12
  %ap12 = load float, ptr %ap12p, align 4
  %ap12v0 = insertelement <8 x float> poison, float %ap12, i64 0
  %ap12v = shufflevector <8 x float> %ap12v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_0, <8 x float> %a0_11)
  %a1_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_1, <8 x float> %a1_11)
  %a2_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_2, <8 x float> %a2_11)
  %a3_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_3, <8 x float> %a3_11)
  %a4_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_4, <8 x float> %a4_11)
  %a5_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_5, <8 x float> %a5_11)
  %a6_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_6, <8 x float> %a6_11)
  %a7_12 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap12v, <8 x float> %v12_7, <8 x float> %a7_11)
  %v13_0p = getelementptr float, ptr %vblk, i64 832
  %v13_0 = load <8 x float>, ptr %v13_0p, align 4
  %v13_1p = getelementptr float, ptr %vblk, i64 840
  %v13_1 = load <8 x float>, ptr %v13_1p, align 4
  %v13_2p = getelementptr float, ptr %vblk, i64 848
  %v13_2 = load <8 x float>, ptr %v13_2p, align 4
  %v13_3p = getelementptr float, ptr %vblk, i64 856
  %v13_3 = load <8 x float>, ptr %v13_3p, align 4
  %v13_4p = getelementptr float, ptr %vblk, i64 864
  %v13_4 = load <8 x float>, ptr %v13_4p, align 4
  %v13_5p = getelementptr float, ptr %vblk, i64 872
  %v13_5 = load <8 x float>, ptr %v13_5p, align 4
  %v13_6p = getelementptr float, ptr %vblk, i64 880
  %v13_6 = load <8 x float>, ptr %v13_6p, align 4
  %v13_7p = getelementptr float, ptr %vblk, i64 888
  %v13_7 = load <8 x float>, ptr %v13_7p, align 4
  %ap13p = getelementptr float, ptr %pb, i64 13
  %ap13 = load float, ptr %ap13p, align 4
  %ap13v0 = insertelement <8 x float> poison, float %ap13, i64 0
  %ap13v = shufflevector <8 x float> %ap13v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_0, <8 x float> %a0_12)
  %a1_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_1, <8 x float> %a1_12)
  %a2_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_2, <8 x float> %a2_12)
  %a3_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_3, <8 x float> %a3_12)
  %a4_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_4, <8 x float> %a4_12)
  %a5_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_5, <8 x float> %a5_12)
  %a6_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_6, <8 x float> %a6_12)
  %a7_13 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap13v, <8 x float> %v13_7, <8 x float> %a7_12)
  %v14_0p = getelementptr float, ptr %vblk, i64 896
  %v14_0 = load <8 x float>, ptr %v14_0p, align 4
  %v14_1p = getelementptr float, ptr %vblk, i64 904
  %v14_1 = load <8 x float>, ptr %v14_1p, align 4
  %v14_2p = getelementptr float, ptr %vblk, i64 912
  %v14_2 = load <8 x float>, ptr %v14_2p, align 4
  %v14_3p = getelementptr float, ptr %vblk, i64 920
  %v14_3 = load <8 x float>, ptr %v14_3p, align 4
  %v14_4p = getelementptr float, ptr %vblk, i64 928
  %v14_4 = load <8 x float>, ptr %v14_4p, align 4
  %v14_5p = getelementptr float, ptr %vblk, i64 936
  %v14_5 = load <8 x float>, ptr %v14_5p, align 4
  %v14_6p = getelementptr float, ptr %vblk, i64 944
  %v14_6 = load <8 x float>, ptr %v14_6p, align 4
  %v14_7p = getelementptr float, ptr %vblk, i64 952
  %v14_7 = load <8 x float>, ptr %v14_7p, align 4
  %ap14p = getelementptr float, ptr %pb, i64 14
  %ap14 = load float, ptr %ap14p, align 4
  %ap14v0 = insertelement <8 x float> poison, float %ap14, i64 0
  %ap14v = shufflevector <8 x float> %ap14v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_0, <8 x float> %a0_13)
  %a1_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_1, <8 x float> %a1_13)
  %a2_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_2, <8 x float> %a2_13)
  %a3_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_3, <8 x float> %a3_13)
  %a4_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_4, <8 x float> %a4_13)
  %a5_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_5, <8 x float> %a5_13)
  %a6_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_6, <8 x float> %a6_13)
  %a7_14 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap14v, <8 x float> %v14_7, <8 x float> %a7_13)
  %v15_0p = getelementptr float, ptr %vblk, i64 960
  %v15_0 = load <8 x float>, ptr %v15_0p, align 4
  %v15_1p = getelementptr float, ptr %vblk, i64 968
  %v15_1 = load <8 x float>, ptr %v15_1p, align 4
  %v15_2p = getelementptr float, ptr %vblk, i64 976
  %v15_2 = load <8 x float>, ptr %v15_2p, align 4
  %v15_3p = getelementptr float, ptr %vblk, i64 984
  %v15_3 = load <8 x float>, ptr %v15_3p, align 4
  %v15_4p = getelementptr float, ptr %vblk, i64 992
  %v15_4 = load <8 x float>, ptr %v15_4p, align 4
  %v15_5p = getelementptr float, ptr %vblk, i64 1000
  %v15_5 = load <8 x float>, ptr %v15_5p, align 4
  %v15_6p = getelementptr float, ptr %vblk, i64 1008
  %v15_6 = load <8 x float>, ptr %v15_6p, align 4
  %v15_7p = getelementptr float, ptr %vblk, i64 1016
  %v15_7 = load <8 x float>, ptr %v15_7p, align 4
  %ap15p = getelementptr float, ptr %pb, i64 15
  %ap15 = load float, ptr %ap15p, align 4
  %ap15v0 = insertelement <8 x float> poison, float %ap15, i64 0
  %ap15v = shufflevector <8 x float> %ap15v0, <8 x float> poison, <8 x i32> zeroinitializer
  %a0_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_0, <8 x float> %a0_14)
  %a1_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_1, <8 x float> %a1_14)
  %a2_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_2, <8 x float> %a2_14)
  %a3_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_3, <8 x float> %a3_14)
  %a4_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_4, <8 x float> %a4_14)
  %a5_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_5, <8 x float> %a5_14)
  %a6_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_6, <8 x float> %a6_14)
  %a7_15 = call <8 x float> @llvm.fmuladd.v8f32(<8 x float> %ap15v, <8 x float> %v15_7, <8 x float> %a7_14)
  store <8 x float> %a0_15, ptr %a0p, align 4
  store <8 x float> %a1_15, ptr %a1p, align 4
  store <8 x float> %a2_15, ptr %a2p, align 4
  store <8 x float> %a3_15, ptr %a3p, align 4
  store <8 x float> %a4_15, ptr %a4p, align 4
  store <8 x float> %a5_15, ptr %a5p, align 4
  store <8 x float> %a6_15, ptr %a6p, align 4
  store <8 x float> %a7_15, ptr %a7p, align 4

  %gn = add i64 %g, 1
  %gm = icmp ult i64 %gn, 7
  br i1 %gm, label %head, label %row.next

row.next:
  %rin = add i64 %ri, 1
  %rm = icmp ult i64 %rin, %rurn
  br i1 %rm, label %row, label %blk.next

blk.next:
  %bn = add i64 %b, 1
  %bm = icmp ult i64 %bn, %nblk
  br i1 %bm, label %blk, label %fin

fin:                                              ; out = acc / l per query head
  %fg = phi i64 [ 0, %blk.next ], [ %fgn, %fin ]
  %flp = getelementptr float, ptr %ls, i64 %fg
  %fl = load float, ptr %flp, align 4
  %finv = fdiv float 1.0, %fl
  %fiv0 = insertelement <8 x float> poison, float %finv, i64 0
  %fiv = shufflevector <8 x float> %fiv0, <8 x float> poison, <8 x i32> zeroinitializer
  %fao = mul i64 %fg, 64
  %fap = getelementptr float, ptr %acc, i64 %fao
  %fgr = udiv i64 %fg, 7                    ; row fg / G of the run, head fg % G
  %fgh = urem i64 %fg, 7
  %fgrow = mul i64 %fgr, 14
  %fgq = add i64 %qrow, %fgrow
  %for = add i64 %fgq, %fgh
  %foo = mul i64 %for, 64
  %fop = getelementptr float, ptr %out, i64 %foo
  %fa0p = getelementptr float, ptr %fap, i64 0
  %fa0 = load <8 x float>, ptr %fa0p, align 4
  %fr0 = fmul <8 x float> %fa0, %fiv
  %fo0p = getelementptr float, ptr %fop, i64 0
  store <8 x float> %fr0, ptr %fo0p, align 4
  %fa1p = getelementptr float, ptr %fap, i64 8
  %fa1 = load <8 x float>, ptr %fa1p, align 4
  %fr1 = fmul <8 x float> %fa1, %fiv
  %fo1p = getelementptr float, ptr %fop, i64 8
  store <8 x float> %fr1, ptr %fo1p, align 4
  %fa2p = getelementptr float, ptr %fap, i64 16
  %fa2 = load <8 x float>, ptr %fa2p, align 4
  %fr2 = fmul <8 x float> %fa2, %fiv
  %fo2p = getelementptr float, ptr %fop, i64 16
  store <8 x float> %fr2, ptr %fo2p, align 4
  %fa3p = getelementptr float, ptr %fap, i64 24
  %fa3 = load <8 x float>, ptr %fa3p, align 4
  %fr3 = fmul <8 x float> %fa3, %fiv
  %fo3p = getelementptr float, ptr %fop, i64 24
  store <8 x float> %fr3, ptr %fo3p, align 4
  %fa4p = getelementptr float, ptr %fap, i64 32
  %fa4 = load <8 x float>, ptr %fa4p, align 4
  %fr4 = fmul <8 x float> %fa4, %fiv
  %fo4p = getelementptr float, ptr %fop, i64 32
  store <8 x float> %fr4, ptr %fo4p, align 4
  %fa5p = getelementptr float, ptr %fap, i64 40
  %fa5 = load <8 x float>, ptr %fa5p, align 4
  %fr5 = fmul <8 x float> %fa5, %fiv
  %fo5p = getelementptr float, ptr %fop, i64 40
  store <8 x float> %fr5, ptr %fo5p, align 4
  %fa6p = getelementptr float, ptr %fap, i64 48
  %fa6 = load <8 x float>, ptr %fa6p, align 4
  %fr6 = fmul <8 x float> %fa6, %fiv
  %fo6p = getelementptr float, ptr %fop, i64 48
  store <8 x float> %fr6, ptr %fo6p, align 4
  %fa7p = getelementptr float, ptr %fap, i64 56
  %fa7 = load <8 x float>, ptr %fa7p, align 4
  %fr7 = fmul <8 x float> %fa7, %fiv
  %fo7p = getelementptr float, ptr %fop, i64 56
  store <8 x float> %fr7, ptr %fo7p, align 4
  %fgn = add i64 %fg, 1
  %fgm = icmp ult i64 %fgn, %ngs
  br i1 %fgm, label %fin, label %next

next:
  %ncost = phi i64 [ %ucost, %unit.mine ], [ %rurc, %fin ]     ; the units done: one, or the run
  %nrows = phi i64 [ 1, %unit.mine ], [ %rurn, %fin ]
  %pren = add i64 %pre, %ncost
  %un = add i64 %u, %nrows
  %units = mul i64 %n, 2
  %um = icmp ult i64 %un, %units
  br i1 %um, label %unit, label %done

done:
  ret void
}

declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare float @llvm.fmuladd.f32(float, float, float)
declare <1 x float> @llvm.fmuladd.v1f32(<1 x float>, <1 x float>, <1 x float>)
declare <2 x float> @llvm.fmuladd.v2f32(<2 x float>, <2 x float>, <2 x float>)
declare <4 x float> @llvm.fmuladd.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare <8 x float> @llvm.fmuladd.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare <16 x float> @llvm.fmuladd.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <32 x float> @llvm.fmuladd.v32f32(<32 x float>, <32 x float>, <32 x float>)
declare <16 x float> @llvm.x86.avx512.mask.scalef.ps.512(<16 x float>, <16 x float>, <16 x float>, i16, i32)
declare <8 x float> @llvm.x86.avx512.mask.scalef.ps.256(<8 x float>, <8 x float>, <8 x float>, i8)
declare <4 x float> @llvm.x86.avx512.mask.scalef.ps.128(<4 x float>, <4 x float>, <4 x float>, i8)
declare <4 x float> @llvm.masked.load.v4f32.p0(ptr, <4 x i1>, <4 x float>)
declare void @llvm.masked.store.v4f32.p0(<4 x float>, ptr, <4 x i1>)
declare <4 x i16> @llvm.masked.load.v4i16.p0(ptr, <4 x i1>, <4 x i16>)
declare void @llvm.masked.store.v4i16.p0(<4 x i16>, ptr, <4 x i1>)
declare <8 x float> @llvm.masked.load.v8f32.p0(ptr, <8 x i1>, <8 x float>)
declare void @llvm.masked.store.v8f32.p0(<8 x float>, ptr, <8 x i1>)
declare <8 x i16> @llvm.masked.load.v8i16.p0(ptr, <8 x i1>, <8 x i16>)
declare void @llvm.masked.store.v8i16.p0(<8 x i16>, ptr, <8 x i1>)
declare <16 x float> @llvm.masked.load.v16f32.p0(ptr, <16 x i1>, <16 x float>)
declare void @llvm.masked.store.v16f32.p0(<16 x float>, ptr, <16 x i1>)
declare <16 x i16> @llvm.masked.load.v16i16.p0(ptr, <16 x i1>, <16 x i16>)
declare void @llvm.masked.store.v16i16.p0(<16 x i16>, ptr, <16 x i1>)

