import sys, importlib.util
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import torch
from bench_serve import game_requests
from babylon_rl.serve.prompting import prepare
from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.train import frozen as new
spec = importlib.util.spec_from_file_location("frozen_old", "/tmp/frozen_old.py"); old = importlib.util.module_from_spec(spec); sys.modules["frozen_old"] = old; spec.loader.exec_module(old)
from babylon_rl.train.models import load_causal_lm
model, tok = load_causal_lm(sys.argv[1], "cpu")
ps = [prepare(tok, a, True).decision for a in game_requests(8)]
packs = [new.pack(tok, p, valid_menu(p, 50)) for p in ps]
ids, pos, mask = new.layout(packs, "cpu")
sh = new.shared_prefix(packs)
for dtype in (torch.bfloat16, None):
    a = new.SplitModel(model, 1, dtype).bottom(ids, pos, mask, sh)
    b = old.SplitModel(model, 1, dtype).bottom(ids, pos, mask, sh)
    c = new.SplitModel(model, 1, dtype).bottom(ids, pos, mask)
    d = old.SplitModel(model, 1, dtype).bottom(ids, pos, mask)
    print(dtype, "shared", sh, "bitwise equal:", torch.equal(a, b), "unshared equal:", torch.equal(c, d))
