#!/usr/bin/env bash
# usage: variant.sh NAME [train args...]: from /work/exp80b (main at d151b0f with bearish-held.patch applied), trains on seed 0's quickstart dataset, evaluates its
# kept checkpoint on the dev world (seed 100)'s held-out half (unseen wording)
set -euo pipefail
cd /work/exp80b
export PYTHONPATH=/work/exp80b
name=$1; shift
PY=/work/main/.venv/bin/python
$PY cli.py --home /tmp/qs/s0 train --dataset quickstart --run-name "$name" --max-steps 384 --train-decisions 480 \
   --validation-decisions 128 --eval-every 32 --shares 50 "$@" > /tmp/exp/$name.train.log 2>&1
best=$(grep -o "best /tmp/qs/s0/runs/$name/checkpoints/step-[0-9]*" /tmp/exp/$name.train.log | head -1 | sed "s/.*best //" || true)
echo "best: $best"
$PY cli.py --home /tmp/qs/dev100 eval --model "$best" --dataset quickstart --baseline none --max-decisions-per-window 2 --menu-shares 50 > /tmp/exp/$name.dev.log 2>&1
grep -E "credit:" /tmp/exp/$name.train.log | head -1 | cut -c1-250 || true
grep -E "^ (logged|const|news|model|trained)|BEATS|NOT" /tmp/exp/$name.dev.log | cut -c1-200
