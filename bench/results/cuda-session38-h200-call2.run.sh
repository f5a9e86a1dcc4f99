#!/usr/bin/env bash
# Session 38, call 2: new = main 4994d95 + the sampler's parallel candidate sort + the dense linears' FP8 forms for
# decode-sized launches (V4.1 bf16 form), prev = main 4994d95 (the fixed decode harness): the GPU tests they touch,
# 4 V4.1 layers A/B + digests, ncu b1 (per kernel and launch by launch) and b512 of both.
source tools/device/call_lib.sh "$1"
t tests 300 $B/cuda_all_tests --gtest_filter='CudaOps.*Sampl*:CudaOps.Greedy*:CudaGemmDecodeFp8.*:*V41*:CudaGemmFast.SplitK*'
grep -E '^\[  FAILED  \]' $R/tests.log | sort -u | head -20 >> $S
# (no cuda_gemm_bench in this bundle: the carry limit)
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
pack
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum"
for v in new prev; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 50 $n --print-summary per-kernel $x $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1; echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
done
timeout 50 $n $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 1 --profile decode > $R/ncu_b1_launches_new.txt 2>&1; echo "ncu b1 launches rc=$? t=$(elapsed)" >> $S
pack
timeout 70 $n --print-summary per-kernel $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 512 --decode 1 --profile decode > $R/ncu_b512_new.txt 2>&1; echo "ncu b512 rc=$? t=$(elapsed)" >> $S
pack
cat $S
