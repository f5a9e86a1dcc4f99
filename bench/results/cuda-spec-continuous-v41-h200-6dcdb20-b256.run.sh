#!/usr/bin/env bash
# Session 26, call 10 (6dcdb20): the V4.1 DSpark scheduler at b256 with its trace.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b9.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 200 $B/spec_bench --device cuda --family v41 --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 \
  --layers 40 --decode 64 --requests-per-slot 4 --temperature 0.8 --batches 256 --arms none,scheduler --trace $R/trace256.jsonl \
  --tokenizer assets/tokenizer/deepseek-v4/tokenizer.json --dir /tmp/sb_v41 > $R/v41_t08.jsonl 2> $R/v41_t08.err
echo "v41 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; tail -3 $R/v41_t08.err
