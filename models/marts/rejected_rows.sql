/* Every raw row of trajectories, llm_call_logs and market_outcomes that is not staged,
   with the reason. Computed as a view from the raw tables and the staging checks, so that
   raw rows = staged rows + rejected rows holds per source table by construction:
     trajectories     the staging checks (staging.trajectory_checks), plus no_window (no
                      startTime and no valid windowId) and window_not_built (a window the
                      models have not been built for yet, e.g. before the project start)
     llm_call_logs    call_without_id, unknown_trajectory, trajectory_rejected,
                      call_outside_window (stamped more than call_log_margin_hours from its
                      trajectory's window), duplicate_call_id (an older row of the same
                      callId), trajectory_not_built
     market_outcomes  the staging checks (staging.market_outcome_checks), plus
                      bad_window_id and window_not_built
   Staged rows are: staging.trajectories, the newest llm_call_logs row of each call id of a
   staged trajectory stamped near its window (the calls of staging.training_chats and
   staging.trajectory_checks.llm_calls), staging.market_outcomes. */
MODEL (
  name babylon.rejected_rows,
  kind VIEW,
  grain (source_table, source_id, reason),
  audits (
    unique_combination_of_columns(columns := (source_table, source_id, reason)),
    not_null(columns := (source_table, source_id, reason))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_table TEXT,
    source_id TEXT,
    reason TEXT,
    detail TEXT
  ),
  column_descriptions (
    source_table = 'The raw table of the row: trajectories, llm_call_logs or market_outcomes',
    source_id = 'The raw row''s id',
    reason = 'Short code of why the row is not staged, e.g. steps_not_json, no_pnl, outcome_without_instrument',
    detail = 'Human-readable explanation of reason'
  )
);

WITH checked_trajectories AS (
  SELECT source_id, trajectory_id, window_start, window_end, reject_reason
  FROM staging.trajectory_checks
),

trajectory_rejects AS (
  SELECT source_id, reject_reason AS reason, reject_detail AS detail
  FROM staging.trajectory_checks
  WHERE reject_reason IS NOT NULL
  UNION ALL
  SELECT
    r."id" AS source_id,
    CASE WHEN r."startTime" IS NULL AND @window_start_from_id(r."windowId") IS NULL THEN 'no_window' ELSE 'window_not_built' END AS reason,
    CASE
      WHEN r."startTime" IS NULL AND @window_start_from_id(r."windowId") IS NULL
      THEN 'startTime is NULL and windowId is not a valid YYYY-MM-DDTHH:MM'
      ELSE 'the models have not been built for this row''s window yet'
    END AS detail
  FROM @raw_schema.trajectories AS r
  LEFT JOIN checked_trajectories AS c
    ON c.source_id = r."id"
  WHERE c.source_id IS NULL
),

staged_trajectories AS (
  SELECT source_id, trajectory_id, window_start, window_end
  FROM checked_trajectories
  WHERE reject_reason IS NULL
),

/* the log row each call keeps, as staging.training_chats and staging.trajectory_checks keep it */
staged_call_logs AS (
  SELECT call_id, log_id
  FROM @newest_call_logs(staged_trajectories) AS l
),

call_log_rejects AS (
  SELECT
    l."id" AS source_id,
    CASE
      WHEN NULLIF(l."callId", '') IS NULL THEN 'call_without_id'
      WHEN NOT EXISTS (SELECT 1 FROM @raw_schema.trajectories AS r WHERE r."trajectoryId" = l."trajectoryId") THEN 'unknown_trajectory'
      WHEN NOT EXISTS (
        SELECT 1 FROM checked_trajectories AS c WHERE c.trajectory_id = l."trajectoryId" AND c.reject_reason IS NULL
      ) AND EXISTS (SELECT 1 FROM checked_trajectories AS c WHERE c.trajectory_id = l."trajectoryId") THEN 'trajectory_rejected'
      WHEN EXISTS (
        SELECT 1 FROM checked_trajectories AS c
        WHERE c.trajectory_id = l."trajectoryId" AND c.reject_reason IS NULL
          AND NOT @logged_near_window(l."timestamp", c.window_start, c.window_end)
      ) THEN 'call_outside_window'
      WHEN EXISTS (SELECT 1 FROM staged_call_logs AS s WHERE s.call_id = l."callId") THEN 'duplicate_call_id'
      ELSE 'trajectory_not_built'
    END AS reason,
    'llm_call_logs row ' || l."id" || ' of trajectory ' || COALESCE(l."trajectoryId", 'NULL')
      || CASE WHEN l."timestamp" IS NOT NULL THEN ' stamped ' || CAST(l."timestamp" AS TEXT) ELSE '' END AS detail
  FROM @raw_schema.llm_call_logs AS l
  LEFT JOIN staged_call_logs AS s
    ON s.log_id = l."id"
  WHERE s.log_id IS NULL
),

market_outcome_rejects AS (
  SELECT source_id, reject_reason AS reason, reject_detail AS detail
  FROM staging.market_outcome_checks
  WHERE reject_reason IS NOT NULL
  UNION ALL
  SELECT
    r."id" AS source_id,
    CASE WHEN @window_start_from_id(r."windowId") IS NULL THEN 'bad_window_id' ELSE 'window_not_built' END AS reason,
    CASE
      WHEN @window_start_from_id(r."windowId") IS NULL
      THEN 'windowId ' || COALESCE('''' || r."windowId" || '''', 'NULL') || ' is not a valid YYYY-MM-DDTHH:MM'
      ELSE 'the models have not been built for this row''s window yet'
    END AS detail
  FROM @raw_schema.market_outcomes AS r
  LEFT JOIN staging.market_outcome_checks AS c
    ON c.source_id = r."id"
  WHERE c.source_id IS NULL
)

SELECT 'trajectories' AS source_table, source_id, reason, detail FROM trajectory_rejects
UNION ALL
SELECT 'llm_call_logs' AS source_table, source_id, reason, detail FROM call_log_rejects
UNION ALL
SELECT 'market_outcomes' AS source_table, source_id, reason, detail FROM market_outcome_rejects
