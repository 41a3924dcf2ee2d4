"""What only the simulator knows never reaches a label: a snapshot with every headline's sentiment and every persona
scrubbed out of its raw tables trains hindsight on the same labels (train/credit.py reads headlines and prices only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from babylon_rl.context import BabylonContext
from babylon_rl.quickstart import NAME, START, QuickstartOptions, dataset_params
from babylon_rl.settings import Home
from babylon_rl.train.credit import credit
from babylon_rl.train.decisions import load_decision_data
from tests.test_credit import _bag_of_words

NEUTRAL_SYSTEM_PROMPT = "You are a trader in the Babylon market game."


def _simulated(home: Path) -> QuickstartOptions:
    options = QuickstartOptions(windows=96, seed=5)
    ctx = BabylonContext.create(str(home))
    ctx.home.ensure()
    ctx.simulate(agents=options.agents, windows=options.windows, steps_per_window=options.steps_per_window, seed=options.seed,
                 start=START, target="duckdb", news_strength=options.news_strength, wording=options.wording)
    return options


def _built(home: Path, options: QuickstartOptions) -> None:
    ctx = BabylonContext.create(str(home))
    ctx.build()
    ctx.dataset_build(dataset_params(options), force=True)


def _without_personas(value):
    """The JSON value with every `persona` key dropped and every system message's persona text replaced."""
    if isinstance(value, dict):
        if value.get("role") == "system":
            value = value | {"content": NEUTRAL_SYSTEM_PROMPT}
        return {k: _without_personas(v) for k, v in value.items() if k != "persona"}
    if isinstance(value, list):
        return [_without_personas(v) for v in value]
    return value


def _scrub(warehouse: Path) -> None:
    """Every headline's sentiment label and every persona (names, system prompts) out of the raw tables."""
    with duckdb.connect(str(warehouse)) as conn:
        assert _labelled(conn) > 0, "the simulator's labels must be there to scrub"
        outcomes = conn.execute('SELECT "id", "newsEvents" FROM raw.market_outcomes WHERE "newsEvents" IS NOT NULL').fetchall()
        conn.executemany('UPDATE raw.market_outcomes SET "newsEvents" = ? WHERE "id" = ?',
                         [(json.dumps([{k: v for k, v in e.items() if k != "sentiment"} for e in json.loads(news)]), i)
                          for i, news in outcomes])
        steps = conn.execute('SELECT "id", "stepsJson" FROM raw.trajectories').fetchall()
        conn.executemany('UPDATE raw.trajectories SET "stepsJson" = ? WHERE "id" = ?',
                         [(json.dumps(_without_personas(json.loads(s))), i) for i, s in steps])
        calls = conn.execute('SELECT "id", "messagesJson" FROM raw.llm_call_logs').fetchall()
        conn.executemany('UPDATE raw.llm_call_logs SET "systemPrompt" = ?, "messagesJson" = ? WHERE "id" = ?',
                         [(NEUTRAL_SYSTEM_PROMPT, json.dumps(_without_personas(json.loads(m))) if m else m, i) for i, m in calls])
        assert _labelled(conn) == 0


def _labelled(conn) -> int:
    """Rows that carry a headline's sentiment or a persona."""
    return conn.execute("""SELECT (SELECT count(*) FROM raw.market_outcomes WHERE "newsEvents" LIKE '%"sentiment"%')
                                + (SELECT count(*) FROM raw.trajectories WHERE "stepsJson" LIKE '%persona%')""").fetchone()[0]


def _labels(home: Path) -> tuple[list[tuple], dict]:
    data = load_decision_data(Home.resolve(home), NAME)
    found = credit(data.train, data.validation, _bag_of_words)
    return [(t.trajectory_id, t.situation, t.news_direction) for t in found.credited(data.train)], found.to_dict()


def test_a_snapshot_without_sentiment_or_personas_trains_on_the_same_labels(tmp_path: Path):
    kept, scrubbed = tmp_path / "kept", tmp_path / "scrubbed"
    options = _simulated(kept)
    shutil.copytree(kept, scrubbed)
    _scrub(Home.resolve(scrubbed).warehouse)
    for home in (kept, scrubbed):
        _built(home, options)

    labels, summary = _labels(kept)
    assert summary["train"]["credited"] > 0 and summary["max_age"] > 0, "the credit must call trades here, or the test shows nothing"
    assert any(direction in ("buy", "sell") for _, _, direction in labels)
    assert _labels(scrubbed) == (labels, summary)
