#!/bin/bash
# usage: student.sh HOME RUN SEED [extra train options]  (env: HS_BAND, HS_BAND_W); trains the quickstart's student, then diag on validation
H=$1; R=$2; S=$3; shift 3
cd /tmp/exp/src1
/work/main/.venv/bin/python cli.py --home $H train --dataset quickstart --backend torch --objective hindsight --run-name $R \
  --max-steps 384 --shares 50 --seed $S --train-decisions 480 --validation-decisions 128 --eval-every 32 "$@" 2>&1 | grep -E "eval:|best|headline" 
/work/main/.venv/bin/python /tmp/exp/diag.py $H $R 2>&1 | grep -v -i warn | tail -4
