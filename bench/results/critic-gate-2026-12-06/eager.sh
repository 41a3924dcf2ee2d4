cd /work/main
for s in 16 19; do
  H=/tmp/qs/g$s
  .venv/bin/python cli.py --home $H train --dataset quickstart --run-name eager --hold-weight 0.3 --max-steps 384 --seed $s \
     --train-decisions 480 --validation-decisions 128 --eval-every 32 --shares 50 > /tmp/qs/eager$s.train.log 2>&1
  .venv/bin/python cli.py --home $H eval --model eager@best --imitation quickstart@best --dataset quickstart \
     --max-decisions-per-window 2 --menu-shares 50 --seed $s > /tmp/qs/eager$s.eval.log 2>&1
done
echo DONE
