#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU call that checks a build: the ceilings (copy bandwidth, cuBLASLt BF16/FP8), the 2-layer full-width
# proxy (prefill 4K, decode at batches 1-512 with 4K contexts, the model's routing and even routing), then
# every CUDA test binary in the bundle, each under what is left of a time budget (LIMIT seconds, default 225).
# Here:
#   cmake -S . -B build-90 -G Ninja -DCMAKE_BUILD_TYPE=Release -DDI_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real
#   cmake --build build-90 --target cuda_all_tests cuda_forward_bench cuda_gemm_bench
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz build-90/tests/cuda_all_tests build-90/bench/cuda_{forward,gemm}_bench
# (cuda_all_tests: every GPU test binary's tests in one, tests/CMakeLists.txt; separate test binaries each carry all
# the kernels, and more than about three of them overflow the device tool's 64 MiB carry limit with the tree.)
# (.devcarry/ ignored locally; `run` with carry [".devcarry/me"]), on the machine:
#   LIMIT=225 bash tools/device/gpu_check.sh .devcarry/me/b.tar.xz
# Writes to $OUT: summary.txt, ceilings.jsonl, proxy.jsonl (cuda_forward_bench lines), tests.log.
set -o pipefail
B=/tmp/mb; mkdir -p $B && tar -xJf "$1" -C $B || exit 1
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
CUDART_DIR=$(dirname "$(find / -name 'libcudart.so.13*' 2>/dev/null | head -1)")  # (make_bundle.sh leaves it out)
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$CUDART_DIR:${LD_LIBRARY_PATH:-} DI_TEST_DATA_DIR=$PWD/tests/data
# The test binaries have this checkout's source paths compiled in (the tokenizer json): point them here.
SRC=$(for f in $B/cuda_*_tests; do strings "$f"; done 2>/dev/null | grep -o '/[^"]*/assets/tokenizer/deepseek-v4/tokenizer.json' | head -1)
[ -n "$SRC" ] && { mkdir -p "$(dirname "${SRC%/assets/*}")"; ln -sfn "$PWD" "${SRC%/assets/*}"; }
T0=$(date +%s); left() { echo $(( ${LIMIT:-225} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/summary.txt
if [ -x $B/cuda_gemm_bench ]; then
  timeout 30 $B/cuda_gemm_bench --only none --out $OUT/ceilings.jsonl > $OUT/ceilings.txt 2>&1
  tail -1 $OUT/ceilings.txt | tee -a $OUT/summary.txt
fi
if [ -x $B/cuda_forward_bench ]; then
  timeout 90 $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --dir /tmp/pb --prefill 4096 \
    --batches 1,32,128,256,512 --context 4096 --decode 8 --max-len 8192 --expert-stats 1 --routing model,even \
    > $OUT/proxy.jsonl 2> $OUT/proxy.err
  echo "proxy rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/summary.txt
fi
for bin in $B/cuda_*_tests; do
  t=$(basename $bin); L=$(left)
  [ $L -lt 10 ] && { echo "$t skipped (time)" | tee -a $OUT/summary.txt; continue; }
  timeout $L $bin > $OUT/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/$t.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" | tee -a $OUT/summary.txt
done
cat $OUT/cuda_*_tests.log > $OUT/tests.log 2>/dev/null; rm -f $OUT/cuda_*_tests.log
