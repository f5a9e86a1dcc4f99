#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Structured output, side by side with xgrammar, in one run: the same DeepSeek tokenizer, the same
schemas, the same token sequences. For each schema: compile time (no cache) and per-token mask time
(median, p99) of deepinfer (build/bench/grammar_bench) and of xgrammar (PyPI, numpy bitmask, CPU).
deepinfer walks the grammar with random allowed tokens; xgrammar then replays exactly those tokens.

    /work/xgvenv/bin/python bench/grammar_bench.py --bin build/bench/grammar_bench \
        --tokenizer assets/tokenizer/deepseek-v4/tokenizer.json \
        --schemas tests/data/grammar/api_suite.jsonl bench/grammar_counted.jsonl \
        --rounds 3 --out bench/results/grammar-vs-xgrammar.md

Each round runs both engines back to back on every schema (the machine may be shared: the load is
recorded); every statistic is the median over the rounds. Raw rows go next to the report (.jsonl).

xgrammar needs torch; install it in a separate virtualenv (not the test requirements).
"""
import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import xgrammar as xgr

VOCAB_SIZE = 129280


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(path):
    tj = json.load(open(path, encoding="utf-8"))
    dec = byte_decoder()
    out = [b""] * VOCAB_SIZE
    for tok, i in tj["model"]["vocab"].items():
        if i < VOCAB_SIZE:
            try:
                out[i] = bytes(dec[c] for c in tok)
            except KeyError:  # not byte-level text (added-token spellings): the literal UTF-8
                out[i] = tok.encode()
    for t in tj["added_tokens"]:
        if t["id"] < VOCAB_SIZE:
            out[t["id"]] = b""  # special: never allowed in constrained text (as deepinfer does)
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def run_deepinfer(a, item, tmpdir):
    path = os.path.join(tmpdir, "schema.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(item) + "\n")
    proc = subprocess.run([a.bin, "--tokenizer", a.tokenizer, "--schemas", path, "--walks", str(a.walks),
                           "--steps", str(a.steps), "--compile-reps", str(a.compile_reps)],
                          capture_output=True, text=True, check=True)
    return [json.loads(x) for x in proc.stdout.splitlines() if '"name"' in x][0]


def run_xgrammar(a, info, item, ours, vocab_bytes):
    row = {}
    schema = json.dumps(item["schema"])
    try:
        compile_ms = []
        for _ in range(a.compile_reps):
            compiler = xgr.GrammarCompiler(info, max_threads=a.threads, cache_enabled=False)
            t0 = time.perf_counter()
            cg = compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=False)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
        row["xg_compile_ms"] = statistics.median(compile_ms)
        times, call_times, replayed, rejected, first_rejected = [], [], 0, 0, None
        mask = np.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=np.int32)
        for seq in ours.get("sequences", []):
            m = xgr.GrammarMatcher(cg)
            for tok in seq:
                t1 = time.perf_counter()
                m.fill_next_token_bitmask(mask)
                t2 = time.perf_counter()
                m.is_terminated()  # a trivial call through the same binding: the timing overhead
                t3 = time.perf_counter()
                times.append(t2 - t1)
                call_times.append(t3 - t2)
                if not m.accept_token(tok):
                    rejected += 1
                    if first_rejected is None:
                        first_rejected = vocab_bytes[tok]
                    break
                replayed += 1
        if times:
            row["xg_median_us"] = statistics.median(times) * 1e6
            row["xg_p99_us"] = pct(times, 0.99) * 1e6
            row["xg_call_us"] = statistics.median(call_times) * 1e6
        row["xg_tokens_replayed"], row["xg_rejected_walks"] = replayed, rejected
        row["xg_first_rejected_token"] = repr(first_rejected)
    except Exception as e:  # noqa: BLE001 - record what xgrammar says
        row["xg_error"] = str(e)[:200]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--schemas", required=True, nargs="+")
    ap.add_argument("--walks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile-reps", type=int, default=5, help="compile time = median of this many fresh compiles")
    ap.add_argument("--rounds", type=int, default=3, help="each statistic = median over this many rounds")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    vocab_bytes = token_bytes(a.tokenizer)
    info = xgr.TokenizerInfo(vocab_bytes, xgr.VocabType.RAW, vocab_size=VOCAB_SIZE, stop_token_ids=[1])
    items = [json.loads(line) for path in a.schemas for line in open(path) if line.strip()]
    per_round, loads = [], []
    with tempfile.TemporaryDirectory() as tmpdir:
        for r in range(a.rounds):
            load_before = os.getloadavg()[0]
            rows = {}
            for item in items:  # both engines back to back per schema, so that they see the same load
                ours = run_deepinfer(a, item, tmpdir)
                row = {"name": item["name"], "di_compile_ms": ours.get("compile_seconds", float("nan")) * 1e3,
                       "di_median_us": ours.get("mask_median_us"), "di_p99_us": ours.get("mask_p99_us"),
                       "di_states": ours.get("states"), "di_error": ours.get("error")}
                row.update(run_xgrammar(a, info, item, ours, vocab_bytes))
                rows[item["name"]] = row
                print(json.dumps({"round": r, **row}), flush=True)
            loads.append((load_before, os.getloadavg()[0]))
            per_round.append(rows)

    def med(name, key):
        xs = [rnd[name].get(key) for rnd in per_round]
        xs = [x for x in xs if isinstance(x, (int, float)) and x == x]
        return statistics.median(xs) if xs else None

    table = []
    for item in items:
        n = item["name"]
        last = per_round[-1][n]
        row = {k: med(n, k) for k in ("di_compile_ms", "xg_compile_ms", "di_median_us", "xg_median_us", "di_p99_us",
                                       "xg_p99_us", "xg_call_us")}
        row.update(name=n, states=last.get("di_states"), replayed=last.get("xg_tokens_replayed"),
                   cut=last.get("xg_rejected_walks"), first=last.get("xg_first_rejected_token"),
                   xg_error=last.get("xg_error"), di_error=last.get("di_error"))
        table.append(row)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    fmt = lambda v, d=1: "-" if v is None or (isinstance(v, float) and v != v) else f"{v:.{d}f}"  # noqa: E731
    ratio = lambda x, y: None if x is None or y is None or y == 0 else x / y  # noqa: E731
    with open(a.out, "w") as f:
        f.write(f"# Structured output: deepinfer vs xgrammar {importlib.metadata.version('xgrammar')}\n\n")
        f.write(f"commit {commit}; {cpu}, {os.cpu_count()} cores (shared with other work); tokenizer DeepSeek-V4 "
                f"(129,280 ids); per schema and round: {a.compile_reps} fresh compiles (median) and {a.walks} random "
                f"walks x {a.steps} steps; {a.rounds} rounds, every number is the median over the rounds; both "
                f"engines run back to back on each schema; xgrammar max_threads={a.threads}, any_whitespace=True, "
                f"strict_mode=False; deepinfer flexible whitespace, strict off, OpenMP threads = cores.\n\n")
        f.write("Load average (1 min) at the start and end of each round: " +
                ", ".join(f"{b:.1f} -> {e:.1f}" for b, e in loads) + ".\n\n")
        f.write("Command:\n\n```\n/work/xgvenv/bin/python bench/grammar_bench.py --bin " + a.bin + " --tokenizer " +
                a.tokenizer + " --schemas " + " ".join(a.schemas) + f" --walks {a.walks} --steps {a.steps} "
                f"--compile-reps {a.compile_reps} --rounds {a.rounds} --out {a.out}\n```\n\n")
        f.write("| schema | states | compile ms deepinfer | compile ms xgrammar | ratio | mask median us deepinfer | "
                "xgrammar | mask p99 us deepinfer | xgrammar | goals (compile <= 2x, median, p99) | tokens replayed "
                "in xgrammar |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in table:
            if r["xg_error"] or r["xg_compile_ms"] is None:
                goals = "xgrammar: " + (r["xg_error"] or "no result")[:80].replace("|", "/")
            else:
                # Against xgrammar's mask times less its Python call overhead (the stricter comparison).
                call = r["xg_call_us"] or 0.0
                ok = [ratio(r["di_compile_ms"], r["xg_compile_ms"]) <= 2,
                      r["di_median_us"] <= r["xg_median_us"] - call, r["di_p99_us"] <= r["xg_p99_us"] - call]
                goals = ", ".join("yes" if x else "**no**" for x in ok)
            f.write(f"| {r['name']} | {r['states']} | {fmt(r['di_compile_ms'])} | {fmt(r['xg_compile_ms'])} | "
                    f"{fmt(ratio(r['di_compile_ms'], r['xg_compile_ms']), 2)} | {fmt(r['di_median_us'])} | "
                    f"{fmt(r['xg_median_us'])} | {fmt(r['di_p99_us'])} | {fmt(r['xg_p99_us'])} | {goals} | "
                    f"{r['replayed'] if r['replayed'] is not None else '-'} ({r['cut'] if r['cut'] is not None else '-'} "
                    f"walks cut; first refused: `{r['first'] or '-'}`) |\n")
        calls = [r["xg_call_us"] for r in table if r["xg_call_us"] is not None]
        if calls:
            f.write(f"\nxgrammar is timed from Python: a trivial call through the same binding "
                    f"(`is_terminated()`) takes {statistics.median(calls):.2f} us (median), included in its mask "
                    f"times above; the goals column compares against xgrammar's times less that overhead. "
                    f"deepinfer is timed in C++ around `fill_next_token_bitmask` (which also counts the allowed "
                    f"tokens).\n")
    with open(os.path.splitext(a.out)[0] + ".jsonl", "w") as f:
        for r, rows in enumerate(per_round):
            for row in rows.values():
                f.write(json.dumps({"round": r, "load_start": loads[r][0], "load_end": loads[r][1], **row}) + "\n")


if __name__ == "__main__":
    main()
