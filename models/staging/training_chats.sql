/* One row per trajectory usable for training (isTrainingData and not isEvaluation): the
   chat exactly as the agent saw and answered it, with its outcome; babylon.training_samples
   adds its standing in the window. A table of its own, so that a change of the P&L marts
   does not parse the calls again. `messages` is a JSON array of {role, content}: the
   agent's system prompt, then for every LLM call of every step, in order, the call's input
   turns (the non-system turns of its `messages` where logged, else its userPrompt) and its
   answer (assistant). A system turn is repeated only where a call's system prompt changes.
   No ground truth enters here.
   The calls are read here, batch by batch, and not stored on their own: the calls of
   stepsJson (@parse_step_calls, every call field) and the rows of llm_call_logs, merged by
   call id (docs/TABLES.md "Call ids": the call's own callId in the plugin shape, else
   {trajectoryId}:{stepNumber}:{index}). Values from stepsJson win; llm_call_logs fills
   what a step left out and adds calls the steps lack. llm_call_logs is deduplicated on ids
   and small columns only, and its prompt text is read only for the calls that need it. A
   plugin-shape call without systemPrompt takes the system turn of its messages. A log row
   stamped more than @call_log_margin_hours from its trajectory's window is not used
   (babylon.rejected_rows: call_outside_window), and each batch reads only the logs stamped
   near its own days. */
MODEL (
  name staging.training_chats,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 120 -- hours per query (five days): the calls' join, order and aggregate stay under the memory limit
  ),
  grain trajectory_id,
  audits (
    unique_values(columns := (trajectory_id)),
    not_null(columns := (trajectory_id, source_id, window_id, window_start, agent_id, messages, pnl))
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
    total_reward = 'totalReward as logged',
    final_status = 'finalStatus',
    used_in_training = 'usedInTraining: a batch already trained on it',
    trained_in_batch = 'trainedInBatch'
  )
);

/* On one thread once DuckDB would parse stepsJson on more: see macros/threads.py */
@single_threaded_parse();

WITH eligible_trajectories AS (
  SELECT *
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
    AND is_training_data
    AND NOT is_evaluation
),

trajectory_calls_parsed AS (
  SELECT t.source_id, t.trajectory_id, @parse_step_calls(r."stepsJson") AS steps
  FROM @trajectories_in_range() AS r
  JOIN eligible_trajectories AS t
    ON t.source_id = r."id"
),

step_call_lists AS (
  SELECT source_id, trajectory_id, @unnest_with_position(steps, step, step_position)
  FROM trajectory_calls_parsed
),

step_calls_unnested AS (
  SELECT
    source_id,
    trajectory_id,
    step_position,
    @step_number(step, step_position) AS step_number,
    @unnest_with_position(@call_list(step), llm_call, call_index)
  FROM step_call_lists
),

step_calls AS (
  SELECT
    @call_id(llm_call, trajectory_id, step_number, call_index) AS call_id,
    source_id,
    step_position,
    step_number,
    call_index,
    @safe_double(@field(llm_call, 'timestamp')) AS epoch_ms,
    @field(llm_call, 'systemPrompt') AS system_prompt,
    @field(llm_call, 'userPrompt') AS user_prompt,
    @chat_turns_of(llm_call) AS chat_turns,
    @field(llm_call, 'response') AS response
  FROM step_calls_unnested
),

logged_calls AS (
  SELECT call_id, log_id, source_id, @safe_int(SUBSTRING(step_id, LENGTH(trajectory_id) + 2)) AS step_number, call_time
  FROM @newest_call_logs(eligible_trajectories, near_batch := TRUE) AS l
),

/* one join for both kinds of call: a step call with its log row, or a call only logged */
calls_matched AS (
  SELECT
    COALESCE(s.call_id, l.call_id) AS call_id,
    COALESCE(s.source_id, l.source_id) AS source_id,
    s.step_position,
    CASE WHEN s.call_id IS NOT NULL THEN s.step_number ELSE l.step_number END AS step_number,
    s.call_index,
    COALESCE(
      CASE
        WHEN s.epoch_ms BETWEEN 0 AND 253402300799999
        THEN TIMESTAMP '1970-01-01 00:00:00' + INTERVAL 1 MILLISECOND * s.epoch_ms
      END,
      l.call_time
    ) AS call_time,
    s.system_prompt AS step_system_prompt,
    s.user_prompt AS step_user_prompt,
    s.chat_turns AS step_chat_turns,
    s.response AS step_response,
    s.call_id IS NOT NULL AS in_steps,
    l.log_id
  FROM step_calls AS s
  FULL OUTER JOIN logged_calls AS l
    ON l.call_id = s.call_id AND l.source_id = s.source_id
),

/* the logged text, read only for calls only logged and step calls without their input */
logged_text AS (
  SELECT
    l."id" AS log_id,
    l."systemPrompt" AS system_prompt,
    l."userPrompt" AS user_prompt,
    @chat_turns_from_text(l."messagesJson") AS chat_turns,
    l."response" AS response
  FROM @call_logs_near_batch() AS l
  WHERE l."id" IN (
    SELECT log_id
    FROM calls_matched
    WHERE log_id IS NOT NULL AND (NOT in_steps OR (step_user_prompt IS NULL AND step_chat_turns IS NULL))
  )
),

calls_merged AS (
  SELECT
    c.source_id,
    c.step_position,
    c.step_number,
    c.call_index,
    c.call_time,
    c.call_id,
    COALESCE(
      c.step_system_prompt, t.system_prompt, @system_turn_content(COALESCE(c.step_chat_turns, t.chat_turns))
    ) AS system_prompt,
    /* the input turns: the non-system turns of the call's messages, else its user prompt */
    @non_system_turns_json(COALESCE(c.step_chat_turns, t.chat_turns)) AS input_turns_json,
    COALESCE(c.step_user_prompt, t.user_prompt) AS user_prompt,
    COALESCE(c.step_response, t.response) AS response
  FROM calls_matched AS c
  LEFT JOIN logged_text AS t
    ON t.log_id = c.log_id
),

calls_in_order AS (
  SELECT
    *,
    LAG(system_prompt) OVER (
      PARTITION BY source_id
      ORDER BY step_position NULLS LAST, step_number, call_index NULLS LAST, call_time, call_id
    ) AS previous_system_prompt
  FROM calls_merged
),

call_turns AS (
  SELECT
    *,
    COALESCE(
      CASE
        WHEN system_prompt IS NOT NULL AND system_prompt IS DISTINCT FROM previous_system_prompt
        THEN '{"role": "system", "content": ' || @json_quote(system_prompt) || '}, '
      END,
      ''
    )
    || COALESCE(
      NULLIF(SUBSTRING(input_turns_json, 2, LENGTH(input_turns_json) - 2), '') || ', ',
      CASE WHEN input_turns_json IS NULL THEN '{"role": "user", "content": ' || @json_quote(user_prompt) || '}, ' END,
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
  t.total_reward,
  t.final_status,
  t.used_in_training,
  t.trained_in_batch
FROM eligible_trajectories AS t
LEFT JOIN trajectory_messages AS m
  ON m.source_id = t.source_id;

@restore_threads();
