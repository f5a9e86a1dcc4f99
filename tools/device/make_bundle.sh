#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs binaries built here for a GPU machine that lacks our shared libraries (the `device` tool's
# machines): strips them, adds each non-system library they load (libfmt, libgomp, libpcre2, ICU; not
# libcudart: those machines have CUDA 13's runtime, and call_lib.sh puts its folder on LD_LIBRARY_PATH), and replaces ICU's 31 MB data library with a slim one that holds only what deepinfer loads at
# run time (the NFKC normalizer of the V4.1 Engram token map, and cnvalias.icu), ~130 KB. Everything
# else ICU needs (NFC/NFD, case mapping, character properties) is compiled into libicuuc.
#   tools/device/make_bundle.sh OUT.tar.xz BINARY...
# On the machine: mkdir -p /tmp/mb && tar -xJf OUT.tar.xz -C /tmp/mb && export LD_LIBRARY_PATH=/tmp/mb
# Needs icupkg (Debian: icu-devtools) for the slim ICU data; without it the full library is packed.
# For an H200/H100 machine, binaries of a tree configured with -DCMAKE_CUDA_ARCHITECTURES=90a-real (e.g.
# build-90/, ignored like build/) carry one cubin per kernel instead of three. Each binary holds every kernel
# (~9 MB of cubins): the tool's 64 MiB carry limit, the ~60 MiB tree included, takes about three test binaries
# a call, or all the GPU tests as one (`ninja cuda_all_tests`) — or two near-identical benchmark builds and two tests.
set -euo pipefail
out=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/b"
for bin in "$@"; do
    cp "$bin" "$work/b/"
    strip "$work/b/$(basename "$bin")"
done
# The libraries the binaries load that a bare CUDA machine lacks (the driver, libc and friends it has).
ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
        libfmt.so.*|libgomp.so.*|libpcre2-8.so.*|libicuuc.so.*|libicudata.so.*) cp -L "$lib" "$work/b/" ;;
    esac
done
icudata=$(ls "$work"/b/libicudata.so.* 2>/dev/null | head -1 || true)
if [ -n "$icudata" ] && command -v icupkg >/dev/null; then
    so=$(ldconfig -p | awk -v n="$(basename "$icudata")" '$1 == n {print $NF; exit}')
    ver=$(basename "$icudata" | sed 's/libicudata\.so\.//')
    mkdir -p "$work/full"
    python3 - "$so" "$work/full/icudt${ver}l.dat" "icudt${ver}_dat" <<'PY'
import re, subprocess, sys
so, out, sym = sys.argv[1:]
line = next(l for l in subprocess.check_output(['readelf', '-Ws', so], text=True).splitlines() if l.endswith(' ' + sym))
f = line.split(); addr = int(f[1], 16); size = int(f[2], 0)
for l in subprocess.check_output(['readelf', '-WS', so], text=True).splitlines():
    m = re.match(r'\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)', l)
    if m and int(m.group(4), 16) and int(m.group(2), 16) <= addr < int(m.group(2), 16) + int(m.group(4), 16):
        off = int(m.group(3), 16) + addr - int(m.group(2), 16)
        open(out, 'wb').write(open(so, 'rb').read()[off:off + size])
        break
PY
    mkdir -p "$work/items" "$work/pkg"
    printf 'nfkc.nrm\ncnvalias.icu\n' > "$work/list.txt"
    icupkg -x "$work/list.txt" -d "$work/items" "$work/full/icudt${ver}l.dat"
    # The package's name must be the data's own (icudtNNl): it prefixes every item's name.
    icupkg -s "$work/items" -a "$work/list.txt" new "$work/pkg/icudt${ver}l.dat"
    printf '.section .rodata\n.balign 16\n.globl icudt%s_dat\n.type icudt%s_dat, @object\nicudt%s_dat:\n.incbin "%s"\n.size icudt%s_dat, . - icudt%s_dat\n.section .note.GNU-stack,"",@progbits\n' \
        "$ver" "$ver" "$ver" "$work/pkg/icudt${ver}l.dat" "$ver" "$ver" > "$work/stub.S"
    gcc -shared -o "$icudata" -Wl,-soname,"$(basename "$icudata")" "$work/stub.S"
fi
# One xz stream with a dictionary larger than the binaries together: the kernels they share pack once.
tar -C "$work/b" -cf - . | xz --lzma2=preset=9e,dict=192MiB -T1 > "$out"
ls -la "$out"
