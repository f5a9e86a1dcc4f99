#!/usr/bin/env bash
# Session 31, call 4: the offline engine end to end on one H200 at 99d217f, 12 full-width V4-Flash layers, even routing.
set -u
T0=$(date +%s)
mkdir -p /work && ln -sfn $PWD /work/main
NL=12 BT=420 ROUTING=even bash bench/run_engine_e2e.sh .devcarry/me/e2e.tar.xz
echo "total t=$(( $(date +%s) - T0 ))" >> $OUT/summary.txt
cat $OUT/summary.txt; tail -5 $OUT/engine.err
