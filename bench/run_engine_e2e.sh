#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 9 / 12's end-to-end run on a GPU machine, from a bundle of tools/device/make_bundle.sh holding
# cuda_gemm_bench and cuda_engine_bench (and cuda_forward_bench for PROF=1):
#   tools/device/make_bundle.sh .devcarry/me/bundle.tar.xz build/bench/cuda_gemm_bench build/bench/cuda_engine_bench build/bench/cuda_forward_bench
#   (on the machine, with $OUT the results folder) NL=32 bash bench/run_engine_e2e.sh .devcarry/me/bundle.tar.xz
# Ceilings first (copy bandwidth, cuBLASLt FP8/BF16: cuda_gemm_bench --only none), then the offline
# engine on the first NL layers of the V4-Flash schedule written to a tmpfs (a 2-GPU machine's memory
# holds 43 layers, ~157 GB): prefill of 8K prompts, decode at batches BS with 4K contexts.
# BTOK: prompt tokens per step and GPU (V4.1: 8192, deepinfer run's CUDA default since session 37, measured at 12
# layers; V4: 4096, as before: 32 V4 layers next to an 8192-token workspace not yet tried on one H200).
# GPUS=2: expert parallelism over both GPUs (NCCL, NVLink multicast off). PROF=1: an ncu decode-b1
# profile of the 2-layer proxy first. ROUTING=even: the MoE layers spread their rows evenly over the
# experts (a trained model's balanced routing) instead of the random router's choice. FAMILY=v41: the
# default model DeepSeek-V4.1-Flash (--layers v41:NL, ~7.3 GB per layer: NL=12 on one H200). Then:
# python3 bench/report_engine.py engine.jsonl ceilings.jsonl.
set -o pipefail
B=/tmp/mb; mkdir -p $B && tar -xJf "$1" -C $B || exit 1
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$NCCL_DIR:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
[ "${GPUS:-1}" = 1 ] && export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/summary.txt
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D 2>&1 | tee -a $OUT/summary.txt || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $OUT/ceilings.jsonl 2>&1 | tail -1 | tee -a $OUT/summary.txt
if [ -n "${PROF:-}" ]; then
  timeout 90 /usr/local/cuda/bin/ncu --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
    $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --dir /tmp/pb --profile 1 --max-len 8192 --prefill 0 \
    --batches 1 --context 4096 --decode 4 > $OUT/prof_b1.txt 2>&1; echo "ncu rc=$?" | tee -a $OUT/summary.txt
fi
s=$(date +%s)
if [ "${FAMILY:-v4}" = v41 ]; then LAYERS="--family v41 --layers v41:${NL:-12}"; BTOK=${BTOK:-8192}; else LAYERS="--layers flash:${NL:-32}"; BTOK=${BTOK:-4096}; fi
timeout ${BT:-450} $B/cuda_engine_bench $LAYERS --gpus ${GPUS:-1} --dir $D/big --batch-tokens $BTOK \
  --prefill-prompt 8192 --prefill-requests ${PR:-$((3 * ${GPUS:-1}))} --context 4096 --batches ${BS:-1,32,128,256,512} --decode 16 \
  --routing ${ROUTING:-model} > $OUT/engine.jsonl 2> $OUT/engine.err
echo "engine rc=$? $(( $(date +%s) - s ))s" | tee -a $OUT/summary.txt
