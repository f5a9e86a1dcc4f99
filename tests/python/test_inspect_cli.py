# SPDX-License-Identifier: Apache-2.0
"""`deepinfer inspect` on the checkpoints transformers 5.17 wrote (unsharded and sharded) and on the
same weights under DeepSeek's names: the schedule must match config.json, the tensor check must be
complete, and the parameter count and bytes must equal an independent count over the safetensors
headers (read here with plain json/struct)."""
import json
import pathlib
import struct
import subprocess

import pytest

MODELS = ["v4_tiny_a", "v4_tiny_a_sharded", "v4_tiny_a_upstream", "v4_tiny_b", "v4_tiny_b_sharded",
          "v4_tiny_b_upstream"]
TYPE_NAMES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
              "heavily_compressed_attention": "hca"}


def header(path: pathlib.Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def expected_schedule(cfg: dict):
    if "layer_types" in cfg:
        attn = [TYPE_NAMES[t] for t in cfg["layer_types"]]
    else:
        rates = {0: "sliding", 4: "csa", 128: "hca"}
        attn = [rates[r] for r in cfg["compress_ratios"][: cfg["num_hidden_layers"]]]
    if "mlp_layer_types" in cfg:
        mlp = cfg["mlp_layer_types"]
    else:
        n = cfg.get("num_hash_layers", 3)
        mlp = ["hash_moe" if i < n else "moe" for i in range(cfg["num_hidden_layers"])]
    return attn, mlp


@pytest.mark.parametrize("model", MODELS)
def test_inspect_lists_layers_and_counts(deepinfer_bin: str, data_dir: pathlib.Path, model: str):
    d = data_dir / "models" / model
    proc = subprocess.run([deepinfer_bin, "inspect", "--model", str(d), "--json", "--strict"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    cfg = json.loads((d / "config.json").read_text())
    attn, mlp = expected_schedule(cfg)
    assert [l["attention"] for l in rep["layers"]] == attn
    assert [l["mlp"] for l in rep["layers"]] == mlp
    assert rep["complete"] and not rep["missing"] and not rep["unexpected"] and not rep["mismatched"]

    files = sorted(f for f in d.glob("*.safetensors") if not f.name.startswith("ref_"))
    assert rep["num_files"] == len(files)
    numel = 0
    nbytes = {}
    count = 0
    for f in files:
        for name, e in header(f).items():
            n = 1
            for s in e["shape"]:
                n *= s
            numel += n
            count += 1
            size = e["data_offsets"][1] - e["data_offsets"][0]
            nbytes[e["dtype"]] = nbytes.get(e["dtype"], 0) + size
    assert rep["num_tensors"] == count
    assert rep["num_parameters"] == numel  # fp32 checkpoints: no scales, no packed fp4
    names = {"F32": "f32", "I64": "i64"}
    assert rep["bytes_by_dtype"] == {names[k]: v for k, v in nbytes.items()}


def test_inspect_text_names_missing_tensor(deepinfer_bin: str, data_dir: pathlib.Path, tmp_path: pathlib.Path):
    """Drop one tensor from a copy of the index: the text report names it and --strict exits 3."""
    src = data_dir / "models" / "v4_tiny_a_sharded"
    for f in src.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    victim = "model.layers.2.attn.compressor.ape"
    shard = index["weight_map"][victim]
    # Rewrite that shard without the victim.
    h = header(tmp_path / shard)
    blob = (tmp_path / shard).read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    data = blob[8 + n:]
    new_h, new_data, off = {}, b"", 0
    for name, e in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if name == victim:
            continue
        b, en = e["data_offsets"]
        new_h[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [off, off + en - b]}
        new_data += data[b:en]
        off += en - b
    hb = json.dumps(new_h).encode()
    hb += b" " * (-len(hb) % 8)
    (tmp_path / shard).write_bytes(struct.pack("<Q", len(hb)) + hb + new_data)
    del index["weight_map"][victim]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    proc = subprocess.run([deepinfer_bin, "inspect", "--model", str(tmp_path), "--strict"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "missing     layers.2.attn.compressor.ape" in proc.stdout
    assert "complete    no" in proc.stdout
