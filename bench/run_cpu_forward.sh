#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CPU forward benchmark (issue 3): prefill and decode tokens/s of the tiny fixture models and of one
# full-width V4-Flash layer of each kind (random FP8/FP4 weights, official numerics), beside the CPU
# GEMM throughput measured in the same run (deepinfer's f32 kernel, and numpy/OpenBLAS sgemm as an
# external ceiling). Writes bench/results/cpu-forward-<date>-<commit>.jsonl.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
BIN=$BUILD/deepinfer
commit=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
out=bench/results/cpu-forward-$(date -u +%Y%m%d)-$commit.jsonl
: > "$out"
meta() { printf '{"machine": "%s", "cores": %s, "commit": "%s", "command": "%s"}\n' \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(git rev-parse HEAD)" "$*" >> "$out"; }
for m in v4_tiny_a v4_tiny_b; do
  meta "$BIN bench --model tests/data/models/$m --prefill 256 --decode 64"
  "$BIN" bench --model tests/data/models/$m --prefill 256 --decode 64 --output "$out" >/dev/null
done
for kind in flash-csa flash-hca flash-sliding; do
  meta "$BIN bench --synthetic $kind --prefill 128 --decode 8"
  "$BIN" bench --synthetic $kind --prefill 128 --decode 8 --output "$out" >/dev/null
done
if [ -x .venv/bin/python ]; then
  meta "numpy sgemm [256,4096]x[4096,4096] and [1,4096]x[4096,4096] (OpenBLAS)"
  .venv/bin/python - >> "$out" <<'PY'
import json, time, numpy as np
def rate(t):
    a = np.random.rand(t, 4096).astype(np.float32); b = np.random.rand(4096, 4096).astype(np.float32)
    a @ b; n = 0; t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0 or n < 2:
        a @ b; n += 1
    return 2 * t * 4096 * 4096 * n / (time.perf_counter() - t0) / 1e9
print(json.dumps({"numpy_sgemm_gflop_s_prefill_shape": rate(256), "numpy_sgemm_gflop_s_decode_shape": rate(1),
                  "numpy": np.__version__}))
PY
fi
cat "$out"
