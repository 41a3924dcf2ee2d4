/* One row per (window, agent): the agent's P&L and activity in the window, and where it
   stands in its group (rank and z-score of P&L among the window's agents). */
MODEL (
  name babylon.agent_window_pnl,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 168 -- hours per query (a week): memory follows a week of play, not the whole history
  ),
  grain (window_id, agent_id),
  audits (
    unique_combination_of_columns(columns := (window_id, agent_id)),
    not_null(columns := (window_id, window_start, agent_id, pnl, pnl_rank)),
    pnl_reconciles_with_trajectories
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    window_id TEXT,
    window_start TIMESTAMP,
    agent_id TEXT,
    trajectories INT,
    pnl DOUBLE,
    trades INT,
    wins INT,
    win_rate DOUBLE,
    actions INT,
    errors INT,
    pnl_rank INT,
    pnl_zscore DOUBLE
  ),
  column_descriptions (
    window_id = 'Window id YYYY-MM-DDTHH:MM',
    window_start = 'Window start (UTC)',
    agent_id = 'The agent',
    trajectories = 'The agent''s trajectories in the window (normally 1)',
    pnl = 'Sum of the trajectories'' P&L (finalPnL, else the last step''s agentPnL)',
    trades = 'Successful actions other than HOLD',
    wins = 'Trades with result.pnl > 0',
    win_rate = 'wins / trades, NULL without trades',
    actions = 'Steps with an action (HOLD included)',
    errors = 'Steps whose action failed or has an error',
    pnl_rank = '1 = best P&L in the window (RANK: ties share a rank)',
    pnl_zscore = '(pnl - window mean) / window sample std, 0 when the std is 0 or undefined'
  )
);

WITH staged_trajectories AS (
  SELECT *
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

agent_figures AS (
  SELECT
    window_id,
    window_start,
    agent_id,
    COUNT(*) AS trajectories,
    SUM(pnl) AS pnl,
    SUM(trades) AS trades,
    SUM(wins) AS wins,
    SUM(actions) AS actions,
    SUM(errors) AS errors
  FROM staged_trajectories
  GROUP BY window_id, window_start, agent_id
),

agent_figures_in_group AS (
  SELECT
    *,
    AVG(pnl) OVER (PARTITION BY window_id) AS window_pnl_mean,
    STDDEV_SAMP(pnl) OVER (PARTITION BY window_id) AS window_pnl_std,
    RANK() OVER (PARTITION BY window_id ORDER BY pnl DESC) AS pnl_rank
  FROM agent_figures
)

SELECT
  window_id,
  window_start,
  agent_id,
  trajectories::INT AS trajectories,
  pnl::DOUBLE AS pnl,
  trades::INT AS trades,
  wins::INT AS wins,
  CASE WHEN trades > 0 THEN wins::DOUBLE / trades END AS win_rate,
  actions::INT AS actions,
  errors::INT AS errors,
  pnl_rank::INT AS pnl_rank,
  CASE
    WHEN COALESCE(window_pnl_std, 0) = 0 THEN 0.0
    ELSE (pnl - window_pnl_mean) / window_pnl_std
  END::DOUBLE AS pnl_zscore
FROM agent_figures_in_group
