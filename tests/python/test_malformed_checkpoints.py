# SPDX-License-Identifier: Apache-2.0
"""Malformed checkpoints through the CLI: every case must exit with status 1 (never a signal),
print one clear `error:` line naming the file and the problem, and write nothing to stdout."""
import json
import pathlib
import struct
import subprocess

import pytest

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 64,
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 32,
    "qk_rope_head_dim": 8, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 4,
    "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
    "compress_ratios": [0, 0], "num_hash_layers": 1,
}


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def raw(header: bytes, data: bytes, header_len=None) -> bytes:
    n = len(header) if header_len is None else header_len
    return struct.pack("<Q", n) + header + data


def js(obj) -> bytes:
    return json.dumps(obj).encode()


VALID_HEADER = js({"w": entry("F32", [2, 2], 0, 16)})

# name -> (file bytes, substring the error must contain)
CASES = {
    "empty_file": (b"", "too short"),
    "truncated_length": (b"\x10\x00\x00", "too short"),
    "truncated_data": (raw(VALID_HEADER, b"\x00" * 10), "past the data section"),
    "header_len_past_eof": (raw(b"{}", b"", header_len=4096), "runs past the end"),
    "header_len_max": (raw(b"{}", b"", header_len=2**64 - 1), "runs past the end"),
    "overlap": (raw(js({"a": entry("U8", [8], 0, 8), "b": entry("U8", [8], 4, 12)}), b"x" * 12), "overlap"),
    "hole": (raw(js({"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 8, 12)}), b"x" * 12), "belong to no tensor"),
    "shape_size_mismatch": (raw(js({"w": entry("BF16", [3, 3], 0, 16)}), b"x" * 16), "needs 18 bytes"),
    "unknown_dtype": (raw(js({"w": entry("Q4_K", [2], 0, 2)}), b"xx"), "unknown dtype 'Q4_K'"),
    "absurd_shape": (raw(js({"w": entry("F32", [2**40, 2**40, 2**40], 0, 8)}), b"x" * 8), "overflows"),
    "absurd_dim": (raw(js({"w": entry("F32", [2**63], 0, 8)}), b"x" * 8), "absurdly large"),
    "absurd_offsets": (raw(js({"w": entry("U8", [4], 0, 2**64 - 1)}), b"x" * 4), "past the data section"),
    "invalid_utf8": (raw(b'{"w\xff\xfe": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"x"),
                     "not valid JSON"),
    "invalid_json": (raw(b'{"w": {"dtype": "U8",', b""), "not valid JSON"),
    "not_an_object": (raw(b"[1,2]", b""), "does not start with '{'"),
    "duplicate_names": (raw(b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                            b'"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}', b"xx"), "'w' twice"),
    "negative_dim": (raw(js({"w": entry("U8", [-1], 0, 1)}), b"x"), "non-negative"),
    "deep_nesting": (raw(b'{"__metadata__": ' + b"[" * 100000 + b"]" * 100000 + b"}", b""), "nesting"),
    "random_bytes": (bytes(range(256)) * 64, "runs past the end"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_checkpoint_is_a_clear_error(tmp_path: pathlib.Path, deepinfer_bin: str, case: str):
    content, needle = CASES[case]
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(content)
    proc = subprocess.run([deepinfer_bin, "inspect", "--model", str(tmp_path)], capture_output=True, timeout=60)
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, f"exit {proc.returncode} (negative = killed by a signal); stderr: {stderr}"
    assert proc.stdout == b""
    assert stderr.startswith("error: "), stderr
    assert str(shard) in stderr, stderr
    assert needle in stderr, stderr
    assert stderr.count("\n") == 1, stderr


def test_bad_config_is_a_clear_error(tmp_path: pathlib.Path, deepinfer_bin: str):
    bad = dict(CONFIG, hidden_size="wide")
    (tmp_path / "config.json").write_text(json.dumps(bad))
    proc = subprocess.run([deepinfer_bin, "inspect", "--model", str(tmp_path)], capture_output=True, timeout=60)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "config.json" in err and "'hidden_size' must be an integer, got \"wide\"" in err, err


def test_missing_directory(tmp_path: pathlib.Path, deepinfer_bin: str):
    proc = subprocess.run([deepinfer_bin, "inspect", "--model", str(tmp_path / "nope")], capture_output=True)
    assert proc.returncode == 1
    assert "no such file or directory" in proc.stderr.decode()
