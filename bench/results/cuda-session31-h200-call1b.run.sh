#!/usr/bin/env bash
# Session 31, call 1b: call 1's ncu tables again (call 1 wrote too many files to come back), packed in one tar.
set -u
T0=$(date +%s)
R=/tmp/r1b; mkdir -p $R
B=/tmp/mb; [ -x $B/cuda_forward_bench ] || { mkdir -p $B && tar -xJf .devcarry/me/c1.tar.xz -C $B; }
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
[ -f /tmp/pb/config.json ] || ls /tmp/pb >/dev/null 2>&1 || timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
S=$R/summary.txt; ls /tmp/pb > $S
NCU="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 60 $NCU $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu pf rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for v in head 1t; do X=$B/cuda_forward_bench; [ $v = 1t ] && X=$B/cuda_forward_bench_1t
timeout 60 $NCU $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 1 --profile 1 > $R/ncu-b1-$v.txt 2>&1
echo "ncu b1 $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S; done
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none --kernel-name regex:swiglu --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-swiglu-detail.txt 2>&1
echo "ncu swiglu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
cat $S; tar -czf $OUT/r1b.tgz -C /tmp r1b
