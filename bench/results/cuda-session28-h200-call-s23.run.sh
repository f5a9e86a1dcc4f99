#!/usr/bin/env bash
# Session 28, call 5: V4.1 bounded replay under expert parallelism (1 rank vs one GPU; 2 ranks skip on one GPU),
# cuda_ep_tests in full; SASS-level counters of the FP4 decode expert kernel at b1 and b128 (even routing).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b23.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$NCCL_DIR NCCL_NVLS_ENABLE=0 DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ep_all 150 $B/cuda_ep_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 8192"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for b in 1 128; do
timeout 150 ncu --profile-from-start off --clock-control none --cache-control all -k regex:'fp4_dec' --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight --section Occupancy -o $R/src-b$b \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 1 > $R/src-b$b.log 2>&1
echo "ncu src b$b rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 ncu -i $R/src-b$b.ncu-rep --page source --print-source sass --csv > $R/src-b$b-sass.csv 2> $R/src-b$b-sass.err
timeout 60 ncu -i $R/src-b$b.ncu-rep --print-details all > $R/src-b$b-details.txt 2>&1
echo "sass b$b rc=$? $(wc -c < $R/src-b$b-sass.csv) t=$(( $(date +%s) - T0 ))" >> $S
done
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure|exception" $R/*.log | head -20; grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued" $R/src-b*-details.txt
