"""What the menu objective costs per item on this machine: the frozen blocks once, a training step, answering.

Reads train decisions from a pack of `bench_learning_gpu.py prepare` (or a dataset in a home), makes
`--items` menu items (one naming each) and times `cache_states`, three `MenuTrainer` steps over them,
and answering 32; `--bottom float32` runs the frozen blocks in float32 where the trainer would use bf16:

    python bench/bench_menu_cost.py --pack .xfer2/news1.pack --model /tmp/brl-gpu1/models/smollm2-135m --train-layers 8
    python bench/bench_menu_cost.py --home /tmp/qs --dataset quickstart --model /tmp/qs/models/smollm2-135m --bottom float32
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402


def main() -> None:
    import torch

    from bench_learning_gpu import load_pack
    from babylon_rl.settings import Home
    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.state_cache import cache_states
    from babylon_rl.train.frozen import SplitModel
    from babylon_rl.train.decisions import load_decision_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pack", type=Path)
    source.add_argument("--home", help="a toolkit home; with --dataset")
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--model", required=True)
    parser.add_argument("--bottom", choices=("auto", "float32"), default="auto",
                        help="the frozen blocks' dtype: the trainer's choice (bf16 where native), or float32")
    parser.add_argument("--train-layers", type=int, default=4)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8)
    args = parser.parse_args()

    options = MenuOptions(train_layers=args.train_layers, micro_batch=args.micro_batch)
    trainer = MenuTrainer(args.model, options)
    if args.bottom == "float32":
        trainer.split = SplitModel(trainer.model, args.train_layers)
    if args.pack:
        tasks = load_pack(args.pack)["train"]["next-look"]
    else:
        tasks = load_decision_data(Home.resolve(args.home), args.dataset).train
    items = make_items(trainer.tokenizer, tasks[: args.items], options, 1, np.random.default_rng(0))
    started = time.monotonic()
    cache_states(trainer.split, items, options.cache_batch, options.device)
    frozen = (time.monotonic() - started) / len(items)
    step = float(np.median([trainer.step(items)["seconds"] for _ in range(3)]))
    started = time.monotonic()
    trainer.choose(items[:32], batch=16)
    answering = (time.monotonic() - started) / 32
    print(f"top {args.train_layers} blocks, bottom {trainer.split.bottom_dtype or torch.float32}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}: "
          f"frozen {frozen:.3f} s/item; a step of {len(items)}: {step:.2f} s = {step / len(items):.3f} s/item; "
          f"answering {answering:.3f} s/item; {np.mean([len(i.packed) for i in items]):.0f} tokens per item")


if __name__ == "__main__":
    main()
