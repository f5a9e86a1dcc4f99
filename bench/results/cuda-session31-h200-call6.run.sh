#!/usr/bin/env bash
# Session 31, call 6 (profiles at 99d217f): ncu per-kernel tables of the proxy's decode at b256 and b512
# (4K contexts, even routing), and ncu full sets of one hc_mix_mma launch and one swiglu_quant launch of the 8K prefill.
set -u
T0=$(date +%s)
R=/tmp/r; rm -rf $R; mkdir -p $R
pack() { tar -czf $OUT/r.tgz -C /tmp r; }
B=/tmp/mb6; mkdir -p $B && tar -xJf .devcarry/me/c6.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
NCU="ncu --profile-from-start off --clock-control none --cache-control none"
for b in 256 512; do
timeout 90 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 1 --profile 1 > $R/ncu-b$b.txt 2>&1
echo "ncu b$b rc=$? t=$(( $(date +%s) - T0 ))" >> $S; pack; done
timeout 90 $NCU --set full --kernel-name-base function --kernel-name regex:hc_mix_mma --launch-count 1 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-hcmix-full.txt 2>&1
echo "ncu hcmix rc=$? t=$(( $(date +%s) - T0 ))" >> $S; pack
cat $S
