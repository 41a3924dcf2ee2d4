"""The learning path: the pretrained default policy, observation-only prompts, answer masks for any
chat template, rewards for the policy's own answers, GRPO steps, and held-out data staying held out."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from types import SimpleNamespace
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.prompts import ANSWER_PREFIX, SYSTEM_PROMPT, decision_prompt, observation_text
from babylon_rl.evaluate.scoring import GroundTruth, Stock, read_observation
from babylon_rl.settings import PROJECT_ROOT, Home
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.trajectories import WindowPlay
from babylon_rl.train.decisions import DIRECTION_BONUS, INVALID_REWARD, Task
from babylon_rl.train.grpo import group_advantages

# Qwen2.5-Instruct's stock chat template (no {% generation %} tags), without its tool-call branches.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant') %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _reasoning_step() -> tuple[str, str, str]:
    """(system prompt, action request, answer) of a simulated step whose agent reasoned before it answered."""
    config = SimulationConfig(agents=10, windows=1, steps_per_window=4, seed=3, start=datetime(2025, 1, 1))
    rows = WindowPlay(config, datetime(2025, 1, 1, 5)).run()
    for row in rows.llm_calls:
        if row[7] == "action" and "Your analysis:" in row[10]:
            return row[9], row[10], row[12]
    raise AssertionError("the simulated window has no step with a reasoning call")


def test_the_decision_prompt_holds_the_observation_and_nothing_the_agent_wrote():
    system, request, answer = _reasoning_step()
    analysis = request.split("Your analysis:")[1].split("\n")[0].strip()
    prompt = decision_prompt(request)
    text = json.dumps(prompt.messages)
    assert analysis and analysis not in text  # the behaviour policy's own reasoning is never handed over
    assert system not in text and "risk tolerance" not in text  # no persona
    assert prompt.messages[0]["content"].startswith(SYSTEM_PROMPT.split("{")[0])
    user = prompt.messages[1]["content"]
    assert "News:" in user and "min left" in user and "Cash" in user
    for headline in (line.split("] ", 1)[1] for line in observation_text(request).splitlines() if line.startswith("  [")):
        assert headline in user  # every headline the agent saw is there
    assert len(user) < len(observation_text(request)) * 0.8  # compact


def test_market_short_names_resolve_to_the_market_ids():
    _, request, _ = _reasoning_step()
    prompt = decision_prompt(request)
    assert prompt.markets and all(name.startswith("M") for name in prompt.markets)
    market_id = prompt.markets["M1"]
    assert market_id not in prompt.messages[1]["content"] and "M1:" in prompt.messages[1]["content"]
    action = prompt.resolve(parse_action('{"action": "bet", "market": "M1", "side": "YES", "amount": 5}'))
    assert action.market == market_id
    assert prompt.rename_markets(f'{{"action": "bet", "market": "{market_id}", "side": "NO", "amount": 5}}').count('"M1"') == 1


def _task(answer_prefix_ok: bool = True) -> Task:
    observation = ("It is 00:10 UTC; window 2025-01-01T00:00 closes in 50 min.\nPrices:\n  ACME $100.00 (+0.00% since your last look)\n"
                   "  BOLT $50.00 (+0.00% since your last look)\nNews so far this window:\n  [00:05] ACME: Acme Corp beats earnings expectations\n"
                   "Prediction markets:\n  pm-1 \"Will ACME close the hour above $101.00?\" YES at 40%\n"
                   "Your portfolio: cash $10,000.00; positions: ACME 50 @ $100.00, BOLT 50 @ $50.00; open bets: none; P&L so far $+0.00.\nWhat do you do?")
    truth = GroundTruth("2025-01-01T00:00", {"ACME": Stock(100.0, 103.0), "BOLT": Stock(50.0, 49.0)}, {"pm-1": "YES"})
    return Task("t1", "2025-01-01T00:00", decision_prompt(observation), read_observation(observation), truth, '{"action": "hold"}')


def test_own_answers_are_priced_by_the_window_ground_truth():
    task = _task()
    buy, outcome = task.price('{"action": "buy", "ticker": "ACME", "shares": 10}')
    assert outcome.correct and outcome.pnl == pytest.approx(30.0)  # marked to the window's end price
    assert buy == pytest.approx(0.3 + DIRECTION_BONUS)
    sell, outcome = task.price('{"action": "sell", "ticker": "ACME", "shares": 10}')
    assert not outcome.correct and outcome.pnl == pytest.approx(-30.0) and sell == pytest.approx(-0.3 - DIRECTION_BONUS)
    bet, outcome = task.price('{"action": "bet", "market": "M1", "side": "YES", "amount": 40}')  # the prompt's short name
    assert outcome.valid and outcome.correct and outcome.pnl == pytest.approx(60.0)  # 40 * (1 - 0.4) / 0.4, by the resolution
    hold, outcome = task.price('{"action": "hold"}')
    assert not outcome.correct and outcome.pnl == 0.0 and hold == 0.0  # something moved, yet a hold risks nothing: reward 0
    assert task.price("I would buy something")[0] == INVALID_REWARD
    assert task.price('{"action": "buy", "ticker": "NOPE", "shares": 1}')[0] == INVALID_REWARD
    assert INVALID_REWARD < min(buy, sell, bet, hold)


def test_group_advantages_normalise_within_each_decision():
    rewards = np.array([[1.0, 0.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    advantages = group_advantages(rewards)
    assert advantages[0].tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-4)
    assert advantages[1].tolist() == [0.0] * 4  # no spread, no signal


def _template_masks(tokenizer) -> tuple[list[int], list[int], str]:
    from babylon_rl.train.data import encode_conversation

    messages = [{"role": "system", "content": "You trade."}, {"role": "user", "content": "ACME up 2%. What now?"},
                {"role": "assistant", "content": '{"action": "buy", "ticker": "ACME", "shares": 3}'},
                {"role": "user", "content": "ACME down 1%."}, {"role": "assistant", "content": '{"action": "hold"}'}]
    encoded = encode_conversation(tokenizer, messages, 4096)
    answer_text = tokenizer.decode([t for t, m in zip(encoded.input_ids, encoded.assistant_mask) if m])
    prompt_text = tokenizer.decode([t for t, m in zip(encoded.input_ids, encoded.assistant_mask) if not m])
    return encoded.input_ids, encoded.assistant_mask, answer_text + "\x00" + prompt_text


@pytest.mark.parametrize("template", ["smollm2", "qwen2.5"])
def test_the_answer_mask_needs_no_generation_tags(smollm2, template):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    if template == "qwen2.5":
        tokenizer.chat_template = QWEN25_TEMPLATE
    assert "{% generation %}" not in tokenizer.chat_template
    _, mask, texts = _template_masks(tokenizer)
    answers, prompts = texts.split("\x00")
    assert '{"action": "buy", "ticker": "ACME", "shares": 3}' in answers and '{"action": "hold"}' in answers
    assert "ACME up 2%" in prompts and "You trade." in prompts and "ACME up 2%" not in answers
    assert answers.count("<|im_end|>") == 2  # each answer's end marker is trained: the model learns to stop
    assert 0 < sum(mask) < len(mask)


def test_model_init_converts_the_shipped_weights_once(smollm2):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(smollm2)
    assert config.num_hidden_layers == 30 and config.hidden_size == 576  # SmolLM2-135M, not a stand-in
    assert (smollm2 / "model.safetensors").stat().st_size > 400_000_000
    assert "quantization_config" not in json.loads((smollm2 / "config.json").read_text())
    source = json.loads((smollm2 / "source.json").read_text())  # what an export names as its base: never this path
    assert source["hub_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and source["dtype"] == "bfloat16"
    from babylon_rl.train.pretrained import init_default_model

    again = init_default_model(Home(smollm2.parent.parent))
    assert not again.created and again.path == smollm2


def test_model_init_parses_the_gguf_once_and_leaves_gguf_as_it_found_it():
    """transformers parses the GGUF once each for the tokenizer, config and weights: while converting, the second parse
    is the first one's reader; afterwards gguf is untouched for anything else that reads a GGUF."""
    import gguf

    from babylon_rl.train.pretrained import _gguf_parsed_once, gguf_path

    original = gguf.GGUFReader
    with _gguf_parsed_once():
        assert gguf.GGUFReader(str(gguf_path())) is gguf.GGUFReader(str(gguf_path()))
    assert gguf.GGUFReader is original


def test_a_grpo_step_samples_its_own_answers_and_moves_the_adapter(small_llama):
    import torch

    from babylon_rl.train.grpo import GrpoOptions, GrpoTrainer

    trainer = GrpoTrainer(str(small_llama), GrpoOptions(samples=4, train_layers=1, max_new_tokens=12, learning_rate=1e-2, seed=1))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all(".layers.1." in n for n in before)  # LoRA on the top block only
    tasks = [_task() for _ in range(3)]
    result = trainer.train_step(tasks)
    assert len(result.answers) == 3 * 4 and all(a.startswith(ANSWER_PREFIX) for a in result.answers)
    assert result.groups_used + result.groups_skipped == 3
    if result.groups_used:
        moved = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
        assert moved
    assert result.rewards == {"t1": pytest.approx(result.reward_mean)}


def test_the_counterfactual_objective_prices_every_menu_answer_and_moves_toward_the_best(small_llama):
    """Every answer on the menu is priced; the policy's odds move toward the one that paid (buy ACME: +3 %, BOLT flat)."""
    from dataclasses import replace

    from babylon_rl.train.counterfactual_step import MenuBatch
    from babylon_rl.train.grpo import GrpoOptions, GrpoTrainer

    task = _task()
    task = replace(task, truth=GroundTruth(task.window_id, {"ACME": Stock(100.0, 103.0), "BOLT": Stock(50.0, 50.0)}, {}))
    assert task.menu == ['{"action": "hold"}'] + [f'{{"action": "{kind}", "ticker": "{t}", "shares": 10}}'
                                                   for kind in ("buy", "sell") for t in ("ACME", "BOLT")]
    menu = MenuBatch.price([task], "cpu")
    assert menu.width == 5 and menu.rewards[0].tolist() == pytest.approx([task.price(a)[0] for a in task.menu])
    best, worst = int(menu.rewards[0].argmax()), int(menu.rewards[0].argmin())
    assert (task.menu[best], task.menu[worst]) == (task.menu[1], task.menu[3])  # buy ACME, sell ACME

    trainer = GrpoTrainer(str(small_llama), GrpoOptions(objective="counterfactual", train_layers=1, learning_rate=1e-2, seed=1))
    before = _menu_logprobs(trainer, task)
    first = trainer.train_step([task, task])
    for _ in range(19):
        last = trainer.train_step([task, task])
    after = _menu_logprobs(trainer, task)
    assert first.groups_used == 2 and first.rewards.keys() == {"t1"} and 0.0 < first.valid_rate < last.valid_rate <= 1.0
    assert after[best] - after[worst] > before[best] - before[worst] + 0.5  # a random 2-block model: ~1.1 nats in 20 steps
    gains = [a - b for a, b in zip(after, before)]
    assert max(range(len(gains)), key=gains.__getitem__) == best  # the paid answer gained the most


def _menu_logprobs(trainer, task) -> list[float]:
    """Each menu answer's whole log-probability under the trainer's policy."""
    import torch

    from babylon_rl.policy import answer_logprobs, encode_answers, encode_prompts

    with torch.no_grad():
        answers, mask = encode_answers(trainer.tokenizer, task.menu, "cpu")
        batch = encode_prompts(trainer.tokenizer, [task.request], "cpu")
        return (answer_logprobs(trainer.model, batch, answers, mask, len(task.menu)) * mask).sum(1).tolist()


def test_sampling_with_a_shared_prompt_cache_matches_plain_generation(small_llama):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from babylon_rl.policy import encode_prompts, sample_answers

    model = AutoModelForCausalLM.from_pretrained(small_llama).eval()
    tokenizer = AutoTokenizer.from_pretrained(small_llama)
    requests = [_task().request, decision_prompt("It is 00:30 UTC; window 2025-01-01T00:00 closes in 30 min.\nWhat do you do?")]
    batch = encode_prompts(tokenizer, requests, "cpu")
    tokens, mask = sample_answers(model, tokenizer, batch, 3, 8, 0.0)
    for i, request in enumerate(requests):  # greedy: each of the 3 copies equals generate() on the prompt alone
        text = tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False) + ANSWER_PREFIX
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)[0, ids["input_ids"].shape[1]:]
        for j in range(3):
            row = tokens[i * 3 + j][mask[i * 3 + j].bool()]
            assert torch.equal(row, out[: len(row)])


@pytest.mark.parametrize("objective", [("--on-policy",), ("--objective", "counterfactual"), ("--objective", "menu"), ("--objective", "hindsight")])
def test_training_and_selection_never_read_the_eval_split(home, small_llama, run_cli, objective):
    """End to end on a simulated market: inputs.json lists every id training read; none is in the manifest's eval ids."""
    for args in (("simulate", "--agents", "6", "--windows", "14", "--steps-per-window", "2", "--seed", "4", "--start", "2025-01-01T00:00"),
                 ("build",), ("dataset", "build", "--name", "d", "--lookback-hours", "20", "--min-actions", "2",
                              "--validation-fraction", "0.2", "--eval-fraction", "0.2")):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
    result = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), *objective, "--run-name", "r", "--max-steps", "2",
                     "--groups-per-step", "2", "--samples", "2", "--train-layers", "1", "--eval-every", "1", "--keep-best",
                     "--learning-rate", "1e-3")
    assert result.exit_code == 0, result.output
    manifest = json.loads((home / "datasets" / "d" / "manifest.json").read_text())
    eval_ids = set(manifest["eval_trajectory_ids"])
    assert eval_ids == set(pl.read_parquet(home / "datasets" / "d" / "eval.parquet")["trajectory_id"])
    read = set(json.loads((home / "runs" / "r" / "inputs.json").read_text())["trajectory_ids"])
    train_ids = set(pl.read_parquet(home / "datasets" / "d" / "train.parquet")["trajectory_id"])
    validation_ids = set(pl.read_parquet(home / "datasets" / "d" / "validation.parquet")["trajectory_id"])
    assert read and read <= train_ids | validation_ids and not read & eval_ids
    if "hindsight" in objective:  # the credit read every train decision, whichever it trained on
        assert train_ids <= read and "credit" in json.loads((home / "runs" / "r" / "inputs.json").read_text())
    best = json.loads((home / "runs" / "r" / "best.json").read_text())
    assert "score" in best  # keep-best chose on the validation split's greedy answers
    menu = ("--menu-shares", "50") if "menu" in objective else ()  # the menu policies: one shared base, answers on the menu
    evaluation = run_cli("eval", "--model", "r", "--dataset", "d", "--max-new-tokens", "12", *menu)
    assert evaluation.exit_code == 0, evaluation.output
    saved = json.loads((home / "runs" / "r" / "eval.json").read_text())
    assert saved["checkpoint"] == "r@2"  # what it is of: RUN names its latest checkpoint
    assert json.loads((home / "runs" / "r" / "evals" / "step-2" / "d" / "eval.json").read_text()) == saved  # kept by checkpoint
    if menu:
        assert saved["menu_shares"] == 50 and json.loads(saved["constant"]["answer"]).get("shares", 50) == 50
        for policy in (p for p in saved["policies"] if p["role"] in ("baseline", "model")):
            assert policy["metrics"]["valid_rate"]["value"] == 1.0 and policy["top_answer"].split()[0] in ("hold", "buy", "sell"), policy
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate.decision_points import load_train_decisions

    chosen_on = load_train_decisions(Dataset.open(Home.resolve(home), "d"))
    assert saved["constant"]["train_decisions"] == len(chosen_on.decisions)
    assert {d.trajectory_id for d in chosen_on.decisions} <= train_ids | validation_ids
    assert [p["role"] for p in saved["policies"]] == ["logged", "constant", "reader", "baseline", "model"]


def _news_reader(body: dict) -> str:
    """The rule that reads the compact prompt's fresh headlines (the reference a learner could reach), else holds; by the
    game's rules, as a model deciding from the quickstart's menu would (50 shares, a sell of shares not held is hold)."""
    from babylon_rl.evaluate.menu import HOLD_ANSWER, on_menu
    from babylon_rl.evaluate.prompts import DecisionPrompt
    from babylon_rl.evaluate.rules import news_rule

    prompt = DecisionPrompt(body["messages"], {})
    return on_menu(news_rule(prompt, HOLD_ANSWER, shares=50), prompt, 50)


def test_news_rule_trades_the_latest_fresh_telling_headline() -> None:
    from babylon_rl.evaluate.prompts import DecisionPrompt
    from babylon_rl.evaluate.rules import headline_sentiment, news_rule

    def prompt(news: str) -> DecisionPrompt:
        return DecisionPrompt([{"role": "user", "content": f"12:40, 20 min left\nACME 230 -0.3%\nBOLT 276 +0.1%\nNews:\n{news}\nCash 10,000"}], {})

    hold = '{"action": "hold"}'
    bullish_then_bearish = "12:15 ACME: Acme Corp beats earnings expectations\n12:30 BOLT: Regulators open a probe into Bolt Energy"
    assert json.loads(news_rule(prompt(bullish_then_bearish), hold)) == {"action": "sell", "ticker": "BOLT", "shares": 10}
    assert json.loads(news_rule(prompt("12:15 ACME: Analysts upgrade ACME to strong buy\n12:35 BOLT: Bolt Energy updates its logo"), hold))["action"] == "buy"
    assert news_rule(prompt("12:05 ACME: Acme Corp beats earnings expectations"), hold) == hold  # 35 minutes old: stale
    assert news_rule(prompt("  (none yet)"), hold) == hold
    assert headline_sentiment("Acme Corp names a new board member") == "NEUTRAL"
    assert headline_sentiment("Acme Corp goes to the moon") is None


@pytest.mark.parametrize("news_strength, shown", [(1.0, True), (0.0, False)])
def test_learning_can_only_be_shown_when_the_world_holds_something_to_learn(tmp_path, news_strength, shown):
    """The same news-reading policy, the same headlines: it beats every reference when headlines lead prices, and
    the evaluation says "learning NOT shown" when they do not (--news-strength 0)."""
    from click.testing import CliRunner

    from cli import cli
    from tests.judge_server import JudgeServer

    home = tmp_path / "home"

    def run(*args: str):
        result = CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    run("simulate", "--agents", "8", "--windows", "60", "--steps-per-window", "4", "--seed", "1", "--start", "2025-01-01T00:00",
        "--news-strength", str(news_strength), "--dirt-rate", "0")
    run("build")
    run("dataset", "build", "--name", "d", "--lookback-hours", "61", "--min-actions", "2", "--eval-fraction", "0.3")
    with JudgeServer() as server:
        server.reply = lambda body: '{"action": "hold"}' if body["model"] == "hold-model" else _news_reader(body)
        result = run("eval", "--model", "reader", "--base-url", server.base_url, "--baseline", "hold-model", "--dataset", "d",
                     "--resamples", "500")
    report = json.loads((home / "evals" / "reader-d" / "eval.json").read_text())
    assert report["learning_shown"] is shown, report["comparison"]
    assert ("learning shown" if shown else "learning NOT shown") in result.output


@pytest.mark.parametrize("news_strength, recognised", [(1.0, True), (0.0, False)])
def test_the_quickstarts_eval_design_recognises_a_news_reader(home: Path, run_cli, news_strength, recognised):
    """With the quickstart's own data and eval design, the rule that reads the news beats its base (hold) and the best
    constant beyond the interval on both metrics, and nothing does with --news-strength 0. (With 24 held-out windows
    x 6 decisions it did not: no trained model could have shown learning.)"""
    from babylon_rl.quickstart import START, QuickstartOptions, dataset_params
    from tests.judge_server import JudgeServer

    options = QuickstartOptions(news_strength=news_strength)
    params = dataset_params(options)

    def run(*args: str) -> None:
        result = run_cli(*args)
        assert result.exit_code == 0, result.output

    run("simulate", "--agents", str(options.agents), "--windows", str(options.windows), "--steps-per-window",
        str(options.steps_per_window), "--seed", str(options.seed), "--start", f"{START:%Y-%m-%dT%H:%M}", "--news-strength", str(news_strength))
    run("build")
    run("dataset", "build", "--name", params.name, "--lookback-hours", str(params.lookback_hours), "--target-trajectories",
        str(params.target_trajectories), "--max-group-size",
        str(params.max_group_size), "--min-actions", str(params.min_actions), "--validation-fraction", str(params.validation_fraction),
        "--eval-fraction", str(params.eval_fraction), "--seed", str(params.seed))
    with JudgeServer() as server:
        server.reply = lambda body: '{"action": "hold"}' if body["model"] == "hold-model" else _news_reader(body)
        run("eval", "--model", "reader", "--base-url", server.base_url, "--baseline", "hold-model", "--dataset", params.name,
            "--max-decisions-per-window", str(options.eval_decisions_per_window), "--seed", str(options.seed))
    report = json.loads((home / "evals" / f"reader-{params.name}" / "eval.json").read_text())
    assert report["windows"] >= 100 and report["decisions"] == report["windows"] * options.eval_decisions_per_window
    for reference in ("baseline", "constant"):
        assert report["comparison"][reference]["beats_outside_interval"] is recognised, report["comparison"][reference]
    # every eval now runs the same rule beside the model (falling back on the best constant) and says so
    assert report["design_check"]["beats_outside_interval"] is recognised, report["design_check"]
    # and the rewards of the same train split teach a learner told where to look the news, only where there is news
    # (bench/bench_signal.py; docs/history/BENCHMARKS-learning.md, 2026-11-26 afternoon)
    signal = _bench_signal().signal_table(Home(home), params.name, [400], seeds=3).rows[400]
    gain = signal["relational"][0] - signal["marginal"][0]
    assert gain > 0.15 if recognised else gain < 0.1, signal
    # under the menu objective's own loss, reading the headline gains over the marginal only where there is news
    objective = _bench_signal().objective_signal(Home(home), params.name, shares=50, renamed=True)
    assert objective["gain_per_decision"] > 0.03 if recognised else objective["gain_per_decision"] == 0.0, objective
    if not recognised:  # nothing to read: no part of the gain at either first choice either
        assert objective["direction_first"] == objective["ticker_first"] == 0.0, objective


def _bench_signal():
    spec = importlib.util.spec_from_file_location("bench_signal", PROJECT_ROOT / "bench" / "bench_signal.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_signal"] = module  # its dataclass resolves its module by name
    spec.loader.exec_module(module)
    return module


def test_train_with_the_default_model_runs_model_init_first(run_cli, home: Path, monkeypatch) -> None:
    """The README's order works without `model init`: `train` converts the default model itself first."""
    from babylon_rl.errors import ConfigError
    from babylon_rl.train import loop

    found = []

    def stop_before_the_run(*args):
        found.append((home / "models" / "smollm2-135m" / "config.json").exists())
        raise ConfigError("stopped before the run")

    monkeypatch.setattr(loop, "_load_data", lambda home_, config: SimpleNamespace(train=[]))  # no dataset needed to get this far
    monkeypatch.setattr(loop, "Schedule", stop_before_the_run)  # the first thing after the model is resolved
    result = run_cli("train", "--dataset", "d", "--on-policy", "--run-name", "r")
    assert found == [True], result.output
    assert "converting the default policy" in result.output
    assert result.exit_code == 2 and "stopped before the run" in result.output


# -- the frozen part computed once (train/frozen.py, train/state_cache.py) -----------------------------------------------
def _menu_task(news: str, at: str = "12:13") -> Task:
    observation = ("It is 12:23 UTC; window 2025-01-01T12:00 closes in 37 min.\nPrices:\n  ACME $223.79 (+0.13% since your last look)\n"
                   "  BOLT $51.20 (-0.40% since your last look)\n  CRUX $12.05 (+1.20% since your last look)\nNews so far this window:\n"
                   f"  [{at}] {news}\nYour portfolio: cash $20,000.00; positions: ACME 50 @ $220.00, BOLT 50 @ $51.00, CRUX 50 @ $12.00; open bets: none; P&L so far $+0.00.")
    truth = GroundTruth("2025-01-01T12:00", {"ACME": Stock(220.0, 230.0), "BOLT": Stock(52.0, 50.0), "CRUX": Stock(12.0, 12.1)}, {})
    return Task("t1", "2025-01-01T12:00", decision_prompt(observation), read_observation(observation), truth, '{"action": "hold"}')


def _reference_menu_logprobs(model, tokenizer, item):
    """The menu-constrained policy's log-probabilities from whole-model passes, one per answer, no packing, no cache."""
    import torch

    packed = item.packed
    prompt_ids = list(packed.ids[: packed.prompt_len])
    bodies = [a[len(ANSWER_PREFIX):] for a in item.shown]
    sequences = [tuple(s) for s in tokenizer(bodies, add_special_tokens=False)["input_ids"]]
    rows = []
    for sequence in sequences:
        logits = model(input_ids=torch.tensor([prompt_ids + list(sequence)])).logits[0]
        total = torch.zeros(())
        for depth in range(len(sequence)):
            options = sorted({s[depth] for s in sequences if len(s) > depth and s[:depth] == sequence[:depth]})
            if len(options) > 1:
                total = total + torch.log_softmax(logits[len(prompt_ids) - 1 + depth, options], 0)[options.index(sequence[depth])]
        rows.append(total)
    return torch.stack(rows)[None]


def test_a_bf16_bottom_runs_on_a_copy_and_gives_the_float32_states_within_bf16_precision(small_llama: Path):
    import torch

    from babylon_rl.train.menu_items import menu
    from babylon_rl.train.frozen import SplitModel, layout, pack
    from babylon_rl.train.models import load_causal_lm

    model, tokenizer = load_causal_lm(str(small_llama), "cpu")
    task = _menu_task("ACME: Acme Corp beats earnings expectations")
    ids, positions, mask = layout([pack(tokenizer, task.request, menu(task, 50))], "cpu")
    exact = SplitModel(model, 1).bottom(ids, positions, mask)
    fast = SplitModel(model, 1, torch.bfloat16).bottom(ids, positions, mask)
    assert fast.dtype == torch.bfloat16 and exact.dtype == torch.float32
    assert float((fast.float() - exact).norm() / exact.norm()) < 2e-2
    assert {p.dtype for p in model.parameters()} == {torch.float32}, "the model a merged checkpoint is saved from is untouched"


def test_a_batchs_shared_opening_runs_once_and_gives_the_same_frozen_states(small_llama: Path):
    """Packs of one batch that open alike (the system prompt) run that opening once, for one row, the rest of every row
    attending to its keys and values: the same frozen states as the whole batch run row by row, padding included."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.frozen import SplitModel, layout, shared_prefix
    from babylon_rl.train.models import load_causal_lm

    model, tokenizer = load_causal_lm(str(small_llama), "cpu")
    tasks = [_menu_task(news) for news in ("ACME: Acme Corp beats earnings expectations", "BOLT: Bolt recalls its trucks after a "
                                           "long investigation into brakes", "CRUX: Crux wins")]
    packs = [i.packed for i in make_items(tokenizer, tasks, MenuOptions(variants=0), 0, np.random.default_rng(0))]
    assert len({len(p) for p in packs}) > 1, "packs of different lengths: padding is part of what is compared"
    shared = shared_prefix(packs)
    assert 30 < shared < min(p.prompt_len for p in packs)
    assert shared_prefix([packs[0], packs[0]]) == packs[0].prompt_len - 1
    ids, positions, mask = layout(packs, "cpu")
    split = SplitModel(model, 1)
    once, each = split.bottom(ids, positions, mask, shared), split.bottom(ids, positions, mask)
    for row, p in enumerate(packs):
        assert torch.allclose(once[row, : len(p)], each[row, : len(p)], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("store_bf16", [False, True])
def test_the_cached_top_blocks_give_the_whole_models_loss_and_gradients(smollm2: Path, store_bf16: bool):
    """The frozen blocks' output computed once (as the trainer does: kept in bf16, computed in bf16 where that is native;
    or computed and kept in float32) and the top blocks run from it give the loss and LoRA gradients of whole-model passes
    over each prompt + answer: the cache changes the cost, not the objective. The model's own weights stay float32."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.state_cache import cache_states
    from babylon_rl.train.frozen import SplitModel, layout

    options = MenuOptions(train_layers=2, seed=3)
    trainer = MenuTrainer(str(smollm2), options)
    with torch.no_grad():  # a non-zero adapter, so that the top blocks' LoRA is part of what is compared
        for p in trainer.params:
            p.add_(0.02 * torch.randn_like(p))
    items = make_items(trainer.tokenizer, [_menu_task("ACME: Acme Corp beats earnings expectations")], options, 1, np.random.default_rng(1))
    item = items[0]
    assert len(item.packed) < item.packed.prompt_len + 20, "the answers' shared format tokens are packed once"
    cache_states(trainer.split, items, 1, "cpu")
    if not store_bf16:
        ids, positions, mask = layout([item.packed], "cpu")
        item.states = SplitModel(trainer.model, options.train_layers).bottom(ids, positions, mask)[0]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    target = torch.softmax(torch.tensor(item.rewards) / 0.3, 0)[None]

    def loss_and_grads(logp):
        trainer.optimizer.zero_grad(set_to_none=True)
        loss = -(target * logp).sum()
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in trainer.params])

    cached_loss, cached_grads = loss_and_grads(trainer._logprobs(items)[0])
    whole_loss, whole_grads = loss_and_grads(_reference_menu_logprobs(trainer.model, trainer.tokenizer, item))
    tolerance = 3e-2 if store_bf16 else 1e-4
    assert cached_loss == pytest.approx(whole_loss, rel=tolerance, abs=tolerance)
    assert float((cached_grads - whole_grads).norm() / whole_grads.norm()) < tolerance * 3


@pytest.mark.parametrize("train_layers", [1, 2])
def test_the_last_block_run_at_the_choices_only_prices_the_menu_as_the_whole_top_does(small_llama: Path, train_layers: int):
    """Nothing follows the last block, so it runs only at each pack's last prompt token and answer tree (its keys and
    values from every position): a batch of packs of different lengths (right-padded) gets the menu log-probabilities
    and LoRA gradients of the top blocks run over every position."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.state_cache import cache_states
    from babylon_rl.train.frozen import answer_logprobs, layout

    options = MenuOptions(train_layers=train_layers, seed=3)
    trainer = MenuTrainer(str(small_llama), options)
    with torch.no_grad():
        for p in trainer.params:
            p.add_(0.05 * torch.randn_like(p))
    tasks = [_menu_task(news) for news in ("ACME: Acme Corp beats earnings expectations", "BOLT: Bolt recalls its trucks after a long "
                                           "investigation into brakes", "CRUX: Crux wins")]
    items = make_items(trainer.tokenizer, tasks, options, 1, np.random.default_rng(1))
    assert len({len(i.packed) for i in items}) > 1, "packs of different lengths: padding is part of what is compared"
    cache_states(trainer.split, items, 8, "cpu")
    packs = [i.packed for i in items]
    ids, positions, mask = layout(packs, "cpu")
    states = torch.nn.utils.rnn.pad_sequence([i.states.float() for i in items], batch_first=True)

    def logp_and_grads(at_choices: bool):
        trainer.optimizer.zero_grad(set_to_none=True)
        top = trainer.split.top_at_choices if at_choices else lambda *a: trainer.split.top(*a[:3])
        logp = answer_logprobs(trainer.split, top(states, positions, mask, packs), packs, at_choices=at_choices)
        logp.masked_fill(~torch.isfinite(logp), 0.0).sum().backward()
        return logp.detach(), torch.cat([p.grad.flatten() for p in trainer.params])

    whole, whole_grads = logp_and_grads(False)
    fast, fast_grads = logp_and_grads(True)
    assert torch.equal(torch.isfinite(whole), torch.isfinite(fast))
    assert torch.allclose(fast[torch.isfinite(fast)], whole[torch.isfinite(whole)], atol=1e-5)
    assert float((fast_grads - whole_grads).norm() / whole_grads.norm()) < 1e-4


def test_renamed_tickers_move_prompt_menu_and_headline_together_and_keep_each_answers_reward():
    from babylon_rl.train.menu_items import menu, renamed, shown_answer

    task = _menu_task("ACME: Acme Corp beats earnings expectations")
    mapping = {"ACME": "CRUX", "BOLT": "ACME", "CRUX": "BOLT"}

    shown = renamed(task.request, mapping, {"ACME": ["Acme Corp"], "CRUX": ["Crux Biotech"]}).messages[-1]["content"]
    assert "CRUX: Crux Biotech beats earnings expectations" in shown and "CRUX 223 +0.1%" in shown and "ACME 51 -0.4%" in shown
    # the price lines in the new names' order, so the first line is not always the same stock's
    assert [line.split()[0] for line in shown.splitlines()[1:4]] == ["ACME", "BOLT", "CRUX"]
    answers = menu(task, 50)
    assert json.loads(shown_answer(answers[1], mapping, "action-first"))["ticker"] == mapping[json.loads(answers[1])["ticker"]]
    assert all(json.loads(a).get("shares", 50) == 50 for a in answers)


def test_a_renaming_swaps_the_company_names_the_headlines_spell_not_the_simulators():
    """The game's companies are not the simulator's: their names are learned from the headlines (credit.company_names),
    so a renamed prompt never keeps the real stock's name beside its new ticker."""
    from babylon_rl.train.menu_items import renamed
    from babylon_rl.train.credit import company_names

    tasks = [_menu_task(news) for news in ("ACME: Zephyr Mills beats earnings expectations", "ACME: Zephyr Mills cuts jobs",
                                           "CRUX: Quill Labs wins approval", "CRUX: Quill Labs misses", "BOLT: Harbor Rail expands",
                                           "BOLT: Harbor Rail recalls trains")]
    names = company_names(tasks)
    assert names == {"ACME": ["Zephyr Mills"], "CRUX": ["Quill Labs"], "BOLT": ["Harbor Rail"]}
    shown = renamed(tasks[0].request, {"ACME": "BOLT", "BOLT": "CRUX", "CRUX": "ACME"}, names).messages[-1]["content"]
    assert "BOLT: Harbor Rail beats earnings expectations" in shown and "Zephyr" not in shown


def test_ticker_first_answers_choose_hold_or_trade_then_the_stock_then_the_direction(smollm2: Path):
    """With the stock written first, the menu's token tree asks hold-or-trade, then which stock, then which direction
    (given the stock); the game's direction-first form asks the direction first. Either way the policy's menu is the same
    set of actions, each with its own reward."""
    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.models import load_tokenizer

    tokenizer = load_tokenizer(str(smollm2))
    task = _menu_task("ACME: Acme Corp beats earnings expectations")
    rng = np.random.default_rng(0)
    game, first = (make_items(tokenizer, [task], MenuOptions(answer_order=order), 0, rng)[0] for order in ("action-first", "ticker-first"))
    assert [parse_action(a) for a in first.shown] == [parse_action(a) for a in game.shown]
    assert json.loads(first.shown[1]) == {"ticker": "ACME", "action": "buy", "shares": 50}
    assert list(first.rewards) == list(game.rewards)

    def choices(item, answer: int) -> list[str]:  # the tokens an answer picks at each of its choices
        return [tokenizer.decode([item.packed.choices[c].tokens[k]]).strip() for c, k in item.packed.paths[answer]]

    assert choices(game, 0) == ["hold"] and choices(game, 1) == ["buy", "AC"]
    assert choices(first, 0) == ["action"] and choices(first, 1) == ["ticker", "AC", "buy"]
    assert choices(first, 4) == ["ticker", "AC", "sell"] and choices(first, 2)[:2] == ["ticker", "B"]


def test_the_menu_trainer_moves_toward_the_paid_answer_and_resumes_where_it_stopped(small_llama, tmp_path):
    """Steps from cached states raise the odds of the answer that paid (buy ACME: +4.5 %); a checkpoint restores the raw
    weights, their average (what answers) and the optimizer, so a resumed run takes the very step an unbroken one takes."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    task = _menu_task("ACME: Acme Corp beats earnings expectations")
    options = MenuOptions(train_layers=1, learning_rate=1e-2, variants=0, seed=1)
    trainer = MenuTrainer(str(small_llama), options)
    items = trainer.items_for([task], 0)
    best = int(np.argmax(items[0].rewards))
    assert json.loads(items[0].answers[best]) == {"action": "buy", "ticker": "ACME", "shares": 50}
    with torch.no_grad():
        before = trainer._logprobs(items)[0][0, best].item()
    for _ in range(10):
        trainer.train_step([task])
    with torch.no_grad():
        after = trainer._logprobs(items)[0][0, best].item()
    assert after > before + 0.5
    assert trainer.evaluate([task])["decisions"] == 1

    kept = trainer.state()
    trainer.train_step([task])
    assert not all(torch.equal(a, b) for a, b in zip(kept["averaged"], trainer.averaged))  # a snapshot, not the live average
    trainer.restore(kept)

    trainer.save(tmp_path / "ckpt", {"step": 10})
    resumed = MenuTrainer(str(small_llama), options)
    resumed.load(tmp_path / "ckpt")
    assert resumed.steps == 10
    assert all(torch.equal(a, b) for a, b in zip(resumed.params, trainer.params))
    assert all(torch.equal(a, b) for a, b in zip(resumed.averaged, trainer.averaged))
    trainer.train_step([task])
    resumed.train_step([task])
    assert all(torch.allclose(a, b) for a, b in zip(resumed.params, trainer.params))


def test_the_expected_reward_objective_holds_where_no_trade_pays_on_average(small_llama):
    """One prompt in 16 windows: ACME and BOLT each move +2 %, -2 %, +0.3 % or -0.3 % (under the 0.5 % threshold both ways
    of trading are wrong), so every trade loses 0.25 a decision on average and holding (0) pays best. The expected-reward
    objective learns to hold; the softmax target, whose mass goes to whichever trade paid in hindsight, learns to trade."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_losses import HOLD_INDEX
    from babylon_rl.train.menu_trainer import MenuTrainer

    template = _menu_task("ACME: Acme Corp names a new chief financial officer")
    moves = (0.02, -0.02, 0.003, -0.003)
    tasks = [replace(template, truth=GroundTruth(template.window_id, {"ACME": Stock(220.0, 223.79 * (1 + acme)),
                                                                     "BOLT": Stock(52.0, 51.20 * (1 + bolt)),
                                                                     "CRUX": Stock(12.0, 12.05)}, {}))
             for acme in moves for bolt in moves]

    def hold_logprobs(objective: str) -> tuple[float, float]:
        """The hold's log-probability before and after 10 steps (one prompt: the same in every window)."""
        trainer = MenuTrainer(str(small_llama), MenuOptions(objective=objective, train_layers=1, learning_rate=1e-2,
                                                            variants=0, seed=1, ema=0.0))
        items = trainer.items_for(tasks, 0)
        trades = [i for i in range(len(items[0].answers)) if i != HOLD_INDEX]
        mean_trade_rewards = np.mean([item.rewards[trades] for item in items], axis=0)
        assert mean_trade_rewards.max() == pytest.approx(-0.25, abs=0.01)  # ACME's and BOLT's; flat CRUX's -0.5
        with torch.no_grad():
            before = trainer._logprobs(items[:1])[0][0, HOLD_INDEX].item()
        for _ in range(10):
            trainer.train_step(tasks)
        with torch.no_grad():
            return before, trainer._logprobs(items[:1])[0][0, HOLD_INDEX].item()

    before, after = hold_logprobs("expected")
    assert after > before + 0.3
    before, after = hold_logprobs("counterfactual")
    assert after < before - 0.15


def test_least_squares_on_the_margins_credits_a_paying_answer_the_policy_never_gives(small_llama):
    """A policy that gives selling ACME 1e-4 (the student that buys after bullish headlines and never sells after bearish
    ones): the expected-reward gradient on that answer's logit scales with its probability and is ~0; least squares on
    the margins over hold moves it by its error, whatever the policy gives it, and stops where the margins are the
    rewards / T, less --trade-cost for a trade."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    task = _menu_task("ACME: Acme Corp misses earnings expectations")
    task = replace(task, truth=GroundTruth(task.window_id, {"ACME": Stock(220.0, 210.0), "BOLT": Stock(52.0, 52.5),
                                                            "CRUX": Stock(12.0, 12.05)}, {}))

    def logit_gradient(objective: str, margins: torch.Tensor | None = None, trade_cost: float = 0.0) -> tuple[np.ndarray, np.ndarray, int]:
        """The loss's gradient on each answer's logit, the policy nearly always holding (or at `margins` over hold)."""
        options = MenuOptions(objective=objective, train_layers=1, variants=0, seed=1, trade_cost=trade_cost)
        trainer = MenuTrainer(str(small_llama), options)
        items = trainer.items_for([task], 0)
        sell = items[0].answers.index('{"action": "sell", "ticker": "ACME", "shares": 50}')
        if margins is None:
            margins = torch.full((1, len(items[0].answers)), np.log(1e-4))
            margins[0, 0] = 0.0
        logits = margins.clone().requires_grad_()
        trainer._logprobs = lambda items: (torch.log_softmax(logits, 1), torch.ones_like(logits, dtype=torch.bool))
        trainer._loss(items)[0].backward()
        return logits.grad[0].numpy(), items[0].rewards, sell

    gradient, rewards, sell = logit_gradient("expected")
    assert rewards[sell] > 1.0 and rewards[sell] == rewards.max()
    assert abs(gradient[sell]) < 1e-3 * rewards[sell]
    gradient, _, _ = logit_gradient("value")
    assert -gradient[sell] > 1.0  # the margin, log 1e-4, is far below the reward / T: pushed up hard
    fitted = torch.tensor(rewards / MenuOptions().reward_temperature, dtype=torch.float32)[None]
    gradient, _, _ = logit_gradient("value", fitted)
    assert np.allclose(gradient, 0.0, atol=1e-5)
    gradient, _, _ = logit_gradient("value", fitted, trade_cost=0.3)  # each trade's margin 1 nat (0.3 / T) too high
    assert np.allclose(gradient[1:], gradient[1], atol=1e-5) and gradient[1] > 0.1
    costed = fitted - torch.tensor([0.0] + [0.3 / MenuOptions().reward_temperature] * (len(rewards) - 1))
    assert np.allclose(logit_gradient("value", costed, trade_cost=0.3)[0], 0.0, atol=1e-5)


def test_the_anchor_fits_each_margin_between_the_reward_and_where_the_student_started(small_llama):
    """--anchor A: the margins' fixed point is (reward / T + A x the starting margin) / (1 + A); the starting margins are
    the weights training started from (a step moves the policy, not its anchor), and the anchor's pass leaves the
    training pass's backward intact."""
    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.menu_losses import margins

    task = _menu_task("ACME: Acme Corp misses earnings expectations")
    trainer = MenuTrainer(str(small_llama), MenuOptions(objective="value", anchor=0.25, train_layers=1, variants=0, seed=1,
                                                        learning_rate=5e-2))
    items = trainer.items_for([task], 0)
    started = trainer._start_margins(items).clone()
    with torch.no_grad():
        assert torch.allclose(margins(trainer._logprobs(items)[0]), started, atol=1e-5)
    for _ in range(3):
        trainer.step(items)  # would raise if the anchor's weight swap broke the graph
    with torch.no_grad():
        moved = margins(trainer._logprobs(items)[0])
    assert (moved - started).abs().max() > 0.1
    assert torch.allclose(trainer._start_margins(items), started, atol=1e-5)

    rewards = torch.tensor(items[0].rewards, dtype=torch.float32)[None]
    fixed_point = (rewards / 0.3 + 0.25 * started) / 1.25
    logits = fixed_point.clone().requires_grad_()
    trainer._logprobs = lambda items: (torch.log_softmax(logits, 1), torch.ones_like(logits, dtype=torch.bool))
    trainer._start_margins = lambda items: started
    trainer._loss(items)[0].backward()
    assert np.allclose(logits.grad.numpy(), 0.0, atol=1e-5)
    logits.grad = None
    with torch.no_grad():
        logits.copy_(rewards / 0.3)  # fitted to the rewards alone: pulled back toward the start
    trainer._loss(items)[0].backward()
    assert (torch.sign(logits.grad[0, 1:]) == torch.sign(rewards[0, 1:] / 0.3 - started[0, 1:])).all()


def test_the_imitation_baseline_and_the_menu_run_of_one_process_compute_the_frozen_states_once(small_llama):
    """The quickstart trains its imitation baseline, then the menu objective, on the same decisions and seed: the second
    trainer takes the first's frozen states (the same tensors), and a trainer on other blocks computes its own. The
    baseline moves toward the logged answer's menu entry."""
    import torch

    from babylon_rl.train import state_cache
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    task = _menu_task("ACME: Acme Corp beats earnings expectations")  # the logged answer: hold
    computed = []
    original = state_cache.cache_states
    state_cache.cache_states = lambda split, items, *a, **k: (items and computed.append(sum(i.states is None for i in items)),
                                                         original(split, items, *a, **k))
    try:
        imitation = MenuTrainer(str(small_llama), MenuOptions(objective="imitate", train_layers=1, learning_rate=1e-2, variants=2, seed=5))
        before = imitation._logprobs(imitation.items_for([task], 2))[0][:, 0].detach()
        for _ in range(5):
            imitation.train_step([task])
        with torch.no_grad():
            after = imitation._logprobs(imitation.items_for([task], 2))[0][:, 0]
        menu = MenuTrainer(str(small_llama), MenuOptions(train_layers=1, variants=2, seed=5))
        reused = menu.items_for([task], 2)
        other_blocks = MenuTrainer(str(small_llama), MenuOptions(train_layers=2, variants=2, seed=5)).items_for([task], 2)
    finally:
        state_cache.cache_states = original
    assert bool((after > before + 0.3).all()), "imitation raises the logged answer's (hold's) odds under each naming"
    assert computed == [2, 0, 2], "the menu run computed none; the trainer on two blocks computed its own"
    assert all(a.states is b.states for a, b in zip(imitation.items_for([task], 2), reused))
    assert all(a.states.shape == b.states.shape for a, b in zip(reused, other_blocks))


def test_frozen_states_kept_on_disk_serve_the_next_process_and_a_broken_file_is_computed_again(small_llama, tmp_path, monkeypatch):
    """A second run on the same base, blocks and decisions (another process: nothing shared in memory) reads the first
    run's frozen states from disk instead of computing them, and prices its menu exactly as the first did; a
    truncated file (a kill mid-write elsewhere) is computed again; other blocks make other keys; the budget evicts."""
    import torch

    from babylon_rl.train import state_cache
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    tasks = [_menu_task(headline) for headline in ("ACME: Acme Corp beats earnings expectations", "BOLT: Bolt recalls its trucks")]
    computed = []
    original = state_cache.cache_states
    monkeypatch.setattr(state_cache, "cache_states", lambda split, items, *a, **k: (computed.append(sum(i.states is None for i in items)),
                                                                               original(split, items, *a, **k)))
    directory = tmp_path / "frozen-states"

    def trainer(layers: int = 1) -> MenuTrainer:
        monkeypatch.setattr(state_cache, "SHARED_STATES", state_cache.SharedStates())  # a new process keeps nothing in memory
        return MenuTrainer(str(small_llama), MenuOptions(train_layers=layers, variants=2, seed=5), states_dir=directory)

    first = trainer()
    with torch.no_grad():
        priced = first._logprobs(first.items_for(tasks, 2))[0]
    assert computed == [4] and len(list(directory.glob("*.pt"))) == 4
    second = trainer()
    with torch.no_grad():
        assert torch.equal(second._logprobs(second.items_for(tasks, 2))[0], priced)
    assert computed == [4, 0], "the second process computed nothing"
    broken = sorted(directory.glob("*.pt"))[0]
    broken.write_bytes(broken.read_bytes()[:100])
    trainer().items_for(tasks, 2)
    assert computed == [4, 0, 1], "only the broken file's states were computed again"
    trainer(layers=2).items_for(tasks, 2)
    assert computed == [4, 0, 1, 4] and len(list(directory.glob("*.pt"))) == 8
    state_cache.StatesOnDisk(directory, "cpu", budget=1).keep((), [])
    assert list(directory.glob("*.pt")) == [], "beyond its budget the least recently used go"


def test_the_menu_memory_plan_keeps_variants_of_train_decisions_and_one_state_per_validation_decision(small_llama):
    """Validation is never renamed: its decisions hold one item's states each, train ones `variants` each."""
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    tasks = [_menu_task(headline) for headline in ("ACME: Acme Corp beats earnings expectations",
                                                   "BOLT: Bolt Motors recalls its trucks", "CRUX: Crux wins a contract")]
    train, validation = tasks[:1], tasks[1:]
    trainer = MenuTrainer(str(small_llama), MenuOptions(train_layers=1, variants=3))
    as_one_naming = MenuTrainer(str(small_llama), MenuOptions(train_layers=1, variants=1)).memory_plan(tasks)
    assert trainer.memory_plan(train, validation).cached * 3 == pytest.approx(as_one_naming.cached * (3 * 1 + 2), abs=10)


def test_next_look_prices_a_decision_at_the_same_agents_next_decision_and_the_last_at_the_windows_end():
    from dataclasses import replace

    from babylon_rl.train.menu_items import next_look

    first = _menu_task("ACME: Acme Corp beats earnings expectations")  # ACME at 223.79 now; the window ends at 230
    second = replace(first, observation=read_observation("Prices:\n  ACME $226.00 (+1.0% since your last look)\n  BOLT $51.00 (+0.0% since your last look)"))
    other = replace(first, trajectory_id="t2")
    priced = next_look([first, second, other])
    assert priced[0].truth.stocks["ACME"].end == 226.0 and priced[0].truth.stocks["BOLT"].end == 51.0
    assert priced[0].truth.stocks["CRUX"].end == first.truth.stocks["CRUX"].end  # not in the next look: the window's end
    assert priced[1].truth == first.truth and priced[2].truth == first.truth  # a trajectory's last decision: the window's end
    assert priced[0].price('{"action": "buy", "ticker": "ACME", "shares": 10}')[1].pnl == pytest.approx(10 * (226.0 - 223.79))


def test_distill_trains_on_the_teachers_answers_only_and_the_eval_shows_them(home, small_llama, run_cli):
    """train --objective distill: the teachers the data chose (train windows, checked on validation) are recorded with
    their figures, training reads only their train decisions (and nothing of eval), and the eval adds them as a reference
    line and claims on P&L and trade precision."""
    for args in (("simulate", "--agents", "10", "--windows", "120", "--steps-per-window", "3", "--seed", "0", "--start", "2025-01-01T00:00",
                  "--dirt-rate", "0"),
                 ("build",), ("dataset", "build", "--name", "d", "--lookback-hours", "121", "--min-actions", "3", "--max-group-size", "10",
                              "--target-trajectories", "100000", "--validation-fraction", "0.2", "--eval-fraction", "0.2")):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
    result = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), "--run-name", "r", "--objective", "distill",
                     "--teacher-answers", "all", "--max-steps", "2", "--groups-per-step", "4", "--train-layers", "1", "--eval-every", "1", "--keep-best",
                     "--validation-decisions", "3")
    assert result.exit_code == 0, result.output
    assert json.loads((home / "runs" / "r" / "run.json").read_text())["objective"] == "distill"
    assert json.loads((home / "runs" / "r" / "checkpoints" / "step-2" / "state.json").read_text())["eval"]["decisions"] == 3
    inputs = json.loads((home / "runs" / "r" / "inputs.json").read_text())
    teachers = [t["agent_id"] for t in inputs["teachers"]["teachers"]]
    assert teachers and f"teachers ({len(teachers)} of 10 agents" in result.output
    assert all(t["train"]["vs_peers"]["low"] > 0 and t["validation"]["vs_peers"]["value"] > 0 for t in inputs["teachers"]["teachers"])
    manifest = json.loads((home / "datasets" / "d" / "manifest.json").read_text())
    assert not set(inputs["trajectory_ids"]) & set(manifest["eval_trajectory_ids"])
    assert len((home / "runs" / "r" / "metrics.csv").read_text().splitlines()) == 3  # a header and two steps
    evaluation = run_cli("eval", "--model", "r", "--dataset", "d", "--menu-shares", "50")
    assert evaluation.exit_code == 0, evaluation.output
    saved = json.loads((home / "runs" / "r" / "eval.json").read_text())
    assert saved["teachers"] == teachers and saved["policies"][-1]["role"] == "teachers"
    eval_agents = pl.read_parquet(home / "datasets" / "d" / "eval.parquet", columns=["agent_id", "actions"])
    teacher_actions = eval_agents.filter(pl.col("agent_id").is_in(teachers))["actions"].sum()
    assert saved["policies"][-1]["decisions"] == teacher_actions  # every held-out decision of theirs, not the sampled ones
    for diff in saved["comparison"].values():
        assert {"pnl_per_decision_diff", "trade_precision_diff", "precision_estimable"} <= set(diff)
    assert "teachers" in saved["comparison"]  # their own held-out play, window by window: compared, never claimed on
    assert "the best agents' own held-out play, window by window (not required)" in evaluation.output
    assert "best agents" in evaluation.output and "trade precision" in evaluation.output

    news = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), "--run-name", "n", "--objective", "distill",
                   "--max-steps", "1", "--groups-per-step", "4", "--train-layers", "1")
    assert news.exit_code == 0, news.output
    news_inputs = json.loads((home / "runs" / "n" / "inputs.json").read_text())
    assert json.loads((home / "runs" / "n" / "run.json").read_text())["teacher_answers"] == "news"
    assert news_inputs["teacher_answers"] == "news" and 0 < news_inputs["taught_decisions"] < inputs["taught_decisions"]
    assert news_inputs["trajectory_ids"] == inputs["trajectory_ids"]  # it read what the run on all their answers read

    few = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), "--run-name", "few", "--objective", "distill", "--train-decisions", "5",
                  "--max-steps", "3", "--groups-per-step", "4", "--train-layers", "1")
    assert few.exit_code == 0, few.output
    assert json.loads((home / "runs" / "few" / "inputs.json").read_text())["taught_decisions"] == 5  # three steps over five decisions
    refused = run_cli("train", "--dataset", "d", "--objective", "grpo", "--train-decisions", "5")
    assert refused.exit_code == 2 and "--train-decisions" in refused.output


def test_a_menu_run_starts_from_a_distilled_adapter_that_never_read_its_eval_windows(home, small_llama, run_cli):
    """--init-from: the improvement starts from the distilled adapter's weights, counts what its run read as read, and is
    refused in one line for another objective, another shape, or a parent that read this dataset's eval windows."""
    import torch
    from safetensors.torch import load_file

    for args in (("simulate", "--agents", "10", "--windows", "120", "--steps-per-window", "3", "--seed", "0", "--start", "2025-01-01T00:00",
                  "--dirt-rate", "0"),
                 ("build",), ("dataset", "build", "--name", "d", "--lookback-hours", "121", "--min-actions", "3", "--max-group-size", "10",
                              "--target-trajectories", "100000", "--validation-fraction", "0.2", "--eval-fraction", "0.2")):
        assert run_cli(*args).exit_code == 0
    common = ("--dataset", "d", "--base-model", str(small_llama), "--train-layers", "1", "--groups-per-step", "4")
    assert run_cli("train", *common, "--objective", "distill", "--run-name", "taught", "--max-steps", "2",
                   "--learning-rate", "1e-2").exit_code == 0
    result = run_cli("train", *common, "--objective", "menu-pg", "--init-from", "taught", "--run-name", "improved", "--max-steps", "1",
                     "--learning-rate", "1e-12")
    assert result.exit_code == 0, result.output
    assert "starting from the adapter" in result.output
    taught = load_file(str(home / "runs" / "taught" / "checkpoints" / "step-2" / "adapter_model.safetensors"))
    improved = load_file(str(home / "runs" / "improved" / "checkpoints" / "step-1" / "adapter_model.safetensors"))
    assert any(float(v.abs().max()) > 0 for k, v in taught.items() if "lora_B" in k)  # a fresh LoRA's B is zero
    assert all(torch.allclose(improved[k], taught[k], atol=1e-6) for k in taught)
    parent = set(json.loads((home / "runs" / "taught" / "inputs.json").read_text())["trajectory_ids"])
    assert parent <= set(json.loads((home / "runs" / "improved" / "inputs.json").read_text())["trajectory_ids"])

    refused = {
        "another objective": run_cli("train", *common, "--objective", "grpo", "--on-policy", "--init-from", "taught", "--run-name", "x1"),
        "another shape": run_cli("train", *common[:-4], "--train-layers", "2", "--groups-per-step", "4", "--objective", "menu",
                                 "--init-from", "taught", "--run-name", "x2", "--max-steps", "1"),
        "not a model": run_cli("train", *common, "--objective", "menu", "--init-from", "nope", "--run-name", "x3"),
    }
    assert run_cli("dataset", "build", "--name", "late", "--lookback-hours", "121", "--min-actions", "3", "--max-group-size", "10",
                   "--target-trajectories", "100000", "--validation-fraction", "0.1", "--eval-fraction", "0.8").exit_code == 0
    refused["read held-out"] = run_cli("train", *common[2:], "--dataset", "late", "--objective", "menu", "--init-from", "taught",
                                       "--run-name", "x4", "--max-steps", "1")
    for why, result in refused.items():
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, (why, result.output)
    assert "eval split" in refused["read held-out"].output and "--train-layers" in refused["another shape"].output
    assert not any((home / "runs" / name / "checkpoints").exists() for name in ("x1", "x2", "x3", "x4"))


def test_the_torch_back_end_trains_hindsight_by_default_and_art_keeps_grpo():
    from babylon_rl.train.loop import TrainConfig

    assert TrainConfig(dataset="d").objective == "hindsight"
    assert TrainConfig(dataset="d", backend="art").objective == "grpo"
    assert TrainConfig(dataset="d", on_policy=True).objective == "grpo"
    assert TrainConfig(dataset="d", objective="menu").objective == "menu"


def test_an_unset_option_takes_the_objectives_recipe_and_a_given_one_wins() -> None:
    """`train --dataset NAME` alone runs hindsight's one-block recipe (credit by meaning, docs/TRAINING.md); its imitation
    baseline gets the same budget; other objectives and back-ends keep the general defaults; what a user gives wins."""
    from babylon_rl.train.loop import TrainConfig
    from babylon_rl.train.objectives import GENERAL as DEFAULTS
    from babylon_rl.train.objectives import RECIPES

    plain = TrainConfig(dataset="d")
    assert plain.objective == "hindsight" and {k: getattr(plain, k) for k in RECIPES["hindsight"]} == RECIPES["hindsight"]
    imitation = TrainConfig(dataset="d", objective="menu-imitate")
    assert {k: getattr(imitation, k) for k in RECIPES["menu-imitate"]} == RECIPES["menu-imitate"]
    # the same budget as the student's; the student holds at full weight (its credit is a critic's)
    assert {k: v for k, v in RECIPES["menu-imitate"].items() if k != "hold_weight"} == {k: getattr(plain, k) for k in RECIPES["menu-imitate"] if k != "hold_weight"}
    assert (imitation.hold_weight, plain.hold_weight) == (0.3, 1.0)
    for other in (TrainConfig(dataset="d", objective="grpo"), TrainConfig(dataset="d", backend="art"), TrainConfig(dataset="d", objective="menu")):
        assert {k: getattr(other, k) for k in DEFAULTS} == DEFAULTS and other.max_steps is None and other.train_decisions is None
    given = TrainConfig(dataset="d", learning_rate=1e-4, train_layers=2, keep_best=False, epochs=3)
    assert (given.learning_rate, given.train_layers, given.keep_best, given.max_steps, given.hold_weight) == (1e-4, 2, False, None, 1.0)
    resumed = TrainConfig(dataset="d", resume=True)  # the saved config runs: no recipe length may pass for a new one
    assert resumed.max_steps is None and resumed.learning_rate is None


def test_distill_without_an_agent_that_stands_out_says_so_and_trains_nothing_where_the_default_trains(home, small_llama, run_cli):
    for args in (("simulate", "--agents", "5", "--windows", "8", "--steps-per-window", "2", "--seed", "4", "--start", "2025-01-01T00:00"),
                 ("build",), ("dataset", "build", "--name", "d", "--lookback-hours", "9", "--min-actions", "2",
                              "--validation-fraction", "0.2", "--eval-fraction", "0.2")):
        assert run_cli(*args).exit_code == 0
    # the design card's command on the same small dataset: it trains, and says in one line what its credit found
    plain = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), "--run-name", "plain", "--max-steps", "2",
                    "--groups-per-step", "4", "--eval-every", "1")
    assert plain.exit_code == 0, plain.output
    assert sum(line.startswith("credit: ") for line in plain.output.splitlines()) == 1
    assert json.loads((home / "runs" / "plain" / "run.json").read_text())["objective"] == "hindsight"
    assert "credit" in json.loads((home / "runs" / "plain" / "inputs.json").read_text())
    result = run_cli("train", "--dataset", "d", "--base-model", str(small_llama), "--objective", "distill", "--run-name", "r")
    assert result.exit_code == 2 and "stands above its peers" in result.output and "nothing to distill" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (home / "runs" / "r" / "checkpoints").exists()


def test_hold_weight_scales_the_logged_holds_in_the_imitation_loss(small_llama):
    """--hold-weight 0 learns from the teachers' trades only: a logged hold adds nothing to the loss; at 1 it counts as
    much as a logged trade (the mean of both)."""
    from dataclasses import replace

    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer

    hold = _menu_task("ACME: Acme Corp beats earnings expectations")
    trade = replace(hold, trajectory_id="t2", logged_answer='{"action": "buy", "ticker": "ACME", "shares": 50}')
    trainer = MenuTrainer(str(small_llama), MenuOptions(objective="imitate", train_layers=1, variants=0, seed=5))
    hold_item, trade_item = trainer.items_for([hold, trade], 0)
    assert (hold_item.target_index, trade_item.target_index) == (0, 1)
    with torch.no_grad():
        both, alone_hold, alone_trade = (float(trainer._loss(items)[0]) for items in ([hold_item, trade_item], [hold_item], [trade_item]))
        trainer.options = replace(trainer.options, hold_weight=0.0)
        trades_only = float(trainer._loss([hold_item, trade_item])[0])
    assert both == pytest.approx((alone_hold + alone_trade) / 2, rel=1e-5)
    assert trades_only == pytest.approx(alone_trade, rel=1e-5) and trades_only != pytest.approx(both, rel=1e-3)


def test_hindsight_fits_the_credited_trade_of_the_named_stock_and_hold_elsewhere(small_llama):
    """The credit goes where the news points: the trade of the named stock the credit calls for (train/credit.py), whatever
    the stock did in this window and whatever the logged agent answered; a stale headline, no headline, or a credited
    hold is fitted to hold, and so is a credited trade the valid menu lacks."""
    from babylon_rl.train.menu_items import MenuOptions, menu
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.objectives.hindsight import hindsight_index

    def target(news: str, direction: str | None, at: str = "12:13") -> tuple[str, str]:
        task = replace(_menu_task(news, at), news_direction=direction)
        answers = menu(task, 50)
        rewards = np.array([task.price(a)[0] for a in answers], dtype=np.float32)
        action = parse_action(answers[hindsight_index(task, answers, rewards)])
        return action.kind, action.ticker

    # ACME rose 220 -> 230 and BOLT fell 52 -> 50 in the window: the credit decides, not this window's move
    assert target("ACME: Acme Corp misses earnings expectations", "sell") == ("sell", "ACME")
    assert target("BOLT: Bolt Inc beats earnings expectations", "buy") == ("buy", "BOLT")
    assert target("ACME: Acme Corp updates its logo", "hold") == ("hold", "")
    assert target("ACME: Acme Corp beats earnings expectations", None) == ("hold", "")
    assert target("ACME: Acme Corp beats earnings expectations", "buy", at="11:40") == ("hold", "")  # 43 minutes old
    # the trainer's items carry it as their target, where imitation's carry the logged answer (a hold here)
    task = replace(_menu_task("ACME: Acme Corp misses earnings expectations"), news_direction="buy")
    targets = {objective: MenuTrainer(str(small_llama), MenuOptions(objective=objective, train_layers=1, variants=0)).items_for([task], 0)[0]
               for objective in ("hindsight", "imitate")}
    assert targets["hindsight"].answers[targets["hindsight"].target_index] == '{"action": "buy", "ticker": "ACME", "shares": 50}'
    assert targets["imitate"].target_index == 0


def test_hindsight_weighs_each_trade_target_by_what_it_paid_and_holds_as_before(small_llama):
    """A trade target counts in proportion to what it paid (its P&L, clipped; the batch's trades averaging 1): ACME's
    rise from $223.79 to $230 weighs far more than CRUX's 5 cents; a hold target keeps --hold-weight, and imitation
    weighs every trade alike."""
    from dataclasses import replace

    import torch

    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_losses import HOLD_INDEX
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.decisions import PNL_CLIP, PNL_SCALE

    acme = replace(_menu_task("ACME: Acme Corp beats earnings expectations"), news_direction="buy")  # as the credit calls it
    crux = replace(_menu_task("CRUX: Crux Biotech beats earnings expectations"), trajectory_id="t2", news_direction="buy")
    stale = replace(_menu_task("ACME: Acme Corp beats earnings expectations", at="11:40"), trajectory_id="t3")
    trainer = MenuTrainer(str(small_llama), MenuOptions(objective="hindsight", train_layers=1, variants=0, seed=5, hold_weight=0.5))
    items = trainer.items_for([acme, crux, stale], 0)
    assert [item.answers[item.target_index] for item in items[:2]] == [
        '{"action": "buy", "ticker": "ACME", "shares": 50}', '{"action": "buy", "ticker": "CRUX", "shares": 50}']
    assert items[2].target_index == HOLD_INDEX
    assert [item.paid for item in items[:2]] == pytest.approx([PNL_CLIP, 50 * 0.05 / PNL_SCALE], rel=1e-3)
    with torch.no_grad():
        logp, _ = trainer._logprobs(items)
        picked = [float(logp[i, item.target_index]) for i, item in enumerate(items)]
        weighed = float(trainer._loss(items)[0])
        trainer.options = replace(trainer.options, objective="imitate")  # the same targets, fitted as a logged answer is
        alike = float(trainer._loss(items)[0])
    paid = [items[0].paid, items[1].paid]
    weights = [2 * p / sum(paid) for p in paid] + [0.5]
    assert weighed == pytest.approx(-sum(w * x for w, x in zip(weights, picked)) / sum(weights), rel=1e-5)
    assert alike == pytest.approx(-(picked[0] + picked[1] + 0.5 * picked[2]) / 2.5, rel=1e-5)


def test_hold_weight_is_refused_for_objectives_that_do_not_imitate(run_cli) -> None:
    result = run_cli("train", "--dataset", "nothing", "--objective", "menu", "--hold-weight", "0")
    assert result.exit_code == 2 and "--hold-weight weighs the hold labels of distill, menu-imitate and hindsight, not menu" in result.output


def test_trade_cost_is_refused_for_objectives_that_do_not_price_the_menu(run_cli) -> None:
    result = run_cli("train", "--dataset", "nothing", "--objective", "distill", "--trade-cost", "0.3")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--trade-cost prices the trades of menu, menu-pg and menu-value, not distill" in result.output


def test_the_anchor_is_refused_outside_menu_value(run_cli) -> None:
    result = run_cli("train", "--dataset", "nothing", "--objective", "menu-pg", "--anchor", "0.25")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--anchor weighs the starting policy's margins in menu-value's fit, not in menu-pg" in result.output

def test_teacher_answers_is_refused_for_objectives_that_do_not_distill(run_cli) -> None:
    result = run_cli("train", "--dataset", "nothing", "--objective", "menu-imitate", "--teacher-answers", "news")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--teacher-answers chooses which of the teachers' answers distill imitates, not menu-imitate" in result.output


@pytest.mark.parametrize("size, seed", [(3, 0), (3, 1), (10, 0), (25, 0)])
def test_the_validation_sample_is_drawn_once_per_seed_in_split_order(size, seed):
    """Every selection pass answers the same --validation-decisions decisions: a seeded draw in split order, all when fewer."""
    from babylon_rl.train.loop import validation_sample

    split = [f"decision-{i:02d}" for i in range(10)]
    sample = validation_sample(split, size, seed)
    assert sample == validation_sample(split, size, seed) == sorted(sample)
    assert len(sample) == min(size, len(split)) and set(sample) <= set(split)
    if size < len(split):
        assert validation_sample(split, size, seed + 1) != sample


@settings(max_examples=200, deadline=None)
@given(situations=st.lists(st.integers(0, 7), min_size=1, max_size=40), size=st.integers(1, 50), seed=st.integers(0, 3))
def test_a_train_draw_takes_one_decision_of_every_situation_before_a_second_of_any(situations, size, seed):
    """--train-decisions spreads over situations (a window and its latest fresh headline): decisions of one situation
    teach hindsight one target, so a draw that took two of one while another had none would spend frozen states on a
    repeat. The draw stays seeded and in split order."""
    from collections import Counter

    from babylon_rl.train.loop import drawn

    decisions = [(situation, i) for i, situation in enumerate(situations)]  # (its situation, its place in the split)
    draw = drawn(decisions, size, seed, situation=lambda d: d[0])
    assert draw == drawn(decisions, size, seed, situation=lambda d: d[0])
    assert [i for _, i in draw] == sorted(i for _, i in draw)
    assert len(draw) == min(size, len(decisions)) and set(draw) <= set(decisions)
    taken, available = Counter(s for s, _ in draw), Counter(situations)
    not_exhausted = [taken[s] for s in available if taken[s] < available[s]]
    if not_exhausted:
        assert max(taken.values(), default=0) <= min(not_exhausted) + 1


def test_decisions_of_one_window_and_fresh_headline_are_one_situation():
    """What the spread draw counts: the same window and latest fresh headline are one situation whoever's portfolio the
    prompt shows; another headline, or none, is another."""
    def task(window: str, news: str, portfolio: str) -> Task:
        text = f"12:40, 20 min left\nACME 223 +0.1%\nNews:\n{news}\nCash {portfolio}; holding none; bets none; P&L +0"
        prompt = SimpleNamespace(messages=[{"role": "user", "content": text}])
        return Task("t", window, prompt, None, None, "")

    bullish = "12:30 ACME: Acme Corp beats earnings expectations"
    assert task("w1", bullish, "9,000").situation == task("w1", bullish, "12,000").situation == ("w1", ("ACME", bullish[12:]))
    assert task("w1", "12:35 BOLT: Bolt Inc misses estimates", "9,000").situation != task("w1", bullish, "9,000").situation
    assert task("w1", "11:50 ACME: old news", "9,000").situation == ("w1", None) != task("w2", "11:50 ACME: old", "1").situation


def _played(base: Path, adapter: Path, prompts: list) -> list[str]:
    """What the decision path of play and serve answers with `adapter` on `base` (babylon_rl/evaluate/decide.py)."""
    from peft import PeftModel

    from babylon_rl.evaluate.decide import Decider, top_layers
    from babylon_rl.train.models import load_causal_lm

    model, tokenizer = load_causal_lm(str(base))
    adapted = PeftModel.from_pretrained(model, str(adapter)).eval()
    decider = Decider(adapted, tokenizer, top_layers(adapted, adapter), "cpu", 50)
    return [choices[0].answer for choices in decider.decide(prompts)]


def test_the_menu_ranker_answers_in_chunks_as_it_does_at_once_and_keeps_no_chunks_states(smollm2, tmp_path, monkeypatch):
    """An evaluation's menu policies rank RANKED_CHUNK decisions at a time (the frozen states of one chunk held, then
    dropped): the base's answers are the ones a single pass over every decision gives, in the decisions' order, and an
    adapter's are the ones its trainer chooses."""
    from babylon_rl.train import menu_items, menu_ranker, menu_trainer

    news = ["ACME: Acme Corp beats earnings expectations", "BOLT: Bolt recalls its flagship", "CRUX: Crux wins a contract",
            "ACME: Acme Corp misses estimates", "BOLT: Bolt raises guidance"]
    tasks = [_menu_task(headline) for headline in news]
    trainer = menu_trainer.MenuTrainer(str(smollm2), menu_items.MenuOptions(train_layers=1, learning_rate=1e-2, variants=0, seed=1, ema=0.0))
    for _ in range(3):
        trainer.train_step(tasks[:1])
    adapter = trainer.save(tmp_path / "ckpt", {"step": 3})
    played = _played(smollm2, adapter, [task.request for task in tasks])  # as arena, simulate --policy and serve decide
    held = []
    states = menu_ranker.cache_states
    monkeypatch.setattr(menu_ranker, "cache_states", lambda split, items, *a, **k: (held.append(len(items)), states(split, items, *a, **k)))

    def answers(chunk: int) -> tuple[list[str], list[str]]:
        monkeypatch.setattr(menu_ranker, "RANKED_CHUNK", chunk)
        ranker = menu_ranker.MenuRanker(str(smollm2), [adapter], 50)
        ranker.prepare(tasks)
        return ranker.answers(None), ranker.answers(adapter)

    base, adapted = answers(len(tasks))
    assert held == [5] and len(set(base)) > 1  # the base answers differently across these decisions: order matters
    assert adapted == played and len(set(adapted)) > 1  # eval decides as the game's paths do
    held.clear()
    assert answers(2) == (base, adapted)
    assert held == [2, 2, 1]  # never more than a chunk's states at a time


def test_every_menu_objective_has_one_loss_and_every_loss_an_objective():
    """The registry a newcomer adds a menu objective to: each `--objective` of the menu names a loss of
    `menu_losses.LOSSES`, and no loss is left without one."""
    from babylon_rl.train.objectives import LOSSES, MENU_OBJECTIVES

    assert set(MENU_OBJECTIVES.values()) == set(LOSSES)


def test_shared_states_are_let_go_when_no_trainer_will_ask_again():
    """The quickstart clears them before its eval: the process's peak is then the eval's or the training's, not both."""
    from types import SimpleNamespace

    import torch

    from babylon_rl.train.state_cache import SharedStates

    shared = SharedStates()
    kept = [SimpleNamespace(packed=("p", i), states=torch.zeros(3, 2, dtype=torch.bfloat16)) for i in range(2)]
    shared.keep(("m",), kept)
    asked = [SimpleNamespace(packed=("p", i), states=None) for i in range(2)]
    shared.fill(("m",), asked)
    assert all(item.states is not None for item in asked)
    shared.clear()
    again = [SimpleNamespace(packed=("p", 0), states=None)]
    shared.fill(("m",), again)
    assert again[0].states is None and shared._bytes == 0
