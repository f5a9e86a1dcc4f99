#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU call that checks session 36's proposals, v41-attn-block128-untested.patch and/or
# v41-heads-batch4-untested.patch (both: one build with both applied; or one each). Here: build main's
# cuda_engine_bench as cuda_engine_bench_prev, apply the patch(es), build cuda_all_tests and cuda_engine_bench
# (build-90, sm_90a), then
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz cuda_all_tests cuda_engine_bench cuda_engine_bench_prev
# (move tests/data/models/v4_tiny_b_sharded aside during the call if the carry limit is hit: only CPU tests use it)
# and run this script through the device tool with carry [".devcarry/me"].
source tools/device/call_lib.sh "$1"
t v41 330 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
pack
ncu_tables $A
pack
cat $S
