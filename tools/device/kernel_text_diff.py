#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare the device code of two builds of one CUDA object file, kernel by kernel, without a GPU or
cuobjdump: extracts each object's .nv_fatbin (objcopy), the ELF cubins inside it, and every kernel's
.text section (readelf), then prints the kernels whose machine code differs and how many of their
16-byte instructions differ. A mend that should not change device code can be checked this way.

    tools/device/kernel_text_diff.py before.o after.o
Exit status 0 when every kernel's code is identical, 1 otherwise. Needs binutils (objcopy, readelf).
"""
import os
import subprocess
import sys
import tempfile


def kernels(obj: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        fat = os.path.join(tmp, "fatbin")
        subprocess.run(["objcopy", "--dump-section", f".nv_fatbin={fat}", obj, os.devnull], check=True,
                       capture_output=True)
        data = open(fat, "rb").read()
        out = {}
        start = data.find(b"\x7fELF")
        cubin = 0
        while start != -1:
            elf = os.path.join(tmp, f"cubin{cubin}")
            with open(elf, "wb") as f:
                f.write(data[start:])
            listing = subprocess.run(["readelf", "-S", "-W", elf], capture_output=True, text=True).stdout
            for line in listing.splitlines():
                parts = line.replace("[ ", "[").split()
                if len(parts) > 6 and parts[1].startswith(".text."):
                    off, size = int(parts[4], 16), int(parts[5], 16)
                    out[(cubin, parts[1][len(".text."):])] = data[start + off:start + off + size]
            cubin += 1
            start = data.find(b"\x7fELF", start + 1)
        return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    changed = 0
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        changed += 1
        if x is None or y is None:
            print(f"cubin {key[0]} {key[1]}: only in {'after' if x is None else 'before'}")
            continue
        n = max(len(x), len(y)) // 16
        differ = sum(1 for i in range(0, min(len(x), len(y)), 16) if x[i:i + 16] != y[i:i + 16])
        print(f"cubin {key[0]} {key[1]}: {len(x) // 16} -> {len(y) // 16} instructions, {differ} of {n} differ")
    print(f"{len(set(a) | set(b))} kernels, {changed} with different code")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
