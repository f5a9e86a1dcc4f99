#!/usr/bin/env bash
# Session 38, call 1: docs/proposals/v41-pass1-batch4-untested.patch (next-call.sh) + a b512 decode ncu table of main.
source tools/device/call_lib.sh "$1"
t v41 240 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
pack
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev new prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  k=1; while [ -e $R/ncu_pf_${v}_$k.txt ]; do k=$((k + 1)); done
  timeout 40 $n $x $A --model "$D/ck" --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf_${v}_$k.txt 2>&1
  echo "ncu pf $v $k rc=$? t=$(elapsed)" >> $S
done
pack
timeout 150 $n $B/cuda_engine_bench_prev $A --model "$D/ck" --prefill-requests 0 --batches 512 --decode 2 --profile decode > $R/ncu_b512_prev.txt 2>&1
echo "ncu b512 rc=$? t=$(elapsed)" >> $S
pack
cat $S
