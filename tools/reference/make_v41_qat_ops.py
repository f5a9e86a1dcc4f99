# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V4.1 cache-format rounding fixtures (spec deepseek-v41-model.md §3.6), written to
tests/data/v41/qat_ops.safetensors for tests/v41/qat_v41_test.cpp.

For each of the three QAT formats - (a) window K=V: e4m3 with a ue8m0 scale per 32; (b) compressed
KV: e2m1 with an e4m3 scale per 16; (c) index keys/queries: e2m1 with a ue8m0 scale per 32 - the
inputs are random rows at several magnitudes plus hostile rows (values exactly on the e2m1 and e4m3
rounding ties after scaling, amax at and below the floors, amax exactly a power of two, zeros and
negative zeros, values that saturate). Two independent references produce the outputs:
  * transformers' DeepseekV41 `_fake_quant_fp8_block` / `_fake_quant_fp4_block` (the executable
    reference the V4.1 forward fixtures come from), and
  * a direct ml_dtypes formulation (float8_e4m3fn / float4_e2m1fn / float8_e8m0fnu casts, RNE),
and the script stops unless both agree bit for bit. It also writes the compact storage codes
(ml_dtypes): e4m3 bytes + ue8m0 scale bytes for (a), packed e2m1 nibbles (element 2k low) + e4m3
scale bytes for (b), packed e2m1 nibbles + ue8m0 bytes for (c).

Run with a Python that has torch, ml_dtypes, safetensors/numpy and transformers 5.24 plus the V4.1 model
package (DEEPSEEK_V41_HF_SRC, as make_v41_models.py):
    DEEPSEEK_V41_HF_SRC=/path/to/deepseek_v41 python tools/reference/make_v41_qat_ops.py
"""
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_v41_models  # noqa: E402  (imports transformers' deepseek_v41 the same way)

mdv41 = make_v41_models.mdv41
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "v41", "qat_ops.safetensors")

E2M1_GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)


def inputs(rng: np.random.Generator, block: int, grid: np.ndarray, e4m3_scale: bool) -> np.ndarray:
    rows = []
    # An e4m3 scale saturates past amax = 6 * 448 (NaN in both references; spec §3.6 b: never reached).
    for mag in [1e-12, 1e-6, 3e-3, 0.1, 1.0, 7.5, 22.0, 300.0] + ([] if e4m3_scale else [1e5]):
        for _ in range(6):
            rows.append(rng.standard_normal(4 * block).astype(np.float32) * np.float32(mag))
    # Values exactly on the rounding ties (midpoints of the code grid) times a power-of-two scale, with the
    # block's amax pinned so that the scale is that power of two.
    mids = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
    for p in [-7, 0, 3]:
        s = np.float32(2.0 ** p)
        row = np.resize(np.concatenate([mids, -mids]), 4 * block).astype(np.float32) * s
        row[::block] = grid[-1] * s  # amax = max code * scale
        rows.append(row)
    # amax exactly a power of two, at the floors, below the floors; zeros and negative zeros.
    row = rng.standard_normal(4 * block).astype(np.float32)
    row[::block] = 8.0
    rows.append(row)
    rows.append(np.full(4 * block, 1e-4, np.float32))
    rows.append(np.full(4 * block, 6.0 * 2.0 ** -9, np.float32))
    rows.append(np.full(4 * block, 1e-30, np.float32))
    z = np.zeros(4 * block, np.float32)
    z[1::2] = -0.0
    rows.append(z)
    return np.stack(rows)


def pow2_ceil(t: np.ndarray) -> np.ndarray:
    bits = t.astype(np.float32).view(np.int32)
    k = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)
    return np.exp2(k.astype(np.float32)).astype(np.float32)


def ref_fp8(x: np.ndarray, block: int):
    b = x.reshape(x.shape[0], -1, block)
    amax = np.maximum(np.abs(b).max(-1), np.float32(1e-4))
    scale = pow2_ceil(amax * np.float32(1.0 / 448.0))
    q = np.clip(b / scale[..., None], -448, 448).astype(np.float32)
    codes = q.astype(ml_dtypes.float8_e4m3fn)
    out = codes.astype(np.float32) * scale[..., None]
    e8m0 = scale.astype(ml_dtypes.float8_e8m0fnu)
    return out.reshape(x.shape), codes.view(np.uint8).reshape(x.shape), e8m0.view(np.uint8)


def ref_fp4(x: np.ndarray, block: int, e4m3_scale: bool):
    b = x.reshape(x.shape[0], -1, block)
    amax = np.abs(b).max(-1)
    if e4m3_scale:
        scale8 = (np.maximum(amax, np.float32(6.0 * 2.0 ** -9)) / np.float32(6.0)).astype(ml_dtypes.float8_e4m3fn)
        scale = scale8.astype(np.float32)
        scale_bytes = scale8.view(np.uint8)
    else:
        scale = pow2_ceil(np.maximum(amax, np.float32(6.0 * 2.0 ** -126)) * np.float32(1.0 / 6.0))
        scale_bytes = scale.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    q = np.clip(b / scale[..., None], -6, 6).astype(np.float32)
    c = q.astype(ml_dtypes.float4_e2m1fn)
    vals = c.astype(np.float32)
    vals = np.where(vals == 0, np.float32(0.0), vals)  # -0 is stored as +0 (spec §3.6 b)
    out = (vals * scale[..., None]).reshape(x.shape)
    nib = c.view(np.uint8).reshape(x.shape) & 0xF
    nib = np.where((nib & 7) == 0, 0, nib).astype(np.uint8)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return out, packed, scale_bytes


def write_safetensors(path: str, tensors: dict, meta: dict):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8"}[a.dtype]
        raw = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    rng = np.random.default_rng(4106)
    fp8_grid = np.array(sorted({float(v) for v in np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
                                .astype(np.float32) if np.isfinite(v) and v >= 0}), np.float32)
    tensors = {}
    cases = [("fp8_window", 32, None, fp8_grid), ("fp4_kv", 16, True, E2M1_GRID), ("fp4_index", 32, False, E2M1_GRID)]
    for name, block, e4m3, grid in cases:
        x = inputs(rng, block, grid, bool(e4m3))
        t = torch.from_numpy(x.copy())
        if e4m3 is None:
            hf = mdv41._fake_quant_fp8_block(t, block_size=block).numpy()
            ours, codes, scales = ref_fp8(x, block)
        else:
            hf = mdv41._fake_quant_fp4_block(t, block_size=block, e4m3_scales=e4m3).numpy()
            ours, codes, scales = ref_fp4(x, block, e4m3)
        diff = np.flatnonzero(hf.view(np.uint32) != ours.view(np.uint32))
        if diff.size:
            sys.exit(f"{name}: transformers and ml_dtypes disagree at {diff.size} values, e.g. x={x.flat[diff[0]]!r} "
                     f"hf={hf.flat[diff[0]]!r} ml_dtypes={ours.flat[diff[0]]!r}")
        tensors[f"{name}.x"] = x
        tensors[f"{name}.out"] = hf
        tensors[f"{name}.codes"] = codes
        tensors[f"{name}.scales"] = scales.reshape(x.shape[0], -1)
        print(f"{name}: {x.shape[0]} rows x {x.shape[1]}, transformers == ml_dtypes bit for bit")
    # act_quant per 32 (the official FP8 GEMMs' activation quantization with V4.1's block, spec §6.3 and
    # V4 §5.2): amax floored at 1e-4, ue8m0 scale from amax * fp32(1/448), e4m3 RNE of x / s.
    x = inputs(rng, 32, fp8_grid, False)
    _, codes, scales = ref_fp8(x, 32)
    tensors["act_quant32.x"] = x
    tensors["act_quant32.codes"] = codes
    tensors["act_quant32.scales"] = scales.reshape(x.shape[0], -1)
    print(f"act_quant32: {x.shape[0]} rows x {x.shape[1]} (ml_dtypes)")
    import transformers
    meta = {"generator": "tools/reference/make_v41_qat_ops.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "ml_dtypes": ml_dtypes.__version__, "numpy": np.__version__}
    write_safetensors(OUT, tensors, meta)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
