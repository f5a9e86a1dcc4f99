#!/usr/bin/env bash
# Session 28, call 8: the decode kernel's 4-blocks-per-SM configuration by default at <= 8 rows per expert: tests,
# proxy decode (compare call 6's a4cb664 column), ncu fp4_dec times; ncu source counters of hc_mix_partial at prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b26.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t gemm 100 $B/cuda_gemm_tests
t fast_model 90 $B/cuda_fast_model_tests
t model 100 $B/cuda_model_tests
t v41 100 $B/cuda_v41_model_tests --gtest_filter='*Fast*:*fast*:*LogitsAndGreedy*'
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do
  timeout 60 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 24 >> $R/dec.jsonl 2>> $R/dec.err
done
echo "dec t=$(( $(date +%s) - T0 ))" >> $S
for b in 1 128; do
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'fp4_dec' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 2 > $R/ncu-b$b.txt 2>&1
done
timeout 120 ncu --profile-from-start off --clock-control none --cache-control all -k regex:'hc_mix_partial' --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis -o $R/hcmix \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/hcmix.log 2>&1
timeout 60 ncu -i $R/hcmix.ncu-rep --page source --print-source sass --csv > $R/hcmix-sass.csv 2>&1
timeout 60 ncu -i $R/hcmix.ncu-rep --print-details all > $R/hcmix-details.txt 2>&1
echo "ncu t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
rows=[json.loads(l) for l in open("/tmp/r/dec.jsonl") if l.startswith("{")]
print([(r["batch"], round(r["ms_per_step"],4)) for r in rows])
PY
grep -h -A3 "fp4_dec_kernel" $R/ncu-b*.txt | grep -E "fp4_dec|duration"; grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|Issued Warp" $R/hcmix-details.txt
