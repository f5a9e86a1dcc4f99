#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 41's first GPU call: checks the two open proposals (docs/proposals/README.md), both of which keep every bit. Here, on a branch from main, in
# build-90 (sm_90a):
#   ninja -C build-90 cuda_engine_bench; copy it as cuda_engine_bench_prev;
#   git am docs/proposals/v41-attention-bf16-io-untested.patch docs/proposals/block-tree-sums-untested.patch;
#   ninja -C build-90 cuda_all_tests cuda_engine_bench;
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz build-90/tests/cuda_all_tests build-90/bench/cuda_engine_bench \
#       cuda_engine_bench_prev
# (move tests/data/models/v4_tiny_b_sharded aside during the call if the carry limit is hit: only CPU tests use it)
# and run this script through the device tool with carry [".devcarry/me"]. ~450 s of device time.
# The digests must be equal (the bf16 I/O keeps every bit, the digest's 8192-row prefill forwards take it; the shared
# tree-sum routine keeps the RMS norms' and the Engram gate's order); every GPU test (the RMS norm's tree sums are V4's
# too: CudaOps.RmsNormTreeSumInItsOrderAndNearTheReference, the fast-model tests), among them: CudaV41Ops.SinkAttentionOverCompactCachesBitIdentical (bf16 I/O = the f32 launch's bits) and
# CudaV41Fast.PrefillBf16AttentionIoBitIdenticalToF32 (2,200-token prefill, logits bit for bit, the path taken).
source tools/device/call_lib.sh "$1"
t all 300 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32 --decode 8 -- prev new prev new
digest_ab $A -- prev new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = new ] || x=$B/cuda_engine_bench_$v
  timeout 60 $n $x $A --model "$D/ck" --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf_$v.txt 2>&1
  echo "ncu pf $v rc=$? t=$(elapsed) $(grep -o 'v41_tc_attention_kernel<512, 1>.*\|to_bf16_kernel.*\|rope_rows_kernel.*' $R/ncu_pf_$v.txt | tr -s ' ' | cut -c1-120 | tr '\n' ' ')" >> $S
done
pack
cat $S
