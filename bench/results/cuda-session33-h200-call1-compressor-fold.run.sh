#!/usr/bin/env bash
# Session 33, call 1: the compressor fold (docs/proposals/compressor-fold-untested.patch, branch
# s33/compressor-fold on 8506a71): every CUDA test binary on the folded tree, and the 2-layer proxy
# (prev = main 8506a71, new = the fold), decode b1/32/128 and prefill 8K, two rounds interleaved.
source tools/device/call_lib.sh .devcarry/me/c1.tar.xz
proxy_ab 1,32,128 2
pack
t ops 100 $B/cuda_ops_tests
t model 90 $B/cuda_model_tests
t fast_model 60 $B/cuda_fast_model_tests
t mtp 90 $B/cuda_mtp_tests
t dspark 100 $B/cuda_dspark_tests
pack
t gemm 120 $B/cuda_gemm_tests



pack
ab_summary >> $S
cat $S; grep -hE "Failure|FAILED" -A3 $R/*.log | head -30
