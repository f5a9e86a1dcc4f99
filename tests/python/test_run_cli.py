# SPDX-License-Identifier: Apache-2.0
"""`deepinfer run` end to end on the built-in model: OpenAI batch output shape, one error record per
malformed line with the rest intact, kill -9 then --resume giving exactly one result per custom_id
(equal to an uninterrupted run), and identical results with async scheduling / prefix cache off."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("dicache"))


def chat_line(cid, text, max_tokens=16, **extra):
    body = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}],
            "max_tokens": max_tokens, "temperature": 0.8, "ignore_eos": True, **extra}
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}


def run(bin_, cache_dir, inp, out, *args, check=True):
    cmd = [bin_, "run", "--input", str(inp), "--output", str(out), "--cache-dir", cache_dir, "--progress", "never",
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def read_out(path):
    return [json.loads(l) for l in pathlib.Path(path).read_text().splitlines()]


def choices(rec):
    return rec["response"]["body"]["choices"]


def test_output_shape_and_malformed_lines(deepinfer_bin, cache_dir, tmp_path):
    lines = [json.dumps(chat_line("ok-1", "hello")),
             '{"custom_id": "broken", "url": ',
             json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}),
             json.dumps({"custom_id": "bad-url", "method": "POST", "url": "/v1/embeddings", "body": {}}),
             json.dumps(chat_line("bad-temp", "x", temperature="hot")),
             json.dumps(chat_line("ok-1", "duplicate id")),
             json.dumps(chat_line("too-long", "x", max_tokens=10**8)),
             json.dumps({"custom_id": "raw", "method": "POST", "url": "/v1/completions",
                         "body": {"prompt": "The lighthouse keeper", "max_tokens": 8, "temperature": 0}}),
             json.dumps(chat_line("ok-2", "second", n=2, logprobs=True, top_logprobs=2)),
             ""]
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    proc = run(deepinfer_bin, cache_dir, inp, out)
    assert "summary: 9 requests (3 completed, 6 errors" in proc.stderr, proc.stderr
    recs = read_out(out)
    assert len(recs) == 9
    errors = [r for r in recs if r["error"]]
    assert len(errors) == 6
    msgs = " | ".join(e["error"]["message"] for e in errors)
    for needle in ["in.jsonl:2: invalid JSON", "in.jsonl:3: missing or non-string field 'custom_id'",
                   "unsupported url '/v1/embeddings'", "body.temperature must be a number",
                   "duplicate custom_id 'ok-1'", "exceeds the model's context"]:
        assert needle in msgs, msgs
    good = {r["custom_id"]: r for r in recs if not r["error"]}
    assert set(good) == {"ok-1", "raw", "ok-2"}
    r = good["ok-1"]
    assert r["response"]["status_code"] == 200 and r["id"].startswith("batch_req_")
    body = r["response"]["body"]
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 16
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 16
    msg = choices(r)[0]["message"]
    assert msg["role"] == "assistant" and "content" in msg and choices(r)[0]["finish_reason"] == "length"
    assert good["raw"]["response"]["body"]["object"] == "text_completion"
    two = choices(good["ok-2"])
    assert len(two) == 2 and two[0]["logprobs"]["content"][0]["top_logprobs"]


def test_kill_then_resume_gives_each_result_once(deepinfer_bin, cache_dir, tmp_path):
    n = 48
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(chat_line(f"r{i}", f"question {i}", max_tokens=24)) + "\n" for i in range(n)))
    ref = tmp_path / "ref.jsonl"
    run(deepinfer_bin, cache_dir, inp, ref, "--max-num-seqs", "4")
    reference = {r["custom_id"]: choices(r) for r in read_out(ref)}
    assert len(reference) == n

    out = tmp_path / "out.jsonl"
    cmd = [deepinfer_bin, "run", "--input", str(inp), "--output", str(out), "--cache-dir", cache_dir, "--progress",
           "never", "--max-num-seqs", "4"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        if out.exists() and out.read_text().count("\n") >= 6:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = out.read_text().count("\n")
    assert 6 <= partial < n, f"{partial} lines before the kill"
    # Without --resume an existing output is refused.
    refused = run(deepinfer_bin, cache_dir, inp, out, check=False)
    assert refused.returncode == 1 and "--resume" in refused.stderr
    resumed = run(deepinfer_bin, cache_dir, inp, out, "--resume", "--max-num-seqs", "4")
    assert "already done" in resumed.stderr
    recs = read_out(out)
    ids = [r["custom_id"] for r in recs]
    assert sorted(ids) == sorted(reference), "each custom_id exactly once"
    for r in recs:
        assert choices(r) == reference[r["custom_id"]], r["custom_id"]


def test_async_and_prefix_cache_do_not_change_results(deepinfer_bin, cache_dir, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(chat_line(f"q{i}", "shared question " * (i % 3), max_tokens=12)) + "\n"
                           for i in range(24)))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    pa = run(deepinfer_bin, cache_dir, inp, a, "--max-num-seqs", "3", "--async")
    run(deepinfer_bin, cache_dir, inp, b, "--max-num-seqs", "8", "--no-async", "--no-prefix-cache",
        "--max-prefill-chunk", "5")
    ra = {r["custom_id"]: choices(r) for r in read_out(a)}
    rb = {r["custom_id"]: choices(r) for r in read_out(b)}
    assert ra == rb
    hit = float(pa.stderr.split("prefix-cache hit rate ")[1].split("%")[0])
    assert hit > 0, pa.stderr
