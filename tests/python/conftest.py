# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the path of the built CLI (DEEPINFER_BIN, set by `make test-python`)."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def deepinfer_bin() -> str:
    path = os.environ.get("DEEPINFER_BIN", str(ROOT / "build" / "deepinfer"))
    if not os.path.exists(path):
        pytest.fail(f"deepinfer binary not found at {path}; run `make build` first")
    return path


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    return ROOT / "tests" / "data"
