#!/usr/bin/env bash
# Session 31, call 5: as call 4 with 24 layers (~90 GB checkpoint in a tmpfs of the 128 GB machine).
set -u
T0=$(date +%s)
mkdir -p /work && ln -sfn $PWD /work/main
umount /mnt/ck 2>/dev/null; rm -rf /dev/shm/big 2>/dev/null
free -g | head -2 > $OUT/summary.txt
NL=24 BT=420 ROUTING=even bash bench/run_engine_e2e.sh .devcarry/me/e2e.tar.xz
echo "total t=$(( $(date +%s) - T0 ))" >> $OUT/summary.txt
cat $OUT/summary.txt; tail -5 $OUT/engine.err
