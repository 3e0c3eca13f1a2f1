; golden: matmul_q8a_Q4_K_kvnni: matmul_q8a/Q4_K/kvnni@avx512_vnni[K=256,M=64,acc=0,nt=1,pf_bytes=8192,u=1]
; symbol: reame_matmul_q8a_Q4_K_kvnni_avx512_vnni_a230de5f96af
; matmul_q8a (Q4_K, AVX-512 VNNI): y[n, M] = dequant(w)[M, K] @ dequant(xq)[n, K]^T
; One zmm holds 64 consecutive weight quants as unsigned bytes (two 32-blocks), multiplied with
; the 64 matching activation int8s by vpdpbusd into 16 int32 lanes (8 lanes per 32-block, 4 per
; Q6_K 16-group), converted to float and accumulated with a per-lane scale vector
; (d * sub-block scale * activation block scale, permuted from an 8/16-float vector).
;   Q4_K/Q5_K: nibbles of 32 quant bytes: the bytes broadcast to both halves of a zmm, the high
;     half shifted right by 4, & 15 -> sub-blocks 2g, 2g+1; Q5_K ORs 16 where qh bit 2g / 2g+1
;     is set. Mins: 8-lane (dmin * m_j) * dx_j * s_j from the Q8A block sums.
;   Q6_K: 64 ql bytes & 15 / >> 4 give values 0-63 / 64-127 of a half; qh bits moved to bits 4-5
;     by per-half variable shifts; the -32 offset is taken off per lane as vpdpbusd(32, x).




; args: [0] w: Q4_K [M, K/256 superblocks of 144 B]   [1] xq: Q8A [n, 320 B]
;       [2] y: f32 [n, M]   [3] n: tokens
; M = 64, K = 256 (1 superblocks, 144 B a row), 1820 rows per L2 chunk,
; tiles of 1 tokens, superblock loop unrolled 1x
define void @reame_matmul_q8a_Q4_K_kvnni_avx512_vnni_a230de5f96af(ptr noalias nocapture readonly %args, i32 %ith, i32 %nth) {
entry:
  %w = load ptr, ptr %args, align 8
  %arg1 = getelementptr i64, ptr %args, i64 1
  %xq = load ptr, ptr %arg1, align 8
  %arg2 = getelementptr i64, ptr %args, i64 2
  %y = load ptr, ptr %arg2, align 8
  %arg3 = getelementptr i64, ptr %args, i64 3
  %n = load i64, ptr %arg3, align 8
  %ith64 = sext i32 %ith to i64
  %nth64 = sext i32 %nth to i64
  %m0 = mul i64 64, %ith64
  %r0 = udiv i64 %m0, %nth64
  %ith1 = add i64 %ith64, 1
  %m1 = mul i64 64, %ith1
  %r1 = udiv i64 %m1, %nth64
  %hasr = icmp ult i64 %r0, %r1
  %hasn = icmp sgt i64 %n, 0
  %go = and i1 %hasr, %hasn
  %nrem = urem i64 %n, 1
  %nfull = sub i64 %n, %nrem
  br i1 %go, label %rc, label %done

rc:
  %rc.r = phi i64 [ %r0, %entry ], [ %rc.e, %rc.end ]
  %rc.e0 = add i64 %rc.r, 1820
  %rc.lt = icmp ult i64 %rc.e0, %r1
  %rc.e = select i1 %rc.lt, i64 %rc.e0, i64 %r1
  br label %t1

t1:
  %t1.t = phi i64 [ 0, %rc ], [ %t1.tn, %t1.rend ]
  %t1.tk0 = add i64 %t1.t, 0
  %t1.xo0 = mul i64 %t1.tk0, 320
  %t1.x0 = getelementptr i8, ptr %xq, i64 %t1.xo0
  %t1.xd0 = getelementptr i8, ptr %t1.x0, i64 256
  %t1.xs0 = getelementptr i8, ptr %t1.x0, i64 288
  %t1.yo0 = mul i64 %t1.tk0, 64
  %t1.yt0 = getelementptr float, ptr %y, i64 %t1.yo0
  br label %t1.row

t1.row:
  %t1.r = phi i64 [ %rc.r, %t1 ], [ %t1.rn, %t1.fin ]
  %t1.woff = mul i64 %t1.r, 144
  %t1.wr = getelementptr i8, ptr %w, i64 %t1.woff
  br label %t1.sb

t1.sb:
  %t1.b = phi i64 [ 0, %t1.row ], [ %t1.bn, %t1.sb ]
  %t1.a.f00 = phi <16 x float> [ zeroinitializer, %t1.row ], [ %t1.u0.f00, %t1.sb ]
  %t1.a.m0 = phi <8 x float> [ zeroinitializer, %t1.row ], [ %t1.u0.m0, %t1.sb ]
  %t1.bi0 = add i64 %t1.b, 0
  %t1.u0.wo = mul i64 %t1.bi0, 144
  %t1.u0.wb = getelementptr i8, ptr %t1.wr, i64 %t1.u0.wo
  %t1.u0.pf0 = getelementptr i8, ptr %t1.u0.wb, i64 8192
  call void @llvm.prefetch.p0(ptr %t1.u0.pf0, i32 0, i32 3, i32 1)
  %t1.u0.pf64 = getelementptr i8, ptr %t1.u0.wb, i64 8256
  call void @llvm.prefetch.p0(ptr %t1.u0.pf64, i32 0, i32 3, i32 1)
  %t1.u0.pf128 = getelementptr i8, ptr %t1.u0.wb, i64 8320
  call void @llvm.prefetch.p0(ptr %t1.u0.pf128, i32 0, i32 3, i32 1)
  %t1.u0.qo = mul i64 %t1.bi0, 256
  %t1.u0.so = mul i64 %t1.bi0, 32
  %t1.u0.q0 = getelementptr i8, ptr %t1.x0, i64 %t1.u0.qo
  %t1.u0.d0 = getelementptr i8, ptr %t1.xd0, i64 %t1.u0.so
  %t1.u0.s0 = getelementptr i8, ptr %t1.xs0, i64 %t1.u0.so

  %t1.u0.dd = load <2 x half>, ptr %t1.u0.wb, align 1
  %t1.u0.ddf = fpext <2 x half> %t1.u0.dd to <2 x float>
  %t1.u0.ddv = shufflevector <2 x float> %t1.u0.ddf, <2 x float> poison, <16 x i32> <i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1>
  %t1.u0.k.p0 = getelementptr i8, ptr %t1.u0.wb, i64 4
  %t1.u0.k.u = load <3 x i32>, ptr %t1.u0.k.p0, align 1
  %t1.u0.k.a = shufflevector <3 x i32> %t1.u0.k.u, <3 x i32> poison, <4 x i32> <i32 0, i32 0, i32 1, i32 1>
  %t1.u0.k.b = shufflevector <3 x i32> %t1.u0.k.u, <3 x i32> poison, <4 x i32> <i32 2, i32 2, i32 2, i32 2>
  %t1.u0.k.lo = and <4 x i32> %t1.u0.k.a, <i32 u0x3F3F3F3F, i32 0, i32 u0x3F3F3F3F, i32 0>
  %t1.u0.k.as = lshr <4 x i32> %t1.u0.k.a, splat (i32 2)
  %t1.u0.k.ah = and <4 x i32> %t1.u0.k.as, <i32 0, i32 u0x30303030, i32 0, i32 u0x30303030>
  %t1.u0.k.bs = lshr <4 x i32> %t1.u0.k.b, <i32 0, i32 0, i32 0, i32 4>
  %t1.u0.k.bh = and <4 x i32> %t1.u0.k.bs, <i32 0, i32 u0x0F0F0F0F, i32 0, i32 u0x0F0F0F0F>
  %t1.u0.k.o1 = or <4 x i32> %t1.u0.k.lo, %t1.u0.k.ah
  %t1.u0.k.w = or <4 x i32> %t1.u0.k.o1, %t1.u0.k.bh
  %t1.u0.k.v = bitcast <4 x i32> %t1.u0.k.w to <16 x i8>

  %t1.u0.vf = uitofp <16 x i8> %t1.u0.k.v to <16 x float>
  %t1.u0.vd = fmul <16 x float> %t1.u0.vf, %t1.u0.ddv
  %t1.u0.sd = shufflevector <16 x float> %t1.u0.vd, <16 x float> poison, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7>
  %t1.u0.md = shufflevector <16 x float> %t1.u0.vd, <16 x float> poison, <8 x i32> <i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15>
  %t1.u0.qp0 = getelementptr i8, ptr %t1.u0.wb, i64 16
  %t1.u0.qv0 = load <32 x i8>, ptr %t1.u0.qp0, align 1
  %t1.u0.qw0 = shufflevector <32 x i8> %t1.u0.qv0, <32 x i8> poison, <64 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31, i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %t1.u0.qi0 = bitcast <64 x i8> %t1.u0.qw0 to <32 x i16>
  %t1.u0.qs0 = lshr <32 x i16> %t1.u0.qi0, <i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4>
  %t1.u0.qb0 = bitcast <32 x i16> %t1.u0.qs0 to <64 x i8>
  %t1.u0.qn0 = and <64 x i8> %t1.u0.qb0, <i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15>
  %t1.u0.Q0 = or <64 x i8> %t1.u0.qn0, zeroinitializer
  %t1.u0.qp1 = getelementptr i8, ptr %t1.u0.wb, i64 48
  %t1.u0.qv1 = load <32 x i8>, ptr %t1.u0.qp1, align 1
  %t1.u0.qw1 = shufflevector <32 x i8> %t1.u0.qv1, <32 x i8> poison, <64 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31, i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %t1.u0.qi1 = bitcast <64 x i8> %t1.u0.qw1 to <32 x i16>
  %t1.u0.qs1 = lshr <32 x i16> %t1.u0.qi1, <i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4>
  %t1.u0.qb1 = bitcast <32 x i16> %t1.u0.qs1 to <64 x i8>
  %t1.u0.qn1 = and <64 x i8> %t1.u0.qb1, <i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15>
  %t1.u0.Q1 = or <64 x i8> %t1.u0.qn1, zeroinitializer
  %t1.u0.qp2 = getelementptr i8, ptr %t1.u0.wb, i64 80
  %t1.u0.qv2 = load <32 x i8>, ptr %t1.u0.qp2, align 1
  %t1.u0.qw2 = shufflevector <32 x i8> %t1.u0.qv2, <32 x i8> poison, <64 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31, i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %t1.u0.qi2 = bitcast <64 x i8> %t1.u0.qw2 to <32 x i16>
  %t1.u0.qs2 = lshr <32 x i16> %t1.u0.qi2, <i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4>
  %t1.u0.qb2 = bitcast <32 x i16> %t1.u0.qs2 to <64 x i8>
  %t1.u0.qn2 = and <64 x i8> %t1.u0.qb2, <i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15>
  %t1.u0.Q2 = or <64 x i8> %t1.u0.qn2, zeroinitializer
  %t1.u0.qp3 = getelementptr i8, ptr %t1.u0.wb, i64 112
  %t1.u0.qv3 = load <32 x i8>, ptr %t1.u0.qp3, align 1
  %t1.u0.qw3 = shufflevector <32 x i8> %t1.u0.qv3, <32 x i8> poison, <64 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31, i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15, i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %t1.u0.qi3 = bitcast <64 x i8> %t1.u0.qw3 to <32 x i16>
  %t1.u0.qs3 = lshr <32 x i16> %t1.u0.qi3, <i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 0, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4, i16 4>
  %t1.u0.qb3 = bitcast <32 x i16> %t1.u0.qs3 to <64 x i8>
  %t1.u0.qn3 = and <64 x i8> %t1.u0.qb3, <i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15, i8 15>
  %t1.u0.Q3 = or <64 x i8> %t1.u0.qn3, zeroinitializer
  %t1.u0.dx0 = load <8 x float>, ptr %t1.u0.d0, align 4
  %t1.u0.S0 = fmul <8 x float> %t1.u0.sd, %t1.u0.dx0
  %t1.u0.sv0 = load <8 x i32>, ptr %t1.u0.s0, align 4
  %t1.u0.svf0 = sitofp <8 x i32> %t1.u0.sv0 to <8 x float>
  %t1.u0.ds0 = fmul <8 x float> %t1.u0.dx0, %t1.u0.svf0
  %t1.u0.m0 = call <8 x float> @llvm.fma.v8f32(<8 x float> %t1.u0.md, <8 x float> %t1.u0.ds0, <8 x float> %t1.a.m0)
  %t1.u0.xp0_0 = getelementptr i8, ptr %t1.u0.q0, i64 0
  %t1.u0.X0_0 = load <64 x i8>, ptr %t1.u0.xp0_0, align 1
  %t1.u0.I0_0 = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <64 x i8> %t1.u0.Q0, <64 x i8> %t1.u0.X0_0)
  %t1.u0.F0_0 = sitofp <16 x i32> %t1.u0.I0_0 to <16 x float>
  %t1.u0.SC0_0 = shufflevector <8 x float> %t1.u0.S0, <8 x float> poison, <16 x i32> <i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 0, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1, i32 1>
  %t1.u0.f00_0 = call <16 x float> @llvm.fma.v16f32(<16 x float> %t1.u0.F0_0, <16 x float> %t1.u0.SC0_0, <16 x float> %t1.a.f00)

  %t1.u0.xp0_1 = getelementptr i8, ptr %t1.u0.q0, i64 64
  %t1.u0.X0_1 = load <64 x i8>, ptr %t1.u0.xp0_1, align 1
  %t1.u0.I0_1 = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <64 x i8> %t1.u0.Q1, <64 x i8> %t1.u0.X0_1)
  %t1.u0.F0_1 = sitofp <16 x i32> %t1.u0.I0_1 to <16 x float>
  %t1.u0.SC0_1 = shufflevector <8 x float> %t1.u0.S0, <8 x float> poison, <16 x i32> <i32 2, i32 2, i32 2, i32 2, i32 2, i32 2, i32 2, i32 2, i32 3, i32 3, i32 3, i32 3, i32 3, i32 3, i32 3, i32 3>
  %t1.u0.f00_1 = call <16 x float> @llvm.fma.v16f32(<16 x float> %t1.u0.F0_1, <16 x float> %t1.u0.SC0_1, <16 x float> %t1.u0.f00_0)

  %t1.u0.xp0_2 = getelementptr i8, ptr %t1.u0.q0, i64 128
  %t1.u0.X0_2 = load <64 x i8>, ptr %t1.u0.xp0_2, align 1
  %t1.u0.I0_2 = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <64 x i8> %t1.u0.Q2, <64 x i8> %t1.u0.X0_2)
  %t1.u0.F0_2 = sitofp <16 x i32> %t1.u0.I0_2 to <16 x float>
  %t1.u0.SC0_2 = shufflevector <8 x float> %t1.u0.S0, <8 x float> poison, <16 x i32> <i32 4, i32 4, i32 4, i32 4, i32 4, i32 4, i32 4, i32 4, i32 5, i32 5, i32 5, i32 5, i32 5, i32 5, i32 5, i32 5>
  %t1.u0.f00_2 = call <16 x float> @llvm.fma.v16f32(<16 x float> %t1.u0.F0_2, <16 x float> %t1.u0.SC0_2, <16 x float> %t1.u0.f00_1)

  %t1.u0.xp0_3 = getelementptr i8, ptr %t1.u0.q0, i64 192
  %t1.u0.X0_3 = load <64 x i8>, ptr %t1.u0.xp0_3, align 1
  %t1.u0.I0_3 = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <64 x i8> %t1.u0.Q3, <64 x i8> %t1.u0.X0_3)
  %t1.u0.F0_3 = sitofp <16 x i32> %t1.u0.I0_3 to <16 x float>
  %t1.u0.SC0_3 = shufflevector <8 x float> %t1.u0.S0, <8 x float> poison, <16 x i32> <i32 6, i32 6, i32 6, i32 6, i32 6, i32 6, i32 6, i32 6, i32 7, i32 7, i32 7, i32 7, i32 7, i32 7, i32 7, i32 7>
  %t1.u0.f00 = call <16 x float> @llvm.fma.v16f32(<16 x float> %t1.u0.F0_3, <16 x float> %t1.u0.SC0_3, <16 x float> %t1.u0.f00_2)


  %t1.bn = add i64 %t1.b, 1
  %t1.bmore = icmp ult i64 %t1.bn, 1
  br i1 %t1.bmore, label %t1.sb, label %t1.fin

t1.fin:
  %t1.f.yf0 = call reassoc float @llvm.vector.reduce.fadd.v16f32(float -0.0, <16 x float> %t1.u0.f00)
  %t1.f.ym0 = call reassoc float @llvm.vector.reduce.fadd.v8f32(float -0.0, <8 x float> %t1.u0.m0)
  %t1.f.y0 = fsub float %t1.f.yf0, %t1.f.ym0

  %t1.yp0 = getelementptr float, ptr %t1.yt0, i64 %t1.r
  store float %t1.f.y0, ptr %t1.yp0, align 4
  %t1.rn = add i64 %t1.r, 1
  %t1.rmore = icmp ult i64 %t1.rn, %rc.e
  br i1 %t1.rmore, label %t1.row, label %t1.rend

t1.rend:
  %t1.tn = add i64 %t1.t, 1
  %t1.tmore = icmp ult i64 %t1.tn, %n
  br i1 %t1.tmore, label %t1, label %rc.end


rc.end:
  %rc.more = icmp ult i64 %rc.e, %r1
  br i1 %rc.more, label %rc, label %done

done:
  ret void
}

declare void @llvm.prefetch.p0(ptr, i32, i32, i32)


declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <64 x i8>, <64 x i8>)
declare <64 x i8> @llvm.x86.vgf2p8affineqb.512(<64 x i8>, <64 x i8>, i8)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare float @llvm.vector.reduce.fadd.v16f32(float, <16 x float>)
declare float @llvm.vector.reduce.fadd.v8f32(float, <8 x float>)
