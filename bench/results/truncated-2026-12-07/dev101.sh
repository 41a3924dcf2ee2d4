#!/usr/bin/env bash
# The second dev world (seed 101, unseen wording): the three students' kept checkpoints evaluated on its held-out half.
# Ran from /work/gemma: a worktree of e8d2ab0 with gemma-split.patch applied (Gemma's blocks; gone since).
set -euo pipefail
cd /work/gemma
PY=/work/main/.venv/bin/python
[ -f /tmp/qs/dev101/datasets/quickstart/manifest.json ] || $PY /work/main/bench/results/credit-by-meaning-2026-12-06/devworld.py /tmp/qs/dev101 101 > /tmp/exp/dev101.build.log 2>&1
for run in quickstart/checkpoints/step-200 l17/checkpoints/step-192 g12/checkpoints/step-224; do
  name=${run%%/*}
  $PY cli.py --home /tmp/qs/dev101 eval --model /tmp/qs/s0/runs/$run --dataset quickstart --baseline none \
     --max-decisions-per-window 2 --menu-shares 50 > /tmp/exp/$name.dev101.log 2>&1
  echo "== $name on dev101"; grep -E "^ (logged|const|news|trained)|BEATS|NOT" /tmp/exp/$name.dev101.log | cut -c1-200
done
