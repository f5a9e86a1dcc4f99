#!/usr/bin/env bash
# Session 43 call 3: fused QAT passes (to_bf16 quant_block: V4.1's bf16 linears' act_quant_dequant + to_bf16 in one
# launch; act_quant_fp8 pre_block: the experts' input QAT + FP8 quantization in one launch). prev = main 69306d2.
source tools/device/call_lib.sh "$1"
t fused 120 $B/cuda_all_tests --gtest_filter='CudaGemmFast.*:*Fp8B32*'
grep -E 'FAILED|Failure' $R/fused.log | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- prev new prev new
pack
digest_ab $A -- prev new
pack
ncu_pf_ab 8192 $A -- prev new
pack
t all 330 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
