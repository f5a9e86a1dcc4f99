# SPDX-License-Identifier: Apache-2.0
"""Shared by the Python-package tests: one LLM on the built-in tiny model per session."""
import json
import os
import pathlib
import subprocess

import pytest


def import_deepinfer():
    """The installed package. In CI (`make test` installs it first) a missing package fails the
    run; elsewhere these tests skip with the command that installs it."""
    if os.environ.get("CI"):
        import deepinfer
        return deepinfer
    return pytest.importorskip("deepinfer", reason="the deepinfer package is not installed: run `make python`")


def cli_run(bin_, cache_dir, lines, tmp_path, *args):
    """Runs `deepinfer run` on request lines; returns {custom_id: record}."""
    inp = tmp_path / "cli_in.jsonl"
    out = tmp_path / "cli_out.jsonl"
    inp.write_text("".join(json.dumps(l) + "\n" for l in lines))
    if out.exists():
        out.unlink()
    proc = subprocess.run([bin_, "run", "--input", str(inp), "--output", str(out), "--cache-dir", cache_dir,
                           "--progress", "never", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return {r["custom_id"]: r for r in map(json.loads, out.read_text().splitlines())}


def read_jsonl(path):
    return [json.loads(l) for l in pathlib.Path(path).read_text().splitlines()]
