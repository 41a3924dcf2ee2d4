#!/bin/bash
# usage: exp.sh NAME MODE [train args...]
set -x
cd /work/main && . .venv/bin/activate
N=$1; M=$2; shift 2
HS_MODE=$M python /tmp/runs/hindsight.py --home /tmp/qs1 train --dataset quickstart --run-name $N --train-decisions 320 --validation-decisions 128 --eval-every 32 "$@" 2>&1 | grep -v "━"
python cli.py --home /tmp/qs1 eval --model $N@best --dataset quickstart --imitation quickstart-imitation@best --max-decisions-per-window 1 --menu-shares 50 2>&1 | grep -v "━"
