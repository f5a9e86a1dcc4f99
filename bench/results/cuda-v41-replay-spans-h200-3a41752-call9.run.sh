#!/usr/bin/env bash
# Session 27, call 9: localize the CudaV41Replay segfault: temporary diagnostic tests, each in its own process.
set -u
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/dbg2.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
for d in ZDiag1ExactAllLogits ZDiag2ReplayModelAllLogits ZDiag3ExactShort ZDiag4ReplayShort ZDiag5ExactAllLogitsShortPrompt; do
  for m in v41_tiny_a_exact v41_tiny_b_official; do
    timeout 30 $B/cuda_v41_model_tests --gtest_filter="Models/CudaV41Replay.$d/$m" > $R/$d-$m.log 2>&1
    echo "$d $m rc=$? $(grep DIAG $R/$d-$m.log | tr '\n' ' ') $(grep -E '^\[  (PASSED|FAILED) ' $R/$d-$m.log)"
  done
done | tee $R/summary.txt
tar -czf $OUT/r.tar.gz -C /tmp r
