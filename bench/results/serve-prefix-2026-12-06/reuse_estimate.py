import sys
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from bench_serve import game_requests
import babylon_rl.evaluate.prompts as P
from babylon_rl.serve.prompting import prepare
from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.train.frozen import pack
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
asks = game_requests(400)
def reuse(ids_list):
    kept=[]; tot=0; re_=0
    for ids in ids_list:
        best=0
        for k in kept:
            n=0
            for a,b in zip(k,ids):
                if a!=b: break
                n+=1
            best=max(best,n)
        re_+=min(best,len(ids)-1); tot+=len(ids); kept.append(ids)
    return re_/tot
def prompts():
    out=[]
    for a in asks:
        d=prepare(tok,a,True).decision
        p=pack(tok,d,valid_menu(d,50)); out.append(p.ids[:p.prompt_len])
    return out
print("today's prompts: reuse", round(reuse(prompts()),3))
orig=P.example_ticker
P.example_ticker=lambda text: orig(text.split("\nCash")[0])
print("example ticker from the tick's shared part: reuse", round(reuse(prompts()),3))
