#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 9's op tables on a GPU machine, from a bundle of tools/device/make_bundle.sh holding
# cuda_gemm_bench and cuda_forward_bench (FAMILY=v41: cuda_engine_bench instead, the default model V4.1-Flash):
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
if [ "${FAMILY:-v4}" = v41 ]; then
  # The default model, V4.1-Flash, through the offline engine (cuda_engine_bench; the bundle holds it): NL full-width
  # layers in the release's proportions, even routing; one engine step profiled per shape (--profile decode: a
  # decode step of batch b with 4K contexts; --profile prefill: the first step of a prompt of t tokens at t tokens
  # per step). Tables of time alone need no DRAM metrics: N_METRICS=gpu__time_duration.sum.
  E="$B/cuda_engine_bench --family v41 --layers v41:${NL:-4} --gpus 1 --routing even --context 4096"
  rm -rf /tmp/opm; timeout 120 $E --dir /tmp/opm --keep 1 --prefill-requests 0 --batches 1 --decode 1 > /dev/null 2>&1
  N4="/usr/local/cuda/bin/ncu --profile-from-start off --metrics ${N_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum} --print-summary per-kernel"
  for b in ${BS:-1 32 128 512}; do
    timeout ${OT:-120} $N4 $E --model /tmp/opm --prefill-requests 0 --batches $b --decode 2 --profile decode > $OUT/op_b$b.txt 2>&1
    echo "op table v41 decode b$b rc=$?"
  done
  for t in ${PF:-4096 8192 16384}; do
    timeout ${OT:-120} $N4 $E --model /tmp/opm --batch-tokens $t --prefill-prompt $t --prefill-requests 1 --batches 1 --decode 1 \
      --profile prefill > $OUT/op_p$t.txt 2>&1
    echo "op table v41 prefill $t rc=$?"
  done
  exit 0
fi
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
