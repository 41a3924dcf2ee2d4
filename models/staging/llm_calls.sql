/* One row per LLM call of a staged trajectory: the calls of stepsJson and the rows of
   llm_call_logs, deduplicated by call id (docs/TABLES.md "Call ids": the call's own
   callId in the plugin shape, else {trajectoryId}:{stepNumber}:{index}). Values from
   stepsJson win; llm_call_logs fills what a step left out and adds calls the steps lack.
   The calls are read from stepsJson (@parse_step_calls) for the steps staging.step_rows
   found calls in; llm_call_logs is deduplicated on ids and small columns only, and its
   prompt text is read only for the calls that need it. A plugin-shape call without
   systemPrompt takes the system turn of its messages. A call is made while its trajectory
   plays: a log row whose timestamp lies more than @call_log_margin_hours from its
   trajectory's window is not staged (babylon.rejected_rows: call_outside_window), and each
   batch reads only the logs stamped near its own days, not the whole table. */
MODEL (
  name staging.llm_calls,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 336 -- hours per query (two weeks): memory follows two weeks of play, not the whole history
  ),
  grain call_id,
  audits (
    unique_values(columns := (call_id)),
    not_null(columns := (call_id, source_id, trajectory_id, window_start))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    call_id TEXT,
    source_id TEXT,
    trajectory_id TEXT,
    window_start TIMESTAMP,
    step_position INT,
    step_number BIGINT,
    call_index INT,
    call_time TIMESTAMP,
    model TEXT,
    purpose TEXT,
    action_type TEXT,
    system_prompt TEXT,
    user_prompt TEXT,
    input_turns_json TEXT,
    response TEXT,
    reasoning TEXT,
    temperature DOUBLE,
    max_tokens INT,
    in_steps BOOLEAN,
    log_id TEXT
  ),
  column_descriptions (
    call_id = 'callId, or {trajectoryId}:{stepNumber}:{index} for legacy-shape calls',
    source_id = 'trajectories.id of the call''s trajectory',
    trajectory_id = 'trajectories.trajectoryId',
    window_start = 'The trajectory''s window start',
    step_position = 'Position of the step in stepsJson (NULL when the step is unknown)',
    step_number = 'The step''s stepNumber',
    call_index = 'Position of the call in the step''s llmCalls (NULL for calls only in llm_call_logs)',
    call_time = 'The call''s timestamp',
    model = 'Model name',
    purpose = 'action / reasoning / evaluation / response / other',
    action_type = 'The action the call decided, when logged',
    system_prompt = 'The system prompt (systemPrompt, else the system turn of messages)',
    user_prompt = 'userPrompt',
    input_turns_json = 'The call''s input turns without system turns, as JSON array text of {"role", "content"} objects (its messages when logged); NULL when they are just one user turn holding user_prompt, which is not stored twice',
    response = 'The model''s answer',
    reasoning = 'Reasoning, when logged',
    temperature = 'Sampling temperature',
    max_tokens = 'maxTokens',
    in_steps = 'TRUE when the call is in stepsJson',
    log_id = 'llm_call_logs.id of the same call, NULL when not logged there'
  )
);

/* On one thread once DuckDB would parse stepsJson on more: see macros/threads.py */
@single_threaded_parse();

WITH staged_trajectories AS (
  SELECT source_id, trajectory_id, window_start, window_end
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

steps_with_calls AS (
  SELECT source_id, step_position, step_number
  FROM staging.step_rows
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND llm_call_count > 0
),

/* stepsJson is read a second time here, for the calls only (see macros/steps.py) */
trajectory_calls_parsed AS (
  SELECT t.source_id, t.trajectory_id, t.window_start, @parse_step_calls(r."stepsJson") AS steps
  FROM @trajectories_in_range() AS r
  JOIN staged_trajectories AS t
    ON t.source_id = r."id"
),

step_call_lists AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    @unnest_with_position(steps, step, step_position)
  FROM trajectory_calls_parsed
),

step_calls_unnested AS (
  SELECT
    l.source_id,
    l.trajectory_id,
    l.window_start,
    l.step_position,
    s.step_number,
    @unnest_with_position(@call_list(l.step), llm_call, call_index)
  FROM step_call_lists AS l
  JOIN steps_with_calls AS s
    ON s.source_id = l.source_id AND s.step_position = l.step_position
),

step_calls AS (
  SELECT
    COALESCE(
      NULLIF(@field(llm_call, 'callId'), ''),
      trajectory_id || ':' || CAST(step_number AS TEXT) || ':' || CAST(call_index AS TEXT)
    ) AS call_id,
    source_id,
    trajectory_id,
    window_start,
    step_position,
    step_number,
    call_index,
    @safe_double(@field(llm_call, 'timestamp')) AS epoch_ms,
    @field(llm_call, 'model') AS model,
    @field(llm_call, 'purpose') AS purpose,
    @field(llm_call, 'actionType') AS action_type,
    @field(llm_call, 'systemPrompt') AS system_prompt,
    @field(llm_call, 'userPrompt') AS user_prompt,
    @chat_turns_of(llm_call) AS chat_turns,
    @field(llm_call, 'response') AS response,
    @field(llm_call, 'reasoning') AS reasoning,
    @safe_double(@field(llm_call, 'temperature')) AS temperature,
    @safe_int(@field(llm_call, 'maxTokens')) AS max_tokens
  FROM step_calls_unnested
),

logged_call_ids AS (
  SELECT
    l."callId" AS call_id,
    l."id" AS log_id,
    t.source_id,
    t.trajectory_id,
    t.window_start,
    @safe_int(SUBSTRING(l."stepId", LENGTH(t.trajectory_id) + 2)) AS step_number,
    l."timestamp" AS call_time,
    l."model" AS model,
    l."purpose" AS purpose,
    l."actionType" AS action_type,
    l."temperature" AS temperature,
    l."maxTokens" AS max_tokens,
    ROW_NUMBER() OVER (PARTITION BY l."callId" ORDER BY l."createdAt" DESC, l."id" DESC) AS newest_first
  FROM @call_logs_near_batch() AS l
  JOIN staged_trajectories AS t
    ON t.trajectory_id = l."trajectoryId"
  WHERE NULLIF(l."callId", '') IS NOT NULL
    AND @logged_near_window(l."timestamp", t.window_start, t.window_end)
),

logged_calls_newest AS (
  SELECT *
  FROM logged_call_ids
  WHERE newest_first = 1
),

/* one join for both kinds of call: a step call with its log row, or a call only logged */
calls_matched AS (
  SELECT
    COALESCE(s.call_id, l.call_id) AS call_id,
    COALESCE(s.source_id, l.source_id) AS source_id,
    COALESCE(s.trajectory_id, l.trajectory_id) AS trajectory_id,
    COALESCE(s.window_start, l.window_start) AS window_start,
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
    COALESCE(s.model, l.model) AS model,
    COALESCE(s.purpose, l.purpose) AS purpose,
    COALESCE(s.action_type, l.action_type) AS action_type,
    s.system_prompt AS step_system_prompt,
    s.user_prompt AS step_user_prompt,
    s.chat_turns AS step_chat_turns,
    s.response AS step_response,
    s.reasoning AS step_reasoning,
    COALESCE(s.temperature, l.temperature) AS temperature,
    COALESCE(s.max_tokens, l.max_tokens) AS max_tokens,
    s.call_id IS NOT NULL AS in_steps,
    l.log_id
  FROM step_calls AS s
  FULL OUTER JOIN logged_calls_newest AS l
    ON l.call_id = s.call_id AND l.source_id = s.source_id
),

/* the logged text, read only for calls only logged and step calls without their input */
logged_text AS (
  SELECT
    l."id" AS log_id,
    l."systemPrompt" AS system_prompt,
    l."userPrompt" AS user_prompt,
    @chat_turns_from_text(l."messagesJson") AS chat_turns,
    l."response" AS response,
    l."reasoning" AS reasoning
  FROM @call_logs_near_batch() AS l
  WHERE l."id" IN (
    SELECT log_id
    FROM calls_matched
    WHERE log_id IS NOT NULL AND (NOT in_steps OR (step_user_prompt IS NULL AND step_chat_turns IS NULL))
  )
),

calls_merged AS (
  SELECT
    c.*,
    COALESCE(c.step_system_prompt, t.system_prompt) AS system_prompt,
    COALESCE(c.step_user_prompt, t.user_prompt) AS user_prompt,
    COALESCE(c.step_chat_turns, t.chat_turns) AS chat_turns,
    COALESCE(c.step_response, t.response) AS response,
    COALESCE(c.step_reasoning, t.reasoning) AS reasoning
  FROM calls_matched AS c
  LEFT JOIN logged_text AS t
    ON t.log_id = c.log_id
)

SELECT
  call_id,
  source_id,
  trajectory_id,
  window_start,
  step_position::INT AS step_position,
  step_number::BIGINT AS step_number,
  call_index::INT AS call_index,
  call_time,
  model,
  purpose,
  action_type,
  COALESCE(system_prompt, @system_turn_content(chat_turns)) AS system_prompt,
  user_prompt,
  /* the prompt text is the bulk of the table: a chat that is only the user prompt is not written a second time */
  NULLIF(
    COALESCE(@non_system_turns_json(chat_turns), '[{"role": "user", "content": ' || @json_quote(user_prompt) || '}]', '[]'),
    '[{"role": "user", "content": ' || @json_quote(user_prompt) || '}]'
  ) AS input_turns_json,
  response,
  reasoning,
  temperature,
  max_tokens::INT AS max_tokens,
  in_steps,
  log_id
FROM calls_merged;

@restore_threads();
