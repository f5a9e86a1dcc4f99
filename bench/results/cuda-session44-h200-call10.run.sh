#!/usr/bin/env bash
# Session 44 call 10 (landing check): every GPU test on the final tree (fp8_as_bf16 = the register-A kernel only;
# V4.1 FP8 twins on by default), the 4-layer engine A/B against main (prev = b3cf35a build) and without the twins
# (notw), digests.
source tools/device/call_lib.sh "$1"
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --fp8-twins 0\n' $B > $B/cuda_engine_bench_notw; chmod +x $B/cuda_engine_bench_notw
t all 330 $B/cuda_all_tests
grep -E '^\[  FAILED  \]|v41-fast-weights' $R/all.log | sort -u | head -20 >> $S
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,4,16,32,512 --decode 8 -- prev new notw new prev
pack
digest_ab $A -- prev new notw
pack
cat $S
