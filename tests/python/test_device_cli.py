# SPDX-License-Identifier: Apache-2.0
"""`--device cuda`: with a GPU (and a CUDA build) `logits` on the GPU equals the CPU's bit for bit (DeepSeek-V4 and
DeepSeek-V4.1); without one the command fails cleanly with one error line naming CUDA, and `--device` rejects
unknown names. `run --gpus-per-replica 2` (expert parallelism) equals one GPU's records where two GPUs and NCCL
exist, else fails cleanly before any request."""
import json
import pathlib
import subprocess

import numpy as np
import pytest


def _logits(deepinfer_bin, model, ids, out, device, numerics):
    return subprocess.run([deepinfer_bin, "logits", "--model", str(model), "--ids", ",".join(map(str, ids)),
                           "--output", str(out), "--numerics", numerics, "--device", device],
                          capture_output=True, text=True)


@pytest.mark.parametrize("model_dir", ["models/v4_tiny_a", "v41/v41_tiny_a"])
def test_cuda_logits_equal_cpu_or_fail_cleanly(deepinfer_bin, data_dir: pathlib.Path, tmp_path, model_dir):
    model = data_dir / model_dir
    prompt = json.loads((model / "ref.json").read_text())["prompts"][1]
    for numerics in ("exact", "official"):
        cpu = _logits(deepinfer_bin, model, prompt, tmp_path / "cpu.f32", "cpu", numerics)
        assert cpu.returncode == 0, cpu.stderr
        gpu = _logits(deepinfer_bin, model, prompt, tmp_path / "gpu.f32", "cuda", numerics)
        if gpu.returncode != 0:  # no GPU, or a build without nvcc
            assert "CUDA" in gpu.stderr and gpu.stderr.count("\n") <= 2, gpu.stderr
            continue
        a = np.fromfile(tmp_path / "cpu.f32", dtype="<f4")
        b = np.fromfile(tmp_path / "gpu.f32", dtype="<f4")
        assert a.shape == b.shape and a.size == len(prompt) * 512
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), numerics


def test_unknown_device_is_rejected(deepinfer_bin, data_dir: pathlib.Path, tmp_path):
    proc = _logits(deepinfer_bin, data_dir / "models" / "v4_tiny_a", [1, 2, 3], tmp_path / "x.f32", "tpu", "exact")
    assert proc.returncode != 0
    assert "unknown device 'tpu'" in proc.stderr


def _run(deepinfer_bin, inp, out, cache_dir, *extra):
    return subprocess.run([deepinfer_bin, "run", "--model", "embedded:v4", "--cache-dir", str(cache_dir), "--input",
                           str(inp), "--output", str(out), "--progress", "never", *extra],
                          capture_output=True, text=True)


def test_run_on_two_gpus_equals_one_or_fails_cleanly(deepinfer_bin, tmp_path):
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "m", "prompt": f"request number {i} " * (i + 1), "max_tokens": 6,
                       "temperature": 0.0 if i % 2 else 0.8, "seed": i}} for i in range(5)]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    two = _run(deepinfer_bin, inp, tmp_path / "two.jsonl", tmp_path / "cache", "--device", "cuda",
               "--gpus-per-replica", "2")
    if two.returncode != 0:  # fewer than 2 GPUs, no NCCL, or a build without nvcc
        assert "CUDA" in two.stderr or "NCCL" in two.stderr or "GPU" in two.stderr, two.stderr
        assert not (tmp_path / "two.jsonl").exists() or (tmp_path / "two.jsonl").read_text() == ""
        return
    one = _run(deepinfer_bin, inp, tmp_path / "one.jsonl", tmp_path / "cache", "--device", "cuda")
    assert one.returncode == 0, one.stderr

    def records(path):
        out = {}
        for line in path.read_text().splitlines():
            r = json.loads(line)
            out[r["custom_id"]] = [c["text"] for c in r["response"]["body"]["choices"]]
        return out

    assert records(tmp_path / "one.jsonl") == records(tmp_path / "two.jsonl")


def test_bench_gpus_need_cuda(deepinfer_bin, data_dir: pathlib.Path):
    proc = subprocess.run([deepinfer_bin, "bench", "--model", str(data_dir / "models" / "v4_tiny_a"), "--prefill", "4",
                           "--decode", "1", "--gpus-per-replica", "2"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "--gpus-per-replica 2 needs --device cuda" in proc.stderr
