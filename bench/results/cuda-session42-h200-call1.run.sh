#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks docs/proposals/v41-attention-wgmma-untested.patch (session 41), which keeps every bit. Here, on a branch from
# main, in build-90 (sm_90a):
#   ninja -C build-90 cuda_engine_bench; copy it as cuda_engine_bench_prev;
#   git am docs/proposals/v41-attention-wgmma-untested.patch; ninja -C build-90 cuda_all_tests cuda_engine_bench;
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz build-90/tests/cuda_all_tests build-90/bench/cuda_engine_bench \
#       cuda_engine_bench_prev
# (move tests/data/models/v4_tiny_b_sharded aside during the call if the carry limit is hit: only CPU tests use it)
# and run this script through the device tool with carry [".devcarry/me"]. ~450 s of device time.
# Must hold: every GPU test passes, among them CudaV41Ops.SinkAttentionOverCompactCachesBitIdentical (the default
# wgmma form = mma.sync pinned, bit for bit, 3 rows and 1; the bf16 I/O form = the f32 one), and the digests equal
# main's (03698faa7b10bfbf 15dacbf93d01cc05 92387dfee027ae40 20f0ea18cce42395 at 256e4bd: the 4096-token prefill
# forwards of the digest take the 64-head kernel). Then the A/B says whether it pays (session 41's ncu: the mma.sync
# loops are 45% of the kernel's stall samples; the wgmma form spills more: ptxas 192 B stack against 88).
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
ncu_pf_ab 8192 $A -- prev new
pack
t all 320 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
