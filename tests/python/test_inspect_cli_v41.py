# SPDX-License-Identifier: Apache-2.0
"""`deepinfer inspect` on DeepSeek-V4.1 checkpoints (the fixtures transformers' DeepseekV41 wrote):
the CSA2 schedule must follow the source-layer rule of spec §1.3 computed here from config.json,
the tensor check must be complete, the tensor and parameter counts must equal an independent count
over the safetensors headers, and a checkpoint with a tensor dropped must fail `--strict` naming it."""
import json
import math
import pathlib
import shutil
import struct
import subprocess

import pytest

MODELS = ["v41_tiny_a", "v41_tiny_b"]


def header(path: pathlib.Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def schedule(cfg: dict):
    """(mode, kv_source, index_source) per layer: the latest source at or before the layer."""
    kv, idx = cfg["kv_source_layer_ids"], cfg["index_source_layer_ids"]
    out = []
    for layer in range(cfg["num_hidden_layers"]):
        if cfg["compress_ratios"][layer] == 0:
            out.append(("window", None, None))
            continue
        k = max(s for s in kv if s <= layer)
        i = max(s for s in idx if s <= layer)
        mode = "full" if layer in kv else "reindex" if layer in idx else "reuse"
        out.append((mode, k, i))
    return out


def inspect(deepinfer_bin: str, d: pathlib.Path, *extra: str):
    return subprocess.run([deepinfer_bin, "inspect", "--model", str(d), *extra], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("model", MODELS)
def test_inspect_v41_schedule_and_counts(deepinfer_bin: str, data_dir: pathlib.Path, model: str):
    d = data_dir / "v41" / model
    proc = inspect(deepinfer_bin, d, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    cfg = json.loads((d / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    assert rep["family"] == "deepseek_v41"
    assert [(l["csa2"], l["kv_source"], l["index_source"]) for l in rep["layers"]] == schedule(cfg)
    assert [l["engram"] for l in rep["layers"]] == [i in cfg["engram_layer_ids"] for i in range(cfg["num_hidden_layers"])]
    assert rep["complete"] and not rep["missing"] and not rep["unexpected"] and not rep["mismatched"]
    h = header(d / "model.safetensors")
    assert rep["num_tensors"] == len(h)
    params = sum(1 if not v["shape"] else math.prod(v["shape"]) for k, v in h.items()
                 if not k.endswith(".scale"))
    assert rep["num_parameters"] == params
    text = inspect(deepinfer_bin, d)
    assert text.returncode == 0 and "complete    yes" in text.stdout and "reindex" in text.stdout


def test_inspect_v41_strict_names_a_dropped_tensor(deepinfer_bin: str, data_dir: pathlib.Path,
                                                  tmp_path: pathlib.Path):
    src = data_dir / "v41" / "v41_tiny_a"
    dst = tmp_path / "dropped"
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    # Rewrite model.safetensors without layer 4's compressor projection (a Full layer's tensor).
    with open(src / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    drop = "model.layers.4.attn.compressor.wkv.weight"
    assert drop in h
    meta = h.pop("__metadata__", None)
    out_h, chunks, off = {}, [], 0
    for name, info in h.items():
        if name == drop:
            continue
        b, e = info["data_offsets"]
        chunks.append(data[b:e])
        out_h[name] = {**info, "data_offsets": [off, off + e - b]}
        off += e - b
    if meta is not None:
        out_h["__metadata__"] = meta
    hb = json.dumps(out_h).encode()
    hb += b" " * (-len(hb) % 8)
    with open(dst / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(chunks))
    proc = inspect(deepinfer_bin, dst, "--json", "--strict")
    assert proc.returncode == 3, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["missing"] == ["layers.4.attn.compressor.wkv.weight"]
    assert not rep["complete"]
