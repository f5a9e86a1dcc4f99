#!/usr/bin/env bash
# Session 44 call 11: the fp8_as_bf16 tests at 9b053b0 (the count assertion fixed after call 10) and the twins test.
source tools/device/call_lib.sh "$1"
t fp8 120 $B/cuda_all_tests --gtest_filter='CudaGemmFp8B32.*:CudaV41Fast.Fp8Twins*'
grep -E 'FAILED|Failure|Which is|v41-fast-weights' $R/fp8.log | head -20 >> $S
pack
cat $S
