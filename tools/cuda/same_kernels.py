#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Whether two builds of a CUDA object hold the same machine code, kernel by kernel.

A refactor of device code (a helper moved into a shared header, a switch folded into a function) that
leaves every kernel's SASS unchanged needs no GPU run to be trusted. This compares the `.text.<kernel>`
sections of every cubin (one per real architecture) in two objects or executables:

    tools/cuda/same_kernels.py BEFORE.o AFTER.o

Exit 0 when every kernel's code is identical (PTX and debug sections are not compared), 1 otherwise,
listing the kernels that differ and how many of their 16-byte instructions differ. The cubins come from
`cuobjdump` where there is one (the CUDA toolkit's, or PyPI's `nvidia-cuda-cuobjdump`: `pip install --target
/tmp/cuobj nvidia-cuda-cuobjdump` then CUOBJDUMP=/tmp/cuobj/nvidia/cu13/bin/cuobjdump), else straight from the
object's `.nv_fatbin` section (binutils' `objcopy`: a machine with nvcc but no cuobjdump); `readelf` either way.
To get BEFORE.o: copy the object, `git stash`, rebuild (ccache makes it quick), copy it again, `git stash pop`.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def cubins(obj: str, workdir: str) -> dict:
    """{architecture: cubin path} of the object's embedded ELF images."""
    exe = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not exe:
        return fatbin_cubins(obj, workdir)
    subprocess.run([exe, "-xelf", "all", os.path.abspath(obj)], cwd=workdir, check=True, stdout=subprocess.DEVNULL)
    out = {}
    for path in glob.glob(os.path.join(workdir, "*.cubin")):
        m = re.search(r"\.(sm_\w+)\.cubin$", path)
        if m:
            out[m.group(1)] = path
    return out


def fatbin_cubins(obj: str, workdir: str) -> dict:
    """Without cuobjdump: the ELF images inside the object's .nv_fatbin section, each written from its ELF magic
    to the section's end (readelf reads only what the image's own headers describe), named by their order."""
    fat = os.path.join(workdir, "fatbin")
    subprocess.run(["objcopy", "--dump-section", f".nv_fatbin={fat}", obj, os.devnull], check=True, capture_output=True)
    data = open(fat, "rb").read()
    out, start = {}, data.find(b"\x7fELF")
    while start != -1:
        path = os.path.join(workdir, f"image{len(out)}.cubin")
        with open(path, "wb") as f:
            f.write(data[start:])
        out[f"image{len(out)}"] = path
        start = data.find(b"\x7fELF", start + 1)
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
                x, y = ta.get(k), tb.get(k)
                if x is None or y is None:
                    print(f"  {k[6:]}: only in {'AFTER' if x is None else 'BEFORE'}")
                    continue
                n = sum(1 for i in range(0, min(len(x), len(y)), 16) if x[i:i + 16] != y[i:i + 16])
                print(f"  {k[6:]}: {len(x) // 16} -> {len(y) // 16} instructions, {n} differ")
            same = same and not differ
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
