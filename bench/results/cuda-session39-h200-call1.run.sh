#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU call that checks v41-heads-pair-untested.patch. Here: build main's cuda_engine_bench as
# cuda_engine_bench_prev, `git am` the patch, build cuda_all_tests and cuda_engine_bench (build-90, sm_90a), then
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz cuda_all_tests cuda_engine_bench cuda_engine_bench_prev
# (move tests/data/models/v4_tiny_b_sharded aside during the call if the carry limit is hit: only CPU tests use it)
# and run this script through the device tool with carry [".devcarry/me"]. ~300 s of device time.
source tools/device/call_lib.sh "$1"
t v41 240 $B/cuda_all_tests --gtest_filter='*V41*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 1 --batches 1,16,32 --decode 8 -- prev new prev new
digest_ab $A -- prev new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 50 $n $x $A --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
  echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
done
pack
cat $S
