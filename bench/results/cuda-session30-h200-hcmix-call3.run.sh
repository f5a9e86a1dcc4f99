#!/usr/bin/env bash
# Session 30, call 3: the mHC mixing logits on tensor cores (3xTF32, hc_mix_mma.cuh; a chunk over 8 warps, one accumulator). GPU tests, then main
# (3d66c4a) vs new alternating on the 2-layer proxy: prefill 8K and 2K, decode b1/32/128/512 at 4K contexts;
# an ncu kernel-time table of the new 8K prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/c3.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 120 $B/cuda_ops_tests
t fast_model 40 $B/cuda_fast_model_tests
t model 60 $B/cuda_model_tests
t mtp 60 $B/cuda_mtp_tests
t dspark 100 $B/cuda_dspark_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench_main $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in main new; do X=$B/cuda_forward_bench; [ $v = main ] && X=$B/cuda_forward_bench_main
  timeout 40 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 2048 --batches 1 --context 16 --decode 0 >> $R/pf2_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 150 $NCU --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 100 $NCU --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 2 --profile 1 > $R/ncu-b1.txt 2>&1
echo "ncu b1 rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
grep -E "hc_mix|hc_pre|hc_head" $R/ncu-pf8192.txt | head; grep -E "hc_mix|hc_pre|hc_head" $R/ncu-b1.txt | head
python3 - <<'PY'
import json
for v in ("main","new"):
    for f in ("pf8","pf2"):
        d=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/{f}_{v}.jsonl") if l.startswith("{") and json.loads(l).get("tok_s",0)>0 and json.loads(l).get("mode")=="prefill"]
        print(f, v, d)
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{") and json.loads(l).get("mode")=="decode"]
    print("dec", v, d)
PY
