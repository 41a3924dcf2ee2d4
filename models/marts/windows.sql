/* One row per window (the episodes of a continuous game): its agents, activity, the
   spread of per-agent P&L, a market summary, and whether it has enough agents to train on. */
MODEL (
  name babylon.windows,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 168 -- hours per query (a week): memory follows a week of play, not the whole history
  ),
  grain window_id,
  audits (
    unique_values(columns := (window_id)),
    not_null(columns := (window_id, window_start, window_end, agents, ready))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    window_id TEXT,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    agents INT,
    trajectories INT,
    steps INT,
    llm_calls INT,
    trades INT,
    errors INT,
    pnl_mean DOUBLE,
    pnl_std DOUBLE,
    pnl_min DOUBLE,
    pnl_max DOUBLE,
    stock_count INT,
    prediction_market_count INT,
    market_mean_change_pct DOUBLE,
    ready BOOLEAN
  ),
  column_descriptions (
    window_id = 'UTC window start as YYYY-MM-DDTHH:MM',
    window_start = 'Window start (UTC)',
    window_end = 'Window end (UTC, exclusive)',
    agents = 'Distinct agents with a staged trajectory in the window',
    trajectories = 'Staged trajectories in the window',
    steps = 'Steps over all trajectories',
    llm_calls = 'LLM calls over all trajectories (stepsJson and llm_call_logs, deduplicated)',
    trades = 'Trades over all trajectories',
    errors = 'Error steps over all trajectories',
    pnl_mean = 'Mean of per-agent P&L',
    pnl_std = 'Sample std of per-agent P&L, 0 for one agent',
    pnl_min = 'Lowest per-agent P&L',
    pnl_max = 'Highest per-agent P&L',
    stock_count = 'Stocks in the window''s ground truth',
    prediction_market_count = 'Prediction markets in the window''s ground truth',
    market_mean_change_pct = 'Mean stock change % over the window',
    ready = 'agents >= @min_agents: the window can form a training group'
  )
);

WITH staged_trajectories AS (
  SELECT *
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

trajectory_figures AS (
  SELECT
    window_id,
    MAX(window_end) AS window_end,
    COUNT(*) AS trajectories,
    SUM(steps) AS steps,
    SUM(llm_calls) AS llm_calls,
    SUM(trades) AS trades,
    SUM(errors) AS errors
  FROM staged_trajectories
  GROUP BY window_id
),

agent_spread AS (
  SELECT
    window_id,
    COUNT(*) AS agents,
    AVG(pnl) AS pnl_mean,
    COALESCE(STDDEV_SAMP(pnl), 0) AS pnl_std,
    MIN(pnl) AS pnl_min,
    MAX(pnl) AS pnl_max
  FROM babylon.agent_window_pnl
  WHERE window_start BETWEEN @start_ts AND @end_ts
  GROUP BY window_id
),

market_summary AS (
  SELECT window_id, AVG(change_pct) AS market_mean_change_pct
  FROM staging.market_outcome_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
    AND instrument_kind = 'stock'
  GROUP BY window_id
)

SELECT
  c.window_id,
  c.window_start,
  COALESCE(t.window_end, c.window_start + INTERVAL 1 HOUR * @window_hours) AS window_end,
  COALESCE(a.agents, 0)::INT AS agents,
  COALESCE(t.trajectories, 0)::INT AS trajectories,
  COALESCE(t.steps, 0)::INT AS steps,
  COALESCE(t.llm_calls, 0)::INT AS llm_calls,
  COALESCE(t.trades, 0)::INT AS trades,
  COALESCE(t.errors, 0)::INT AS errors,
  a.pnl_mean::DOUBLE AS pnl_mean,
  a.pnl_std::DOUBLE AS pnl_std,
  a.pnl_min::DOUBLE AS pnl_min,
  a.pnl_max::DOUBLE AS pnl_max,
  c.stock_count,
  c.prediction_market_count,
  m.market_mean_change_pct::DOUBLE AS market_mean_change_pct,
  COALESCE(a.agents, 0) >= @min_agents AS ready
FROM babylon.window_market_context AS c
LEFT JOIN trajectory_figures AS t
  ON t.window_id = c.window_id
LEFT JOIN agent_spread AS a
  ON a.window_id = c.window_id
LEFT JOIN market_summary AS m
  ON m.window_id = c.window_id
WHERE c.window_start BETWEEN @start_ts AND @end_ts
