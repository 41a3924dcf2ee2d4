import sys
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from bench_serve import game_requests
from babylon_rl.serve.prompting import prepare
from babylon_rl.evaluate.decide import Decider
from babylon_rl.evaluate.prefix_cache import PrefixCache
from babylon_rl.train.models import load_causal_lm
model, tok = load_causal_lm(sys.argv[1], "cpu")
prompts = [prepare(tok, a, True).decision for a in game_requests(48)]
def run(d, batch):
    out=[]
    for i in range(0, len(prompts), batch):
        ps = prompts[i:i+batch]; out += d.logprobs(ps, d.menus(ps))[0]
    return out
p16 = run(Decider(model, tok, 1, "cpu"), 16); p1 = run(Decider(model, tok, 1, "cpu"), 1)
c = run(Decider(model, tok, 1, "cpu", prefix_cache=PrefixCache()), 16)
f = lambda a,b: max(max(abs(x-y) for x,y in zip(r,s)) for r,s in zip(a,b))
print("bf16: plain16 vs plain1", f(p16,p1), "cached vs plain1", f(c,p1))
import babylon_rl.train.frozen as fr
fr.bottom_dtype.cache_clear()
orig = fr.bottom_dtype
class D(Decider):
    def __init__(s, *a, **k):
        super().__init__(*a, **k); s.split.bottom_dtype=None
q1 = run(D(model, tok, 1, "cpu"), 1); qc = run(D(model, tok, 1, "cpu", prefix_cache=PrefixCache()), 16)
print("fp32: cached vs plain1", f(qc,q1))
