#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 36, call 1: proposal v41-e2m1-via-e4m3 (V4.1's FP4 cache codes through the FP4 GEMMs' e2m1 -> e4m3 byte
# permutes, then the hardware e4m3x2 -> f16x2 conversion). prev = main 22655c2, new = 22655c2 + the proposal.
# Every V4.1 GPU test (cuda_all_tests filtered: the decoders bit for bit, the model, image-span and replay tests
# call 6 of session 35 did not reach), the 4-layer V4.1 A/B, ncu tables, then the attention's per-instruction
# stall samples of a compressed layer (the b1 step's slowest launches) at b1 and in a 4096-token prefill.
source tools/device/call_lib.sh "$1"
t v41 330 $B/cuda_all_tests --gtest_filter='*V41*:*CompactRow*'
grep -E '^\[  FAILED  \]' $R/v41.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
pack
ncu_tables $A
pack
NC="ncu --profile-from-start off --import-source no"
SA="--section WarpStateStats --section SourceCounters --page source --print-source sass --csv -k regex:v41_tc_attention --launch-skip 2 --launch-count 1"
timeout 70 $NC $SA $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode \
  > $R/ncu_attn_b1_sass.csv 2> $R/ncu_attn_b1_sass.err; echo "ncu attn b1 sass rc=$? t=$(elapsed)" >> $S
timeout 70 $NC --set full -k regex:v41_tc_attention --launch-skip 2 --launch-count 1 $B/cuda_engine_bench $A --model $D/ck \
  --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_attn_b1_full.txt 2>&1; echo "ncu attn b1 full rc=$? t=$(elapsed)" >> $S
pack
timeout 90 $NC $SA $B/cuda_engine_bench $A --model $D/ck --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 \
  --profile prefill > $R/ncu_attn_pf_sass.csv 2> $R/ncu_attn_pf_sass.err; echo "ncu attn pf sass rc=$? t=$(elapsed)" >> $S
pack
cat $S
