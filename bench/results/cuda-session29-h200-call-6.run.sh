#!/usr/bin/env bash
# Session 29, call 6: the combine on float4 rows, SwiGLU+quantization with 4 blocks per warp: GPU tests; then the
# session's start (65b6b7c), the previous commit (1656163) and new: proxy prefill 8K / 2K, decode b1/32/128/512; ncu 8K prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/old35.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b35.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 60 $B/cuda_ops_tests
t gemm 60 $B/cuda_gemm_tests
t fast_model 40 $B/cuda_fast_model_tests
t model 40 $B/cuda_model_tests

FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
run() { local v=$1 X=$2
  timeout 25 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 25 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 2048 --batches 1 --context 16 --decode 0 >> $R/pf2_$v.jsonl 2>> $R/pf.err
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
}
run start $O/start; run prev $O/prev; run new $B; run start $O/start; run new $B
echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-pf8192.txt 2>&1
echo "ncu pf rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
for v in ("start","prev","new"):
    a=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf8_{v}.jsonl") if l.startswith("{")]
    b=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf2_{v}.jsonl") if l.startswith("{")]
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{")]
    print(v, "pf8", a, "pf2", b, d)
PY
