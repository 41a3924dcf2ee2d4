#!/usr/bin/env bash
# usage: pair.sh A "argsA" B "argsB": trains both on seed 0, evaluates both on the dev world in one eval (B as --imitation)
set -uo pipefail
cd /work/main
for pair in "$1|$2" "$3|$4"; do
  name=${pair%%|*}; args=${pair#*|}
  .venv/bin/python cli.py --home /tmp/qs/s0 train --dataset quickstart --run-name "$name" --max-steps 384 --train-decisions 480 \
     --validation-decisions 128 --eval-every 32 --shares 50 $args > /tmp/exp/$name.train.log 2>&1
done
a=$(grep -o "best /tmp/qs/s0/runs/$1/checkpoints/step-[0-9]*" /tmp/exp/$1.train.log | sed "s/.*best //")
b=$(grep -o "best /tmp/qs/s0/runs/$3/checkpoints/step-[0-9]*" /tmp/exp/$3.train.log | sed "s/.*best //")
echo "A $a  B $b"
.venv/bin/python cli.py --home /tmp/qs/dev100 eval --model "$a" --imitation "$b" --dataset quickstart --baseline none --max-decisions-per-window 2 --menu-shares 50 > /tmp/exp/$1-$3.dev.log 2>&1
grep -E "^ (logged|const|news|model|trained|imitation)|BEATS|NOT" /tmp/exp/$1-$3.dev.log | cut -c1-200
