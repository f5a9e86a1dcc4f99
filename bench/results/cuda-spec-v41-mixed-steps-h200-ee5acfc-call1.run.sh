#!/usr/bin/env bash
# Session 27, call 1 (ec3651b): mixed steps decided on their decode rows. V4.1 DSpark b128/b256 with the
# trace at b256, then V4 DSpark and MTP at b256 (no regression).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b10.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
COMMON="--device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 --decode 64 --requests-per-slot 4 --temperature 0.8 --tokenizer assets/tokenizer/deepseek-v4/tokenizer.json"
timeout 150 $B/spec_bench $COMMON --family v41 --layers 40 --batches 128,256 --arms none,fixed,scheduler --trace $R/trace_v41.jsonl \
  --dir /tmp/sb_v41 > $R/v41.jsonl 2> $R/v41.err
echo "v41 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 120 $B/spec_bench $COMMON --family v4-dspark --layers 43 --batches 256 --arms none,scheduler \
  --dir /tmp/sb_v4d > $R/v4_dspark.jsonl 2> $R/v4_dspark.err
echo "v4 dspark rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 120 $B/spec_bench $COMMON --family v4 --layers 43 --batches 256 --arms none,scheduler \
  --dir /tmp/sb_v4m > $R/v4_mtp.jsonl 2> $R/v4_mtp.err
echo "v4 mtp rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; tail -3 $R/*.err
