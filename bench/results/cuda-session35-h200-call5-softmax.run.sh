#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 5: the V4.1 tensor-core attention's softmax pass with -inf in a lane's unused score slots (the
# same bits: the maximum unchanged, exact zeros added after the lane's last term) instead of a 64-bit compare and a
# predicate per slot. prev = main 4e03b48, new = the change. Tests, the 4-layer V4.1 A/B (prev, new x 3), ncu b1/prefill.
source tools/device/call_lib.sh "$1"
t v41_ops 60 $B/cuda_v41_ops_tests
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new prev new
pack
ncu_tables $A
pack
cat $S
