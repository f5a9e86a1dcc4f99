#!/usr/bin/env bash
# Session 26, call 4: speculation against none with continuous batching (--requests-per-slot 4), published formats,
# 43 layers, V = 129,280, T = 0.8 (DSpark, MTP) and greedy DSpark; batches 16 .. 256.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-400}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b4.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
sb() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 30 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) $B/spec_bench --device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 --layers 43 --decode 64 --requests-per-slot 4 "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb dsp_t08 130 --family v4-dspark --temperature 0.8 --batches 16,64,128,256 --arms none,fixed,scheduler --trace $R/trace_dsp.jsonl
sb mtp_t08 130 --family v4 --temperature 0.8 --batches 16,64,128,256 --arms none,fixed,scheduler --trace $R/trace_mtp.jsonl
sb dsp_t0 90 --family v4-dspark --temperature 0 --batches 64,256 --arms none,fixed,scheduler
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
