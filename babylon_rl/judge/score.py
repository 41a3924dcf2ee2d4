"""Scoring a dataset: every window group judged once, cached, then written out as a whole.

`score_dataset` (sync) / `score_dataset_async` judge the groups missing from the cache
concurrently (an asyncio semaphore of `concurrency`), commit every finished group to
the cache at once, and write `scores.parquet` (temp file + atomic rename) only when
every group of the dataset has scores; otherwise they raise `ScoringIncomplete`
naming how many groups were scored, and a re-run resumes from the cache.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import polars as pl

from babylon_rl.errors import BabylonError, ConfigError
from babylon_rl.judge.base import GroupOutcome, Judge, LLMSettings
from babylon_rl.judge.cache import JudgeCache, Score, group_key
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.judge.dataset import WindowGroup, load_groups
from babylon_rl.judge.options import JudgeKind, ScoreOptions
from babylon_rl.settings import Home, mask_url, scrub

SCORE_COLUMNS = ("trajectory_id", "window_id", "split", "score", "explanation", "judge", "judge_model",
                 "rubric_version", "no_signal")


class ScoringIncomplete(BabylonError):
    """Some groups could not be scored; nothing was written as complete."""


@dataclass
class ScoreRun:
    """What one scoring run did; `path` is scores.parquet, set only when every group was scored."""

    dataset: str
    judge: str
    judge_model: str
    rubric_version: str
    groups: int
    trajectories: int
    cached_groups: int = 0
    judged_groups: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    truncated: int = 0
    cost: float = 0.0
    no_signal_groups: int = 0
    path: Path | None = None
    judge_path: Path | None = None  # scores.<judge>.parquet of the same run

    @property
    def scored_groups(self) -> int:
        return self.cached_groups + self.judged_groups


def make_judge(options: ScoreOptions) -> Judge:
    if options.judge == "heuristic":
        from babylon_rl.judge.heuristic import HeuristicJudge

        return HeuristicJudge()
    settings = llm_settings(options)
    if options.judge == "art-ruler":
        from babylon_rl.judge.art_ruler import ArtRulerJudge

        return ArtRulerJudge(settings)
    from babylon_rl.judge.ruler import RulerJudge

    return RulerJudge(settings)


def llm_settings(options: ScoreOptions) -> LLMSettings:
    key = options.api_key.get_secret_value() if options.api_key else None
    if not key and not options.base_url:
        raise ConfigError(f"--judge {options.judge} needs an endpoint: set OPENAI_API_KEY (OpenAI) or pass "
                          "--judge-base-url URL (any OpenAI-compatible server), or use --judge heuristic")
    if not options.judge_model:
        raise ConfigError(f"--judge {options.judge} needs a judge model: pass --judge-model NAME or set JUDGE_MODEL")
    return LLMSettings(model=options.judge_model, base_url=options.base_url, api_key=key, timeout=options.timeout,
                       max_retries=options.max_retries, attempts=options.attempts,
                       max_judge_tokens=options.max_judge_tokens)


def validate(home: Home, name: str, options: ScoreOptions) -> None:
    """Raise the one-line ConfigError for an unknown dataset or a missing endpoint/model, before any work."""
    Dataset.open(home, name)
    resolved = options.resolved()
    if resolved.judge != "heuristic":
        llm_settings(resolved)


class ScoreTally:
    """Counts for the progress display and the summary."""

    def __init__(self, run: ScoreRun, options: ScoreOptions, on_update: Callable[[ScoreRun], None]) -> None:
        self.run, self.options, self.on_update = run, options, on_update

    def record(self, window_id: str, outcome: GroupOutcome) -> None:
        run = self.run
        run.requests += outcome.requests
        run.tokens_in += outcome.prompt_tokens
        run.tokens_out += outcome.completion_tokens
        run.cost = (run.tokens_in * self.options.price_in + run.tokens_out * self.options.price_out) / 1e6
        if outcome.scores is None:
            run.failed[window_id] = outcome.error or "unknown error"
        else:
            run.judged_groups += 1
            run.truncated += outcome.truncated
        self.on_update(run)


async def _judge_pending(judge: Judge, pending: list[tuple[str, WindowGroup]], cache: JudgeCache, tracker: ScoreTally,
                         concurrency: int, secret: str | None) -> dict[str, dict[str, Score]]:
    semaphore = asyncio.Semaphore(concurrency)
    meta = {"judge": judge.name, "judge_model": judge.model, "rubric_version": judge.rubric_version}
    done: dict[str, dict[str, Score]] = {}

    async def one(key: str, group: WindowGroup) -> None:
        async with semaphore:
            try:
                outcome = await judge.score_group(group)
            except Exception as exc:  # noqa: BLE001 - one broken group must not stop the others
                outcome = GroupOutcome(error=scrub(f"{type(exc).__name__}: {exc}", secret))
        if outcome.scores is not None:
            cache.put(key, group, outcome.scores, meta, (outcome.prompt_tokens, outcome.completion_tokens))
            done[group.window_id] = outcome.scores
        tracker.record(group.window_id, outcome)

    try:
        await asyncio.gather(*(one(key, group) for key, group in pending))
    finally:
        await judge.aclose()
    return done


def _frame(groups: list[WindowGroup], scores: dict[str, dict[str, Score]], judge: Judge) -> pl.DataFrame:
    rows = []
    for group in groups:
        by_id = scores[group.window_id]
        flat = len({round(s.score, 9) for s in by_id.values()}) <= 1
        for traj in group.trajectories:
            score = by_id[traj.trajectory_id]
            rows.append({"trajectory_id": traj.trajectory_id, "window_id": group.window_id, "split": traj.split,
                         "score": float(score.score), "explanation": score.explanation, "judge": judge.name,
                         "judge_model": judge.model, "rubric_version": judge.rubric_version, "no_signal": flat})
    schema = {"trajectory_id": pl.Utf8, "window_id": pl.Utf8, "split": pl.Utf8, "score": pl.Float64,
              "explanation": pl.Utf8, "judge": pl.Utf8, "judge_model": pl.Utf8, "rubric_version": pl.Utf8,
              "no_signal": pl.Boolean}
    return pl.DataFrame(rows, schema=schema).sort("window_id", "trajectory_id")


def _summary(run: ScoreRun, options: ScoreOptions, manifest: dict) -> dict:
    return {
        "dataset": run.dataset, "dataset_content_hash": manifest.get("content_hash"),
        "judge": run.judge, "judge_model": run.judge_model, "rubric_version": run.rubric_version,
        "endpoint": mask_url(options.base_url) if options.base_url else ("https://api.openai.com/v1" if run.judge != "heuristic" else None),
        "groups": run.groups, "trajectories": run.trajectories, "groups_scored": run.scored_groups,
        "groups_from_cache": run.cached_groups, "groups_failed": len(run.failed), "requests": run.requests,
        "tokens_in": run.tokens_in, "tokens_out": run.tokens_out, "price_in_per_1m": options.price_in,
        "price_out_per_1m": options.price_out, "est_cost_usd": round(run.cost, 6),
        "truncated_trajectories": run.truncated, "no_signal_groups": run.no_signal_groups,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


async def score_dataset_async(home: Home, name: str, options: ScoreOptions,
                              on_update: Callable[[ScoreRun], None] = lambda run: None,
                              on_start: Callable[[ScoreRun], None] = lambda run: None) -> ScoreRun:
    """Judge every window group of dataset `name` missing from the cache; write scores when all are scored."""
    options = options.resolved()
    dataset = Dataset.open(home, name)
    judge = make_judge(options)
    groups = load_groups(dataset)
    run = ScoreRun(name, judge.name, judge.model, judge.rubric_version, len(groups),
                   sum(len(g.trajectories) for g in groups))
    cache = JudgeCache(home.judge_cache)
    try:
        scores, pending = {}, []
        for group in groups:
            key = group_key(group, judge.name, judge.model, judge.rubric_version)
            cached = cache.get(key, group)
            if cached is None:
                pending.append((key, group))
            else:
                scores[group.window_id] = cached
        run.cached_groups = len(scores)
        on_start(run)
        secret = options.api_key.get_secret_value() if options.api_key else None
        scores.update(await _judge_pending(judge, pending, cache, ScoreTally(run, options, on_update),
                                           options.concurrency, secret))
    finally:
        cache.close()
    if run.failed:
        raise ScoringIncomplete(_incomplete_message(run))
    frame = _frame(groups, scores, judge)
    run.no_signal_groups = frame.filter(pl.col("no_signal")).select("window_id").n_unique()
    run.path = dataset.write_scores(judge.name, frame, _summary(run, options, dataset.manifest))
    run.judge_path = dataset.scores_path(judge.name)
    return run


def _incomplete_message(run: ScoreRun) -> str:
    window, reason = sorted(run.failed.items())[0]
    return (f"scored {run.scored_groups} of {run.groups} groups of dataset {run.dataset!r}; {len(run.failed)} failed "
            f"(e.g. window {window}: {reason}); no scores.parquet written; re-run the same command to resume "
            f"from the cache (only the failed groups are sent again)")


def score_dataset(home: Home, name: str, options: ScoreOptions, **callbacks) -> ScoreRun:
    return asyncio.run(score_dataset_async(home, name, options, **callbacks))


def ensure_scores(home: Home | str | Path, dataset_name: str, judge: JudgeKind = "heuristic", **options) -> pl.DataFrame:
    """The dataset's complete scores for `judge` as a DataFrame (SCORE_COLUMNS), scoring what is not cached.

    Raises ScoringIncomplete when some groups cannot be scored. Must not run inside an event loop;
    use `ensure_scores_async` there.
    """
    resolved = home if isinstance(home, Home) else Home.resolve(home)
    run = score_dataset(resolved, dataset_name, ScoreOptions(judge=judge, **options))
    return _judge_scores(run)


async def ensure_scores_async(home: Home | str | Path, dataset_name: str, judge: JudgeKind = "heuristic",
                              **options) -> pl.DataFrame:
    resolved = home if isinstance(home, Home) else Home.resolve(home)
    run = await score_dataset_async(resolved, dataset_name, ScoreOptions(judge=judge, **options))
    return _judge_scores(run)


def _judge_scores(run: ScoreRun) -> pl.DataFrame:
    """The run's scores.<judge>.parquet, from the version it was written into."""
    return pl.read_parquet(run.judge_path)  # type: ignore[arg-type]


def run_as_dict(run: ScoreRun) -> dict:
    data = asdict(run)
    data["path"] = str(run.path) if run.path else None
    return data
