; golden: rms_norm_F32_generic: rms_norm/F32/generic@generic[K=64,eps=1e-06,vl=4]
; symbol: reame_rms_norm_F32_generic_generic_401e84ab69cd
; RMSNorm over rows: y[r, :] = x[r, :] * w / sqrt(mean(x[r, :]^2) + eps)
; args: [0] x: f32 [n, K]   [1] w: f32 [K]   [2] y: f32 [n, K]   [3] n: rows
; rows are split between threads; K = 64 and eps are compile-time constants.
define void @reame_rms_norm_F32_generic_generic_401e84ab69cd(ptr noalias nocapture readonly %args, i32 %ith, i32 %nth) {
entry:
  %x = load ptr, ptr %args
  %a1 = getelementptr i64, ptr %args, i64 1
  %w = load ptr, ptr %a1
  %a2 = getelementptr i64, ptr %args, i64 2
  %y = load ptr, ptr %a2
  %a3 = getelementptr i64, ptr %args, i64 3
  %n = load i64, ptr %a3
  %ith64 = sext i32 %ith to i64
  %nth64 = sext i32 %nth to i64
  %s0 = mul i64 %n, %ith64
  %r0 = udiv i64 %s0, %nth64
  %ith1 = add i64 %ith64, 1
  %s1 = mul i64 %n, %ith1
  %r1 = udiv i64 %s1, %nth64
  %any = icmp ult i64 %r0, %r1
  br i1 %any, label %row, label %done

row:
  %r = phi i64 [ %r0, %entry ], [ %rnext, %normed ]
  %off = mul i64 %r, 64
  %xr = getelementptr float, ptr %x, i64 %off
  %yr = getelementptr float, ptr %y, i64 %off
  br label %sq

sq:                                             ; sum of squares, VL lanes at a time
  %i = phi i64 [ 0, %row ], [ %inext, %sq ]
  %acc = phi <4 x float> [ zeroinitializer, %row ], [ %acc1, %sq ]
  %px = getelementptr float, ptr %xr, i64 %i
  %vx = load <4 x float>, ptr %px, align 4
  %acc1 = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %vx, <4 x float> %vx, <4 x float> %acc)
  %inext = add i64 %i, 4
  %more = icmp ult i64 %inext, 64
  br i1 %more, label %sq, label %sqtail

sqtail:
  %hsum = call float @llvm.vector.reduce.fadd.v4f32(float 0.0, <4 x float> %acc1)
  %ss = fadd float %hsum, 0.0
  %mean = fmul float %ss, 0x3F90000000000000
  %me = fadd float %mean, 0x3EB0C6F7A0000000
  %rt = call float @llvm.sqrt.f32(float %me)
  %scale = fdiv float 1.0, %rt
  %sv0 = insertelement <4 x float> poison, float %scale, i64 0
  %sv = shufflevector <4 x float> %sv0, <4 x float> poison, <4 x i32> zeroinitializer
  br label %mul

mul:
  %k = phi i64 [ 0, %sqtail ], [ %knext, %mul ]
  %pxk = getelementptr float, ptr %xr, i64 %k
  %vxk = load <4 x float>, ptr %pxk, align 4
  %pwk = getelementptr float, ptr %w, i64 %k
  %vwk = load <4 x float>, ptr %pwk, align 4
  %t1 = fmul <4 x float> %vxk, %sv
  %t2 = fmul <4 x float> %t1, %vwk
  %pyk = getelementptr float, ptr %yr, i64 %k
  store <4 x float> %t2, ptr %pyk, align 4
  %knext = add i64 %k, 4
  %kmore = icmp ult i64 %knext, 64
  br i1 %kmore, label %mul, label %multail

multail:
  br label %normed

normed:
  %rnext = add i64 %r, 1
  %rmore = icmp ult i64 %rnext, %r1
  br i1 %rmore, label %row, label %done

done:
  ret void
}

declare <4 x float> @llvm.fmuladd.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare float @llvm.vector.reduce.fadd.v4f32(float, <4 x float>)
declare float @llvm.sqrt.f32(float)
