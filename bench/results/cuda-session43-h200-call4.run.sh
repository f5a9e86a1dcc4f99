#!/usr/bin/env bash
# Session 43 call 4: hc_post writes the next mHC site's collapse (HcPostParams::collapse_pre; hc_pre then skips its
# collapse pass). prev = b54f139.
source tools/device/call_lib.sh "$1"
t v41ops 150 $B/cuda_all_tests --gtest_filter='CudaV41Ops.*'
grep -E 'FAILED|Failure' $R/v41ops.log | head -20 >> $S
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
