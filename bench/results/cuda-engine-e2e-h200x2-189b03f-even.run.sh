#!/usr/bin/env bash
# x2 call: cuda_ep_tests at HEAD, then the 43-layer V4-Flash engine run across both GPUs with even routing.
set -u
T0=$(date +%s)
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/x2/b.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$NCCL_DIR NCCL_NVLS_ENABLE=0 DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $OUT/summary.txt
timeout 100 $B/cuda_ep_tests > $OUT/cuda_ep_tests.log 2>&1
echo "cuda_ep_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/cuda_ep_tests.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $OUT/summary.txt
L=$(( 575 - ($(date +%s) - T0) ))
GPUS=2 NL=43 BT=$(( L - 90 )) ROUTING=even bash bench/run_engine_e2e.sh .devcarry/x2/b.tar.xz
echo "total t=$(( $(date +%s) - T0 ))" >> $OUT/summary.txt
cat $OUT/summary.txt; tail -5 $OUT/engine.err
