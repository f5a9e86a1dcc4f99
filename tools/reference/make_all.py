#!/usr/bin/env python3
"""Run every deepinfer reference generator and write DIR/versions.json.

Usage:
    python3 tools/reference/make_all.py --out DIR [--device auto|cpu|cuda] [--no-cuda-compare]

Runs, with the same interpreter:
    make_format_fixtures.py --out DIR          -> DIR/formats.safetensors (always CPU)
    make_v4_models.py --out DIR [...]          -> DIR/v4_tiny_{a,b}{,_sharded,_upstream}/
then writes DIR/versions.json (interpreter and library versions, GPU, date, per-file size and sha256).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE_BUDGET = 40 * 1024 * 1024


def lib_version(name):
    try:
        mod = __import__(name)
        return getattr(mod, "__version__", "unknown")
    except ImportError:
        return None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--no-cuda-compare", action="store_true")
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()

    steps = [
        [sys.executable, os.path.join(HERE, "make_format_fixtures.py"), "--out", out],
        [sys.executable, os.path.join(HERE, "make_v4_models.py"), "--out", out, "--device", args.device]
        + (["--no-cuda-compare"] if args.no_cuda_compare else []),
    ]
    for cmd in steps:
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)

    import torch

    gpu = None
    if torch.cuda.is_available():
        gpu = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    files = {}
    total = 0
    for root, _, names in os.walk(out):
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, out)
            if rel == "versions.json":
                continue
            size = os.path.getsize(p)
            total += size
            files[rel] = {"bytes": size, "sha256": sha256(p)}
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": lib_version("transformers"),
        "safetensors": lib_version("safetensors"),
        "ml_dtypes": lib_version("ml_dtypes"),
        "numpy": lib_version("numpy"),
        "gpu": gpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "device_arg": args.device,
        "total_bytes": total,
        "files": dict(sorted(files.items())),
    }
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1)
        f.write("\n")
    print(f"wrote {out}/versions.json; total output {total / 2**20:.1f} MiB in {len(files)} files, "
          f"{time.time() - t0:.0f}s")
    if total > SIZE_BUDGET:
        print(f"WARNING: output exceeds the {SIZE_BUDGET / 2**20:.0f} MiB budget", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
