#!/usr/bin/env bash
# Session 29, call 7: the final build (610d922) on the test binaries the earlier calls did not run with every change:
# V4.1 (fast, logits, batch invariance, replay), expert parallelism (one GPU), MTP, DSpark, V4.1 ops.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b36.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$NCCL_DIR NCCL_NVLS_ENABLE=0 DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t v41_ops 25 $B/cuda_v41_ops_tests
t ep 40 $B/cuda_ep_tests
t mtp 40 $B/cuda_mtp_tests
t dspark 40 $B/cuda_dspark_tests
t v41 80 $B/cuda_v41_model_tests --gtest_filter='*Fast*:*fast*:*LogitsAndGreedy*:*BatchInvarian*:*Replay*'
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
