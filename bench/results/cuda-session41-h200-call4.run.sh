#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 41 call 4: the V4.1 attention's key staging with fewer instructions (FP4 entries straight to bf16,
# e4m3_value by its bits, the scale offsets by shifts), bundle of sm_90a builds (build-90): prev = main 256e4bd's
# cuda_engine_bench (as cuda_engine_bench_prev), new = branch s41-staging's cuda_engine_bench and cuda_all_tests:
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz build-90/tests/cuda_all_tests build-90/bench/cuda_engine_bench \
#       cuda_engine_bench_prev
# run through the device tool with carry [".devcarry/me"]. The digests must be equal (the same bits by construction).
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = new ] || x=$B/cuda_engine_bench_$v
  timeout 40 $n $x $A --model "$D/ck" --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf_$v.txt 2>&1
  echo "ncu pf $v rc=$? t=$(elapsed)" >> $S
  timeout 30 $n $x $A --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
  echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
done
pack
t all 320 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
