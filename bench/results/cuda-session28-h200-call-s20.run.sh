#!/usr/bin/env bash
# Session 28, call 2: the replay fixture's tests with the prompts read (dangling-json fix), re-enabled; the comb on a
# warp (hc_comb_warp) against the CPU; old (b19 = 1df9ec2) vs new proxy decode; ncu detail of fp4_dec and hc_pre at b1.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b19f.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b20.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t replay 120 $B/cuda_v41_model_tests --gtest_filter='*Replay*'
t ops_hc 60 $B/cuda_ops_tests --gtest_filter='*HyperConnection*'
t v41_ops 60 $B/cuda_v41_ops_tests
t model 100 $B/cuda_model_tests
t v41_logits 100 $B/cuda_v41_model_tests --gtest_filter='*LogitsAndGreedy*:*BatchInvarian*'
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 8192"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
echo "pb rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for round in 1 2; do for v in old new; do X=$O; [ $v = new ] && X=$B
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128 --decode-warmup 3 --decode 32 >> $R/ab_$v.jsonl 2>> $R/ab.err
done; done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 2 > $R/ncu-b1.txt 2> $R/ncu-b1.err
python3 bench/ncu_summary.py $R/ncu-b1.txt > $R/ncu-b1.sum.txt 2>&1
echo "ncu b1 t=$(( $(date +%s) - T0 ))" >> $S
timeout 120 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'fp4_dec|hc_pre' --launch-count 6 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 1 > $R/ncu-detail.txt 2> $R/ncu-detail.err
echo "ncu detail rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head -20
python3 - <<'PY'
import json
for v in ("old","new"):
    rows=[json.loads(l) for l in open(f"/tmp/r/ab_{v}.jsonl") if l.startswith("{")]
    print(v, [(r["batch"], round(r["ms_per_step"],4)) for r in rows])
PY
head -30 $R/ncu-b1.sum.txt
