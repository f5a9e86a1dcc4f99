#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 36, call 4: the 16-heads-per-CTA V4.1 attention with a row's four CTAs as a cluster sharing the key
# decoding (each decodes a quarter of every block into all four CTAs' buffers; the same bits). prev = main
# f4d6610, new = the change. Every V4.1 GPU test; digests of both builds; the 4-layer A/B (one round) and ncu b1
# table; then the ceilings and DeepSeek-V4.1-Flash end to end at 12 layers with the new build (README).
source tools/device/call_lib.sh "$1"
t v41 300 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 90 $x $A --model $D/ck --prefill-prompt 4096 --prefill-requests 2 --batches 1,32,64 --decode 4 --digest 1 > $R/digest_$v.jsonl 2> $R/digest_$v.err
  echo "digest $v rc=$? t=$(elapsed) $(grep -o '"digest":"[0-9a-f]*"' $R/digest_$v.jsonl | tr '\n' ' ')" >> $S
done
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 50 $N $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1
echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/ck
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 170 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --dir $D/v41 --keep 1 > $R/engine_v41.jsonl 2> $R/engine_v41.err
echo "engine v41 rc=$? t=$(elapsed)" >> $S
pack
cat $S
