# SPDX-License-Identifier: Apache-2.0
"""bench/op_table.py and bench/ncu_summary.py on recorded Nsight Compute summaries (H200): every kernel of
V4's and V4.1's engine steps falls in a named op of the model (none left as "other"), the ops' times and
launches add up to the file's, and both scripts read the same kernels and times."""
import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
FILES = ["cuda-session34-h200-call4-v41-ncu-b1.txt.xz", "cuda-session34-h200-call4-v41-ncu-prefill4096.txt.xz",
         "cuda-session32-h200-call2-ncu-b1-new.txt.xz", "cuda-session32-h200-call5-ncu-pf8-new.txt.xz",
         "cuda-session45-h200-call1-ncu-b1.txt.xz", "cuda-session45-h200-call1-ncu-b32.txt.xz"]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_kernel_in_a_named_op_and_both_readers_agree():
    ops, summary = load("op_table"), load("ncu_summary")
    for f in FILES:
        kernels = ops.parse(RESULTS / f)
        rows = summary.parse(RESULTS / f)
        assert len(kernels) == len(rows) > 20, f
        others = {k["name"] for k in kernels if ops.op_of(k["name"]) == "other"}
        assert not others, (f, others)
        t_ops = sum(k["m"]["gpu__time_duration.sum"] * k["calls"] for k in kernels)
        t_rows = sum(r[6] for r in rows)
        assert abs(t_ops - t_rows) <= 1e-9 * t_rows, f
        assert sum(k["calls"] for k in kernels) == sum(r[2] for r in rows), f
        for r in rows:  # min <= average <= max, as ncu printed them
            assert r[4] <= r[3] * 1.0001 and r[3] <= r[5] * 1.0001, (f, r)


def test_v41_attention_is_its_own_op():
    ops = load("op_table")
    kernels = ops.parse(RESULTS / FILES[0])
    att = [k for k in kernels if ops.op_of(k["name"]).startswith("sparse attention")]
    assert [k["name"].split("(")[0] for k in att] == ["void v41_tc_attention_kernel<512, 1>"]
    assert att[0]["calls"] == 4  # a launch per layer of the 4-layer step
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "op_table.py"), f"b1={RESULTS / FILES[0]}"],
                         capture_output=True, text=True, check=True).stdout
    assert "| sparse attention (window + compressed, sink) | v41_tc_attention_kernel<512, 1> | 4 |" in out
    assert "| other |" not in out


def test_ncu_summary_top():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ncu_summary.py"), "--top", "2", str(RESULTS / FILES[1])],
                         capture_output=True, text=True, check=True).stdout
    assert sum(1 for line in out.splitlines() if " n=" in line) == 2


def test_launches_in_order_from_per_launch_output(tmp_path):
    """--launches: every launch of per-launch ncu output in order, with the metric-only form's time row and
    --set full's Duration row (a recorded file)."""
    summary = load("ncu_summary")
    text = ("==PROF== Connected to process 1\n"
            "  void a_kernel<1>(P) (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0\n"
            "    Section: Command line profiler metrics\n"
            "    gpu__time_duration.sum                                     us       56.30\n"
            "  b_kernel(Q) (4096, 1, 1)x(512, 1, 1), Context 1, Stream 7, Device 0, CC 9.0\n"
            "    gpu__time_duration.sum                                     ms        2.13\n"
            "  void a_kernel<1>(P) (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0\n"
            "    gpu__time_duration.sum                                     us    1,250.00\n")
    f = tmp_path / "launches.txt"
    f.write_text(text)
    got = summary.launches(f)
    assert [(n, g) for n, g, _ in got] == [("void a_kernel<1>(P)", "132x1x1/384"), ("b_kernel(Q)", "4096x1x1/512"),
                                          ("void a_kernel<1>(P)", "132x1x1/384")]
    assert [round(t, 3) for _, _, t in got] == [56.3, 2130.0, 1250.0]
    full = summary.launches(RESULTS / "cuda-session35-h200-call3-v41-ncu-fp4dec-b1-full.txt.xz")
    assert [g for _, g, _ in full] == ["72x6x1/128", "80x6x1/128"] and all(t > 0 for _, _, t in full)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ncu_summary.py"), "--launches", str(f)], capture_output=True,
                         text=True, check=True).stdout
    assert "3 launches" in out and "2130.0us" in out


def test_ncu_summary_diff_adds_up():
    """--diff: a file against itself differs by nothing; two steps' per-kernel differences add up to the difference
    of their totals, and every kernel of either file appears with its launches."""
    summary = load("ncu_summary")
    a, b = RESULTS / FILES[2], RESULTS / FILES[3]
    same = summary.diff(a, a)
    assert same and all(r[1] == r[2] and r[3] == r[4] for r in same)
    rows = summary.diff(a, b)
    ta, tb = sum(r[6] for r in summary.parse(a)), sum(r[6] for r in summary.parse(b))
    assert abs(sum(r[2] - r[1] for r in rows) - (tb - ta)) <= 1e-6 * max(ta, tb)
    assert sum(r[3] for r in rows) == sum(r[2] for r in summary.parse(a))
    assert sum(r[4] for r in rows) == sum(r[2] for r in summary.parse(b))
    assert {r[0] for r in rows} == {r[0] for r in summary.parse(a)} | {r[0] for r in summary.parse(b)}
    diffs = [abs(r[2] - r[1]) for r in rows]
    assert diffs == sorted(diffs, reverse=True)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ncu_summary.py"), "--diff", str(a), str(b)], check=True,
                         capture_output=True, text=True).stdout
    assert out.startswith("== ") and " ms (" in out.splitlines()[0]
