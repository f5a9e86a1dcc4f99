# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the reference-fixture scripts (make_v4_models.py, make_v41_models.py)."""
import json
import struct

import torch


def set_determinism():
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))
