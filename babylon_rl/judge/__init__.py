"""Judging: one score in [0, 1] per trajectory of a dataset, relative to its window group.

Entry point for the training stage::

    from babylon_rl.judge.score import ensure_scores
    scores = ensure_scores(home, "my-dataset", judge="ruler", judge_model="gpt-4.1-mini",
                           base_url="http://127.0.0.1:8000/v1", concurrency=8)
    # polars DataFrame: trajectory_id, window_id, split, score, explanation, judge,
    # judge_model, rubric_version, no_signal  (every trajectory of train and eval)

It scores only what the cache lacks (a fully cached dataset sends no request), writes
`HOME/datasets/NAME/scores.parquet` (in the dataset's published version; + `scores.<judge>.parquet` and `scores.json`)
and raises `ScoringIncomplete` (a BabylonError) rather than returning a partial set.
Inside a running event loop use `await ensure_scores_async(...)`. Options are the
fields of `ScoreOptions` (babylon_rl.judge.options); unset LLM options come from
JUDGE_MODEL, OPENAI_BASE_URL and OPENAI_API_KEY.

Judges: `ruler` (our rubric, one chat-completions request per group, babylon_rl.judge.ruler),
`art-ruler` (ART's `ruler_score_group`, babylon_rl.judge.art_ruler), `heuristic`
(a formula of the dataset's features, babylon_rl.judge.heuristic).

The package itself imports nothing: a CLI command that does not judge loads none of it.
"""
