#!/usr/bin/env bash
# devprobs: the GPU drafters' device distributions (Draft::device_probs) on one H200.
set -o pipefail
mkdir -p /tmp/mb && tar -xJf .devcarry/devprobs/b1.tar.xz -C /tmp/mb && export LD_LIBRARY_PATH=/tmp/mb
export DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work/wt && ln -sfn "$PWD" /work/wt/devprobs
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/tests.log
run() {  # name timeout args...
    local n=$1 t=$2; shift 2
    echo "===== $n $*" | tee -a $OUT/tests.log
    local s=$(date +%s%N)
    timeout $t /tmp/mb/$n "$@" >> $OUT/tests.log 2>&1
    local rc=$?
    echo "===== $n rc=$rc $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a $OUT/tests.log
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran" $OUT/tests.log | tail -3
}
run cuda_mtp_tests 30
run cuda_dspark_tests 70
run cuda_model_tests 30
run cuda_v41_model_tests 20 --gtest_filter='*CudaV41Runtime*'
