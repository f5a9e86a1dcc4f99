#!/usr/bin/env bash
# Session 39, call 2: V4.1's tiled indexer kernel (8 rows per block) + the CTA pairs restricted to rows with picks.
source tools/device/call_lib.sh "$1"
t v41 300 $B/cuda_all_tests --gtest_filter='*V41*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32 --decode 8 -- prev new prev new
engine_ab $A --prefill-prompt 16384 --prefill-requests 1 --batches 1 --decode 2 -- prev new prev new
digest_ab $A -- prev new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 60 $n $x $A --model "$D/ck" --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf_$v.txt 2>&1
  echo "ncu pf $v rc=$? t=$(elapsed)" >> $S
  timeout 50 $n $x $A --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
  echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
done
pack
cat $S
