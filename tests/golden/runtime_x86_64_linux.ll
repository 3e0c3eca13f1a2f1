; golden: runtime_x86_64_linux: runtime_generic[x86_64,linux]
; symbol: __RT___run
; The step runtime: a program interpreter that every pool thread enters once per step.
;
; Work inside an op is claimed dynamically: the op is cut into `nchunks` slices and each thread
; claims the next free slice with a compare-and-swap and calls the kernel with (slice, nchunks)
; as its (ith, nth), until none is left. An op is complete when all its slices are done (not
; when all threads arrive), so a thread that loses its core to another process delays at most
; the slice it holds, and a thread that arrives late finds the work done and skips ahead.
; Counters carry the step's generation in their high 32 bits: a thread still walking an old
; step can never claim work of a newer one.
;
; Control block (i64 words; hot words on their own 64-byte lines):
;   [0]  i32 step generation (the step being run)
;   [8]  i32 progress: the futex word sleeping threads wait on, bumped (and woken) when a
;        step starts, an op completes or the pool shuts down while somebody sleeps
;   [24] program pointer   [25] nth   [26] shutdown flag   [27] spins before sleeping
;   [32] threads asleep
; Program (i64 words):
;   [0] n_ops  [1] dispatch table: fn ptrs [2][n_slots]  [2] ptr to active copy index (i64)
;   [3] n_slots  [4] stats: i64 [n_slots][2] (calls, cycles in the kernel summed over threads),
;       or 0 when this step is not sampled
;   [8 + 8*i] op i: slot, args pointer, flags, claim counter, done counter (one cache line)
;   flags: bit 0 = wait for the op to complete before the next one; bits 8-15 = slices per
;   thread (nchunks = that * nth; 0 means 1)

define internal void @relax() alwaysinline {
  call void @llvm.x86.sse2.pause()
  ret void
}

; x86: the TSC; AArch64: the generic timer's virtual count CNTVCT_EL0 (LLVM lowers
; readcyclecounter to `mrs CNTVCT_EL0` there, while readsteadycounter became `mov x0, xzr`: a
; counter stuck at 0). Its frequency is CNTFRQ_EL0 (@hz below); 0 means "calibrate".
define internal i64 @cycles() alwaysinline {
  %c = call i64 @llvm.readcyclecounter()
  ret i64 %c
}

; sleep until the progress word moves on from `seen`, unless the word a waiter watches (the op's
; done counter, or the step generation) is no longer `was`. Waiters announce themselves in the
; sleepers count before that last look, and wakers look at the count after their own write
; (both sequentially consistent), so either the waker sees the sleeper and wakes it, or the
; sleeper sees the write and does not sleep.
define internal void @sleep_on_progress(ptr %ctl, i32 %seen, ptr %watch, i64 %was) {
entry:
  %pprog = getelementptr i64, ptr %ctl, i64 8
  %psleep = getelementptr i64, ptr %ctl, i64 32
  %s0 = atomicrmw add ptr %psleep, i64 1 seq_cst
  %w = load atomic i64, ptr %watch seq_cst, align 8
  %unchanged = icmp eq i64 %w, %was
  br i1 %unchanged, label %check, label %done
check:
  %now = load atomic i32, ptr %pprog seq_cst, align 8
  %same = icmp eq i32 %now, %seen
  br i1 %same, label %block, label %done
block:
  ; futex(&progress, FUTEX_WAIT_PRIVATE, seen, NULL)
  %fr = call i64 (i64, ...) @syscall(i64 202, ptr %pprog, i32 128, i32 %seen, ptr null)
  br label %done
done:
  %s1 = atomicrmw sub ptr %psleep, i64 1 seq_cst
  ret void
}

; after a write waiters watch (done counter, generation): if any thread sleeps, bump the
; progress word and wake them all. Nobody asleep (the usual case) costs one load.
define internal void @advance(ptr %ctl) {
entry:
  %psleep = getelementptr i64, ptr %ctl, i64 32
  %n = load atomic i64, ptr %psleep seq_cst, align 8
  %any = icmp ne i64 %n, 0
  br i1 %any, label %wake, label %out
wake:
  call void @advance_always(ptr %ctl)
  br label %out
out:
  ret void
}

define internal void @advance_always(ptr %ctl) {
entry:
  %pprog = getelementptr i64, ptr %ctl, i64 8
  %old = atomicrmw add ptr %pprog, i32 1 seq_cst
  ; futex(&progress, FUTEX_WAKE_PRIVATE, INT_MAX)
  %fw = call i64 (i64, ...) @syscall(i64 202, ptr %pprog, i32 129, i32 2147483647)
  ret void
}

; wait until every slice of the op at `rec` is done: 1, or 0 if the step moved on meanwhile
define internal i32 @wait_op(ptr %rec, i64 %tagh, i64 %nth64, ptr %ctl, i32 %gen) {
entry:
  %pgen = getelementptr i64, ptr %ctl, i64 0
  %pprogress = getelementptr i64, ptr %ctl, i64 8
  %plimit = getelementptr i64, ptr %ctl, i64 27
  %pflags = getelementptr i64, ptr %rec, i64 2
  %flags = load i64, ptr %pflags
  %cpt0 = lshr i64 %flags, 8
  %cpt1 = and i64 %cpt0, 255
  %cpt0z = icmp eq i64 %cpt1, 0
  %cpt = select i1 %cpt0z, i64 1, i64 %cpt1
  %nch = mul i64 %cpt, %nth64
  %target = or i64 %tagh, %nch
  %pdone = getelementptr i64, ptr %rec, i64 4
  br label %wait
wait:
  %spins = phi i64 [ 0, %entry ], [ %spins1, %pause ], [ 0, %sleep ]
  %seen = load atomic i32, ptr %pprogress seq_cst, align 8
  %dn = load atomic i64, ptr %pdone seq_cst, align 8
  %isdone = icmp eq i64 %dn, %target
  br i1 %isdone, label %done, label %checkgen
checkgen:
  %g = load atomic i32, ptr %pgen acquire, align 8
  %moved = icmp ne i32 %g, %gen
  br i1 %moved, label %stale, label %spin
spin:
  %spins1 = add i64 %spins, 1
  %limit = load i64, ptr %plimit
  %long = icmp ugt i64 %spins1, %limit
  br i1 %long, label %sleep, label %pause
pause:
  call void @relax()
  br label %wait
sleep:
  call void @sleep_on_progress(ptr %ctl, i32 %seen, ptr %pdone, i64 %dn)
  br label %wait
done:
  ret i32 1
stale:
  ret i32 0
}

; walk a program for step `gen`: returns 1 when every op completed, 0 when the step moved on
; (a newer step started: this thread was late and must not touch the new step's work)
define internal i32 @walk(ptr %prog, i32 %ith, i32 %nth, ptr %ctl, i32 %gen) {
entry:
  %nops = load i64, ptr %prog
  %ptab = getelementptr i64, ptr %prog, i64 1
  %tab = load ptr, ptr %ptab
  %pact = getelementptr i64, ptr %prog, i64 2
  %actp = load ptr, ptr %pact
  %active = load atomic i64, ptr %actp acquire, align 8
  %pns = getelementptr i64, ptr %prog, i64 3
  %nslots = load i64, ptr %pns
  %base = mul i64 %active, %nslots
  %pst = getelementptr i64, ptr %prog, i64 4
  %stats = load ptr, ptr %pst
  %hasstats = icmp ne ptr %stats, null
  %first = icmp eq i32 %ith, 0
  %sample = and i1 %hasstats, true
  %tag = zext i32 %gen to i64
  %tagh = shl i64 %tag, 32
  %nth64 = zext i32 %nth to i64
  %empty = icmp eq i64 %nops, 0
  br i1 %empty, label %complete, label %op

op:                                           ; ---- op i: decode its record
  %i = phi i64 [ 0, %entry ], [ %inext, %next ]
  %gstart = phi i64 [ 0, %entry ], [ %gnext, %next ]     ; first op not yet waited for
  %w = shl i64 %i, 3
  %w0 = add i64 %w, 8
  %rec = getelementptr i64, ptr %prog, i64 %w0
  %slot = load i64, ptr %rec
  %pargs = getelementptr i64, ptr %rec, i64 1
  %args = load ptr, ptr %pargs
  %pflags = getelementptr i64, ptr %rec, i64 2
  %flags = load i64, ptr %pflags
  %pclaim = getelementptr i64, ptr %rec, i64 3
  %pdone = getelementptr i64, ptr %rec, i64 4
  %fi = add i64 %base, %slot
  %pfn = getelementptr ptr, ptr %tab, i64 %fi
  %fn = load ptr, ptr %pfn
  %cpt0 = lshr i64 %flags, 8
  %cpt1 = and i64 %cpt0, 255
  %cpt0z = icmp eq i64 %cpt1, 0
  %cpt = select i1 %cpt0z, i64 1, i64 %cpt1
  %nch = mul i64 %cpt, %nth64
  %nch32 = trunc i64 %nch to i32
  %target = or i64 %tagh, %nch
  br label %claim

claim:                                        ; ---- claim the next slice (CAS, tag-checked)
  %tsum = phi i64 [ 0, %op ], [ %tsum1, %ran ], [ %tsum1, %announce ], [ %tsum, %try ]
  %cur = load atomic i64, ptr %pclaim acquire, align 8
  %curtag = and i64 %cur, u0xFFFFFFFF00000000
  %mine = icmp eq i64 %curtag, %tagh
  br i1 %mine, label %claimtag, label %stale
claimtag:
  %k = and i64 %cur, u0xFFFFFFFF
  %left = icmp ult i64 %k, %nch
  br i1 %left, label %try, label %claimed_all
try:
  %cur1 = add i64 %cur, 1
  %cx = cmpxchg ptr %pclaim, i64 %cur, i64 %cur1 acq_rel acquire
  %ok = extractvalue { i64, i1 } %cx, 1
  br i1 %ok, label %run, label %claim
run:
  %k32 = trunc i64 %k to i32
  br i1 %sample, label %timed, label %plain
plain:
  call void %fn(ptr %args, i32 %k32, i32 %nch32)
  br label %ran
timed:
  %t0 = call i64 @cycles()
  call void %fn(ptr %args, i32 %k32, i32 %nch32)
  %t1 = call i64 @cycles()
  %dt = sub i64 %t1, %t0
  br label %ran
ran:
  %d = phi i64 [ 0, %plain ], [ %dt, %timed ]
  %tsum1 = add i64 %tsum, %d
  %old = atomicrmw add ptr %pdone, i64 1 seq_cst
  %old1 = add i64 %old, 1
  %finished = icmp eq i64 %old1, %target
  br i1 %finished, label %announce, label %claim
announce:                                     ; this thread did the op's last slice
  call void @advance(ptr %ctl)
  br label %claim

claimed_all:                                  ; ---- no slice left: account, then wait
  br i1 %sample, label %account, label %waitcheck
account:                                      ; every thread adds its time; thread 0 counts the call
  %s2 = shl i64 %slot, 1
  %pcalls = getelementptr i64, ptr %stats, i64 %s2
  %pcyc = getelementptr i64, ptr %pcalls, i64 1
  %cyc0 = atomicrmw add ptr %pcyc, i64 %tsum monotonic
  %one = zext i1 %first to i64
  %calls0 = atomicrmw add ptr %pcalls, i64 %one monotonic
  br label %waitcheck
waitcheck:
  %bar = and i64 %flags, 1
  %needwait = icmp ne i64 %bar, 0
  br i1 %needwait, label %wait, label %next

wait:                                         ; ---- wait for every op since the last wait
  %j = phi i64 [ %gstart, %waitcheck ], [ %j1, %waited ]
  %wj = shl i64 %j, 3
  %wj0 = add i64 %wj, 8
  %recj = getelementptr i64, ptr %prog, i64 %wj0
  %okj = call i32 @wait_op(ptr %recj, i64 %tagh, i64 %nth64, ptr %ctl, i32 %gen)
  %isok = icmp ne i32 %okj, 0
  br i1 %isok, label %waited, label %stale
waited:
  %j1 = add i64 %j, 1
  %jmore = icmp ule i64 %j1, %i
  br i1 %jmore, label %wait, label %next

next:
  %inext = add i64 %i, 1
  %gnext = select i1 %needwait, i64 %inext, i64 %gstart
  %more = icmp ult i64 %inext, %nops
  br i1 %more, label %op, label %complete
complete:
  ret i32 1
stale:
  ret i32 0
}

; run one step of a program on this thread (used by tests through `_launch`)
define void @__RT___run(ptr %prog, i32 %ith, i32 %nth, ptr %ctl) {
entry:
  %pgen = getelementptr i64, ptr %ctl, i64 0
  %g = load atomic i32, ptr %pgen acquire, align 8
  %r = call i32 @walk(ptr %prog, i32 %ith, i32 %nth, ptr %ctl, i32 %g)
  ret void
}

; a pool worker: waits for each new step, helps with it, until shutdown. The generation starts
; at 0 in a new control block: a step launched before the worker got here still gets its help.
define void @__RT___worker(ptr %ctl, i32 %ith) {
entry:
  %pgen = getelementptr i64, ptr %ctl, i64 0
  %pprogress = getelementptr i64, ptr %ctl, i64 8
  %pprog = getelementptr i64, ptr %ctl, i64 24
  %pnth = getelementptr i64, ptr %ctl, i64 25
  %pstop = getelementptr i64, ptr %ctl, i64 26
  %plimit = getelementptr i64, ptr %ctl, i64 27
  br label %wait
wait:
  %seengen = phi i32 [ 0, %entry ], [ %seengen, %pause ], [ %seengen, %slept ], [ %g, %work ]
  %k = phi i64 [ 0, %entry ], [ %k1, %pause ], [ 0, %slept ], [ 0, %work ]
  %seen = load atomic i32, ptr %pprogress seq_cst, align 8
  %stop = load atomic i64, ptr %pstop acquire, align 8
  %isstop = icmp ne i64 %stop, 0
  br i1 %isstop, label %exit, label %check
check:
  %g = load atomic i32, ptr %pgen acquire, align 8
  %changed = icmp ne i32 %g, %seengen
  br i1 %changed, label %work, label %idle
idle:
  %k1 = add i64 %k, 1
  %limit = load i64, ptr %plimit
  %spinning = icmp ult i64 %k1, %limit
  br i1 %spinning, label %pause, label %sleep
pause:
  call void @relax()
  br label %wait
sleep:
  %seen64 = zext i32 %seengen to i64
  call void @sleep_on_progress(ptr %ctl, i32 %seen, ptr %pgen, i64 %seen64)
  br label %slept
slept:
  br label %wait
work:
  %prog = load ptr, ptr %pprog
  %nth64 = load i64, ptr %pnth
  %nth = trunc i64 %nth64 to i32
  %r = call i32 @walk(ptr %prog, i32 %ith, i32 %nth, ptr %ctl, i32 %g)
  br label %wait
exit:
  ret void
}

; start a step: reset the program's counters to the new generation, publish it, wake the
; workers, take part, and return when every op has completed
define void @__RT___launch(ptr %ctl, ptr %prog, i32 %nth) {
entry:
  %pgen = getelementptr i64, ptr %ctl, i64 0
  %pprog = getelementptr i64, ptr %ctl, i64 24
  %pnth = getelementptr i64, ptr %ctl, i64 25
  %g0 = load atomic i32, ptr %pgen acquire, align 8
  %g = add i32 %g0, 1
  %tag = zext i32 %g to i64
  %tagh = shl i64 %tag, 32
  %nops = load i64, ptr %prog
  %empty = icmp eq i64 %nops, 0
  br i1 %empty, label %publish, label %reset
reset:
  %i = phi i64 [ 0, %entry ], [ %inext, %reset ]
  %w = shl i64 %i, 3
  %w3 = add i64 %w, 11
  %pc = getelementptr i64, ptr %prog, i64 %w3
  store atomic i64 %tagh, ptr %pc monotonic, align 8
  %pd = getelementptr i64, ptr %pc, i64 1
  store atomic i64 %tagh, ptr %pd monotonic, align 8
  %inext = add i64 %i, 1
  %more = icmp ult i64 %inext, %nops
  br i1 %more, label %reset, label %publish
publish:
  store ptr %prog, ptr %pprog
  %nth64 = sext i32 %nth to i64
  store i64 %nth64, ptr %pnth
  store atomic i32 %g, ptr %pgen seq_cst, align 8
  call void @advance(ptr %ctl)
  %r = call i32 @walk(ptr %prog, i32 0, i32 %nth, ptr %ctl, i32 %g)
  ret void
}

; the counter the runtime samples op times with (for calibration)
define i64 @__RT___cycles() {
entry:
  %c = call i64 @cycles()
  ret i64 %c
}

; ticks per second of @cycles when the hardware says (AArch64: CNTFRQ_EL0), else 0
define i64 @__RT___hz() {
entry:
  ret i64 0
}

; stop the workers (they return from _worker)
define void @__RT___shutdown(ptr %ctl) {
entry:
  %pstop = getelementptr i64, ptr %ctl, i64 26
  store atomic i64 1, ptr %pstop seq_cst, align 8
  call void @advance_always(ptr %ctl)
  ret void
}

declare i32 @sched_yield()
declare i64 @syscall(i64, ...)
declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()
