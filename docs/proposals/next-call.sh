#!/usr/bin/env bash
# The next GPU call for docs/proposals/qat-ilp-untested.patch (session 43): build main and the patched tree's
# cuda_engine_bench (prev = main, new = patched) and the patched cuda_all_tests, bundle them with
# tools/device/make_bundle.sh, then run this with the bundle. Land the patch only if every test passes, the digests
# equal main's, and the ncu step table shows to_bf16_quant_kernel / act_quant_fp8_kernel / swiglu_quant_kernel faster.
source tools/device/call_lib.sh "$1"
t fused 120 $B/cuda_all_tests --gtest_filter='CudaGemmFast.*:*Fp8B32*:CudaV41Ops.*'
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
