"""Can the tiny model learn to read the news at all, within the quickstart's compute?

Learning from rewards can only find what the model can represent and learn in the time it
gets. This benchmark separates the two on a built dataset (e.g. the quickstart's):

1. Ceilings: direction accuracy (the eval's own scoring) of the logged agents per persona,
   of simple rules that read the observation, and of the best constant action.
2. Direct supervision: the model is fine-tuned on the answers of the best rule (the news
   rule) for every TRAINING decision, the easiest signal there is; every `--eval-every`
   steps its greedy answers to the held-out decisions are scored. If it cannot learn the
   rule when told the answer, it cannot learn it from the judge's rewards either.

    python bench/bench_learnability.py --home /tmp/brl-qs --dataset quickstart --model tiny --steps 1500
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.constant import best_constant
from babylon_rl.evaluate.decisions import Decision, load_eval_set, load_train_decisions
from babylon_rl.evaluate.policies import LocalPolicy, resolve_model
from babylon_rl.evaluate.scoring import DEFAULT_THRESHOLD_PCT, GroundTruth, read_observation, score_action
from babylon_rl.settings import Home
from babylon_rl.simulate.agents import PERSONAS
from babylon_rl.simulate.market import HEADLINES

NEWS_LINE = re.compile(r"^\s*\[(\d\d):(\d\d)\] ([A-Z]+): (.*)$", re.MULTILINE)
CLOCK = re.compile(r"It is (\d\d):(\d\d) UTC")
PRICE_MOVE = re.compile(r"^\s*([A-Z]+) \$[0-9.,]+ \(([+-][0-9.]+)%", re.MULTILINE)
FRESH_MINUTES = 30


def _template(text: str) -> re.Pattern:
    return re.compile(re.escape(text).replace(r"\{name\}", ".+").replace(r"\{ticker\}", "[A-Z]+") + "$")


SENTIMENT = [(sentiment, _template(t)) for sentiment in ("BULLISH", "BEARISH") for t in HEADLINES[sentiment]]


def persona(decision: Decision) -> str:
    system = str(decision.prompt[0].get("content", "")) if decision.prompt else ""
    return next((name for name, p in PERSONAS.items() if p.description in system), "other")


def trade(kind: str, ticker: str) -> str:
    return json.dumps({"action": kind, "ticker": ticker, "shares": 10})


def news_rule(fallback: str) -> Callable[[Decision], str]:
    """Buy (sell) the ticker of the latest bullish (bearish) headline of the last 30 minutes; else `fallback`."""
    def answer(decision: Decision) -> str:
        text = decision.observation
        clock = CLOCK.search(text)
        now = int(clock.group(1)) * 60 + int(clock.group(2)) if clock else 0
        for hours, minutes, ticker, headline in reversed(NEWS_LINE.findall(text)):
            if (now - int(hours) * 60 - int(minutes)) % 1440 > FRESH_MINUTES:
                break
            for sentiment, pattern in SENTIMENT:
                if pattern.match(headline.strip()):
                    return trade("buy" if sentiment == "BULLISH" else "sell", ticker)
        return fallback
    return answer


def momentum_rule(decision: Decision) -> str:
    moves = [(float(change), ticker) for ticker, change in PRICE_MOVE.findall(decision.observation)]
    return trade("buy", max(moves)[1]) if moves else json.dumps({"action": "hold"})


def accuracy(decisions: list[Decision], answers: list[str], truths: dict[str, GroundTruth]) -> dict[str, float]:
    by_persona: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for decision, answer in zip(decisions, answers):
        outcome = score_action(parse_action(answer), read_observation(decision.observation), truths[decision.window_id])
        for key in ("all", persona(decision)):
            by_persona[key][0] += outcome.correct
            by_persona[key][1] += 1
    return {key: round(right / total, 3) for key, (right, total) in sorted(by_persona.items())}


def supervise(policy: LocalPolicy, train: list[Decision], rule: Callable[[Decision], str], steps: int, batch: int,
              lr: float, report: Callable[[int, float], None], every: int) -> None:
    """Fine-tune on the rule's answers to the training prompts (the warm start's loop), reporting every `every` steps."""
    from babylon_rl.train.data import encode_chunks, fit_context
    from babylon_rl.train.tiny import supervised_fine_tune

    tokenizer, budget = policy._tokenizer, policy.context_budget
    examples = [e for d in train for e in encode_chunks(
        tokenizer, fit_context(tokenizer, list(d.prompt), budget) + [{"role": "assistant", "content": rule(d)}], budget + policy.max_new_tokens)]

    def on_step(step: int, loss: float) -> None:
        if step % every == 0 or step == steps:
            policy._model.eval()
            report(step, loss)

    supervised_fine_tune(policy._model, tokenizer, examples, steps, lr, batch, seed=0, on_step=on_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--model", default="tiny", help="a model in HOME/models or a directory")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--eval-every", type=int, default=250)
    args = parser.parse_args()
    home = Home(args.home)
    path = home.datasets / args.dataset
    eval_set = load_eval_set(path, args.dataset)
    truths = eval_set.truths
    train = load_train_decisions(path, truths)
    constant = best_constant(train, truths, DEFAULT_THRESHOLD_PCT)
    rules = {"logged agents": lambda d: d.logged_answer, f"best constant ({constant.answer})": lambda d: constant.answer,
             "momentum: buy the top riser": momentum_rule, "news rule, else the best constant": news_rule(constant.answer)}
    print(f"{len(train)} training decisions, {len(eval_set.decisions)} held-out decisions in {len(eval_set.windows)} windows")
    for name, rule in rules.items():
        held_out = accuracy(eval_set.decisions, [rule(d) for d in eval_set.decisions], truths)
        print(f"{name}: held-out {held_out} | train {accuracy(train, [rule(d) for d in train], truths)['all']}")

    policy = LocalPolicy(resolve_model(home, args.model), args.model).load()
    started = time.monotonic()

    def report(step: int, loss: float) -> None:
        answers = policy.answer([d.prompt for d in eval_set.decisions], lambda n: None)
        top = max(set(answers), key=answers.count)
        print(f"step {step}: loss {loss:.3f}, held-out accuracy {accuracy(eval_set.decisions, answers, truths)['all']:.3f}, "
              f"most frequent answer {top[:60]!r} {answers.count(top) / len(answers):.0%}, {time.monotonic() - started:.0f}s", flush=True)

    report(0, float("nan"))
    supervise(policy, train, rules["news rule, else the best constant"], args.steps, args.batch, args.learning_rate,
              report, args.eval_every)


if __name__ == "__main__":
    main()
