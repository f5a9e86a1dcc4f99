#!/usr/bin/env bash
# Session 29, call 2: the FP4 decode kernel's scale pairs prepared once per stage (scale_info): GPU tests, then
# old (65b6b7c) vs new alternating: expert GEMM sweep at 1-16 rows per expert, proxy decode b1/32/128/512, prefill 8K.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/old31.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b31.tar.xz -C $B
cp $B/lib* $O/ 2>/dev/null
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t gemm 60 $B/cuda_gemm_tests
t fast_model 30 $B/cuda_fast_model_tests
t model 40 $B/cuda_model_tests
t ep 60 $B/cuda_ep_tests
t v41 60 $B/cuda_v41_model_tests --gtest_filter='*Fast*:*fast*:*LogitsAndGreedy*'
V=dec64_kt2_72k_b3_pf256,dec64_kt2_54k_b4_pf256
for round in 1 2; do for v in old new; do X=$O; [ $v = new ] && X=$B
timeout 100 $X/cuda_gemm_bench --out $R/sweep_$v.jsonl --only experts_w1,experts_w2,none --ms 128,512 --per-expert 1,3,8,12,16 --variants $V > $R/sweep_$v.txt 2>> $R/sweep.err
echo "sweep $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S
done; done
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in old new; do X=$O; [ $v = new ] && X=$B
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json,collections
for v in ("old","new"):
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{")]
    print(v, d)
agg=collections.defaultdict(list)
for v in ("old","new"):
    for l in open(f"/tmp/r/sweep_{v}.jsonl"):
        j=json.loads(l)
        if j["op"].startswith("experts"): agg[(j["op"],j["impl"],j["note"][-30:],j["m"])].append((v,round(j["gbps"])))
for k,x in sorted(agg.items()): print(k, x)
PY
