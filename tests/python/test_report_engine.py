# SPDX-License-Identifier: Apache-2.0
"""bench/report_engine.py, the end-to-end table of issue 9, on recorded H200 runs (V4-Flash and the default
model V4.1-Flash): it runs, its V4.1 published schedule is the released config's, and every floor it draws
is a floor: no measurement beats it, and a larger batch never has a smaller one."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

RESULTS = ROOT / "bench" / "results"
SCRIPT = ROOT / "bench" / "report_engine.py"


def load_report():
    spec = importlib.util.spec_from_file_location("report_engine", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_report(engine, ceilings):
    out = subprocess.run([sys.executable, str(SCRIPT), str(RESULTS / engine), str(RESULTS / ceilings)],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\| decode b(\d+), \d+ context \| ([\d.]+) ms/step.*?\| ([\d.]+) ms \| ([\d.]+)x \|", line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))))
    return out, rows


def check_floors(rows):
    assert len(rows) == 5, rows
    for batch, measured, floor, ratio in rows:
        assert floor > 0 and measured >= floor, (batch, measured, floor)
        assert ratio >= 1 and abs(measured / floor / ratio - 1) < 0.05, (batch, measured, floor, ratio)  # (printed rounded)
    floors = [r[2] for r in sorted(rows)]
    assert floors == sorted(floors), floors


def test_v4_flash_report():
    out, rows = run_report("cuda-engine-e2e-h200-69ed29a-even.jsonl", "cuda-engine-e2e-h200-69ed29a-even-ceilings.jsonl")
    assert "Model: V4-Flash, 24 layers" in out and "scaled to 43 layers" in out
    check_floors(rows)


def test_v41_flash_report():
    out, rows = run_report("cuda-engine-e2e-v41-h200-69ed29a-even.jsonl",
                           "cuda-engine-e2e-v41-h200-69ed29a-even-ceilings.jsonl")
    assert "Model: V4.1-Flash, 12 layers" in out and "scaled to 40 layers" in out
    check_floors(rows)
    # The 12-layer model's prefill ceiling is above its 40-layer extrapolation's rate (a per-token ceiling).
    prefill = re.search(r"\| prefill 3 x 8192 tokens \| ([\d,]+) tok/s \| ([\d,]+) tok/s \(FP8\)", out)
    assert prefill and int(prefill.group(1).replace(",", "")) < int(prefill.group(2).replace(",", ""))


def test_v41_published_schedule_is_the_released_config():
    report = load_report()
    released = json.loads((ROOT / "tests" / "data" / "v41" / "configs" / "deepseek-v41-flash.json").read_text())
    text = released["text_config"]
    sched = report.v41_published_schedule()
    layers = text["num_hidden_layers"]
    assert sched["ratios"] == text["compress_ratios"][:layers]
    assert sched["kv_sources"] == text["kv_source_layer_ids"]
    assert sched["index_sources"] == text["index_source_layer_ids"]
    assert sched["engram"] == text["engram_layer_ids"]
    assert report.V41["layers"] == layers and report.V41["experts"] == text["n_routed_experts"]
    assert report.V41["hidden"] == text["hidden_size"] and report.V41["inter"] == text["moe_intermediate_size"]


def test_full_batch_steps_line(tmp_path):
    """Rows since session 38 say whether every timed decode step decoded the whole batch: the report prints yes
    where tokens == batch x steps and NO where a row says otherwise (the harness fault it guards against: timed
    steps that still carried prefill chunks, bench/results/cuda-session38-h200-call1.md); older rows print nothing."""
    engine = "cuda-engine-e2e-v41-h200-s38call3-even-bt8192.jsonl"
    ceilings = "cuda-engine-e2e-v41-h200-s38call3-ceilings.jsonl"
    out, rows = run_report(engine, ceilings)
    check_floors(rows)
    assert "Timed decode steps of the whole batch" in out
    assert "b512 yes (8,192 tokens in 16 steps)" in out and " NO " not in out
    lines = [json.loads(l) for l in (RESULTS / engine).read_text().splitlines() if l.strip()]
    for r in lines:
        if r.get("batch") == 512:
            r["tokens"], r["full_batch_steps"] = 7000, False
    bad = tmp_path / "partial.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = subprocess.run([sys.executable, str(SCRIPT), str(bad), str(RESULTS / ceilings)], capture_output=True, text=True,
                         check=True).stdout
    assert "b512 NO (7,000 tokens in 16 steps)" in out
    old, _ = run_report("cuda-engine-e2e-v41-h200-s37call3-even-bt8192.jsonl", "cuda-engine-e2e-v41-h200-s37call3-ceilings.jsonl")
    assert "Timed decode steps of the whole batch" not in old
