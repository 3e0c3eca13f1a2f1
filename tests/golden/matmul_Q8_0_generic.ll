; golden: matmul_Q8_0_generic: matmul/Q8_0/generic@generic[K=64,M=64,acc=0,nt=4,rows=1,vl=4]
; symbol: reame_matmul_Q8_0_generic_generic_849daf95417f
; matmul (generic): y[n, M] = x[n, K] @ W[M, K]^T, W Q8_0, M = 64, K = 64
; args: [0] w: M rows of 68 bytes   [1] x: f32 [n, K]   [2] y: f32 [n, M]   [3] n
; 4 lanes; tile 1 rows x 4 tokens (weights dequantised once per tile, used for
; 4 tokens); tokens walked in panels of 1024 (256 KiB of x, kept in L2);
; n < 4: one row stream per thread (tile 1 x 1). Threads split M in units of 1 rows.

define internal fastcc void @tile_1x1(ptr noalias %w, ptr noalias %x, ptr noalias %y, i64 %r, i64 %t) {
entry:
  %ri0 = add i64 %r, 0
  %ro0 = mul i64 %ri0, 68
  %wr0 = getelementptr i8, ptr %w, i64 %ro0
  %tj0 = add i64 %t, 0
  %xo0 = mul i64 %tj0, 64
  %xr0 = getelementptr float, ptr %x, i64 %xo0
  br label %loop

loop:                                           ; one block / group of 32 elements
  %g = phi i64 [ 0, %entry ], [ %gn, %loop ]
  %a0_0_0 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_0_0.c4, %loop ]
  %a0_0_1 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_0_1.c5, %loop ]
  %a0_0_2 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_0_2.c6, %loop ]
  %a0_0_3 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_0_3.c7, %loop ]
  %bo = mul i64 %g, 34
  %eo = mul i64 %g, 32
  %b0 = getelementptr i8, ptr %wr0, i64 %bo
  %h0.d.p = getelementptr i8, ptr %b0, i64 0
  %h0.d.h = load i16, ptr %h0.d.p, align 1
  %h0.d.z = zext i16 %h0.d.h to i32
  %h0.d.em = and i32 %h0.d.z, u0x7FFF
  %h0.d.sg0 = and i32 %h0.d.z, u0x8000
  %h0.d.sg = shl i32 %h0.d.sg0, 16
  %h0.d.sh = shl i32 %h0.d.em, 13
  %h0.d.f0 = bitcast i32 %h0.d.sh to float
  %h0.d.f1 = fmul float %h0.d.f0, 0x46F0000000000000
  %h0.d.b1 = bitcast float %h0.d.f1 to i32
  %h0.d.inf = icmp uge i32 %h0.d.em, u0x7C00
  %h0.d.bi = or i32 %h0.d.sh, u0x7F800000
  %h0.d.b2 = select i1 %h0.d.inf, i32 %h0.d.bi, i32 %h0.d.b1
  %h0.d.b3 = or i32 %h0.d.b2, %h0.d.sg
  %h0.d = bitcast i32 %h0.d.b3 to float

  %h0.d.v.ins = insertelement <4 x float> poison, float %h0.d, i64 0
  %h0.d.v = shufflevector <4 x float> %h0.d.v.ins, <4 x float> poison, <4 x i32> zeroinitializer



  %xg0 = getelementptr float, ptr %xr0, i64 %eo
  %w0c0.p = getelementptr i8, ptr %b0, i64 2
  %w0c0.b = load <4 x i8>, ptr %w0c0.p, align 1
  %w0c0.f = sitofp <4 x i8> %w0c0.b to <4 x float>
  %w0c0 = fmul <4 x float> %h0.d.v, %w0c0.f

  %xp0c0 = getelementptr float, ptr %xg0, i64 0
  %x0c0 = load <4 x float>, ptr %xp0c0, align 4
  %a0_0_0.c0 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c0, <4 x float> %x0c0, <4 x float> %a0_0_0)
  %w0c1.p = getelementptr i8, ptr %b0, i64 6
  %w0c1.b = load <4 x i8>, ptr %w0c1.p, align 1
  %w0c1.f = sitofp <4 x i8> %w0c1.b to <4 x float>
  %w0c1 = fmul <4 x float> %h0.d.v, %w0c1.f

  %xp0c1 = getelementptr float, ptr %xg0, i64 4
  %x0c1 = load <4 x float>, ptr %xp0c1, align 4
  %a0_0_1.c1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c1, <4 x float> %x0c1, <4 x float> %a0_0_1)
  %w0c2.p = getelementptr i8, ptr %b0, i64 10
  %w0c2.b = load <4 x i8>, ptr %w0c2.p, align 1
  %w0c2.f = sitofp <4 x i8> %w0c2.b to <4 x float>
  %w0c2 = fmul <4 x float> %h0.d.v, %w0c2.f

  %xp0c2 = getelementptr float, ptr %xg0, i64 8
  %x0c2 = load <4 x float>, ptr %xp0c2, align 4
  %a0_0_2.c2 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c2, <4 x float> %x0c2, <4 x float> %a0_0_2)
  %w0c3.p = getelementptr i8, ptr %b0, i64 14
  %w0c3.b = load <4 x i8>, ptr %w0c3.p, align 1
  %w0c3.f = sitofp <4 x i8> %w0c3.b to <4 x float>
  %w0c3 = fmul <4 x float> %h0.d.v, %w0c3.f

  %xp0c3 = getelementptr float, ptr %xg0, i64 12
  %x0c3 = load <4 x float>, ptr %xp0c3, align 4
  %a0_0_3.c3 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c3, <4 x float> %x0c3, <4 x float> %a0_0_3)
  %w0c4.p = getelementptr i8, ptr %b0, i64 18
  %w0c4.b = load <4 x i8>, ptr %w0c4.p, align 1
  %w0c4.f = sitofp <4 x i8> %w0c4.b to <4 x float>
  %w0c4 = fmul <4 x float> %h0.d.v, %w0c4.f

  %xp0c4 = getelementptr float, ptr %xg0, i64 16
  %x0c4 = load <4 x float>, ptr %xp0c4, align 4
  %a0_0_0.c4 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c4, <4 x float> %x0c4, <4 x float> %a0_0_0.c0)
  %w0c5.p = getelementptr i8, ptr %b0, i64 22
  %w0c5.b = load <4 x i8>, ptr %w0c5.p, align 1
  %w0c5.f = sitofp <4 x i8> %w0c5.b to <4 x float>
  %w0c5 = fmul <4 x float> %h0.d.v, %w0c5.f

  %xp0c5 = getelementptr float, ptr %xg0, i64 20
  %x0c5 = load <4 x float>, ptr %xp0c5, align 4
  %a0_0_1.c5 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c5, <4 x float> %x0c5, <4 x float> %a0_0_1.c1)
  %w0c6.p = getelementptr i8, ptr %b0, i64 26
  %w0c6.b = load <4 x i8>, ptr %w0c6.p, align 1
  %w0c6.f = sitofp <4 x i8> %w0c6.b to <4 x float>
  %w0c6 = fmul <4 x float> %h0.d.v, %w0c6.f

  %xp0c6 = getelementptr float, ptr %xg0, i64 24
  %x0c6 = load <4 x float>, ptr %xp0c6, align 4
  %a0_0_2.c6 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c6, <4 x float> %x0c6, <4 x float> %a0_0_2.c2)
  %w0c7.p = getelementptr i8, ptr %b0, i64 30
  %w0c7.b = load <4 x i8>, ptr %w0c7.p, align 1
  %w0c7.f = sitofp <4 x i8> %w0c7.b to <4 x float>
  %w0c7 = fmul <4 x float> %h0.d.v, %w0c7.f

  %xp0c7 = getelementptr float, ptr %xg0, i64 28
  %x0c7 = load <4 x float>, ptr %xp0c7, align 4
  %a0_0_3.c7 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c7, <4 x float> %x0c7, <4 x float> %a0_0_3.c3)
  %gn = add i64 %g, 1
  %gmore = icmp ult i64 %gn, 2
  br i1 %gmore, label %loop, label %tail

tail:
  %s0_0.u0 = fadd <4 x float> zeroinitializer, %a0_0_0.c4
  %s0_0.u1 = fadd <4 x float> %s0_0.u0, %a0_0_1.c5
  %s0_0.u2 = fadd <4 x float> %s0_0.u1, %a0_0_2.c6
  %s0_0.u3 = fadd <4 x float> %s0_0.u2, %a0_0_3.c7
  %s0_0.v = fadd <4 x float> %s0_0.u3, zeroinitializer
  %s0_0.r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float -0.0, <4 x float> %s0_0.v)
  %yo0 = mul i64 %tj0, 64
  %yb0 = add i64 %yo0, %r
  %yp0_0 = getelementptr float, ptr %y, i64 %yb0
  %ypi0_0 = getelementptr float, ptr %yp0_0, i64 0
  store float %s0_0.r, ptr %ypi0_0, align 4
  ret void
}

define internal fastcc void @tile_1x4(ptr noalias %w, ptr noalias %x, ptr noalias %y, i64 %r, i64 %t) {
entry:
  %ri0 = add i64 %r, 0
  %ro0 = mul i64 %ri0, 68
  %wr0 = getelementptr i8, ptr %w, i64 %ro0
  %tj0 = add i64 %t, 0
  %xo0 = mul i64 %tj0, 64
  %xr0 = getelementptr float, ptr %x, i64 %xo0
  %tj1 = add i64 %t, 1
  %xo1 = mul i64 %tj1, 64
  %xr1 = getelementptr float, ptr %x, i64 %xo1
  %tj2 = add i64 %t, 2
  %xo2 = mul i64 %tj2, 64
  %xr2 = getelementptr float, ptr %x, i64 %xo2
  %tj3 = add i64 %t, 3
  %xo3 = mul i64 %tj3, 64
  %xr3 = getelementptr float, ptr %x, i64 %xo3
  br label %loop

loop:                                           ; one block / group of 32 elements
  %g = phi i64 [ 0, %entry ], [ %gn, %loop ]
  %a0_0_0 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_0_0.c7, %loop ]
  %a0_1_0 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_1_0.c7, %loop ]
  %a0_2_0 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_2_0.c7, %loop ]
  %a0_3_0 = phi <4 x float> [ zeroinitializer, %entry ], [ %a0_3_0.c7, %loop ]
  %bo = mul i64 %g, 34
  %eo = mul i64 %g, 32
  %b0 = getelementptr i8, ptr %wr0, i64 %bo
  %h0.d.p = getelementptr i8, ptr %b0, i64 0
  %h0.d.h = load i16, ptr %h0.d.p, align 1
  %h0.d.z = zext i16 %h0.d.h to i32
  %h0.d.em = and i32 %h0.d.z, u0x7FFF
  %h0.d.sg0 = and i32 %h0.d.z, u0x8000
  %h0.d.sg = shl i32 %h0.d.sg0, 16
  %h0.d.sh = shl i32 %h0.d.em, 13
  %h0.d.f0 = bitcast i32 %h0.d.sh to float
  %h0.d.f1 = fmul float %h0.d.f0, 0x46F0000000000000
  %h0.d.b1 = bitcast float %h0.d.f1 to i32
  %h0.d.inf = icmp uge i32 %h0.d.em, u0x7C00
  %h0.d.bi = or i32 %h0.d.sh, u0x7F800000
  %h0.d.b2 = select i1 %h0.d.inf, i32 %h0.d.bi, i32 %h0.d.b1
  %h0.d.b3 = or i32 %h0.d.b2, %h0.d.sg
  %h0.d = bitcast i32 %h0.d.b3 to float

  %h0.d.v.ins = insertelement <4 x float> poison, float %h0.d, i64 0
  %h0.d.v = shufflevector <4 x float> %h0.d.v.ins, <4 x float> poison, <4 x i32> zeroinitializer



  %xg0 = getelementptr float, ptr %xr0, i64 %eo
  %xg1 = getelementptr float, ptr %xr1, i64 %eo
  %xg2 = getelementptr float, ptr %xr2, i64 %eo
  %xg3 = getelementptr float, ptr %xr3, i64 %eo
  %w0c0.p = getelementptr i8, ptr %b0, i64 2
  %w0c0.b = load <4 x i8>, ptr %w0c0.p, align 1
  %w0c0.f = sitofp <4 x i8> %w0c0.b to <4 x float>
  %w0c0 = fmul <4 x float> %h0.d.v, %w0c0.f

  %xp0c0 = getelementptr float, ptr %xg0, i64 0
  %x0c0 = load <4 x float>, ptr %xp0c0, align 4
  %xp1c0 = getelementptr float, ptr %xg1, i64 0
  %x1c0 = load <4 x float>, ptr %xp1c0, align 4
  %xp2c0 = getelementptr float, ptr %xg2, i64 0
  %x2c0 = load <4 x float>, ptr %xp2c0, align 4
  %xp3c0 = getelementptr float, ptr %xg3, i64 0
  %x3c0 = load <4 x float>, ptr %xp3c0, align 4
  %a0_0_0.c0 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c0, <4 x float> %x0c0, <4 x float> %a0_0_0)
  %a0_1_0.c0 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c0, <4 x float> %x1c0, <4 x float> %a0_1_0)
  %a0_2_0.c0 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c0, <4 x float> %x2c0, <4 x float> %a0_2_0)
  %a0_3_0.c0 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c0, <4 x float> %x3c0, <4 x float> %a0_3_0)
  %w0c1.p = getelementptr i8, ptr %b0, i64 6
  %w0c1.b = load <4 x i8>, ptr %w0c1.p, align 1
  %w0c1.f = sitofp <4 x i8> %w0c1.b to <4 x float>
  %w0c1 = fmul <4 x float> %h0.d.v, %w0c1.f

  %xp0c1 = getelementptr float, ptr %xg0, i64 4
  %x0c1 = load <4 x float>, ptr %xp0c1, align 4
  %xp1c1 = getelementptr float, ptr %xg1, i64 4
  %x1c1 = load <4 x float>, ptr %xp1c1, align 4
  %xp2c1 = getelementptr float, ptr %xg2, i64 4
  %x2c1 = load <4 x float>, ptr %xp2c1, align 4
  %xp3c1 = getelementptr float, ptr %xg3, i64 4
  %x3c1 = load <4 x float>, ptr %xp3c1, align 4
  %a0_0_0.c1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c1, <4 x float> %x0c1, <4 x float> %a0_0_0.c0)
  %a0_1_0.c1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c1, <4 x float> %x1c1, <4 x float> %a0_1_0.c0)
  %a0_2_0.c1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c1, <4 x float> %x2c1, <4 x float> %a0_2_0.c0)
  %a0_3_0.c1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c1, <4 x float> %x3c1, <4 x float> %a0_3_0.c0)
  %w0c2.p = getelementptr i8, ptr %b0, i64 10
  %w0c2.b = load <4 x i8>, ptr %w0c2.p, align 1
  %w0c2.f = sitofp <4 x i8> %w0c2.b to <4 x float>
  %w0c2 = fmul <4 x float> %h0.d.v, %w0c2.f

  %xp0c2 = getelementptr float, ptr %xg0, i64 8
  %x0c2 = load <4 x float>, ptr %xp0c2, align 4
  %xp1c2 = getelementptr float, ptr %xg1, i64 8
  %x1c2 = load <4 x float>, ptr %xp1c2, align 4
  %xp2c2 = getelementptr float, ptr %xg2, i64 8
  %x2c2 = load <4 x float>, ptr %xp2c2, align 4
  %xp3c2 = getelementptr float, ptr %xg3, i64 8
  %x3c2 = load <4 x float>, ptr %xp3c2, align 4
  %a0_0_0.c2 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c2, <4 x float> %x0c2, <4 x float> %a0_0_0.c1)
  %a0_1_0.c2 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c2, <4 x float> %x1c2, <4 x float> %a0_1_0.c1)
  %a0_2_0.c2 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c2, <4 x float> %x2c2, <4 x float> %a0_2_0.c1)
  %a0_3_0.c2 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c2, <4 x float> %x3c2, <4 x float> %a0_3_0.c1)
  %w0c3.p = getelementptr i8, ptr %b0, i64 14
  %w0c3.b = load <4 x i8>, ptr %w0c3.p, align 1
  %w0c3.f = sitofp <4 x i8> %w0c3.b to <4 x float>
  %w0c3 = fmul <4 x float> %h0.d.v, %w0c3.f

  %xp0c3 = getelementptr float, ptr %xg0, i64 12
  %x0c3 = load <4 x float>, ptr %xp0c3, align 4
  %xp1c3 = getelementptr float, ptr %xg1, i64 12
  %x1c3 = load <4 x float>, ptr %xp1c3, align 4
  %xp2c3 = getelementptr float, ptr %xg2, i64 12
  %x2c3 = load <4 x float>, ptr %xp2c3, align 4
  %xp3c3 = getelementptr float, ptr %xg3, i64 12
  %x3c3 = load <4 x float>, ptr %xp3c3, align 4
  %a0_0_0.c3 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c3, <4 x float> %x0c3, <4 x float> %a0_0_0.c2)
  %a0_1_0.c3 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c3, <4 x float> %x1c3, <4 x float> %a0_1_0.c2)
  %a0_2_0.c3 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c3, <4 x float> %x2c3, <4 x float> %a0_2_0.c2)
  %a0_3_0.c3 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c3, <4 x float> %x3c3, <4 x float> %a0_3_0.c2)
  %w0c4.p = getelementptr i8, ptr %b0, i64 18
  %w0c4.b = load <4 x i8>, ptr %w0c4.p, align 1
  %w0c4.f = sitofp <4 x i8> %w0c4.b to <4 x float>
  %w0c4 = fmul <4 x float> %h0.d.v, %w0c4.f

  %xp0c4 = getelementptr float, ptr %xg0, i64 16
  %x0c4 = load <4 x float>, ptr %xp0c4, align 4
  %xp1c4 = getelementptr float, ptr %xg1, i64 16
  %x1c4 = load <4 x float>, ptr %xp1c4, align 4
  %xp2c4 = getelementptr float, ptr %xg2, i64 16
  %x2c4 = load <4 x float>, ptr %xp2c4, align 4
  %xp3c4 = getelementptr float, ptr %xg3, i64 16
  %x3c4 = load <4 x float>, ptr %xp3c4, align 4
  %a0_0_0.c4 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c4, <4 x float> %x0c4, <4 x float> %a0_0_0.c3)
  %a0_1_0.c4 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c4, <4 x float> %x1c4, <4 x float> %a0_1_0.c3)
  %a0_2_0.c4 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c4, <4 x float> %x2c4, <4 x float> %a0_2_0.c3)
  %a0_3_0.c4 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c4, <4 x float> %x3c4, <4 x float> %a0_3_0.c3)
  %w0c5.p = getelementptr i8, ptr %b0, i64 22
  %w0c5.b = load <4 x i8>, ptr %w0c5.p, align 1
  %w0c5.f = sitofp <4 x i8> %w0c5.b to <4 x float>
  %w0c5 = fmul <4 x float> %h0.d.v, %w0c5.f

  %xp0c5 = getelementptr float, ptr %xg0, i64 20
  %x0c5 = load <4 x float>, ptr %xp0c5, align 4
  %xp1c5 = getelementptr float, ptr %xg1, i64 20
  %x1c5 = load <4 x float>, ptr %xp1c5, align 4
  %xp2c5 = getelementptr float, ptr %xg2, i64 20
  %x2c5 = load <4 x float>, ptr %xp2c5, align 4
  %xp3c5 = getelementptr float, ptr %xg3, i64 20
  %x3c5 = load <4 x float>, ptr %xp3c5, align 4
  %a0_0_0.c5 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c5, <4 x float> %x0c5, <4 x float> %a0_0_0.c4)
  %a0_1_0.c5 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c5, <4 x float> %x1c5, <4 x float> %a0_1_0.c4)
  %a0_2_0.c5 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c5, <4 x float> %x2c5, <4 x float> %a0_2_0.c4)
  %a0_3_0.c5 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c5, <4 x float> %x3c5, <4 x float> %a0_3_0.c4)
  %w0c6.p = getelementptr i8, ptr %b0, i64 26
  %w0c6.b = load <4 x i8>, ptr %w0c6.p, align 1
  %w0c6.f = sitofp <4 x i8> %w0c6.b to <4 x float>
  %w0c6 = fmul <4 x float> %h0.d.v, %w0c6.f

  %xp0c6 = getelementptr float, ptr %xg0, i64 24
  %x0c6 = load <4 x float>, ptr %xp0c6, align 4
  %xp1c6 = getelementptr float, ptr %xg1, i64 24
  %x1c6 = load <4 x float>, ptr %xp1c6, align 4
  %xp2c6 = getelementptr float, ptr %xg2, i64 24
  %x2c6 = load <4 x float>, ptr %xp2c6, align 4
  %xp3c6 = getelementptr float, ptr %xg3, i64 24
  %x3c6 = load <4 x float>, ptr %xp3c6, align 4
  %a0_0_0.c6 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c6, <4 x float> %x0c6, <4 x float> %a0_0_0.c5)
  %a0_1_0.c6 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c6, <4 x float> %x1c6, <4 x float> %a0_1_0.c5)
  %a0_2_0.c6 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c6, <4 x float> %x2c6, <4 x float> %a0_2_0.c5)
  %a0_3_0.c6 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c6, <4 x float> %x3c6, <4 x float> %a0_3_0.c5)
  %w0c7.p = getelementptr i8, ptr %b0, i64 30
  %w0c7.b = load <4 x i8>, ptr %w0c7.p, align 1
  %w0c7.f = sitofp <4 x i8> %w0c7.b to <4 x float>
  %w0c7 = fmul <4 x float> %h0.d.v, %w0c7.f

  %xp0c7 = getelementptr float, ptr %xg0, i64 28
  %x0c7 = load <4 x float>, ptr %xp0c7, align 4
  %xp1c7 = getelementptr float, ptr %xg1, i64 28
  %x1c7 = load <4 x float>, ptr %xp1c7, align 4
  %xp2c7 = getelementptr float, ptr %xg2, i64 28
  %x2c7 = load <4 x float>, ptr %xp2c7, align 4
  %xp3c7 = getelementptr float, ptr %xg3, i64 28
  %x3c7 = load <4 x float>, ptr %xp3c7, align 4
  %a0_0_0.c7 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c7, <4 x float> %x0c7, <4 x float> %a0_0_0.c6)
  %a0_1_0.c7 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c7, <4 x float> %x1c7, <4 x float> %a0_1_0.c6)
  %a0_2_0.c7 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c7, <4 x float> %x2c7, <4 x float> %a0_2_0.c6)
  %a0_3_0.c7 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %w0c7, <4 x float> %x3c7, <4 x float> %a0_3_0.c6)
  %gn = add i64 %g, 1
  %gmore = icmp ult i64 %gn, 2
  br i1 %gmore, label %loop, label %tail

tail:
  %s0_0.u0 = fadd <4 x float> zeroinitializer, %a0_0_0.c7
  %s0_0.v = fadd <4 x float> %s0_0.u0, zeroinitializer
  %s0_1.u0 = fadd <4 x float> zeroinitializer, %a0_1_0.c7
  %s0_1.v = fadd <4 x float> %s0_1.u0, zeroinitializer
  %s0_2.u0 = fadd <4 x float> zeroinitializer, %a0_2_0.c7
  %s0_2.v = fadd <4 x float> %s0_2.u0, zeroinitializer
  %s0_3.u0 = fadd <4 x float> zeroinitializer, %a0_3_0.c7
  %s0_3.v = fadd <4 x float> %s0_3.u0, zeroinitializer
  %s0_0.r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float -0.0, <4 x float> %s0_0.v)
  %s0_1.r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float -0.0, <4 x float> %s0_1.v)
  %s0_2.r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float -0.0, <4 x float> %s0_2.v)
  %s0_3.r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float -0.0, <4 x float> %s0_3.v)
  %yo0 = mul i64 %tj0, 64
  %yb0 = add i64 %yo0, %r
  %yp0_0 = getelementptr float, ptr %y, i64 %yb0
  %ypi0_0 = getelementptr float, ptr %yp0_0, i64 0
  store float %s0_0.r, ptr %ypi0_0, align 4
  %yo1 = mul i64 %tj1, 64
  %yb1 = add i64 %yo1, %r
  %yp0_1 = getelementptr float, ptr %y, i64 %yb1
  %ypi0_1 = getelementptr float, ptr %yp0_1, i64 0
  store float %s0_1.r, ptr %ypi0_1, align 4
  %yo2 = mul i64 %tj2, 64
  %yb2 = add i64 %yo2, %r
  %yp0_2 = getelementptr float, ptr %y, i64 %yb2
  %ypi0_2 = getelementptr float, ptr %yp0_2, i64 0
  store float %s0_2.r, ptr %ypi0_2, align 4
  %yo3 = mul i64 %tj3, 64
  %yb3 = add i64 %yo3, %r
  %yp0_3 = getelementptr float, ptr %y, i64 %yb3
  %ypi0_3 = getelementptr float, ptr %yp0_3, i64 0
  store float %s0_3.r, ptr %ypi0_3, align 4
  ret void
}


define void @reame_matmul_Q8_0_generic_generic_849daf95417f(ptr noalias nocapture readonly %args, i32 %ith, i32 %nth) {
entry:
  %w = load ptr, ptr %args
  %a1 = getelementptr i64, ptr %args, i64 1
  %x = load ptr, ptr %a1
  %a2 = getelementptr i64, ptr %args, i64 2
  %y = load ptr, ptr %a2
  %a3 = getelementptr i64, ptr %args, i64 3
  %n = load i64, ptr %a3
  %ith64 = sext i32 %ith to i64
  %nth64 = sext i32 %nth to i64
  %q0 = mul i64 %ith64, 64
  %u0 = udiv i64 %q0, %nth64
  %ith1 = add i64 %ith64, 1
  %q1 = mul i64 %ith1, 64
  %u1 = udiv i64 %q1, %nth64
  %r0 = mul i64 %u0, 1
  %r1a = mul i64 %u1, 1
  %r1 = call i64 @llvm.umin.i64(i64 %r1a, i64 64)
  %hasr = icmp ult i64 %r0, %r1
  %hasn = icmp ugt i64 %n, 0
  %any = and i1 %hasr, %hasn
  br i1 %any, label %panel, label %done

panel:                                          ; tokens [p0, pe)
  %p0 = phi i64 [ 0, %entry ], [ %p1, %pnext ]
  %p1 = add i64 %p0, 1024
  %pe = call i64 @llvm.umin.i64(i64 %p1, i64 %n)
  %pn = sub i64 %pe, %p0
  %pnt = udiv i64 %pn, 4
  %pnf = mul i64 %pnt, 4
  %pf = add i64 %p0, %pnf                       ; end of the whole 4-token tiles
  br label %B.start

B.start:
  %rA = add i64 %r0, 0
  br label %B.rcheck

B.rcheck:                                       ; rows [rA, r1) one at a time
  %br = phi i64 [ %rA, %B.start ], [ %brn, %B.rnext ]
  %brmore = icmp ult i64 %br, %r1
  br i1 %brmore, label %B.tcheck, label %pnext

B.tcheck:
  %bt = phi i64 [ %p0, %B.rcheck ], [ %btn, %B.tbody ]
  %btmore = icmp ult i64 %bt, %pf
  br i1 %btmore, label %B.tbody, label %B.scheck

B.tbody:
  call fastcc void @tile_1x4(ptr %w, ptr %x, ptr %y, i64 %br, i64 %bt)
  %btn = add i64 %bt, 4
  br label %B.tcheck

B.scheck:
  %bs = phi i64 [ %bt, %B.tcheck ], [ %bsn, %B.sbody ]
  %bsmore = icmp ult i64 %bs, %pe
  br i1 %bsmore, label %B.sbody, label %B.rnext

B.sbody:
  call fastcc void @tile_1x1(ptr %w, ptr %x, ptr %y, i64 %br, i64 %bs)
  %bsn = add i64 %bs, 1
  br label %B.scheck

B.rnext:
  %brn = add i64 %br, 1
  br label %B.rcheck

pnext:
  %pmore = icmp ult i64 %p1, %n
  br i1 %pmore, label %panel, label %done

done:
  ret void
}

declare <4 x float> @llvm.fmuladd.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare float @llvm.vector.reduce.fadd.v4f32(float, <4 x float>)
declare i64 @llvm.umin.i64(i64, i64)
