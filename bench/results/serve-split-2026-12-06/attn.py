import time, torch
torch.set_num_threads(1)
from transformers.models.llama.modeling_llama import repeat_kv
B, H, KV, D, T, P = 1, 9, 3, 64, 175, 155
dt = torch.bfloat16
q = torch.randn(B, H, T, D, dtype=dt); k = torch.randn(B, KV, P + T, D, dtype=dt); v = torch.randn(B, KV, P + T, D, dtype=dt)
allowed = torch.ones(T, P + T, dtype=torch.bool).tril(P)
addmask = torch.zeros(B, 1, T, P + T).masked_fill(~allowed, -1e9)
def f1():
    m = addmask.to(dt)
    return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), attn_mask=m, scale=0.125)
def f2():
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed[None, None], scale=0.125, enable_gqa=True)
def f3():
    return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), attn_mask=allowed[None, None], scale=0.125)
for f in (f1, f2, f3, f1, f2, f3):
    f(); t = time.perf_counter()
    for _ in range(200): out = f()
    print(f.__name__, (time.perf_counter() - t) / 200 * 1000, "ms")
print((f1().float() - f2().float()).abs().max())
