#!/usr/bin/env bash
# Session 42 call 2: V4.1 64-head prefill attention, pass 1 with the next block's key loads in flight during the MMAs
# (A: quantized keys only; B: + this chunk's f32 window rows staged with all 4 loads in flight), pass 3 with the
# probabilities' loads beside the keys'. prev = main f6c914b.
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- prev A B prev A B
digest_ab $A -- prev A B
ncu_pf_ab 8192 $A -- prev A B
pack
t testsA 120 $B/cuda_all_tests_A --gtest_filter='*V41Ops*:*SparseSink*:*V41FlashWidth*:*V41Fast*:*V41Tiny*'
t all 320 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log $R/testsA.log | sort -u | head -20 >> $S
pack
cat $S
