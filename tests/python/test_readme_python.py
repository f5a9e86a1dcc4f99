# SPDX-License-Identifier: Apache-2.0
"""Runs every ```python example of the README's "## Python" section, as written, in a fresh
interpreter (the installed package; the built-in model generated in a temporary cache)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from package_helpers import import_deepinfer

import_deepinfer()  # skips outside CI when the package is not installed
ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_examples():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_examples():
    examples = python_examples()
    assert len(examples) >= 3
    assert any('LLM("deepseek-ai/DeepSeek-V4.1-Flash-1017")' in e for e in examples)


@pytest.mark.parametrize("index", range(len(python_examples())))
def test_readme_example_runs(index, tmp_path):
    code = python_examples()[index]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    if "llm.generate" in code:
        lines = out.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("'The capital of France is' -> ")
        assert all(line.endswith(("length 16", "stop 16")) or " stop " in line for line in lines)
    if "llm.chat" in code:
        assert out.startswith("reasoning: '") and "finish: " in out
    if "run_batch" in code:
        assert out.strip() == "2 completed, 0 errors"
        assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2
