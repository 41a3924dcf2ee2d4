#!/usr/bin/env bash
# The last step (384) of the recipe's student and of Gemma's, on both dev worlds: does fitting the seen wording longer
# lose unseen wording?
# Ran from /work/gemma: a worktree of e8d2ab0 with gemma-split.patch applied (Gemma's blocks; gone since).
set -uo pipefail
cd /work/gemma
PY=/work/main/.venv/bin/python
for run in quickstart g12; do
  for home in dev100 dev101; do
    nice -n 10 $PY cli.py --home /tmp/qs/$home eval --model /tmp/qs/s0/runs/$run/checkpoints/step-384 --dataset quickstart \
       --baseline none --max-decisions-per-window 2 --menu-shares 50 > /tmp/exp/$run-384.$home.log 2>&1
    echo "== $run step-384 on $home"; grep -E "^ trained" /tmp/exp/$run-384.$home.log
  done
done
