#!/usr/bin/env bash
# Session 27, call 2 (ec3651b + --decode-spread): V4.1 DSpark with varied output lengths (b16..b256), uniform
# lengths with 16 requests per slot at b256, and V4 DSpark at b256 with varied lengths.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b11.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
COMMON="--device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 --decode 64 --temperature 0.8 --tokenizer assets/tokenizer/deepseek-v4/tokenizer.json"
timeout 200 $B/spec_bench $COMMON --family v41 --layers 40 --requests-per-slot 4 --decode-spread 0.5 --batches 16,64,128,256 --arms none,fixed,scheduler \
  --trace $R/trace_v41_spread.jsonl --dir /tmp/sb_v41 > $R/v41_spread.jsonl 2> $R/v41_spread.err
echo "v41 spread rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 150 $B/spec_bench $COMMON --family v41 --layers 40 --requests-per-slot 16 --batches 256 --arms none,scheduler \
  --trace $R/trace_v41_r16.jsonl --dir /tmp/sb_v41 > $R/v41_r16.jsonl 2> $R/v41_r16.err
echo "v41 r16 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 100 $B/spec_bench $COMMON --family v4-dspark --layers 43 --requests-per-slot 4 --decode-spread 0.5 --batches 256 --arms none,fixed,scheduler \
  --dir /tmp/sb_v4d > $R/v4d_spread.jsonl 2> $R/v4d_spread.err
echo "v4 dspark spread rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; for f in $R/*.err; do tail -n 3 $f; done
