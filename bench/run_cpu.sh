#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the CPU benchmarks and writes CSV (with machine and commit) under bench/results/.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
out=bench/results/cpu-dequant-$(date -u +%Y%m%d)-$(git rev-parse --short HEAD 2>/dev/null || echo nogit).csv
{
  echo "# machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "# commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "# command: $BUILD/bench/dequant_bench --benchmark_format=csv"
  "$BUILD/bench/dequant_bench" --benchmark_format=csv 2>/dev/null
} | tee "$out"
echo "wrote $out"
