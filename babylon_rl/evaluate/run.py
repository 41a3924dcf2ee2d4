"""Replay evaluation, top to bottom: decision points -> answers -> actions -> scores -> intervals -> files.

Every policy (the logged agents, the baseline, the model under test) answers the same
decision points of the held-out eval windows; their answers are parsed into actions and
scored against the window's ground truth (`scoring.py`); per-window totals give bootstrap
intervals over windows (`stats.py`).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.actions import KINDS, Action, parse_action
from babylon_rl.evaluate.constant import CONSTANT_SHARES, ConstantChoice, best_constant
from babylon_rl.evaluate.decide import run_shares
from babylon_rl.evaluate.decision_points import EvalSet, load_eval_set, load_train_decisions
from babylon_rl.evaluate.policies import ConstantPolicy, EndpointPolicy, LocalPolicy, MenuPolicy, Policy, ReaderPolicy
from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.evaluate.scoring import DEFAULT_THRESHOLD_PCT, Outcome, read_observation, score_action
from babylon_rl.evaluate.stats import (
    DEFAULT_RESAMPLES, Interval, difference_interval, ratio_difference_interval, ratio_interval, resample_indices,
)
from babylon_rl.model_names import ModelRef, default_baseline, in_home, resolve
from babylon_rl.settings import Home, mask_url

METRICS = ("direction_accuracy", "pnl_per_decision", "trade_precision", "trade_share", "valid_rate")
TRADES = ("buy", "sell", "bet")
# A reference with fewer trades than this has no trade precision worth comparing: P&L alone decides against it.
MIN_TRADES = 20
CSV_COLUMNS = ["policy", "role", "model", "windows", "decisions"] + [
    f"{m}{suffix}" for m in METRICS for suffix in ("", "_low", "_high")] + [f"share_{k}" for k in KINDS + ("invalid",)] + [
    "top_answer", "top_answer_share"]
# The references a trained model must beat beyond the interval, on P&L per decision AND trade precision
# (the share of its buy, sell and bet answers right in direction: holding is not punished, as direction
# accuracy punishes it), before the evaluation says it learnt: the model it was trained from, the best answer
# that ignores the observation (constant.py), the logged agents, and (when given) the same model
# trained for the same budget to imitate every logged answer. The first two must be present.
LEARNING_REFERENCES = ("baseline", "constant", "logged", "imitation")
REQUIRED_REFERENCES = ("baseline", "constant")
# A model whose answers the game could not act on has not learned to play, whatever the valid ones earned: the claim
# also needs this share of its held-out answers to be valid actions.
MIN_VALID_RATE = 0.95


@dataclass(frozen=True)
class EvalOptions:
    model: str
    dataset: str
    base_url: str | None = None
    baseline: str | None = None  # None: the run's base model; "none": no baseline
    imitation: str | None = None  # a model trained to imitate the logged answers (the same budget), compared too
    max_new_tokens: int = 32
    batch_size: int = 16
    concurrency: int = 8
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    device: str = "auto"
    max_decisions_per_window: int | None = None  # a seeded sample of each eval window's decisions (CPU budgets)
    menu_shares: int | None = None  # local models answer from the menu (hold; buy or sell this many shares), sharing frozen blocks
    # the agents that stand above their peers on the train windows (train/teachers.py), shown as the line to beat when the
    # model's run learned from none (the quickstart's hindsight student); a distilled run's own teachers win
    best_agents: tuple[str, ...] = ()


@dataclass
class PolicyResult:
    name: str
    role: str  # logged | constant | reader | baseline | imitation | model
    model: str
    outcomes: list[Outcome]
    answers: list[str] = field(default_factory=list, repr=False)  # answer keys (`answer_key`), one per decision
    metrics: dict[str, Interval] = field(default_factory=dict)
    action_shares: dict[str, float] = field(default_factory=dict)
    failed_requests: int = 0
    # the decisions it answered where they are not the eval's sample: the logged agents' every held-out decision
    decisions: EvalSet | None = field(default=None, repr=False)

    @property
    def top_answer(self) -> tuple[str, float]:
        """The most frequent answer (action and its ticker or market) and its share of the decisions."""
        if not self.answers:
            return "", 0.0
        key, count = Counter(self.answers).most_common(1)[0]
        return key, count / len(self.answers)

    def to_dict(self) -> dict:
        top, share = self.top_answer
        return {"name": self.name, "role": self.role, "model": self.model, "decisions": len(self.outcomes),
                "metrics": {k: v.to_dict() for k, v in self.metrics.items()}, "action_shares": self.action_shares,
                "top_answer": top, "top_answer_share": share, "failed_requests": self.failed_requests}


@dataclass
class EvalResult:
    options: EvalOptions
    eval_set: EvalSet
    policies: list[PolicyResult]
    comparison: dict
    constant: ConstantChoice | None
    output_dir: Path
    model_ref: ModelRef | None  # the local model evaluated, as eval resolved it; None for an endpoint
    created_at: str
    design_check: dict | None = None  # the news rule vs the best constant (_paired): could this evaluation recognise reading?
    teachers: list[str] = field(default_factory=list)  # the agents the model was distilled from (its run's inputs.json)

    @property
    def run_dir(self) -> Path | None:
        return self.model_ref.run_dir if self.model_ref else None

    @property
    def checkpoint_key(self) -> str | None:
        return self.model_ref.checkpoint_key if self.model_ref else None

    @property
    def checkpoint(self) -> str | None:
        """The run's model evaluated (`RUN@7`, `RUN@merged`): what eval.json is of; None for a model of no run."""
        return self.model_ref.name if self.run_dir else None

    @property
    def model_result(self) -> PolicyResult:
        return next(p for p in self.policies if p.role == "model")

    @property
    def learning_shown(self) -> bool:
        """The trained model beats every learning reference present beyond the interval, baseline and constant at least,
        with at least `MIN_VALID_RATE` of its answers valid actions."""
        present = [role for role in LEARNING_REFERENCES if role in self.comparison]
        return self.model_valid and all(role in present for role in REQUIRED_REFERENCES) and all(
            self.comparison[role]["beats_outside_interval"] for role in present)

    @property
    def model_valid(self) -> bool:
        return self.model_result.metrics["valid_rate"].value >= MIN_VALID_RATE

    @property
    def named_baseline(self) -> str | None:
        """The model --baseline named, as the table shows it; None when the baseline is the trained model's own base."""
        if self.options.baseline is None:
            return None
        return next((p.name.removeprefix("baseline ") for p in self.policies if p.role == "baseline"), None)

    def to_dict(self) -> dict:
        o = self.options
        return {
            "dataset": o.dataset, "model": o.model, "checkpoint": self.checkpoint, "base_url": mask_url(o.base_url) if o.base_url else None,
            "baseline": next((p.model for p in self.policies if p.role == "baseline"), None), "named_baseline": self.named_baseline,
            "windows": len(self.eval_set.windows), "decisions": len(self.eval_set.decisions),
            "threshold_pct": o.threshold_pct, "max_new_tokens": o.max_new_tokens, "menu_shares": o.menu_shares,
            "bootstrap": {"resamples": o.resamples, "seed": o.seed, "unit": "window", "level": 0.95},
            "constant": asdict(self.constant) if self.constant else None,
            "policies": [p.to_dict() for p in self.policies], "comparison": self.comparison,
            "learning_shown": self.learning_shown, "design_check": self.design_check, "teachers": self.teachers,
            "claim": "P&L per decision AND trade precision, paired 95 % bootstrap over windows", "created_at": self.created_at,
        }


# -- the evaluation ---------------------------------------------------------------------
def evaluate(home: Home, options: EvalOptions, on_policy: Callable[[str, int], Callable[[int], None]] | None = None) -> EvalResult:
    """Score the logged agents, the best constant action, the baseline and the model on the dataset's eval windows."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.train.models import resolve_device

    options = replace(options, device=resolve_device(options.device))
    dataset = Dataset.open(home, options.dataset)
    every_decision = load_eval_set(dataset)
    eval_set = every_decision.sample(options.max_decisions_per_window, options.seed)
    model_policy, ref = _model_policy(home, options)
    if ref and not options.menu_shares:  # a local model decides from its menu, of its run's trade size
        options = replace(options, menu_shares=run_shares(ref.run_dir))
    # with a menu, the references trade its size and answer from it too, so they play by the models' rules
    chosen_on = load_train_decisions(dataset)  # train + validation windows, never eval
    constant = best_constant(chosen_on.decisions, chosen_on.truths, options.threshold_pct, options.menu_shares)
    prompts = [d.request for d in eval_set.decisions]
    policies: list[tuple[str, Policy]] = []
    if constant:
        policies.append(("constant", ConstantPolicy(constant.answer, f"best constant: {answer_key(parse_action(constant.answer))}",
                                                    options.menu_shares)))
    reader = _reader_policy(prompts, constant.answer, options.menu_shares) if constant else None
    if reader:
        policies.append(("reader", reader))
    baseline = _baseline_policy(home, options, ref)
    if baseline:
        policies.append(("baseline", baseline))
    if options.imitation:
        imitation = resolve(home, options.imitation)
        policies.append(("imitation", _local(imitation, f"imitation {in_home(home, imitation.path)}", options)))
    policies.append(("model", model_policy))
    policies = _menu_policies(policies, eval_set, options, home.frozen_states)

    results = [logged_reference(every_decision, eval_set, options)]
    for role, policy in policies:
        progress = on_policy(policy.name, len(prompts)) if on_policy else (lambda n: None)
        answers = policy.answer(prompts, progress)
        results.append(_score(role, policy, answers, eval_set, options))
    comparison, design = compare_results(results, eval_set, options)
    teachers = run_teachers(ref.run_dir) if ref and ref.run_dir else []
    if teachers or options.best_agents:
        best = teachers_reference(teachers or list(options.best_agents), every_decision, options, learned=bool(teachers))
        results.append(best)
        if best.decisions.decisions and set(best.decisions.windows) <= set(eval_set.windows):  # paired by window
            comparison["teachers"] = _paired(next(r for r in results if r.role == "model"), best, eval_set,
                                             resample_indices(len(eval_set.windows), options.resamples, options.seed))
    output_dir = _output_dir(home, options, ref)
    return EvalResult(options, eval_set, results, comparison, constant, output_dir, ref,
                      datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), design_check=design, teachers=teachers)


def logged_reference(every_decision: EvalSet, eval_set: EvalSet, options: EvalOptions) -> PolicyResult:
    """The logged agents on every held-out decision of the eval's windows, not only the sampled ones: pricing a logged
    answer needs no model, and their P&L is heavy-tailed (one agent's bet can pay thousands), so one decision a window
    gives an interval ten times as wide as all of them do (docs/EVALUATION.md). Still paired by window with the models:
    each resample takes the same windows for both, the model's mean over its sampled decisions, theirs over all."""
    answered = every_decision if every_decision.windows == eval_set.windows else eval_set
    result = _scored("logged", "logged agents", "logged", [d.logged_answer for d in answered.decisions], answered, options)
    result.decisions = answered if answered is not eval_set else None
    return result


def run_teachers(run_dir: Path) -> list[str]:
    """The agents a run was distilled from, as its inputs.json recorded them (none for other objectives)."""
    inputs = run_dir / "inputs.json"
    if not inputs.exists():
        return []
    recorded = json.loads(inputs.read_text()).get("teachers") or {}
    return [t["agent_id"] for t in recorded.get("teachers", [])]


def teachers_reference(teachers: list[str], every_decision: EvalSet, options: EvalOptions, learned: bool = True) -> PolicyResult:
    """The best agents (those it learned from, or those that stand above their peers on the train windows): their own
    logged answers on every held-out decision they made: not the sampled decisions the policies answer, so the model is
    compared with them window by window (the difference of each window's means), a line the claim does not need."""
    mine = EvalSet(every_decision.dataset, [d for d in every_decision.decisions if d.agent_id in teachers], every_decision.truths)
    name = (f"the agents it learned from ({', '.join(teachers)}), logged" if learned else
            f"the agents that stand above their peers on the train windows ({', '.join(teachers)}), logged")
    result = _scored("teachers", name, "logged", [d.logged_answer for d in mine.decisions], mine, options)
    result.decisions = mine
    if mine.decisions:
        _summarise(result, mine, resample_indices(len(mine.windows), options.resamples, options.seed))
    return result


def compare_results(results: list[PolicyResult], eval_set: EvalSet, options: EvalOptions) -> tuple[dict, dict | None]:
    """Summarise each policy's outcomes and compare the model with every other (paired over windows); also the design
    check, the news rule against the best constant, where both are present."""
    indices = resample_indices(len(eval_set.windows), options.resamples, options.seed)
    for result in results:
        _summarise(result, eval_set, indices)
    by_role = {r.role: r for r in results}
    design = _paired(by_role["reader"], by_role["constant"], eval_set, indices) if {"reader", "constant"} <= set(by_role) else None
    return _compare(results, eval_set, indices), design


def scored_answers(role: str, name: str, answers: list[str], eval_set: EvalSet, options: EvalOptions) -> PolicyResult:
    """Answers to an evaluation's decisions (in its order) priced as the evaluation prices every policy's."""
    return _scored(role, name, name, answers, eval_set, options)


def resized(answer: str, shares: int) -> str:
    """A stock trade's JSON answer with `shares` shares; any other answer as it is."""
    action = json.loads(answer)
    return json.dumps(action | {"shares": shares}) if "shares" in action else answer


def _menu_policies(policies: list[tuple[str, Policy]], eval_set: EvalSet, options: EvalOptions,
                   states_dir: Path) -> list[tuple[str, Policy]]:
    """The local models deciding from their valid menus, as every decision path does (`babylon_rl/evaluate/decide.py`): the
    models on one base share its frozen blocks, computed once for all and kept in `states_dir` for the next
    evaluation of the same decisions."""
    from babylon_rl.train.menu_ranker import MenuRanker
    from babylon_rl.train.decisions import Task

    def base_of(policy: LocalPolicy) -> str:
        return str(Path(policy.ref.base_model if policy.ref.adapter else policy.ref.path).resolve())

    local = [p for _, p in policies if isinstance(p, LocalPolicy)]
    tasks = [Task.from_decision(d, eval_set.truths[d.window_id]) for d in eval_set.decisions] if local else []
    menu_policies: dict[int, MenuPolicy] = {}
    for base in dict.fromkeys(base_of(p) for p in local):
        on_base = [p for p in local if base_of(p) == base]
        ranker = MenuRanker(base, [p.ref.path for p in on_base if p.ref.adapter], options.menu_shares, options.device, states_dir)
        ranker.prepare(tasks)
        for p in on_base:
            menu_policies[id(p)] = MenuPolicy(ranker, p.ref.path if p.ref.adapter else None, p.name)
    return [(role, menu_policies.get(id(p), p)) for role, p in policies]


def _reader_policy(prompts: list[DecisionPrompt], constant_answer: str, shares: int | None = None) -> ReaderPolicy | None:
    """The news rule, falling back on the best constant; None where no prompt has a headline it reads (the game's own data)."""
    reader = ReaderPolicy(constant_answer, shares=shares or CONSTANT_SHARES, menu_shares=shares)
    return reader if any(a != constant_answer for a in reader.answer(prompts, lambda n: None)) else None


def score_answers(name: str, answers: list[str], result: EvalResult) -> PolicyResult:
    """Answers to an evaluation's decisions (in its order) scored and summarised as its policies were: a reference
    computed after the fact (the benchmark's news rule) on the same decisions and bootstrap resamples."""
    eval_set, options = result.eval_set, result.options
    scored = _scored("reference", name, name, answers, eval_set, options)
    _summarise(scored, eval_set, resample_indices(len(eval_set.windows), options.resamples, options.seed))
    return scored


def _model_policy(home: Home, options: EvalOptions) -> tuple[Policy, ModelRef | None]:
    if options.base_url:
        return EndpointPolicy(options.base_url, options.model, f"model {options.model}", options.max_new_tokens,
                              options.concurrency), None
    ref = resolve(home, options.model)
    return _local(ref, f"model {in_home(home, ref.path)}", options), ref


def _local(ref: ModelRef, name: str, options: EvalOptions) -> LocalPolicy:
    """A local model, loaded when its turn to answer comes (one model in memory at a time)."""
    return LocalPolicy(ref, name, options.max_new_tokens, options.batch_size, options.device)


def _baseline_policy(home: Home, options: EvalOptions, ref: ModelRef | None) -> Policy | None:
    wanted = options.baseline or (default_baseline(ref, home) if ref else None)
    if not wanted or wanted.lower() == "none":
        return None
    try:
        base = resolve(home, wanted)
    except ConfigError:
        if not options.base_url:
            raise
        return EndpointPolicy(options.base_url, wanted, f"baseline {wanted}", options.max_new_tokens, options.concurrency)
    return _local(base, f"baseline {in_home(home, base.path)}", options)


def answer_key(action: Action | None) -> str:
    """What an answer does, without its size: `buy EVRG`, `bet pm-...`, `hold` or `invalid`."""
    if action is None:
        return "invalid"
    return " ".join(x for x in (action.kind, action.ticker or action.market) if x)


def _score(role: str, policy: Policy, answers: list[str], eval_set: EvalSet, options: EvalOptions) -> PolicyResult:
    model = getattr(policy, "model", None) or getattr(policy, "text", None) or str(getattr(getattr(policy, "ref", None), "path", "logged"))
    return _scored(role, policy.name, model, answers, eval_set, options, getattr(policy, "failures", 0))


def _scored(role: str, name: str, model: str, answers: list[str], eval_set: EvalSet, options: EvalOptions,
            failures: int = 0) -> PolicyResult:
    actions = [d.request.resolve(parse_action(answer)) for d, answer in zip(eval_set.decisions, answers)]
    outcomes = [
        score_action(action, read_observation(d.observation), eval_set.truths[d.window_id], options.threshold_pct, game_rules=True)
        for d, action in zip(eval_set.decisions, actions)
    ]
    return PolicyResult(name, role, model, outcomes, [answer_key(a) for a in actions], failed_requests=failures)


# -- statistics -------------------------------------------------------------------------
def _per_window(outcomes: list[Outcome], eval_set: EvalSet, windows: list[str] | None = None) -> dict[str, np.ndarray]:
    """Each window's totals (in the order of `windows`, by default the set's own) of the outcomes of `eval_set`'s decisions."""
    index = {w: i for i, w in enumerate(windows or eval_set.windows)}
    totals = {k: np.zeros(len(index)) for k in ("decisions", "correct", "pnl", "valid", "trades", "right_trades")}
    for decision, outcome in zip(eval_set.decisions, outcomes):
        i = index[decision.window_id]
        traded = outcome.valid and outcome.kind in TRADES
        totals["decisions"][i] += 1
        totals["correct"][i] += outcome.correct
        totals["pnl"][i] += outcome.pnl
        totals["valid"][i] += outcome.valid
        totals["trades"][i] += traded
        totals["right_trades"][i] += traded and outcome.correct
    return totals


def _summarise(result: PolicyResult, eval_set: EvalSet, indices: np.ndarray) -> None:
    t = _per_window(result.outcomes, result.decisions or eval_set, eval_set.windows)
    result.metrics = {
        "direction_accuracy": ratio_interval(t["correct"], t["decisions"], indices),
        "pnl_per_decision": ratio_interval(t["pnl"], t["decisions"], indices),
        "trade_precision": ratio_interval(t["right_trades"], t["trades"], indices),
        "trade_share": ratio_interval(t["trades"], t["decisions"], indices),
        "valid_rate": ratio_interval(t["valid"], t["decisions"], indices),
    }
    n = max(len(result.outcomes), 1)
    result.action_shares = {k: sum(o.kind == k for o in result.outcomes) / n for k in KINDS + ("invalid",)}


def _compare(results: list[PolicyResult], eval_set: EvalSet, indices: np.ndarray) -> dict:
    """The model against every other policy: paired differences with intervals."""
    model = next(r for r in results if r.role == "model")
    return {other.role: _paired(model, other, eval_set, indices) for other in results if other.role != "model"}


def _paired(a_result: PolicyResult, b_result: PolicyResult, eval_set: EvalSet, indices: np.ndarray) -> dict:
    """a - b on P&L per decision, trade precision and direction accuracy, paired by window, and whether a beats b beyond
    the intervals of P&L AND trade precision (P&L alone where b trades fewer than MIN_TRADES times: its precision
    cannot be estimated)."""
    a_set, b_set = a_result.decisions or eval_set, b_result.decisions or eval_set
    a, b = (_per_window(r.outcomes, s, eval_set.windows) for r, s in ((a_result, a_set), (b_result, b_set)))
    if a_set is b_set:  # the same decisions: the mean of the differences
        acc = difference_interval(a["correct"], b["correct"], a["decisions"], indices)
        pnl = difference_interval(a["pnl"], b["pnl"], a["decisions"], indices)
    else:  # the same windows, each with its own decisions: the difference of the means
        acc = ratio_difference_interval(a["correct"], a["decisions"], b["correct"], b["decisions"], indices)
        pnl = ratio_difference_interval(a["pnl"], a["decisions"], b["pnl"], b["decisions"], indices)
    precision = ratio_difference_interval(a["right_trades"], a["trades"], b["right_trades"], b["trades"], indices)
    estimable = bool(b["trades"].sum() >= MIN_TRADES)
    return {"pnl_per_decision_diff": pnl.to_dict(), "trade_precision_diff": precision.to_dict(),
            "direction_accuracy_diff": acc.to_dict(), "reference_trades": int(b["trades"].sum()),
            "precision_estimable": estimable,
            "beats_outside_interval": bool(pnl.low > 0 and (precision.low > 0 or not estimable) and a["trades"].sum() > 0)}


# -- outputs ----------------------------------------------------------------------------
def _output_dir(home: Home, options: EvalOptions, ref: ModelRef | None) -> Path:
    if ref and ref.run_dir:
        return ref.run_dir
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(options.model).name or options.model).strip("-.") or "model"
    return home.root / "evals" / f"{name}-{options.dataset}"


def write_outputs(result: EvalResult) -> tuple[Path, Path]:
    """eval.json and eval.csv in the output directory (a run's: its latest evaluation, which its report shows); a run's
    eval.json also kept as RUN/evals/CHECKPOINT/DATASET/eval.json, where `model export` finds the one of its checkpoint."""
    result.output_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = result.output_dir / "eval.json", result.output_dir / "eval.csv"
    text = json.dumps(result.to_dict(), indent=2) + "\n"
    atomic.write_text(json_path, text)
    if result.run_dir is not None:
        kept = result.run_dir / "evals" / result.model_ref.path.name / result.options.dataset / "eval.json"
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(kept, text)
    rows = []
    for p in result.policies:
        row = {"policy": p.name, "role": p.role, "model": p.model, "windows": len(result.eval_set.windows), "decisions": len(p.outcomes)}
        for m, interval in p.metrics.items():
            row |= {m: round(interval.value, 6), f"{m}_low": round(interval.low, 6), f"{m}_high": round(interval.high, 6)}
        row |= {f"share_{k}": round(v, 6) for k, v in p.action_shares.items()}
        row |= {"top_answer": p.top_answer[0], "top_answer_share": round(p.top_answer[1], 6)}
        rows.append(row)
    with atomic.file(csv_path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path


def summary_metrics(result: EvalResult) -> dict:
    """Flat metrics of every policy, for W&B and trained_models.evalMetrics."""
    flat: dict = {"dataset": result.options.dataset, "windows": len(result.eval_set.windows),
                  "decisions": len(result.eval_set.decisions)}
    for p in result.policies:
        for m, interval in p.metrics.items():
            flat[f"{p.role}/{m}"] = interval.value
            flat[f"{p.role}/{m}_low"] = interval.low
            flat[f"{p.role}/{m}_high"] = interval.high
    for role, diff in result.comparison.items():
        flat[f"model_vs_{role}/direction_accuracy_diff"] = diff["direction_accuracy_diff"]["value"]
        flat[f"model_vs_{role}/beats_outside_interval"] = diff["beats_outside_interval"]
    flat["learning_shown"] = result.learning_shown
    return flat


def log_wandb(result: EvalResult) -> str | None:
    """Log the table and metrics to the run's W&B run (offline unless WANDB_API_KEY); None without a run."""
    if result.run_dir is None:
        return None
    import babylon_rl.train  # noqa: F401  (W&B offline defaults)
    import wandb

    name = result.run_dir.name
    run_id = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:64]
    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "babylon-rl"), name=name, id=run_id, resume="allow",
                     dir=str(result.run_dir),
                     mode="online" if os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") != "offline" else "offline",
                     settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_machine_info=True))
    try:
        columns = ["policy", "direction_accuracy", "low", "high", "pnl_per_decision", "valid_rate"]
        table = wandb.Table(columns=columns, data=[
            [p.name, p.metrics["direction_accuracy"].value, p.metrics["direction_accuracy"].low,
             p.metrics["direction_accuracy"].high, p.metrics["pnl_per_decision"].value, p.metrics["valid_rate"].value]
            for p in result.policies])
        run.log({"replay_eval/table": table})
        run.summary.update({f"replay_eval/{k}": v for k, v in summary_metrics(result).items()})
        return run.id
    finally:
        run.finish()


def write_database(result: EvalResult, url: str) -> int:
    """Store the metrics on the checkpoint's trained_models row; returns the rows updated (0 or 1)."""
    if result.run_dir is None or result.checkpoint_key is None:
        return 0
    from babylon_rl import db

    model_id = f"{result.run_dir.name}:{result.checkpoint_key}"
    metrics = {"replay_eval": summary_metrics(result)}
    with db.connect(url) as conn, conn.transaction():
        cur = conn.execute(
            """UPDATE "trained_models" SET "evalMetrics" = COALESCE("evalMetrics", '{}'::jsonb) || %s::jsonb,
                      "benchmarkScore" = %s, "updatedAt" = now()
               WHERE "modelId" = %s""",
            (json.dumps(metrics), result.model_result.metrics["direction_accuracy"].value, model_id),
        )
        return cur.rowcount
