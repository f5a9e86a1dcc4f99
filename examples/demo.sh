#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: what the CLI can do end to end today. The batch job (`deepinfer run`) and the
# embedded default model arrive with the engine issues; until then the demo inspects the tiny
# random-weight DeepSeek-V4 checkpoints that transformers wrote (tests/data/models/).
set -euo pipefail
BIN=${1:-build/deepinfer}
cd "$(dirname "$0")/.."
echo "== deepinfer --version"
"$BIN" --version
for model in tests/data/models/v4_tiny_a tests/data/models/v4_tiny_b_sharded; do
  echo
  echo "== deepinfer inspect --model $model"
  "$BIN" inspect --model "$model"
done
echo
echo "Note: these are tiny random-weight models of the real architecture, used as test fixtures."
