"""The frozen blocks (all but the top one of SmolLM2-135M) over 8 random sequences of 330 tokens, float32 against a
dynamic int8 copy (torch.ao.quantization.quantize_dynamic): seconds a sequence and the relative error of the output.
Run: python int8_bottom.py HOME/models/smollm2-135m"""
import time, torch, sys
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
path = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
dec = model.get_decoder()
layers = dec.layers[:-1]
B, T = 8, 330
ids = torch.randint(0, 40000, (B, T))
pos = torch.arange(T)[None].expand(B, -1)
mask = torch.full((T, T), -1e9).triu(1)[None, None].expand(B, 1, T, T)
def run(layers, embed):
    with torch.no_grad():
        h = embed(ids)
        rot = dec.rotary_emb(h, position_ids=pos)
        for l in layers:
            h = l(h, attention_mask=mask, position_ids=pos, position_embeddings=rot)
    return h
def timeit(layers, embed, n=3):
    run(layers, embed)
    t = time.perf_counter()
    for _ in range(n): out = run(layers, embed)
    return (time.perf_counter() - t) / n / B, out
t32, h32 = timeit(layers, dec.embed_tokens)
import copy
q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(torch.nn.ModuleList(layers)), {torch.nn.Linear}, dtype=torch.qint8)
t8, h8 = timeit(q, dec.embed_tokens)
rel = ((h8 - h32).norm() / h32.norm()).item()
print(f"fp32 {t32:.3f} s/seq  int8-dynamic {t8:.3f} s/seq  speedup {t32/t8:.2f}x  rel err {rel:.4f}")
