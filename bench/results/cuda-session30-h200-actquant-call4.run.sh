#!/usr/bin/env bash
# Session 30, call 4: act_quant_fp8 with 4 blocks per warp and the hardware e4m3 rounding (act_quant_quad, also
# SwiGLU+quant and the per-32 form). GPU tests; gemm bench main (3d66c4a) vs new (act_quant rows, elementwise
# incl. swiglu_quant); proxy main / hcmix (8daa13e) / new: prefill 8K, 2K, decode b1-512; ncu 8K prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/c4.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t gemm 90 $B/cuda_gemm_tests
t ops 90 $B/cuda_ops_tests
t v41ops 60 $B/cuda_v41_ops_tests
t fast_model 40 $B/cuda_fast_model_tests
t model 60 $B/cuda_model_tests
timeout 60 $B/cuda_gemm_bench --out $R/ceil.jsonl --only none --ms 128 > /dev/null 2>&1
for round in 1 2; do for v in main new; do X=$B/cuda_gemm_bench; [ $v = main ] && X=$B/cuda_gemm_bench_main
  timeout 120 $X --no-ceilings --out $R/gb_$v.jsonl --only wq_a,wo_b,elementwise --ms 1,128,4096,16384 > /dev/null 2>> $R/gb.err
  echo "gb $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S
done; done
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench_main $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in main hcmix new; do X=$B/cuda_forward_bench_$v; [ $v = new ] && X=$B/cuda_forward_bench
  timeout 40 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 2048 --batches 1 --context 16 --decode 0 >> $R/pf2_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
timeout 150 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
grep -E "act_quant|swiglu_quant|hc_mix" $R/ncu-pf8192.txt | grep -v "==PROF" | head
python3 - <<'PY'
import json,collections
for v in ("main","hcmix","new"):
    for f in ("pf8","pf2"):
        d=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/{f}_{v}.jsonl") if l.startswith("{") and json.loads(l).get("mode")=="prefill"]
        print(f, v, d)
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{") and json.loads(l).get("mode")=="decode"]
    print("dec", v, d)
agg=collections.defaultdict(list)
for v in ("main","new"):
    for l in open(f"/tmp/r/gb_{v}.jsonl"):
        j=json.loads(l)
        if j["op"] in ("act_quant_fp8","swiglu","swiglu_quant","rms_norm","hc_post","moe_combine"): agg[(j["op"],j.get("shape",""),j["m"])].append((v,round(j["ms"]*1000,1),round(j["gbps"])))
for k,x in sorted(agg.items()): print(k, x)
PY
