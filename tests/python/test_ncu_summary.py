# SPDX-License-Identifier: Apache-2.0
"""bench/ncu_summary.py on recorded Nsight Compute summaries (H200, session 34): the parse adds up, every
kernel of V4's and V4.1's engine steps falls in a named kind (only the embedding lookup is "other"), and the
kinds' totals and launches add up to the file's."""
import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SCRIPT = ROOT / "bench" / "ncu_summary.py"
FILES = ["cuda-session34-h200-call4-v41-ncu-b1.txt", "cuda-session34-h200-call4-v41-ncu-prefill4096.txt",
         "cuda-session32-h200-call2-ncu-b1-new.txt", "cuda-session32-h200-call5-ncu-pf8-new.txt"]


def load():
    spec = importlib.util.spec_from_file_location("ncu_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kinds_cover_every_kernel_and_add_up():
    n = load()
    for f in FILES:
        rows = n.parse(RESULTS / f)
        assert len(rows) > 20, f
        total = sum(r[6] for r in rows)
        kinds = n.categories(rows)
        assert abs(sum(t for t, _ in kinds.values()) - total) < 1e-6 * total, f
        assert sum(c for _, c in kinds.values()) == sum(r[2] for r in rows), f
        others = {r[0].split("(")[0] for r in rows if n.category(r[0]) == "other"}
        assert others <= {"embed_kernel"}, (f, others)
        for r in rows:  # each total is its invocations x average, within the file's rounding
            assert r[4] <= r[3] * 1.0001 + 1e-9 and r[3] <= r[5] * 1.0001 + 1e-9, (f, r)


def test_v41_b1_attention_is_its_kernel():
    n = load()
    rows = n.parse(RESULTS / FILES[0])
    att = [r for r in rows if "v41_tc_attention_kernel" in r[0]]
    assert len(att) == 1 and att[0][2] == 4  # one launch per layer of the 4-layer step
    assert n.categories(rows)["attention"] == (att[0][6], 4)


def test_cli_prints_the_kinds():
    out = subprocess.run([sys.executable, str(SCRIPT), "--categories", "--top", "2", str(RESULTS / FILES[1])],
                         capture_output=True, text=True, check=True).stdout
    assert "-- by kind (" in out and "routed experts (FP4)" in out and "attention" in out
    assert sum(1 for line in out.splitlines() if " n=" in line) == 2
