import sys, time
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import os
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64"); os.environ.setdefault("LRU_CACHE_CAPACITY", "64")
import torch
torch.set_num_threads(1)
from bench_serve import game_requests
from babylon_rl.serve.prompting import prepare
from babylon_rl.evaluate.decide import Decider
from babylon_rl.evaluate.prefix_cache import PrefixCache
from babylon_rl.train.models import load_causal_lm
def rss():
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])//1024
model, tok = load_causal_lm(sys.argv[1], "cpu")
prompts = [prepare(tok, a, True).decision for a in game_requests(193)]
d = Decider(model, tok, 1, "cpu", prefix_cache=PrefixCache(128 << 20))
d.decide(prompts[:1]); base = rss(); t = time.perf_counter()
for i in range(1, len(prompts), 16):
    d.decide(prompts[i:i+16])
print(f"{time.perf_counter()-t:.1f}s for 192, rss +{rss()-base}")
