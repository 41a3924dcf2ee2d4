#!/bin/bash
# try.sh HOME NAME SEED [train options]: train a hindsight variant in an existing quickstart home (its frozen states
# cached) and evaluate it like the quickstart does
home=$1; name=$2; seed=$3; shift 3
cd <a checkout of the commit named in README.md>
py=python
{ /usr/bin/time -f "train %e s" $py cli.py --home $home train --dataset quickstart --objective hindsight --run-name $name \
    --train-decisions 640 --validation-decisions 128 --eval-every 32 --seed $seed "$@" \
 && /usr/bin/time -f "eval %e s" $py cli.py --home $home eval --model $name@best --dataset quickstart --imitation quickstart-imitation@best \
    --seed $seed --max-decisions-per-window 1 --menu-shares 50 ; } > /tmp/exp/$name-s$seed.log 2>&1
grep -E "^ (trained|imitation|its base|logged|const|news) |model (BEATS|does NOT)|learning|train .* s$|eval .* s$" /tmp/exp/$name-s$seed.log | grep -v "news rule BEATS\|not required"
