"""A linear probe: is the sentiment of the latest fresh telling headline readable from the base model's hidden state at the
last prompt token, block by block? 400 train decisions (never eval), 5-fold, L2-regularised logistic regression.

    python bench/probe_headline_sentiment.py
"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_headline_margins import HOME as home, telling_decisions  # noqa: E402
from babylon_rl.evaluate.rules import latest_fresh_headline  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

LAYERS = [8, 16, 22, 26, 30]  # hidden_states[i]: the output of block i (0: the embeddings)


def last_prompt_states(tasks) -> dict[int, np.ndarray]:
    """Each layer's hidden state at the last prompt token, one row a task."""
    path = str(home.models / "smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    rows = {layer: [] for layer in LAYERS}
    with torch.no_grad():
        for task in tasks:
            ids = tokenizer.apply_chat_template(task.request.messages, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)["input_ids"]
            hidden = model(ids, output_hidden_states=True).hidden_states
            for layer in LAYERS:
                rows[layer].append(hidden[layer][0, -1].numpy())
    return {layer: np.array(r) for layer, r in rows.items()}


def fold_accuracy(x_train, y_train, x_test, y_test) -> float:
    """L2-regularised logistic regression fitted by L-BFGS; its accuracy on the held-out fold."""
    x_train, y_train = torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train, dtype=torch.float32)
    w = torch.zeros(x_train.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=200)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x_train @ w + b, y_train) + 0.01 * (w * w).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    predicted = (torch.tensor(x_test, dtype=torch.float32) @ w + b > 0).numpy()
    return float((predicted == y_test).mean())


def main() -> None:
    torch.set_num_threads(1)
    tasks = telling_decisions("train", 400)
    bullish = np.array([latest_fresh_headline(t.request)[1] == "BULLISH" for t in tasks])
    print("n", len(bullish), "bullish share", bullish.mean())
    folds = np.arange(len(bullish)) % 5
    for layer, x in last_prompt_states(tasks).items():
        x = (x - x.mean(0)) / (x.std(0) + 1e-6)
        accuracy = np.mean([fold_accuracy(x[folds != f], bullish[folds != f], x[folds == f], bullish[folds == f]) for f in range(5)])
        print(layer, round(float(accuracy), 3), flush=True)


if __name__ == "__main__":
    main()
