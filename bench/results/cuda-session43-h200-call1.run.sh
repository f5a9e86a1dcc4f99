#!/usr/bin/env bash
# Session 43 call 1: the warp-specialized FP8 32x32 GEMM (V4.1's dense linears, native form): bits vs the classic
# kernel, GEMM times vs the classic kernel and the bf16 form, the engine with the native form vs the bf16 form.
source tools/device/call_lib.sh "$1"
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --gemm fast-fp8\n' "$B" > $B/cuda_engine_bench_fp8; chmod +x $B/cuda_engine_bench_fp8
t b32 120 $B/cuda_all_tests --gtest_filter='*Fp8B32*:CudaGemmFast.*'
grep -E 'fp8b32|FAILED' $R/b32.log | head -30 >> $S
t gemm 150 $B/cuda_gemm_bench --out $R/gemm.jsonl --ms 128,256,512,1024,4096,8192 --only v41_wq_a,v41_wq_b,v41_wkv,v41_wo_b,v41_shared_w1,v41_shared_w2,v41_engram_wkv
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- new fp8 new fp8
pack
ncu_pf_ab 8192 $A -- new fp8
pack
t v41fast 150 $B/cuda_all_tests --gtest_filter='*V41Fast*:*V41FlashWidth*'
grep -E '^\[  FAILED  \]' $R/v41fast.log | head >> $S
pack
cat $S
