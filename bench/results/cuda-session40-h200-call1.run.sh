#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU call that checks the open proposals (docs/proposals/README.md). Here, on a branch from main, in build-90 (sm_90a):
#   build cuda_engine_bench, copy it as cuda_engine_bench_prev;
#   git am docs/proposals/v41-attn-prefetch-untested.patch docs/proposals/indexer-tile-shared-untested.patch; build
#   cuda_engine_bench, copy it as cuda_engine_bench_attn (both keep every bit);
#   git am docs/proposals/v41-engram-tree-untested.patch; build cuda_all_tests and cuda_engine_bench (= both patches);
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz cuda_all_tests cuda_engine_bench cuda_engine_bench_prev cuda_engine_bench_attn
# (move tests/data/models/v4_tiny_b_sharded aside during the call if the carry limit is hit: only CPU tests use it)
# and run this script through the device tool with carry [".devcarry/me"]. ~340 s of device time.
# Digests: attn must equal prev (the same bits: the attention prefetch, the shared indexer tile routines); new (+ the Engram tree sums) differs by design, its bits are
# checked by the tests (CudaV41Ops.EngramGatherAndFusionEqualCpu, CudaV41Fast.*).
source tools/device/call_lib.sh "$1"
t v41 300 $B/cuda_all_tests --gtest_filter='*V41*:*IndexerPrefill*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,256 --decode 8 -- prev attn new prev attn new
digest_ab $A -- prev attn new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev attn new; do
  x=$B/cuda_engine_bench; [ $v = new ] || x=$B/cuda_engine_bench_$v
  timeout 60 $n $x $A --model "$D/ck" --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf_$v.txt 2>&1
  echo "ncu pf $v rc=$? t=$(elapsed) $(grep -o 'v41_tc_attention_kernel<512, 1>.*\|engram_fuse_kernel.*' $R/ncu_pf_$v.txt | tr -s ' ' | cut -c1-160 | tr '\n' ' ')" >> $S
done
timeout 50 $n $B/cuda_engine_bench $A --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_new.txt 2>&1
echo "ncu b1 new rc=$? t=$(elapsed)" >> $S
pack
cat $S
