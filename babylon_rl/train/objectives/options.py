"""`train`'s options that are no one objective's: every objective's (COMMON) and each family's (FAMILY_OPTIONS).

An objective's own options are in its module. The defaults a recipe changes are not written here: the help shows them
from GENERAL and the recipes (`command.TrainCommand`).
"""

from __future__ import annotations

import click

from babylon_rl.train.objectives.base import Option

COMMON: tuple[Option, ...] = (
    Option(("--dataset",), "dataset", "A dataset (HOME/datasets/NAME); without --on-policy it is scored first if it has no scores.",
           required=True),
    Option(("--objective",), "objective", "What the policy is fitted to: one of the sections below."),
    Option(("--backend",), "backend", "torch: LoRA on CPU/GPU here; art: ART LocalBackend (NVIDIA GPU); serverless: ART on W&B "
           "(WANDB_API_KEY).", click.Choice(["torch", "art", "serverless"]), "torch", True),
    Option(("--base-model",), "base_model", "A local model directory, a name in HOME/models (smollm2-135m is made on first use), "
           "or a hub id.", default="smollm2-135m", show_default=True),
    Option(("--run-name",), "run_name", "Letters, digits, - _ . (default DATASET-BACKEND); the run lives in HOME/runs/RUN."),
    Option(("--learning-rate",), "learning_rate", "About 1e-3 for a tiny model, 5e-6 for full fine-tuning of a larger one.",
           click.FloatRange(min=0, min_open=True)),
    Option(("--max-steps",), "max_steps", "Steps to train.", click.IntRange(min=1), unset="one epoch"),
    Option(("--epochs",), "epochs", "Passes over the training windows or decisions; wins over --max-steps.", click.IntRange(min=1)),
    Option(("--groups-per-step",), "groups_per_step", "GRPO groups per step: windows of logged trajectories, or with --on-policy "
           "decisions (each with --samples answers); decisions per step for the menu objectives.", click.IntRange(min=1)),
    Option(("--checkpoint-every",), "checkpoint_every", "A checkpoint every N steps (and at the last).", click.IntRange(min=1), 50, True),
    Option(("--eval-every",), "eval_every", "Evaluate on the validation split every N steps (never eval.parquet).",
           click.IntRange(min=1), unset="never"),
    Option(("--keep-best/--no-keep-best",), "keep_best", "Keep only the checkpoint best on the validation split (and the latest, "
           "for --resume); with --eval-every every evaluated step is a checkpoint it can choose."),
    Option(("--resume",), "resume", "Continue the run from its latest checkpoint with its saved settings; --max-steps or --epochs "
           "makes it longer.", is_flag=True),
    Option(("--seed",), "seed", "Seed of every draw: the step order, the decisions drawn, the LoRA's start.", int, 0, True),
    Option(("--lora-r",), "lora_r", "LoRA rank; 0 trains the whole model (logged path only).", click.IntRange(min=0), 16, True),
    Option(("--train-layers",), "train_layers", "LoRA on the top N blocks only (the frozen blocks below cost no backward pass and "
           "keep no activations); 0 = all.", click.IntRange(min=0)),
    Option(("--validation-decisions", "--fitness-decisions"), "validation_decisions", "Validation decisions each selection pass "
           "answers (--eval-every, --keep-best, a population's evolutions): drawn once from --seed, the same each time.",
           click.IntRange(min=1), 256, True),
    Option(("--device",), "device", "Where torch runs (decisions and the menu).", click.Choice(["auto", "cpu", "cuda"]), "auto", True),
    Option(("--merge",), "merge", "Also save the base model with the adapter merged in (torch).", is_flag=True),
)

_KL = Option(("--kl-coef",), "kl_coef", "KL penalty to the base model.", click.FloatRange(min=0), 0.0, True)
_CLIP = Option(("--clip-eps",), "clip_eps", "PPO's clip of the probability ratio.", click.FloatRange(min=0, min_open=True), 0.2, True)
_INNER = Option(("--inner-epochs",), "inner_epochs", "Updates per batch (PPO-style; the clipped ratio matters from the second).",
                click.IntRange(min=1), 1, True)
TRAIN_DECISIONS = Option(
    ("--train-decisions",), "train_decisions", "Train on at most N of the train decisions (after distill's filter), drawn once "
    "from --seed, one of every situation (a window and its latest fresh headline) before a second of any. The frozen blocks "
    "cost per distinct decision and a step of --train-layers 1 almost nothing, so many epochs over fewer decisions fit a CPU "
    "budget (docs/TRAINING.md).", click.IntRange(min=1), unset="all")

# the options of every objective of a family, beyond COMMON
FAMILY_OPTIONS: dict[str, tuple[Option, ...]] = {
    "logged": (
        _KL, _CLIP, _INNER,
        Option(("--micro-batch",), "micro_batch", "Padded tokens per forward pass; lower it when train says the step does not fit "
               "in memory.", click.IntRange(min=1), 4096, True),
        Option(("--max-length",), "max_length", "Tokens per chunk of a conversation (longer ones are split; at most the model's "
               "context).", click.IntRange(min=16), 2048, True),
        Option(("--judge",), "judge", "Judge used to score the dataset first when it has no scores.parquet yet (see `score`).",
               click.Choice(["heuristic", "ruler", "art-ruler"]), "heuristic", True),
    ),
    "decisions": (_KL, _CLIP, _INNER, TRAIN_DECISIONS),
    "menu": (
        Option(("--shares",), "shares", "Shares per menu trade.", click.IntRange(min=1), 50, True),
        Option(("--variants",), "variants", "Renamed copies of each train decision (0: the real tickers).", click.IntRange(min=0), 1, True),
        TRAIN_DECISIONS,
        Option(("--init-from",), "init_from", "Start the LoRA from this adapter (a run name: its latest checkpoint; or a checkpoint "
               "directory), e.g. --objective menu-pg or menu-value from a distilled run. Its run must not have read this dataset's "
               "eval windows.", metavar="MODEL"),
        Option(("--population",), "population", "Train N settings side by side over one set of frozen states; every --evolve-every "
               "steps they are scored on the validation split, the best kept as it is, the others replaced by mutated clones of "
               "the winners (docs/TRAINING.md#populations).", click.IntRange(min=1),
               refusal="a population trains a menu objective ({takers}), not {objective}"),
        Option(("--evolve-every",), "evolve_every", "--population: steps between evolutions.", click.IntRange(min=1), 10, True),
        Option(("--replace-bottom",), "replace_bottom", "--population: replace only this bottom share of the members, from the same "
               "top share (PBT); default: a tournament for every place but the elite's.",
               click.FloatRange(min=0, max=1, min_open=True, max_open=True)),
        Option(("--bound",), "bounds", "--population: where mutation may take a hyper-parameter (learning_rate, lora_r, lora_alpha, "
               "batch, ema, reward_temperature, imitation_weight, hold_weight); repeatable.", multiple=True, metavar="NAME=LOW:HIGH"),
    ),
}
FAMILY_TITLES = {
    "logged": "Over a dataset's scored conversations, one GRPO group per window",
    "decisions": "On the train split's replayed decisions, priced by what the market did (grpo.py)",
    "menu": "On each decision's menu (hold, buy or sell each stock), from frozen states (menu_trainer.py)",
}

# options several objectives name as their own
REWARD_TEMPERATURE = Option(("--reward-temperature",), "reward_temperature", "The target's temperature over the menu's "
                            "rewards: smaller puts it on the best-paying answers.", click.FloatRange(min=0, min_open=True), 0.3, True)
HOLD_WEIGHT = Option(("--hold-weight",), "hold_weight", "A hold label's weight in the loss against a trade's 1; 0 learns from the "
                     "trades only (docs/TRAINING.md#distilling-the-best-agents).", click.FloatRange(0, 1),
                     refusal="--hold-weight weighs the hold labels of {takers}, not {objective}", neutral=1.0)
TRADE_COST = Option(("--trade-cost",), "trade_cost", "Taken off every trade's reward in the training target (validation and eval "
                    "price trades as they are): a trade must pay this much on average to rank above hold.", click.FloatRange(min=0),
                    0.0, True, refusal="--trade-cost prices the trades of {takers}, not {objective}", neutral=0.0)
