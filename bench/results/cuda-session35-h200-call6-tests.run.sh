#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 6: every single-GPU test (cuda_all_tests without the two-GPU EP tests) at main da1c903 + the V4.1
# attention's softmax change (call 5): the f16 decoders and the softmax pass under the V4.1 model tests.
source tools/device/call_lib.sh "$1"
t all 280 $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
