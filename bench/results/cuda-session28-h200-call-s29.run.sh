#!/usr/bin/env bash
# Session 28, call 11: powers of two by their bits (dev::exp2i / exp2i_inv) in the activation / cache quantizers and
# round_narrow (x / 2^k as x · 2^-k, bit for bit): tests, 0c9e875 (b28f) vs new proxy prefill/decode, ncu act_quant.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b28f.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b29.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 40 $B/cuda_ops_tests
t gemm 40 $B/cuda_gemm_tests
t v41_ops 20 $B/cuda_v41_ops_tests
t model 40 $B/cuda_model_tests
t fast_model 20 $B/cuda_fast_model_tests
t v41 60 $B/cuda_v41_model_tests --gtest_filter='*Fast*:*fast*:*LogitsAndGreedy*:*Cache*:*Paged*'
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in old new; do X=$O; [ $v = new ] && X=$B
  timeout 25 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf_$v.jsonl 2>> $R/pf.err
  timeout 25 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
for v in old new; do X=$O; [ $v = new ] && X=$B
timeout 30 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'act_quant' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-$v.txt 2>&1
done
echo "ncu t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
for v in ("old","new"):
    a=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf_{v}.jsonl") if l.startswith("{")]
    d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{")]
    print(v, a, d)
PY
for v in old new; do echo "== $v"; grep -v PROF $R/ncu-$v.txt | grep -A3 act_quant | grep -E "act_quant|gpu__time"; done
