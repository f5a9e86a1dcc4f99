# SPDX-License-Identifier: Apache-2.0
"""Reference outputs of the rounding operations of DeepSeek's official V4 inference numerics
(deepseek-v4-model.md §2.7, §5.2, §5.3), computed with PyTorch and ml_dtypes, for bit-exact tests of
the engine's `official` numerics mode.

Writes DIR/official_ops.safetensors:
  kv_x            F32 [N, 512]   bf16-representable inputs (varied magnitudes, some tiny rows)
  kv_fp8_sim      F32 [N, 512]   FP8 simulation of dims 0..447 in blocks of 64 (e4m3, ue8m0 scale), bf16
  ix_x            F32 [N, 128]   bf16-representable indexer vectors
  ix_hadamard     F32 [N, 128]   natural-order Walsh-Hadamard / sqrt(128), fp32 inside, bf16 out
  ix_fp4_sim      F32 [N, 128]   FP4 simulation per 32 of ix_x (e2m1 via ml_dtypes, ue8m0 scale), bf16
  ix_hadamard_fp4 F32 [N, 128]   FP4 simulation of ix_hadamard (the indexer's QAT for q and keys)
  qn_x            F32 [N, 512]   bf16 inputs of the per-head unweighted RMS norm
  qn_out          F32 [N, 512]   official bf16-arithmetic head norm (eps 1e-6)

Run: python3 tools/reference/make_official_ops.py --out DIR (CPU; deterministic).
"""
import argparse
import datetime
import json
import math
import pathlib
import sys

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import save_file

SEED = 20261130


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def pow2_ceil_scale(t: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 t) for positive normal fp32 t, from the bit pattern (as the official kernels do)."""
    bits = t.view(torch.int32)
    exp = ((bits >> 23) & 0xFF) - 127
    exp = exp + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.ldexp(torch.ones_like(t), exp)


def kv_fp8_sim(x: torch.Tensor, nope: int = 448) -> torch.Tensor:
    out = x.clone()
    blocks = x[:, :nope].reshape(x.shape[0], nope // 64, 64)
    amax = blocks.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    s = pow2_ceil_scale(amax * torch.tensor(1.0 / 448.0, dtype=torch.float32))
    q = (blocks / s).clamp(-448, 448).to(torch.float8_e4m3fn).to(torch.float32)
    out[:, :nope] = bf16(q * s).reshape(x.shape[0], nope)
    return out


def hadamard(x: torch.Tensor) -> torch.Tensor:
    y = x.clone().to(torch.float32)
    n = y.shape[-1]
    h = 1
    while h < n:
        y = y.reshape(*y.shape[:-1], n // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).reshape(*x.shape[:-1], n)
        h *= 2
    return bf16(y * torch.tensor(1.0 / math.sqrt(n), dtype=torch.float32))


def fp4_sim(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    blocks = x.reshape(x.shape[0], n // 32, 32)
    amax = blocks.abs().amax(-1, keepdim=True).clamp(min=6 * 2.0**-126)
    s = pow2_ceil_scale(amax * torch.tensor(1.0 / 6.0, dtype=torch.float32))
    scaled = (blocks / s).clamp(-6, 6).numpy()
    q = torch.from_numpy(scaled.astype(ml_dtypes.float4_e2m1fn).astype(np.float32))
    return bf16(q * s).reshape(x.shape)


def head_norm_bf16(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The official per-head norm, run on CUDA when present: the official code runs on GPUs, where
    bf16 reductions accumulate in fp32 and round once, and `bf16 + python float` adds in fp32. (PyTorch's
    CPU kernels differ: they round the scalar eps to bf16 first, which changes ~1 row in 64.)"""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    xb = x.to(dev).to(torch.bfloat16)
    return (xb * torch.rsqrt(xb.square().mean(-1, keepdim=True) + eps)).to(torch.float32).cpu()


def bf16_inputs(g: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    mag = torch.exp2(torch.randint(-12, 8, (rows, 1), generator=g).float())
    x = torch.randn(rows, cols, generator=g) * mag
    x[0] = 0.0                      # all-zero row: the amax floors apply
    x[1] = x[1] * 1e-7              # tiny row
    x[2, :64] = 448.0 * 2.0**-3     # a block whose amax is exactly 448·2^k
    x[3] = torch.randn(cols, generator=g) * 1e4
    return bf16(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(SEED)
    kv_x = bf16_inputs(g, 64, 512)
    ix_x = bf16_inputs(g, 64, 128)
    qn_x = bf16_inputs(g, 64, 512)
    ix_h = hadamard(ix_x)
    tensors = {
        "kv_x": kv_x, "kv_fp8_sim": kv_fp8_sim(kv_x),
        "ix_x": ix_x, "ix_hadamard": ix_h, "ix_fp4_sim": fp4_sim(ix_x), "ix_hadamard_fp4": fp4_sim(ix_h),
        "qn_x": qn_x, "qn_out": head_norm_bf16(qn_x),
    }
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    meta = {"provenance": json.dumps({
        "generator": "tools/reference/make_official_ops.py", "command": " ".join(sys.argv),
        "date": datetime.date.today().isoformat(), "seed": SEED,
        "head_norm_device": "cuda" if torch.cuda.is_available() else "cpu",
        "versions": {"torch": torch.__version__, "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__},
    })}
    save_file(tensors, str(out / "official_ops.safetensors"), metadata=meta)
    print("wrote", out / "official_ops.safetensors", {k: list(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
