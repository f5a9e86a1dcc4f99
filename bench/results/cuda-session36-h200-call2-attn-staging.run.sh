#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 36, call 2: the V4.1 tensor-core attention's key staging without per-item index splits, format
# lookups and 64-bit divisions (a key table with a kind byte, per-thread code and scale offsets), pass 1's
# blocks last-first so pass 3's first block stays staged, and the P staging's loads all in flight.
# prev = main c569244 + cuda_engine_bench --digest, new = that + the change. Every V4.1 GPU test; the digests
# of both builds (every token id and logprob bit of a prefill and two decode batches: the same bits expected);
# the 4-layer V4.1 A/B; ncu tables; the attention's instruction profile again.
source tools/device/call_lib.sh "$1"
t v41 330 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
pack
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 90 $x $A --model $D/ck --prefill-prompt 4096 --prefill-requests 2 --batches 1,64 --decode 4 --digest 1 > $R/digest_$v.jsonl 2> $R/digest_$v.err
  echo "digest $v rc=$? t=$(elapsed) $(grep -o '"digest":"[0-9a-f]*"' $R/digest_$v.jsonl | tr '\n' ' ')" >> $S
done
pack
ncu_tables $A
pack
NC="ncu --profile-from-start off --import-source no"
SA="--section WarpStateStats --section SourceCounters --page source --print-source sass --csv -k regex:v41_tc_attention --launch-skip 2 --launch-count 1"
timeout 90 $NC $SA $B/cuda_engine_bench $A --model $D/ck --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 \
  --profile prefill > $R/ncu_attn_pf_sass.csv 2> $R/ncu_attn_pf_sass.err; echo "ncu attn pf sass rc=$? t=$(elapsed)" >> $S
pack
cat $S
