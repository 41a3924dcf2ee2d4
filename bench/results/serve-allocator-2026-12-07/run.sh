#!/usr/bin/env bash
# The server's resident growth through hostile clients, and its throughput at 16 clients, with glibc's mmap threshold
# left dynamic (today) and fixed (MALLOC_MMAP_THRESHOLD_, which glibc reads at start), alternated; nothing else running.
set -uo pipefail
cd /work/main
out=bench/results/serve-allocator-2026-12-07
export OMP_NUM_THREADS=1
for round in 1 2; do
  for mode in dynamic fixed1m; do
    if [ $mode = fixed1m ]; then export MALLOC_MMAP_THRESHOLD_=1048576; else unset MALLOC_MMAP_THRESHOLD_; fi
    echo "== round $round $mode $(date -u +%H:%M:%S)"
    .venv/bin/python bench/bench_serve_hostile.py --home /tmp/qs/s0 --seconds 120 --out $out/hostile-$mode-$round.json 2>&1 | tail -3
    [ $round = 1 ] && .venv/bin/python bench/bench_serve.py --home /tmp/qs/s0 --seconds 60 --levels 16 --out $out/serve-$mode.json 2>&1 | tail -4
  done
done
unset MALLOC_MMAP_THRESHOLD_
