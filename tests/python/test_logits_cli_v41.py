# SPDX-License-Identifier: Apache-2.0
"""`deepinfer logits` and `generate` on DeepSeek-V4.1 checkpoints (routed to the V4.1 CPU forward): logits at every
position match transformers' DeepseekV41 references (tests/data/v41) within 1e-4 x max|logit|, in one
chunk and in chunks of 7, the two runs bit-identical; greedy continuations identical."""
import json
import pathlib
import subprocess

import numpy as np
import pytest


@pytest.mark.parametrize("model", ["v41_tiny_a", "v41_tiny_b"])
def test_v41_logits_match_reference(deepinfer_bin, data_dir: pathlib.Path, tmp_path, model):
    d = data_dir / "v41" / model
    ref = json.loads((d / "ref.json").read_text())
    cfg = json.loads((d / "config.json").read_text())
    vocab = (cfg.get("text_config") or cfg)["vocab_size"]
    for i, prompt in enumerate(ref["prompts"]):
        want = np.fromfile(d / f"ref_logits_{i}.f32", dtype="<f4").reshape(len(prompt), vocab)
        runs = []
        for chunk in (0, 7):
            out = tmp_path / f"{i}_{chunk}.f32"
            proc = subprocess.run([deepinfer_bin, "logits", "--model", str(d), "--ids", ",".join(map(str, prompt)),
                                   "--output", str(out), "--chunk", str(chunk)], capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode == 0, proc.stderr
            got = np.fromfile(out, dtype="<f4").reshape(len(prompt), vocab)
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), (model, i, chunk)
            runs.append(got)
        assert np.array_equal(runs[0], runs[1]), "chunked run differs from the one-chunk run"


@pytest.mark.parametrize("model", ["v41_tiny_a", "v41_tiny_b"])
def test_v41_generate_greedy_matches_reference(deepinfer_bin, data_dir: pathlib.Path, model):
    d = data_dir / "v41" / model
    ref = json.loads((d / "ref.json").read_text())
    for prompt, greedy in zip(ref["prompts"], ref["greedy"]):
        proc = subprocess.run([deepinfer_bin, "generate", "--model", str(d), "--ids", ",".join(map(str, prompt)),
                               "--max-tokens", str(len(greedy))], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["token_ids"] == greedy
