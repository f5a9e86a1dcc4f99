#!/usr/bin/env bash
# Session 28, call 6: the FP4 kernels' leaner conversion and promotion scale (tc::fp4x8_to_e4m3_fast, dev::e8m0_pow2):
# tests (bits vs the shared-memory kernel, models vs CPU), old (b19f = 1df9ec2) vs new proxy decode / prefill, ncu times.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b19f.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b24.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$NCCL_DIR NCCL_NVLS_ENABLE=0 DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t gemm 150 $B/cuda_gemm_tests
t fast_model 90 $B/cuda_fast_model_tests
t model 100 $B/cuda_model_tests
t ep 100 $B/cuda_ep_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
echo "pb rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for round in 1 2; do for v in old new; do X=$O; [ $v = new ] && X=$B
  timeout 60 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 24 >> $R/ab_$v.jsonl 2>> $R/ab.err
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/ab_$v.jsonl 2>> $R/ab.err
done; done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
for v in old new; do X=$O; [ $v = new ] && X=$B
for b in 1 128; do
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'fp4_dec' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 2 > $R/ncu-$v-b$b.txt 2>&1
done; done
echo "ncu t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head -20
python3 - <<'PY'
import json
for v in ("old","new"):
    rows=[json.loads(l) for l in open(f"/tmp/r/ab_{v}.jsonl") if l.startswith("{")]
    print(v, [(r["mode"][0], r["batch"], round(r.get("ms_per_step",0),4), round(r.get("tok_s",0))) for r in rows])
PY
grep -h "fp4_dec" $R/ncu-*.txt | grep -v PROF; ls $R
