#!/usr/bin/env bash
# The GPU call for docs/proposals/fp8-as-bf16-untested.patch (session 43): apply it on a branch, build
# cuda_all_tests and cuda_gemm_bench, bundle them with tools/device/make_bundle.sh, then run this with the bundle.
# First question: are the register-A decode kernel's bits the bf16 upload's (swapped operands, bf16 k16)? Then: is it
# faster than the bf16 form at 1-64 rows (it reads half the weight bytes)? Only then the model side (a DenseFp8 mode
# that keeps V4.1's dense weights FP8 and passes fp8_as_bf16, bf16 activations, split and weight scratch) and the
# engine A/B with digests, which must equal main's.
source tools/device/call_lib.sh "$1"
t asbf16 120 $B/cuda_all_tests --gtest_filter='CudaGemmFp8B32.*'
grep -E 'FAILED|Failure|Which is|: [0-9]+ x ' $R/asbf16.log | head -40 >> $S
t gemm 200 $B/cuda_gemm_bench --out $R/gemm.jsonl --ms 1,32,128,512,4096 --only v41_wq_a,v41_wq_b,v41_wkv,v41_wo_b,v41_shared_w1,v41_shared_w2,v41_engram_wkv
grep -E 'bf16_split|fp8_as_bf16' $R/gemm.log | head -60 >> $S
pack
cat $S
