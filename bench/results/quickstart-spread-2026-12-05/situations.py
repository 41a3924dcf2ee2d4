"""situations.py HOME SEED: how many situations (a window and its latest fresh headline: decisions.Task.situation) a
draw of the quickstart's train decisions covers, drawn at random (before 2026-12-05) and spread over situations (now),
as `train --train-decisions N --seed SEED` draws them (loop.drawn, seed + 4). HOME: a quickstart's home."""

import sys
from pathlib import Path

from babylon_rl.settings import Home
from babylon_rl.train.decisions import load_decision_data
from babylon_rl.train.loop import drawn

home, seed = Home(Path(sys.argv[1])), int(sys.argv[2])
train = load_decision_data(home, "quickstart").train
print(f"train decisions {len(train)}, situations {len({t.situation for t in train})}")
for size in (384, 480, 640):
    for name, situation in (("random", None), ("spread", lambda task: task.situation)):
        draw = drawn(train, size, seed + 4, situation=situation)
        print(f"{size} {name}: situations {len({t.situation for t in draw})}, with a fresh headline {sum(t.situation[1] is not None for t in draw)}")
