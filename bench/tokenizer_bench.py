# SPDX-License-Identifier: Apache-2.0
"""Side-by-side encode throughput: deepinfer's tokenizer (bench/tokenizer_bench.cpp) and Hugging
Face `tokenizers`, same tokenizer.json, same documents, same thread count, in one run.

Corpora: "code+prose" (the Python standard library's .py files: code, comments, English
docstrings) and "hostile" (tests/tokenizer/corpus.py: every script, emoji, long runs). Both sides
must produce the same number of tokens (identical ids are tested in tests/python).

    .venv/bin/python bench/tokenizer_bench.py [--build build] [--threads N] [--out FILE]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import sysconfig
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json"


def code_prose_corpus(limit_bytes=8_000_000, doc_bytes=4096):
    """Documents of ~4 KiB cut (at line ends) from the standard library's Python sources."""
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    docs, total = [], 0
    for path in sorted(stdlib.rglob("*.py")):
        if "test" in path.parts or "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        chunk = ""
        for line in text.splitlines(keepends=True):
            chunk += line
            if len(chunk) >= doc_bytes:
                docs.append(chunk)
                total += len(chunk.encode())
                chunk = ""
        if chunk:
            docs.append(chunk)
            total += len(chunk.encode())
        if total >= limit_bytes:
            break
    return docs


def hostile_corpus():
    sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))
    import corpus
    return corpus.build_corpus()


def bench_hf(docs, threads, repeat):
    import tokenizers  # imported after RAYON_NUM_THREADS is set
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    nbytes = sum(len(d.encode()) for d in docs)
    single, batch, ntok = 1e30, 1e30, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = 0
        for d in docs:
            n += len(tok.encode(d, add_special_tokens=False).ids)
        single = min(single, time.perf_counter() - t0)
        ntok = n
        t0 = time.perf_counter()
        out = tok.encode_batch(docs, add_special_tokens=False)
        batch = min(batch, time.perf_counter() - t0)
        assert sum(len(e.ids) for e in out) == n
    return {"single_mb_s": nbytes / single / 1e6, "batch_mb_s": nbytes / batch / 1e6, "tokens": ntok,
            "bytes": nbytes, "docs": len(docs), "version": tokenizers.__version__}


def bench_ours(build, corpus_path, threads, repeat):
    out = subprocess.run([str(build / "bench" / "tokenizer_bench"), "--tokenizer", str(TOKENIZER), "--corpus",
                          str(corpus_path), "--threads", str(threads), "--repeat", str(repeat)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="Markdown file to write (default: bench/results/...)")
    ap.add_argument("--reuse-corpora", action="store_true",
                    help="Read the corpora written by an earlier run (BUILD/bench/tokenizer-corpora) instead of "
                         "building them, e.g. to run on another machine with another Python")
    args = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    build = pathlib.Path(args.build)
    tmp = build / "bench" / "tokenizer-corpora"
    tmp.mkdir(parents=True, exist_ok=True)

    rows = []
    for name, make in [("code+prose", code_prose_corpus), ("hostile", hostile_corpus)]:
        path = tmp / f"{name.replace('+', '_')}.jsonl"
        if args.reuse_corpora:
            docs = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
        else:
            docs = make()
            path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
        hf = bench_hf(docs, args.threads, args.repeat)
        ours = bench_ours(build, path, args.threads, args.repeat)
        assert ours["tokens"] == hf["tokens"], (name, ours["tokens"], hf["tokens"])
        rows.append((name, hf, ours))

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cpu = platform.processor() or "unknown"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [f"# Tokenizer encode throughput ({datetime.date.today().isoformat()}, commit {commit})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs ({cpu}); threads used: {args.threads}.",
             f"Tokenizer: `assets/tokenizer/deepseek-v4/tokenizer.json`; Hugging Face tokenizers "
             f"{rows[0][1]['version']}; best of {args.repeat} runs.",
             f"Command: `.venv/bin/python bench/tokenizer_bench.py --threads {args.threads}`", "",
             "| corpus | docs | MB | tokens | HF single MB/s | deepinfer single MB/s | speed-up | "
             f"HF batch ({args.threads} thr) MB/s | deepinfer batch ({args.threads} thr) MB/s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, hf, ours in rows:
        lines.append(f"| {name} | {hf['docs']} | {hf['bytes'] / 1e6:.2f} | {hf['tokens']} | {hf['single_mb_s']:.2f} | "
                     f"{ours['single_mb_s']:.2f} | {ours['single_mb_s'] / hf['single_mb_s']:.1f}x | "
                     f"{hf['batch_mb_s']:.2f} | {ours['batch_mb_s']:.2f} | "
                     f"{ours['batch_mb_s'] / hf['batch_mb_s']:.1f}x |")
    lines.append("")
    lines.append(f"deepinfer tokenizer load time: {rows[0][2]['load_s']:.2f} s.")
    report = "\n".join(lines) + "\n"
    print(report)
    out = pathlib.Path(args.out) if args.out else (
        ROOT / "bench" / "results" / f"tokenizer-{datetime.date.today().strftime('%Y%m%d')}-{commit}-t{args.threads}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
