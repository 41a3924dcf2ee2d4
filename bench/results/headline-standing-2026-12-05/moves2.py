import sys
from collections import defaultdict
from pathlib import Path
import numpy as np
from babylon_rl.settings import Home
from babylon_rl.train.decisions import load_decision_data
from babylon_rl.train.cached import next_look
from babylon_rl.evaluate.rules import headline_sentiment
data = load_decision_data(Home(Path(sys.argv[1])), "quickstart")
for name, tasks in (("window-end", data.train), ("next-look", next_look(data.train))):
    moves = defaultdict(list); seen = set()
    for t in tasks:
        if t.situation[1] is None or t.situation in seen: continue
        seen.add(t.situation)
        ticker, h = t.situation[1]
        now = t.observation.prices.get(ticker)
        moves[headline_sentiment(h)].append(t.truth.stocks[ticker].end / now - 1)
    print(name, " ".join(f"{s}: n={len(m)} right={(np.sign(m) == (1 if s=='BULLISH' else -1)).mean():.2f} mean={np.mean(m)*100:+.2f} sd={np.std(m)*100:.2f}" for s, m in sorted(moves.items())))
