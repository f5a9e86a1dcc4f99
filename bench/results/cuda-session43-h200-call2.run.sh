#!/usr/bin/env bash
# Session 43 call 2: FastLinearParams::fp8_as_bf16 (V4.1's FP8 32x32 dense weights multiplied as bf16): bits vs the
# bf16 upload, GEMM times vs the bf16 form.
source tools/device/call_lib.sh "$1"
t b32 200 $B/cuda_all_tests --gtest_filter='*Fp8B32*:CudaGemmFast.*'
grep -E 'FAILED|Failure|Expected|Which is|differ' $R/b32.log | head -30 >> $S
t gemm 200 $B/cuda_gemm_bench --out $R/gemm.jsonl --ms 1,32,128,512,4096 --only v41_wq_a,v41_wq_b,v41_wkv,v41_wo_b,v41_shared_w1,v41_shared_w2,v41_engram_wkv
pack
cat $S
