#!/usr/bin/env bash
# Session 43 call 6: call 4's hc_post (the collapse summed per stream as it is written) with call 5's one-warp hc_pre
# launch without the collapse: digests and the prefill step's kernels only (the device budget left). prev = b54f139.
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,512 --decode 8 -- new
digest_ab $A -- new
pack
ncu_pf_ab 8192 $A -- new
pack
cat $S
