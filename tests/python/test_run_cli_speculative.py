# SPDX-License-Identifier: Apache-2.0
"""`deepinfer run --speculative mtp` on the tiny V4 fixture with an MTP block: greedy results equal a
run without speculation (with and without the confidence scheduler), the summary reports the
speculative metrics, and a checkpoint without the drafter is refused with a clear message."""
import json
import pathlib
import random
import subprocess


def completion_line(cid, ids, **body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/completions",
            "body": {"prompt": ids, "max_tokens": 10, "temperature": 0, "ignore_eos": True, **body}}


def run(bin_, model, inp, out, *args):
    cmd = [bin_, "run", "--model", str(model), "--input", str(inp), "--output", str(out), "--progress", "never",
           "--numerics", "exact", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def tokens(path):
    out = {}
    for line in pathlib.Path(path).read_text().splitlines():
        rec = json.loads(line)
        assert rec["error"] is None, rec
        out[rec["custom_id"]] = rec["response"]["body"]["choices"][0]["text"]
    return out


def test_speculative_run_equals_plain_greedy(deepinfer_bin, data_dir, tmp_path):
    model = data_dir / "models" / "v4_tiny_a_mtp"
    rng = random.Random(3)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(completion_line(f"r{i}", [rng.randrange(512) for _ in range(3 + 7 * i)]))
                           + "\n" for i in range(6)))
    plain = run(deepinfer_bin, model, inp, tmp_path / "plain.jsonl")
    assert plain.returncode == 0, plain.stderr
    want = tokens(tmp_path / "plain.jsonl")
    assert len(want) == 6
    for extra in ([], ["--spec-scheduler"]):
        p = run(deepinfer_bin, model, inp, tmp_path / "spec.jsonl", "--speculative", "mtp",
                "--num-speculative-tokens", "3", *extra)
        assert p.returncode == 0, p.stderr
        assert tokens(tmp_path / "spec.jsonl") == want
        assert "speculative: mean accepted length" in p.stderr, p.stderr
        (tmp_path / "spec.jsonl").unlink()


def test_speculative_needs_the_drafter(deepinfer_bin, data_dir, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps(completion_line("a", [1, 2, 3])) + "\n")
    p = run(deepinfer_bin, data_dir / "models" / "v4_tiny_a", inp, tmp_path / "o.jsonl", "--speculative", "mtp")
    assert p.returncode != 0
    assert "needs a checkpoint with that drafter" in p.stderr, p.stderr


def test_speculative_auto_uses_the_checkpoints_drafter(deepinfer_bin, data_dir, tmp_path):
    rng = random.Random(4)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(completion_line(f"r{i}", [rng.randrange(512) for _ in range(4 + 5 * i)]))
                           + "\n" for i in range(3)))
    for name, drafts in (("v4_tiny_a_mtp", True), ("v4_tiny_a", False)):
        model = data_dir / "models" / name
        plain = run(deepinfer_bin, model, inp, tmp_path / "plain.jsonl")
        assert plain.returncode == 0, plain.stderr
        p = run(deepinfer_bin, model, inp, tmp_path / "auto.jsonl", "--speculative", "auto",
                "--num-speculative-tokens", "4")
        assert p.returncode == 0, p.stderr
        assert tokens(tmp_path / "auto.jsonl") == tokens(tmp_path / "plain.jsonl")
        assert ("speculative: mean accepted length" in p.stderr) == drafts, p.stderr
        for f in ("plain.jsonl", "auto.jsonl"):
            (tmp_path / f).unlink()


def test_spec_trace_reports_every_decode_step(deepinfer_bin, data_dir, tmp_path):
    # --spec-trace: one JSON line per step (decode-only ones marked: the ones the scheduler learns from), in step
    # order, each with every field;
    # a step's accepted drafts never exceed its drafts, which are fewer than its rows (one anchor per request).
    # A path that cannot be written is a clear error.
    model = data_dir / "models" / "v4_tiny_a_mtp"
    rng = random.Random(5)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(completion_line(f"r{i}", [rng.randrange(512) for _ in range(4 + 3 * i)]))
                           + "\n" for i in range(3)))
    trace = tmp_path / "trace.jsonl"
    # (one sequence at a time: the later requests' prompts run in steps after decode steps, which the trace marks)
    p = run(deepinfer_bin, model, inp, tmp_path / "spec.jsonl", "--speculative", "mtp", "--num-speculative-tokens", "3",
            "--spec-scheduler", "--max-num-seqs", "1", "--spec-trace", str(trace))
    assert p.returncode == 0, p.stderr
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert steps, "no trace lines"
    keys = {"step", "decode_only", "decode_rows", "rows", "tapped", "drafted", "verifying", "drafts", "accepted",
            "step_s", "draft_s", "predicted_step_s", "predicted_draft_s", "expected_gain"}
    for s in steps:
        assert set(s) == keys, s
        assert 0 <= s["accepted"] <= s["drafts"] < s["rows"], s
        assert (s["decode_rows"] == s["rows"]) == s["decode_only"], s
        assert s["verifying"] <= 1 and s["step_s"] >= 0, s
    assert [s["step"] for s in steps] == sorted(s["step"] for s in steps)
    assert sum(s["drafts"] for s in steps) > 0
    assert any(s["decode_only"] for s in steps) and not all(s["decode_only"] for s in steps)
    bad = run(deepinfer_bin, model, inp, tmp_path / "o.jsonl", "--speculative", "mtp", "--spec-trace",
              str(tmp_path / "no" / "such" / "dir" / "t.jsonl"))
    assert bad.returncode != 0
    assert "--spec-trace: cannot write" in bad.stderr, bad.stderr
