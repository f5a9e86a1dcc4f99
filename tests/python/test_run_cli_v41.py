# SPDX-License-Identifier: Apache-2.0
"""`deepinfer run` on DeepSeek-V4.1 checkpoints (tests/data/v41): greedy completions of the fixture prompts
equal transformers' greedy continuations, and every request's tokens and logprobs are identical across
scheduling settings (async, batch size, prefix cache on/off, prefill chunk size, tight state memory)."""
import json
import pathlib
import random
import subprocess

import pytest


def completion_line(cid, ids, max_tokens, **extra):
    body = {"prompt": ids, "max_tokens": max_tokens, "logprobs": 2, **extra}
    return {"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": body}


def run(bin_, model, inp, out, *args):
    cmd = [bin_, "run", "--model", str(model), "--input", str(inp), "--output", str(out), "--progress", "never", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc


def results(path):
    recs = [json.loads(l) for l in pathlib.Path(path).read_text().splitlines()]
    assert all(r["error"] is None for r in recs), recs
    return {r["custom_id"]: r["response"]["body"]["choices"] for r in recs}


def token_ids(choice):
    return [t["id"] for t in choice["logprobs"]["content"]]


@pytest.mark.parametrize("model", ["v41_tiny_a", "v41_tiny_b"])
def test_v41_run_greedy_and_scheduling_invariance(deepinfer_bin, data_dir: pathlib.Path, tmp_path, model):
    d = data_dir / "v41" / model
    ref = json.loads((d / "ref.json").read_text())
    vocab = json.loads((d / "config.json").read_text())["vocab_size"]
    rng = random.Random(41)
    shared = [rng.randrange(vocab) for _ in range(70)]  # > one prefix-cache block (64)
    lines = [completion_line(f"greedy-{i}", p, len(g), temperature=0, ignore_eos=True)
             for i, (p, g) in enumerate(zip(ref["prompts"], ref["greedy"]))]
    for i in range(8):
        prompt = (shared if i % 2 else []) + [rng.randrange(vocab) for _ in range(rng.randrange(3, 30))]
        lines.append(completion_line(f"sampled-{i}", prompt, 6, temperature=0.9, top_p=0.9, seed=i, ignore_eos=True))
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(l) + "\n" for l in lines))
    runs = []
    for k, args in enumerate([[],
                              ["--async", "--max-num-seqs", "3"],
                              # tight state memory with async scheduling (finished sequences' pages freed in time)
                              ["--async", "--no-prefix-cache", "--max-prefill-chunk", "5", "--max-batched-tokens", "40",
                               "--state-memory-gib", "0.0004"]]):
        out = tmp_path / f"out{k}.jsonl"
        proc = run(deepinfer_bin, d, inp, out, *args)
        assert "0 errors" in proc.stderr, proc.stderr
        if k == 1:
            assert float(proc.stderr.split("prefix-cache hit rate ")[1].split("%")[0]) > 0, proc.stderr
        runs.append(results(out))
    for i, greedy in enumerate(ref["greedy"]):
        assert token_ids(runs[0][f"greedy-{i}"][0]) == greedy, (model, i)
    for k in range(1, len(runs)):
        assert runs[k] == runs[0], f"run {k} differs from the default run"
