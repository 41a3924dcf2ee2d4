/* One row per trajectory usable for training (isTrainingData and not isEvaluation): the
   chat exactly as the agent saw and answered it, with its outcome and its standing in the
   window. `messages` is a JSON array of {role, content}: the agent's system prompt, then
   for every LLM call of every step, in order, the call's input turns (the non-system turns
   of its `messages` where logged, else its userPrompt) and its answer (assistant). A system
   turn is repeated only where a call's system prompt changes. No ground truth enters here. */
MODEL (
  name babylon.training_samples,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 72 -- hours per query (three days): ordering and joining the chats of a week comes near the memory limit
  ),
  grain trajectory_id,
  depends_on (babylon.windows),
  audits (
    unique_values(columns := (trajectory_id)),
    not_null(columns := (trajectory_id, source_id, window_id, agent_id, messages, pnl)),
    samples_have_a_window
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    trajectory_id TEXT,
    source_id TEXT,
    window_id TEXT,
    window_start TIMESTAMP,
    agent_id TEXT,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    messages TEXT,
    llm_calls INT,
    steps INT,
    actions INT,
    trades INT,
    wins INT,
    errors INT,
    pnl DOUBLE,
    pnl_rank INT,
    pnl_zscore DOUBLE,
    win_rate DOUBLE,
    window_agents INT,
    total_reward DOUBLE,
    final_status TEXT,
    used_in_training BOOLEAN,
    trained_in_batch TEXT
  ),
  column_descriptions (
    trajectory_id = 'trajectories.trajectoryId',
    source_id = 'trajectories.id',
    window_id = 'Window id YYYY-MM-DDTHH:MM',
    window_start = 'Window start (UTC)',
    agent_id = 'The agent',
    start_time = 'startTime',
    end_time = 'endTime',
    messages = 'JSON array of {role, content}: system prompt, then every LLM call''s input turns and answer, in order',
    llm_calls = 'LLM calls in messages',
    steps = 'Steps of the trajectory',
    actions = 'Steps with an action (HOLD included)',
    trades = 'Successful actions other than HOLD',
    wins = 'Trades with result.pnl > 0',
    errors = 'Steps whose action failed or has an error',
    pnl = 'The trajectory''s P&L',
    pnl_rank = 'The agent''s P&L rank in the window (1 = best)',
    pnl_zscore = 'The agent''s P&L z-score in the window',
    win_rate = 'The agent''s wins / trades in the window',
    window_agents = 'Agents in the window',
    total_reward = 'totalReward as logged',
    final_status = 'finalStatus',
    used_in_training = 'usedInTraining: a batch already trained on it',
    trained_in_batch = 'trainedInBatch'
  )
);

WITH eligible_trajectories AS (
  SELECT *
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
    AND is_training_data
    AND NOT is_evaluation
),

calls_in_order AS (
  SELECT
    c.source_id,
    c.step_position,
    c.step_number,
    c.call_index,
    c.call_time,
    c.call_id,
    c.system_prompt,
    c.input_turns_json,
    c.user_prompt,
    c.response,
    LAG(c.system_prompt) OVER (
      PARTITION BY c.source_id
      ORDER BY c.step_position NULLS LAST, c.step_number, c.call_index NULLS LAST, c.call_time, c.call_id
    ) AS previous_system_prompt
  FROM staging.llm_calls AS c
  JOIN eligible_trajectories AS t
    ON t.source_id = c.source_id
  WHERE c.window_start BETWEEN @start_ts AND @end_ts
),

call_turns AS (
  SELECT
    source_id,
    step_position,
    step_number,
    call_index,
    call_time,
    call_id,
    COALESCE(
      CASE
        WHEN system_prompt IS NOT NULL AND system_prompt IS DISTINCT FROM previous_system_prompt
        THEN '{"role": "system", "content": ' || @json_quote(system_prompt) || '}, '
      END,
      ''
    )
    || COALESCE(
      /* staging.llm_calls leaves input_turns_json NULL when the input is just the user prompt */
      CASE WHEN input_turns_json IS NULL THEN '{"role": "user", "content": ' || @json_quote(user_prompt) || '}, ' END,
      NULLIF(SUBSTRING(input_turns_json, 2, LENGTH(input_turns_json) - 2), '') || ', ',
      ''
    )
    || '{"role": "assistant", "content": ' || @json_quote(COALESCE(response, '')) || '}' AS turns
  FROM calls_in_order
),

trajectory_messages AS (
  SELECT
    source_id,
    COUNT(*) AS llm_calls,
    '[' || STRING_AGG(
      turns, ', ' ORDER BY step_position NULLS LAST, step_number, call_index NULLS LAST, call_time, call_id
    ) || ']' AS messages
  FROM call_turns
  GROUP BY source_id
),

window_agents AS (
  SELECT window_id, COUNT(*) AS agents
  FROM babylon.agent_window_pnl
  WHERE window_start BETWEEN @start_ts AND @end_ts
  GROUP BY window_id
)

SELECT
  t.trajectory_id,
  t.source_id,
  t.window_id,
  t.window_start,
  t.agent_id,
  t.start_time,
  t.end_time,
  COALESCE(m.messages, '[]') AS messages,
  COALESCE(m.llm_calls, 0)::INT AS llm_calls,
  t.steps,
  t.actions,
  t.trades,
  t.wins,
  t.errors,
  t.pnl,
  a.pnl_rank,
  a.pnl_zscore,
  a.win_rate,
  w.agents::INT AS window_agents,
  t.total_reward,
  t.final_status,
  t.used_in_training,
  t.trained_in_batch
FROM eligible_trajectories AS t
LEFT JOIN trajectory_messages AS m
  ON m.source_id = t.source_id
LEFT JOIN babylon.agent_window_pnl AS a
  ON a.window_id = t.window_id AND a.agent_id = t.agent_id AND a.window_start BETWEEN @start_ts AND @end_ts
LEFT JOIN window_agents AS w
  ON w.window_id = t.window_id
