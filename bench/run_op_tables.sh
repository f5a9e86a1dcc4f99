#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 9's op tables on a GPU machine, from a bundle of tools/device/make_bundle.sh holding
# cuda_gemm_bench and cuda_forward_bench:
#   (on the machine, with $OUT the results folder) bash bench/run_op_tables.sh BUNDLE
# Ceilings (copy bandwidth) first, then one Nsight Compute per-kernel summary (time, DRAM bytes read and
# written) of the V4-Flash-width 2-layer proxy's timed loop per shape: decode batches BS with 4K-token
# contexts, prefill chunks PF. Then: python3 bench/op_table.py --ceilings op-ceilings.jsonl "decode b1=op_b1.txt" ...
set -o pipefail
B=/tmp/mb; mkdir -p $B && { [ -x $B/cuda_forward_bench ] || tar -xJf "$1" -C $B; } || exit 1
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:${LD_LIBRARY_PATH:-} CUDA_VISIBLE_DEVICES=${OP_GPU:-0}
timeout 60 $B/cuda_gemm_bench --only none --out $OUT/op-ceilings.jsonl 2>&1 | tail -1
N="/usr/local/cuda/bin/ncu --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --print-summary per-kernel"
P="$B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --profile 1"
rm -rf /tmp/opm; timeout 60 $P --dir /tmp/opm --keep 1 --max-len 20480 --prefill 16 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for b in ${BS:-1 32 128 512}; do
  timeout ${OT:-120} $N $P --model /tmp/opm --max-len 8192 --prefill 0 --batches $b --context 4096 --decode 2 > $OUT/op_b$b.txt 2>&1
  echo "op table decode b$b rc=$?"
done
for t in ${PF:-4096 16384}; do
  timeout ${OT:-120} $N $P --model /tmp/opm --max-len 20480 --prefill $t --batches 1 --context 16 --decode 0 > $OUT/op_p$t.txt 2>&1
  echo "op table prefill $t rc=$?"
done
