#!/usr/bin/env bash
# Session 27, call 3 (bc13ca0): where a prefill's time goes now, on the 2-layer proxy (even routing):
# timing at 4096 and 8192 tokens, then ncu per-kernel of an 8192-token prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b12.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 90 $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --dir /tmp/pb --keep 1 --prefill 8192 --batches 1 --context 16 --decode 2 --max-len 16384 --routing even > $R/time8192.jsonl 2> $R/time8192.err
echo "time8192 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --model /tmp/pb --prefill 4096 --batches 1 --context 16 --decode 2 --max-len 16384 --routing even > $R/time4096.jsonl 2> $R/time4096.err
echo "time4096 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 150 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 --max-len 16384 --routing even > $R/ncu8192.txt 2> $R/ncu8192.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
python3 bench/ncu_summary.py $R/ncu8192.txt > $R/ncu8192.sum.txt 2>&1
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; cat $R/ncu8192.sum.txt | head -40; tail -n 2 $R/*.err
