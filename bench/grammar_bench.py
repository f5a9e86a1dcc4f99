#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Structured output, side by side with xgrammar, in one run: the same DeepSeek tokenizer, the same
schemas, the same token sequences. For each schema: compile time (no cache) and per-token mask time
(median, p99) of deepinfer (build/bench/grammar_bench) and of xgrammar (PyPI, numpy bitmask, CPU).
deepinfer walks the grammar with random allowed tokens; xgrammar then replays exactly those tokens.

    /work/xgvenv/bin/python bench/grammar_bench.py --bin build/bench/grammar_bench \
        --tokenizer assets/tokenizer/deepseek-v4/tokenizer.json --schemas tests/data/grammar/api_suite.jsonl \
        --out bench/results/grammar-vs-xgrammar.md

xgrammar needs torch; install it in a separate virtualenv (not the test requirements).
"""
import argparse
import json
import platform
import statistics
import subprocess
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--schemas", required=True)
    ap.add_argument("--walks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile-reps", type=int, default=5, help="compile time = median of this many fresh compiles")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    proc = subprocess.run([a.bin, "--tokenizer", a.tokenizer, "--schemas", a.schemas, "--walks", str(a.walks),
                           "--steps", str(a.steps), "--compile-reps", str(a.compile_reps)],
                          capture_output=True, text=True, check=True)
    ours = [json.loads(x) for x in proc.stdout.splitlines()]
    ours = {o["name"]: o for o in ours if "name" in o}

    token_bytes.cache = token_bytes(a.tokenizer)
    info = xgr.TokenizerInfo(token_bytes.cache, xgr.VocabType.RAW, vocab_size=VOCAB_SIZE, stop_token_ids=[1])
    rows = []
    for line in open(a.schemas):
        item = json.loads(line)
        name, schema = item["name"], json.dumps(item["schema"])
        o = ours.get(name, {})
        row = {"name": name, "di_compile_ms": o.get("compile_seconds", float("nan")) * 1e3,
               "di_median_us": o.get("mask_median_us"), "di_p99_us": o.get("mask_p99_us"), "di_states": o.get("states"),
               "di_error": o.get("error")}
        try:
            compile_ms = []
            for _ in range(a.compile_reps):
                compiler = xgr.GrammarCompiler(info, max_threads=a.threads, cache_enabled=False)
                t0 = time.perf_counter()
                cg = compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=False)
                compile_ms.append((time.perf_counter() - t0) * 1e3)
            row["xg_compile_ms"] = statistics.median(compile_ms)
            times, replayed, rejected, first_rejected = [], 0, 0, None
            vocab_bytes = token_bytes.cache if hasattr(token_bytes, "cache") else None
            mask = np.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=np.int32)
            for seq in o.get("sequences", []):
                m = xgr.GrammarMatcher(cg)
                for tok in seq:
                    t1 = time.perf_counter()
                    m.fill_next_token_bitmask(mask)
                    times.append(time.perf_counter() - t1)
                    if not m.accept_token(tok):
                        rejected += 1
                        if first_rejected is None and vocab_bytes is not None:
                            first_rejected = vocab_bytes[tok]
                        break
                    replayed += 1
            row["xg_median_us"] = statistics.median(times) * 1e6 if times else None
            row["xg_p99_us"] = pct(times, 0.99) * 1e6 if times else None
            row["xg_tokens_replayed"], row["xg_rejected_walks"] = replayed, rejected
            row["xg_first_rejected_token"] = repr(first_rejected)
        except Exception as e:  # noqa: BLE001 - record what xgrammar says
            row["xg_error"] = str(e)[:200]
        rows.append(row)
        print(json.dumps(row), flush=True)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    fmt = lambda v, d=1: "-" if v is None or (isinstance(v, float) and v != v) else f"{v:.{d}f}"  # noqa: E731
    with open(a.out, "w") as f:
        f.write(f"# Structured output: deepinfer vs xgrammar {getattr(xgr, '__version__', '0.2.9')}\n\n")
        f.write(f"commit {commit}; machine: {platform.machine()} {platform.processor() or ''}, "
                f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
                f"tokenizer DeepSeek-V4 (129,280 ids); {a.walks} random walks x {a.steps} steps per schema; "
                f"xgrammar max_threads={a.threads}, any_whitespace=True, strict_mode=False; deepinfer flexible "
                f"whitespace, strict off, OpenMP threads = cores.\n\n")
        f.write("Command:\n\n```\n/work/xgvenv/bin/python bench/grammar_bench.py --bin build/bench/grammar_bench "
                f"--tokenizer {a.tokenizer} --schemas {a.schemas} --walks {a.walks} --steps {a.steps} --out {a.out}\n```\n\n")
        f.write("| schema | deepinfer compile ms | xgrammar compile ms | deepinfer mask median us | xgrammar mask median us "
                "| deepinfer mask p99 us | xgrammar mask p99 us | tokens replayed in xgrammar |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['name']} | {fmt(r['di_compile_ms'])} | {fmt(r.get('xg_compile_ms'))} | {fmt(r['di_median_us'])} | "
                    f"{fmt(r.get('xg_median_us'))} | {fmt(r['di_p99_us'])} | {fmt(r.get('xg_p99_us'))} | "
                    f"{r.get('xg_tokens_replayed', '-')} ({r.get('xg_rejected_walks', '-')} walks cut; first token xgrammar refused: "
                    f"`{r.get('xg_first_rejected_token', '-')}`) |\n")
        ok = [r for r in rows if r.get("xg_compile_ms") and r.get("di_median_us") is not None]
        if ok:
            g = lambda k: statistics.median([r[k] for r in ok])  # noqa: E731
            f.write(f"\nMedians over schemas: compile deepinfer {g('di_compile_ms'):.1f} ms vs xgrammar "
                    f"{g('xg_compile_ms'):.1f} ms; mask median deepinfer {g('di_median_us'):.1f} us vs xgrammar "
                    f"{g('xg_median_us'):.1f} us; mask p99 deepinfer {g('di_p99_us'):.1f} us vs xgrammar "
                    f"{g('xg_p99_us'):.1f} us.\n")


if __name__ == "__main__":
    main()
