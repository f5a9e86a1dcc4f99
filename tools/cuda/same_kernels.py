#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Whether two builds of a CUDA object hold the same machine code, kernel by kernel.

A refactor of device code (a helper moved into a shared header, a switch folded into a function) that
leaves every kernel's SASS unchanged needs no GPU run to be trusted. This compares the `.text.<kernel>`
sections of every cubin (one per real architecture) in two objects or executables:

    tools/cuda/same_kernels.py BEFORE.o AFTER.o

Exit 0 when every kernel's code is identical (PTX and debug sections are not compared), 1 otherwise,
listing the kernels that differ. Needs `cuobjdump` (the CUDA toolkit's, or PyPI's
`nvidia-cuda-cuobjdump`: `pip install --target /tmp/cuobj nvidia-cuda-cuobjdump` then
CUOBJDUMP=/tmp/cuobj/nvidia/cu13/bin/cuobjdump) and binutils' `readelf`.
To get BEFORE.o: copy the object, `git stash`, rebuild (ccache makes it quick), copy it again, `git stash pop`.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def cuobjdump() -> str:
    exe = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not exe:
        sys.exit("same_kernels: no cuobjdump (set CUOBJDUMP or put it on PATH; see --help)")
    return exe


def cubins(obj: str, workdir: str) -> dict:
    """{architecture: cubin path} of the object's embedded ELF images."""
    subprocess.run([cuobjdump(), "-xelf", "all", os.path.abspath(obj)], cwd=workdir, check=True,
                   stdout=subprocess.DEVNULL)
    out = {}
    for path in glob.glob(os.path.join(workdir, "*.cubin")):
        m = re.search(r"\.(sm_\w+)\.cubin$", path)
        if m:
            out[m.group(1)] = path
    return out


def text_sections(cubin: str) -> dict:
    """{section name: bytes} of the cubin's .text.* sections (one per kernel or device function)."""
    listing = subprocess.run(["readelf", "-SW", cubin], check=True, capture_output=True, text=True).stdout
    data = open(cubin, "rb").read()
    sections = {}
    for line in listing.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(1).startswith(".text."):
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            sections[m.group(1)] = data[off:off + size]
    return sections


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as a_dir, tempfile.TemporaryDirectory() as b_dir:
        a, b = cubins(sys.argv[1], a_dir), cubins(sys.argv[2], b_dir)
        if sorted(a) != sorted(b):
            print(f"architectures differ: {sorted(a)} vs {sorted(b)}")
            return 1
        same = True
        for arch in sorted(a):
            ta, tb = text_sections(a[arch]), text_sections(b[arch])
            differ = sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
            print(f"{arch}: {len(ta)} vs {len(tb)} kernels, {len(differ)} differ")
            for k in differ:
                print(f"  {k[6:]}")
            same = same and not differ
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
