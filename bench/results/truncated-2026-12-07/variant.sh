#!/usr/bin/env bash
# usage: variant.sh NAME BASE_MODEL_DIR [train args...]: from /work/gemma (e8d2ab0 with gemma-split.patch applied), trains the quickstart's student recipe
# (hindsight) on seed 0's quickstart dataset over another base model, then evaluates its kept checkpoint on the dev
# world's held-out half (seed 100, unseen wording) and on seed 0's held-out half, two decisions a window.
set -euo pipefail
cd /work/gemma
name=$1; base=$2; shift 2
PY=/work/main/.venv/bin/python
$PY cli.py --home /tmp/qs/s0 train --dataset quickstart --objective hindsight --base-model "$base" --run-name "$name" \
   --max-steps 384 --train-decisions 480 --validation-decisions 128 --eval-every 32 --shares 50 "$@" > /tmp/exp/$name.train.log 2>&1
best=$(grep -o "best /tmp/qs/s0/runs/$name/checkpoints/step-[0-9]*" /tmp/exp/$name.train.log | head -1 | sed "s/.*best //" || true)
echo "best: $best"
for home in dev100 s0; do
  $PY cli.py --home /tmp/qs/$home eval --model "$best" --dataset quickstart --baseline none --max-decisions-per-window 2 \
     --menu-shares 50 > /tmp/exp/$name.$home.log 2>&1
  echo "== $home"; grep -E "^ (logged|const|news|model|trained)|BEATS|NOT|shown" /tmp/exp/$name.$home.log | cut -c1-200
done
grep -E "credit:" /tmp/exp/$name.train.log | head -1 | cut -c1-250 || true
