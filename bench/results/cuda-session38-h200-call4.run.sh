#!/usr/bin/env bash
# Session 38, call 4: docs/proposals/sampler-slices8-untested.patch (next-call.sh, trimmed to the device time left):
# the sampler's GPU tests, 4 V4.1 layers b1/b512 A/B, digests, ncu of a b512 decode step of both.
source tools/device/call_lib.sh "$1"
t samp 90 $B/cuda_all_tests --gtest_filter='CudaOps.*Sampl*:CudaOps.Greedy*'
grep -E '^\[  FAILED  \]' $R/samp.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 1 --batches 1,512 --decode 8 -- prev new
digest_ab $A -- prev new
pack
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in new prev; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 40 $n $x $A --model "$D/ck" --prefill-requests 0 --batches 512 --decode 1 --profile decode > $R/ncu_b512_$v.txt 2>&1
  echo "ncu b512 $v rc=$? t=$(elapsed)" >> $S
done
pack
cat $S
