#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 2: every GPU test of branch s35/proposals (main ff91da5 + session 34's five proposals) in one binary,
# tests/CMakeLists.txt's cuda_all_tests (the carry limit takes ~3 separate test binaries a call).
source tools/device/call_lib.sh "$1"
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$(find / -name 'libcudart.so.13*' 2>/dev/null | head -1)")
ldd $B/cuda_all_tests | grep -i 'not found' >> $S
t all 560 $B/cuda_all_tests
grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' $R/all.log | awk '{print $2, $4}' | sort | uniq -c | sort -rn | head -5 >> $S
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
