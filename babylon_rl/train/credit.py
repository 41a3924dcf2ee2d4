"""Credit by meaning: the trade a headline calls for, learned from what the stocks did after news like it.

`hindsight` fits, after a fresh headline, the trade of the stock it names that the news calls for, and hold elsewhere.
What the news calls for is learned here, from the train windows' outcomes, in a way that carries across wording: the
game writes every story afresh (simulate/news.py), so a headline's exact text almost never recurs and a table of
headlines (what each did over its windows) judges nothing.

The critic. Each train *situation* (a window and its latest fresh headline, `Task.situation`) gives one example: the
headline, its stock's ticker and company name masked, embedded by the base model (its hidden states after
`EMBED_LAYER` blocks, averaged over the headline's tokens), and whether the named stock ended the window above its
price at the situation's decision nearest the headline. A logistic regression on the standardised embeddings, its L2
weight chosen by cross-fitted log-loss, gives P(up) for a headline of any wording.

Cross-fitted. The train windows are cut into `FOLDS` folds; a situation's credit comes from the critic fitted on the
other folds, so no label is the critic's memory of its own window (a critic that saw the window would credit its
noise). Credit: buy where P(up) >= `CONFIDENT`, sell where P(up) <= 1 - `CONFIDENT`, hold elsewhere: where the critic
is not confident the student is taught to hold. A headline's move unfolds over minutes, so a decision long after it
has little left to gain: the credit holds for as long as the cross-fitted trades were right beyond chance, learned in
`AGE_STEP`-minute steps of the headline's age (on the quickstart's world the critic's calls are right far more often
just after a headline than twenty minutes on: docs/TRAINING.md#credit-by-meaning). And the critic as a whole must have shown it reads
something: unless its cross-fitted trades were right more often than a coin beyond chance (the Wilson lower bound of
their precision at `LEVEL`, one-sided, above 1/2), it credits hold everywhere. A critic fitted to noise is confident
somewhere by chance (on headlines whose stocks moved at random: tests/test_credit.py); this is
what keeps a student from trading where there is nothing to learn. The same critic fitted on every train situation
then credits the validation decisions, and the share of credited trades whose stock moved their way there
(`precision`) is reported before any student trains on it.

What it reads: the prompts' headlines and the train windows' prices only. Never the simulator's sentiment (the
contexts do not carry it), a persona, or its templates; the company names to mask are learned from the headlines
themselves (`company_names`), not from the simulator's name table. Train decisions only; a situation counts once.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from babylon_rl.evaluate.rules import FRESH_MINUTES, fresh_headlines, latest_headline_age

if TYPE_CHECKING:
    from babylon_rl.train.decisions import DecisionData, Task

EMBED_LAYER = 16  # of SmolLM2-135M's 30 blocks: where a linear read of a headline's direction carried best to unseen wording
FOLDS = 5
CONFIDENT = 0.6
L2_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
LEVEL = 0.95
AGE_STEP = 5  # minutes: the steps in which how long a headline's credit holds is learned
NAME_SHARE = 0.5  # a word run in at least this share of one stock's headlines, and in few of the others', names it
WORD = re.compile(r"[A-Z][\w&.'-]*")


@dataclass(frozen=True)
class Check:
    """How the credit fared on decisions whose label it did not see: trades credited and how many were right."""

    decisions: int  # decisions after a fresh headline
    credited: int  # decisions credited a trade (buy or sell)
    right: int  # of them, how many the named stock moved the credited way from then to the window's end

    @property
    def precision(self) -> float | None:
        return self.right / self.credited if self.credited else None

    @property
    def beyond_chance(self) -> bool:
        """The Wilson lower bound of the precision, one-sided at `LEVEL`, above 1/2."""
        if not self.credited:
            return False
        z, n, p = NormalDist().inv_cdf(LEVEL), self.credited, self.right / self.credited
        low = (p + z * z / (2 * n) - z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
        return bool(low > 0.5)

    def to_dict(self) -> dict:
        return {"decisions": self.decisions, "credited": self.credited, "right": self.right, "precision": self.precision}


@dataclass(frozen=True)
class Credit:
    """What each train situation's headline calls for (cross-fitted), and the critic's own check on validation."""

    directions: dict[tuple, str]  # train situation -> buy | sell | hold
    cross_fitted: Check  # the train decisions' credit, each from the critic that did not see its window
    validation: Check  # the critic fitted on every train situation, crediting the validation decisions
    l2: float | None
    reason: str = ""  # why nothing was credited, where nothing was
    checked: dict[tuple, str] = field(default_factory=dict, repr=False)  # validation situation -> the critic's call there
    max_age: int = 0  # minutes: a headline older than this is credited hold (the news has moved its stock by then)

    def direction(self, task: "Task") -> str | None:
        call = self.directions.get(task.situation)
        return "hold" if call is not None and headline_age(task) >= self.max_age else call

    def credited(self, tasks: list["Task"]) -> list["Task"]:
        """The tasks with `news_direction` set where their situation has a fresh headline."""
        return [replace(task, news_direction=self.direction(task)) for task in tasks]

    @property
    def confident(self) -> bool:
        return self.max_age > 0 and any(d != "hold" for d in self.directions.values())

    def line(self) -> str:
        c = self.cross_fitted
        if self.reason:
            return f"credit: {self.reason}; hindsight fits hold everywhere"
        if not self.confident:
            return (f"credit: confident nowhere on {c.decisions} train decisions after a fresh headline (the critic's "
                    f"cross-fitted trades were no better than a coin beyond chance at any headline age); hindsight fits "
                    f"hold everywhere")
        v = self.validation
        valid = f"{v.precision:.2f} of {v.credited}" if v.credited else "none credited"
        return (f"credit: a trade on {c.credited} of {c.decisions} train decisions after a fresh headline (cross-fitted "
                f"precision {c.precision:.2f}; headlines under {self.max_age} min old), hold on the rest; on validation "
                f"{valid} credited trades right ({v.decisions} decisions)")

    def to_dict(self) -> dict:
        calls = Counter(self.directions.values())
        return {"embed_layer": EMBED_LAYER, "folds": FOLDS, "confident": CONFIDENT, "max_age": self.max_age,
                "beyond_chance": self.cross_fitted.beyond_chance, "l2": self.l2, "reason": self.reason,
                "train": self.cross_fitted.to_dict() | dict(calls), "validation": self.validation.to_dict()}


@dataclass(frozen=True)
class Example:
    situation: tuple
    text: str  # the headline, names masked
    up: bool | None  # the named stock ended above its price then; None: no move


def credited(data: "DecisionData", embed) -> "DecisionData":
    """`data`'s train decisions with what their headlines call for, learned from the train windows' outcomes and checked
    on validation (`credit`): all of them are read, whichever `--train-decisions` later draws."""
    found = credit(data.train, data.validation, embed)
    return replace(data, train=found.credited(data.train), credit=found, read_trajectory_ids=data.every_train_id)


def credit(train: list["Task"], validation: list["Task"], embed) -> Credit:
    """The cross-fitted credit of the train situations and its check on validation (module docstring).
    `embed(texts) -> [n, d]` embeds masked headlines (`HeadlineEmbedder`)."""
    names = company_names(train + validation)
    train_examples, validation_examples = examples(train, names), examples(validation, names)
    labelled = [e for e in train_examples if e.up is not None]
    windows = sorted({e.situation[0] for e in labelled})
    empty = Check(len(train), 0, 0)
    if not train_examples:
        return Credit({}, empty, Check(len(validation), 0, 0), None,
                      "no train decision follows a fresh headline that names a listed stock")
    if len(windows) < 2 or len({e.up for e in labelled}) < 2:
        return Credit({e.situation: "hold" for e in train_examples}, empty, Check(len(validation), 0, 0), None,
                      f"{len(labelled)} train situations with a headline in {len(windows)} windows are too few to learn from")
    features = embed([e.text for e in train_examples + validation_examples])
    train_x, validation_x = _standardised(features[: len(train_examples)], features[len(train_examples):])
    is_labelled = np.array([e.up is not None for e in train_examples])
    x, y = train_x[is_labelled], np.array([float(e.up) for e in labelled])
    fold = _folds([e.situation[0] for e in labelled], windows)
    l2 = min(L2_GRID, key=lambda penalty: _log_loss(y, _cross_fitted(x, y, fold, penalty)))
    p_train = np.full(len(train_examples), 0.5)
    p_train[is_labelled] = _cross_fitted(x, y, fold, l2)
    p_validation = _predict(_fit(x, y, l2), validation_x) if len(validation_examples) else np.array([])
    calls = {e.situation: _call(float(p)) for e, p in zip(train_examples, p_train)}
    checked = {e.situation: _call(float(p)) for e, p in zip(validation_examples, p_validation)}
    max_age = _fresh_for(train, calls)
    cross_fitted = _check(train, calls, max_age)
    directions = {situation: call if cross_fitted.beyond_chance else "hold" for situation, call in calls.items()}
    return Credit(directions, cross_fitted, _check(validation, checked, max_age), l2, checked=checked, max_age=max_age)


def _fresh_for(tasks: list["Task"], calls: dict[tuple, str]) -> int:
    """How long a headline's credit holds, learned from the train decisions: the cross-fitted credited trades by the
    headline's age in `AGE_STEP`-minute steps, up to the first step with trades not right beyond chance (a step without
    any trades is passed over)."""
    max_age = 0
    for start in range(0, FRESH_MINUTES + 1, AGE_STEP):
        check = _check([t for t in tasks if t.situation in calls and start <= headline_age(t) < start + AGE_STEP], calls, start + AGE_STEP)
        if check.credited and not check.beyond_chance:
            break
        if check.credited:
            max_age = start + AGE_STEP
    return max_age


def examples(tasks: list["Task"], names: dict[str, list[str]]) -> list[Example]:
    """One example per situation with a fresh headline, labelled at its decision nearest the headline (the most of the
    news's move still to come, the least noise after it)."""
    freshest: dict[tuple, "Task"] = {}
    for task in tasks:
        situation = task.situation
        if situation[1] is not None and (situation not in freshest or headline_age(task) < headline_age(freshest[situation])):
            freshest[situation] = task
    return [Example(situation, masked(situation[1][0], situation[1][1], names), _up(task, situation[1][0]))
            for situation, task in freshest.items()]


def _up(task: "Task", ticker: str) -> bool | None:
    """Whether `ticker` ended the window above its price at `task`; None where it did not move or is not known."""
    now, stock = task.observation.prices.get(ticker), task.truth.stocks.get(ticker)
    return None if not now or stock is None or stock.end == now else stock.end > now


def headline_age(task: "Task") -> int:
    """Minutes from the task's latest headline to its decision (0 without one)."""
    return latest_headline_age(task.request)


def company_names(tasks: list["Task"]) -> dict[str, list[str]]:
    """Each ticker's name as its headlines spell it: the longest capitalised word runs in at least `NAME_SHARE` of the
    headlines naming it and in under a tenth of the others' (outlets and firms run across every stock)."""
    headlines: dict[str, set[str]] = {}
    for task in tasks:
        for ticker, headline in fresh_headlines(task.request):
            headlines.setdefault(ticker, set()).add(headline)
    runs = {ticker: Counter(r for h in texts for r in set(_word_runs(h))) for ticker, texts in headlines.items()}
    names = {}
    for ticker, counts in runs.items():
        size, others = len(headlines[ticker]), [t for t in runs if t != ticker]
        found = [run for run, n in counts.items() if n >= NAME_SHARE * size and all(runs[o][run] < 0.1 * len(headlines[o]) for o in others)]
        names[ticker] = sorted((run for run in found if not any(run != longer and run in longer for longer in found)), key=len, reverse=True)
    return names


def _word_runs(headline: str) -> list[str]:
    """Every run of one to three consecutive capitalised words."""
    words = [(m.start(), m.end()) for m in WORD.finditer(headline)]
    runs = []
    for i in range(len(words)):
        for j in range(i, min(i + 3, len(words))):
            if j > i and headline[words[j - 1][1]:words[j][0]] != " ":
                break
            runs.append(headline[words[i][0]:words[j][1]])
    return runs


def masked(ticker: str, headline: str, names: dict[str, list[str]]) -> str:
    for name in names.get(ticker, []):
        headline = headline.replace(name, "the company")
    return re.sub(rf"\b{re.escape(ticker)}\b", "the stock", headline)


def _call(p: float) -> str:
    return "buy" if p >= CONFIDENT else "sell" if p <= 1 - CONFIDENT else "hold"


def _check(tasks: list["Task"], calls: dict[tuple, str], max_age: int) -> Check:
    """The decisions with a fresh headline, the trades their situation's call credits under `max_age`, and the right ones."""
    with_news = [t for t in tasks if t.situation in calls]
    trades = [(calls[t.situation], _up(t, t.situation[1][0])) for t in with_news if headline_age(t) < max_age]
    trades = [(call, up) for call, up in trades if call != "hold" and up is not None]
    return Check(len(with_news), len(trades), sum((call == "buy") == up for call, up in trades))


def _standardised(train: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(0), train.std(0) + 1e-6
    return (train - mean) / std, (other - mean) / std


def _folds(windows_of: list[str], windows: list[str]) -> np.ndarray:
    """Each example's fold: its window's, windows dealt round in time order (neighbouring hours in different folds)."""
    fold_of = {w: i % min(FOLDS, len(windows)) for i, w in enumerate(windows)}
    return np.array([fold_of[w] for w in windows_of])


def _cross_fitted(x: np.ndarray, y: np.ndarray, fold: np.ndarray, l2: float) -> np.ndarray:
    p = np.full(len(y), 0.5)
    for k in np.unique(fold):
        held, kept = fold == k, fold != k
        if len(np.unique(y[kept])) == 2:
            p[held] = _predict(_fit(x[kept], y[kept], l2), x[held])
    return p


def _fit(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Logistic regression with an L2 penalty of `l2` on the weights (not the intercept), by L-BFGS."""
    import torch

    features, labels = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def loss():
        optimiser.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(features @ w[:-1] + w[-1], labels) + l2 * (w[:-1] ** 2).sum() / 2
        value.backward()
        return value

    optimiser.step(loss)
    return w.detach().numpy()


def _predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w[:-1] + w[-1])))


def _log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


class HeadlineEmbedder:
    """The base model's mean hidden state after `EMBED_LAYER` blocks over a text's tokens (the blocks above never run)."""

    def __init__(self, base_model: str, device: str = "cpu", batch: int = 64):
        self.base_model, self.device, self.batch = base_model, device, batch

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        from babylon_rl.train.models import load_causal_lm

        model, tokenizer = load_causal_lm(self.base_model, self.device)
        tokenizer.padding_side = "right"  # positions count from each text's first token
        blocks = model.model.layers
        model.model.layers = blocks[: min(EMBED_LAYER, len(blocks))]
        captured = {}
        hook = model.model.layers[-1].register_forward_hook(lambda _m, _i, out: captured.update(h=out[0] if isinstance(out, tuple) else out))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch):
                chunk = order[start:start + self.batch]
                tokens = tokenizer([texts[i] for i in chunk], return_tensors="pt", padding=True).to(self.device)
                model.model(**tokens)
                mask = tokens["attention_mask"][..., None].float()
                out[chunk] = ((captured["h"] * mask).sum(1) / mask.sum(1)).float().cpu().numpy()
        hook.remove()
        return out
