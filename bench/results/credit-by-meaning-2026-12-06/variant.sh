#!/usr/bin/env bash
# usage: variant.sh NAME [train args...]: trains on seed 0's quickstart dataset, evaluates its best checkpoint on the dev world (seed 100)
set -euo pipefail
cd /work/main
name=$1; shift
if [ "$name" != quickstart ]; then
  .venv/bin/python cli.py --home /tmp/qs/s0 train --dataset quickstart --run-name "$name" --max-steps 384 --train-decisions 480 \
     --validation-decisions 128 --eval-every 32 --shares 50 "$@" > /tmp/exp/$name.train.log 2>&1
fi
best=$(grep -o "best /tmp/qs/s0/runs/$name/checkpoints/step-[0-9]*" /tmp/exp/$name.train.log /tmp/qs/s0.log 2>/dev/null | head -1 | sed "s/.*best //" || true)
echo "best: $best"
.venv/bin/python cli.py --home /tmp/qs/dev100 eval --model "$best" --dataset quickstart --baseline none --max-decisions-per-window 2 --menu-shares 50 > /tmp/exp/$name.dev.log 2>&1
grep -E "credit:" /tmp/exp/$name.train.log /tmp/qs/s0.log 2>/dev/null | head -1 | cut -c1-250 || true
grep -E "^ (logged|const|news|model|trained)|BEATS|NOT" /tmp/exp/$name.dev.log | cut -c1-200
