#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What every recorded GPU call script (bench/results/*.run.sh) repeats, for new scripts to source on the
# `device` tool's machine, from the repository root:
#   source tools/device/call_lib.sh .devcarry/me/bundle.tar.xz    # a tools/device/make_bundle.sh bundle
#   t model 60 $B/cuda_model_tests                                 # a test binary, its rc and PASSED/FAILED line
#   for v in prev new; do ... >> $R/pf8_$v.jsonl; done; pack       # results under $R, packed into $OUT/r.tgz
# It unpacks the bundle into $B (/tmp/mb), finds cuBLAS and the CUDA runtime for LD_LIBRARY_PATH, points DI_TEST_DATA_DIR at the
# fixtures and /work/main at this checkout (tests that name it), starts $R (/tmp/r) with the GPU's line in
# $S ($R/summary.txt), and defines:
#   t NAME SECONDS CMD...  run CMD under a timeout into $R/NAME.log; one line in $S
#   pack                   $R into $OUT/r.tgz (one file: the tool returns a limited number of files)
#   elapsed                seconds since sourcing
#   FB                     the 2-layer proxy's cuda_forward_bench flags (CSA + HCA, 256 experts, fast, even routing)
#   engine_ab ARGS -- V...   the offline engine's A/B (cuda_engine_bench ARGS, e.g. --family v41 --layers v41:4 ...):
#                          a checkpoint on a tmpfs ($D/ck) written by the first variant's run, then one run per
#                          listed variant in order (V = suffix of $B/cuda_engine_bench_V, "new" = $B/cuda_engine_bench),
#                          into $R/V1.jsonl, $R/V2.jsonl, ... (a variant listed twice gets its next number)
#   digest_ab ARGS -- V...   after engine_ab: each variant's `cuda_engine_bench --digest 1` on that checkpoint (a
#                          4096-token prefill of two requests, decode batches 1, 32 and 64, 4 steps) into
#                          $R/digest_V.jsonl and one line per variant in $S: equal digests = the same bits end to end
#   ncu_tables ARGS        kernel-time tables (ncu) of a 4096-token prefill step and two b1 steps of that
#                          checkpoint with $B/cuda_engine_bench: $R/ncu_pf.txt, $R/ncu_b1.txt (bench/op_table.py reads them)
#   ncu_pf_ab T ARGS -- V...  after engine_ab: each variant's kernel-time table (ncu, per kernel) of one T-token prefill
#                          step of that checkpoint: $R/ncu_pf_V.txt (bench/ncu_summary.py reads them), a line each in $S
#   ncu_launches ARGS      the same 4096-token prefill step launch by launch, in order: $R/ncu_pf_launches.txt
#                          (bench/ncu_summary.py --launches: tells apart the launches of one kernel and grid)
#   proxy_ab BATCHES ROUNDS  the proxy's checkpoint (/tmp/pb), then ROUNDS rounds of decode at BATCHES (4096
#                          context) and an 8K prefill, $B/cuda_forward_bench_prev and $B/cuda_forward_bench
#                          interleaved, into $R/{dec,pf8}_{prev,new}.jsonl; ab_summary prints them
set -u
CALL_T0=$(date +%s)
B=/tmp/mb
R=/tmp/r
S=$R/summary.txt
rm -rf "$R" && mkdir -p "$R" "$B"
tar -xJf "$1" -C "$B"
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
CUDART_DIR=$(dirname "$(find / -name 'libcudart.so.13*' 2>/dev/null | head -1)")  # (make_bundle.sh leaves it out)
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR:$CUDART_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && { [ -e /work/main ] && [ ! -L /work/main ]; } || ln -sfn "$PWD" /work/main  # (not over a real checkout)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$S"
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
elapsed() { echo $(( $(date +%s) - CALL_T0 )); }
pack() { tar -czf "$OUT/r.tgz" -C "$(dirname "$R")" "$(basename "$R")"; }
t() {
    local name=$1 cap=$2
    shift 2
    timeout "$cap" "$@" > "$R/$name.log" 2>&1
    echo "$name rc=$? t=$(elapsed) $(grep -E '^\[  (PASSED|FAILED) ' "$R/$name.log" | tr '\n' ' ' | cut -c1-300)" >> "$S"
}
proxy_ab() {
    local batches=$1 rounds=${2:-2} v x
    [ -d /tmp/pb ] || timeout 60 "$B/cuda_forward_bench" $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
    for _ in $(seq "$rounds"); do
        for v in prev new; do
            x=$B/cuda_forward_bench; [ "$v" = prev ] && x=$B/cuda_forward_bench_prev
            timeout 50 "$x" $FB --model /tmp/pb --prefill 0 --context 4096 --batches "$batches" --decode-warmup 3 --decode 16 >> "$R/dec_$v.jsonl" 2>> "$R/pf.err"
            timeout 30 "$x" $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> "$R/pf8_$v.jsonl" 2>> "$R/pf.err"
        done
    done
    echo "proxy t=$(elapsed)" >> "$S"
}
engine_ab() {
    local args=() v x n
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
    for v in "$@"; do
        x=$B/cuda_engine_bench; [ "$v" = new ] || x=$B/cuda_engine_bench_$v
        n=1; while [ -e "$R/$v$n.jsonl" ]; do n=$((n + 1)); done
        if [ -d "$D/ck" ]; then timeout 60 "$x" "${args[@]}" --model "$D/ck" > "$R/$v$n.jsonl" 2> "$R/$v$n.err"
        else timeout 120 "$x" "${args[@]}" --dir "$D/ck" --keep 1 > "$R/$v$n.jsonl" 2> "$R/$v$n.err"; fi
        echo "$v$n rc=$? t=$(elapsed)" >> "$S"
    done
}
digest_ab() {
    local args=() v x
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    for v in "$@"; do
        x=$B/cuda_engine_bench; [ "$v" = new ] || x=$B/cuda_engine_bench_$v
        timeout 90 "$x" "${args[@]}" --model "$D/ck" --prefill-prompt 4096 --prefill-requests 2 --batches 1,32,64 --decode 4 \
            --digest 1 > "$R/digest_$v.jsonl" 2> "$R/digest_$v.err"
        echo "digest $v rc=$? t=$(elapsed) $(grep -o '"digest":"[0-9a-f]*"' "$R/digest_$v.jsonl" | tr '\n' ' ')" >> "$S"
    done
}
ncu_tables() {
    local n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
    timeout 60 $n "$B/cuda_engine_bench" "$@" --model "$D/ck" --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 \
        --profile prefill > "$R/ncu_pf.txt" 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> "$S"
    timeout 50 $n "$B/cuda_engine_bench" "$@" --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 \
        --profile decode > "$R/ncu_b1.txt" 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> "$S"
}
ncu_pf_ab() {
    local tokens=$1 args=() v x
    shift
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    for v in "$@"; do
        x=$B/cuda_engine_bench; [ "$v" = new ] || x=$B/cuda_engine_bench_$v
        timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \
            --print-summary per-kernel "$x" "${args[@]}" --model "$D/ck" --prefill-prompt "$tokens" --prefill-requests 1 \
            --batches 1 --decode 1 --profile prefill > "$R/ncu_pf_$v.txt" 2>&1
        echo "ncu pf $v rc=$? t=$(elapsed)" >> "$S"
    done
}
ncu_launches() {
    timeout 90 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        "$B/cuda_engine_bench" "$@" --model "$D/ck" --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 \
        --profile prefill > "$R/ncu_pf_launches.txt" 2>&1
    echo "ncu pf launches rc=$? t=$(elapsed)" >> "$S"
}
ab_summary() {
    local v
    for v in prev new; do
        echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' "$R/pf8_$v.jsonl" | grep -v ':0$' | tr '\n' ' ')"
        echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' "$R/dec_$v.jsonl" | tr '\n' ' ')"
    done
}
