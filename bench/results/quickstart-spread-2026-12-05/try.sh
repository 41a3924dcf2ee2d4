#!/bin/bash
# try2.sh SRC HOME TAG SEED TRAIN_DECISIONS: the quickstart's imitation baseline and hindsight student, trained on
# TRAIN_DECISIONS drawn by SRC's code in an existing quickstart home (cached frozen states reused), then its eval
src=$1; home=$2; tag=$3; seed=$4; n=$5
cd $src  # a checkout of the commit named in README.md
py=python
common="--dataset quickstart --backend torch --max-steps 384 --shares 50 --seed $seed --train-decisions $n --validation-decisions 128 --eval-every 32"
{ /usr/bin/time -f "imitation %e s %M KB" $py cli.py --home $home train $common --objective menu-imitate --run-name imit-$tag \
 && /usr/bin/time -f "student %e s %M KB" $py cli.py --home $home train $common --objective hindsight --run-name hs-$tag \
 && /usr/bin/time -f "eval %e s %M KB" $py cli.py --home $home eval --model hs-$tag@best --dataset quickstart --imitation imit-$tag@best \
    --seed $seed --max-decisions-per-window 1 --menu-shares 50 ; } > /tmp/try2-$tag-s$seed.log 2>&1
