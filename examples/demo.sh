#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: the main job end to end on the built-in default model. `deepinfer run` reads the
# OpenAI Batch API file examples/requests.jsonl (chat and raw completions, n > 1, logprobs, and two
# deliberately malformed lines) and writes the batch output file; then `inspect` shows a fixture.
# The built-in model is a tiny RANDOM-weight model of the real DeepSeek-V4.1 architecture and
# vocabulary: its text is meaningless by design. Use --model DIR with a real checkpoint
# (deepseek-ai/DeepSeek-V4.1-Flash-1017 in production) for real answers.
set -euo pipefail
BIN=${1:-build/deepinfer}
cd "$(dirname "$0")/.."
out=${DEMO_OUTPUT:-build/demo-results.jsonl}
rm -f "$out"
echo "== deepinfer run --input examples/requests.jsonl --output $out"
"$BIN" run --input examples/requests.jsonl --output "$out"
echo
echo "== results ($out), one line per request:"
.venv/bin/python - "$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["error"]:
        print(f"  {str(r['custom_id']):8} ERROR {r['error']['message']}")
        continue
    body = r["response"]["body"]
    for c in body["choices"]:
        text = c.get("text")
        if text is None:
            m = c["message"]
            text = (m.get("content") or "") or ("[reasoning] " + (m.get("reasoning_content") or ""))
        print(f"  {r['custom_id']:8} [{c['index']}] {c['finish_reason']:6} {text[:60]!r}")
PY
echo
echo "== deepinfer inspect --model tests/data/models/v4_tiny_a (a transformers-written fixture)"
"$BIN" inspect --model tests/data/models/v4_tiny_a | head -25
