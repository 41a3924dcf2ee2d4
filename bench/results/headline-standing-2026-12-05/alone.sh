#!/bin/bash
# hindsight alone at train's recipe (640 decisions, 192 steps), in the seed-0 quickstart home, then the quickstart's eval of it
cd "$(git rev-parse --show-toplevel)"  # a checkout of 4131c12; the seed-0 quickstart home in /tmp/exp/n0
/usr/bin/time -v python cli.py --home /tmp/exp/n0 train --dataset quickstart --objective hindsight --run-name hs-recipe
/usr/bin/time -v python cli.py --home /tmp/exp/n0 eval --model hs-recipe@best --dataset quickstart \
  --imitation quickstart-imitation@best --max-decisions-per-window 1 --menu-shares 50 --seed 0
