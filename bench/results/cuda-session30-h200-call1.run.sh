#!/usr/bin/env bash
# Session 30, call 1: the two untested proposals (decode width split, variants 32/33; ws lean consumer addressing).
# GPU tests of the patched tree, then main vs patched alternating: decode expert sweep, prefill expert sweep,
# proxy decode (main default vs split variants as default) and proxy prefill 8K (main vs lean ws).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/c1.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t gemm 90 $B/cuda_gemm_tests
t fast_model 40 $B/cuda_fast_model_tests
V=dec64_kt2_72k_b3_pf256,dec64_kt2_54k_b4_pf256,dec64_kt2_72k_b3_pf256_n44b5,dec64_kt2_72k_b3_pf256_n54b4
for round in 1 2; do
  timeout 100 $B/cuda_gemm_bench --no-ceilings --out $R/dsweep.jsonl --only experts_w1,experts_w2 --ms 128,512 --per-expert 1,3,8,12,16 --variants $V > /dev/null 2>> $R/sweep.err
  echo "dsweep rc=$? t=$(( $(date +%s) - T0 ))" >> $S
done
timeout 60 $B/cuda_gemm_bench --out $R/ceil.jsonl --only none --ms 128 > $R/ceil.txt 2>&1
for round in 1 2; do for v in main new; do X=$B/cuda_gemm_bench; [ $v = main ] && X=$B/cuda_gemm_bench_main
  timeout 100 $X --no-ceilings --out $R/psweep_$v.jsonl --only experts_w1,experts_w2 --ms 4096,8192,16384 --variants ws128p2_s5_pers > /dev/null 2>> $R/sweep.err
  echo "psweep $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S
done; done
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench_main $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in main v32 v33; do
  timeout 40 $B/cuda_forward_bench_$v $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "proxy dec t=$(( $(date +%s) - T0 ))" >> $S
for round in 1 2; do for v in main new; do
  timeout 40 $B/cuda_forward_bench_$v $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf_$v.jsonl 2>> $R/pf.err
done; done
echo "proxy pf t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json,collections
for v in ("main","v32","v33"):
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{")]
    print("dec", v, d)
for v in ("main","new"):
    d=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf_{v}.jsonl") if l.startswith("{")]
    print("pf", v, d)
agg=collections.defaultdict(list)
for l in open("/tmp/r/dsweep.jsonl"):
    j=json.loads(l)
    if j["op"].startswith("experts"): agg[(j["op"],j["m"],j.get("note","")[-24:],j["impl"])].append(round(j["gbps"]))
for k,x in sorted(agg.items()): print(k, x)
agg=collections.defaultdict(list)
for v in ("main","new"):
    for l in open(f"/tmp/r/psweep_{v}.jsonl"):
        j=json.loads(l)
        if j["op"].startswith("experts"): agg[(j["op"],j["m"],j["impl"])].append((v,round(j["tflops"])))
for k,x in sorted(agg.items()): print(k, x)
PY
