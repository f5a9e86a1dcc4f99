#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 36, call 3: V4.1's tensor-core attention over four CTAs of 16 heads per row while the rows leave SMs
# idle (v41_attention_tc_heads.cuh: the same bits as the 64-head kernel), and the key staging moved into
# v41_attention_keys.cuh (the 64-head kernel's spills 312 -> 48 bytes). prev = main 50367a4, new = the change.
# Every V4.1 GPU test (the ops tests compare the two kernels bit for bit); the digests of both builds (a prefill,
# decode batches 1, 32 and 64: the same bits expected); the 4-layer V4.1 A/B; ncu tables.
source tools/device/call_lib.sh "$1"
t v41 330 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
pack
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 90 $x $A --model $D/ck --prefill-prompt 4096 --prefill-requests 2 --batches 1,32,64 --decode 4 --digest 1 > $R/digest_$v.jsonl 2> $R/digest_$v.err
  echo "digest $v rc=$? t=$(elapsed) $(grep -o '"digest":"[0-9a-f]*"' $R/digest_$v.jsonl | tr '\n' ' ')" >> $S
done
pack
ncu_tables $A
pack
cat $S
