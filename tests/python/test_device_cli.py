# SPDX-License-Identifier: Apache-2.0
"""`--device cuda`: with a GPU (and a CUDA build) `logits` on the GPU equals the CPU's bit for bit (DeepSeek-V4 and
DeepSeek-V4.1); without one the command fails cleanly with one error line naming CUDA, and `--device` rejects
unknown names."""
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
