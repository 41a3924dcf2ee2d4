/* One row per LLM call of a staged trajectory: the calls of stepsJson and the rows of
   llm_call_logs, deduplicated by call id (docs/TABLES.md "Call ids": the call's own
   callId in the plugin shape, else {trajectoryId}:{stepNumber}:{index}). Values from
   stepsJson win; llm_call_logs fills what a step left out and adds calls the steps lack. */
MODEL (
  name staging.llm_calls,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start
  ),
  grain call_id,
  audits (
    unique_values(columns := (call_id)),
    not_null(columns := (call_id, source_id, trajectory_id, window_start, input_turns_json))
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
    messages_json = 'The exact chat the model saw (plugin shape / messagesJson), JSON text; NULL when not logged',
    input_turns_json = 'The call''s input turns without system turns, JSON array text: messages when logged, else one user turn',
    response = 'The model''s answer',
    reasoning = 'Reasoning, when logged',
    temperature = 'Sampling temperature',
    max_tokens = 'maxTokens',
    in_steps = 'TRUE when the call is in stepsJson',
    log_id = 'llm_call_logs.id of the same call, NULL when not logged there'
  )
);

WITH staged_trajectories AS (
  SELECT source_id, trajectory_id, window_start
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

steps_with_calls AS (
  SELECT s.source_id, s.trajectory_id, s.window_start, s.step_position, s.step_number, s.llm_calls_json
  FROM staging.step_rows AS s
  JOIN staged_trajectories AS t
    ON t.source_id = s.source_id
  WHERE s.window_start BETWEEN @start_ts AND @end_ts
    AND s.llm_call_count > 0
),

step_calls_unnested AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    step_position,
    step_number,
    UNNEST(@json_array(llm_calls_json)) AS llm_call,
    GENERATE_SUBSCRIPTS(@json_array(llm_calls_json), 1) - 1 AS call_index
  FROM steps_with_calls
),

step_calls AS (
  SELECT
    COALESCE(
      NULLIF(@json_text(llm_call, 'callId'), ''),
      trajectory_id || ':' || CAST(step_number AS TEXT) || ':' || CAST(call_index AS TEXT)
    ) AS call_id,
    source_id,
    trajectory_id,
    window_start,
    step_position,
    step_number,
    call_index,
    @safe_double(@json_text(llm_call, 'timestamp')) AS epoch_ms,
    @json_text(llm_call, 'model') AS model,
    @json_text(llm_call, 'purpose') AS purpose,
    @json_text(llm_call, 'actionType') AS action_type,
    @json_text(llm_call, 'systemPrompt') AS system_prompt,
    @json_text(llm_call, 'userPrompt') AS user_prompt,
    CASE WHEN @json_kind(@json_value(llm_call, 'messages')) = 'array'
      THEN CAST(@json_value(llm_call, 'messages') AS TEXT)
    END AS messages_json,
    @json_text(llm_call, 'response') AS response,
    @json_text(llm_call, 'reasoning') AS reasoning,
    @safe_double(@json_text(llm_call, 'temperature')) AS temperature,
    @safe_int(@json_text(llm_call, 'maxTokens')) AS max_tokens
  FROM step_calls_unnested
),

logged_calls AS (
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
    l."systemPrompt" AS system_prompt,
    l."userPrompt" AS user_prompt,
    CASE WHEN @json_kind(@json_parse(l."messagesJson")) = 'array' THEN l."messagesJson" END AS messages_json,
    l."response" AS response,
    l."reasoning" AS reasoning,
    l."temperature" AS temperature,
    l."maxTokens" AS max_tokens,
    ROW_NUMBER() OVER (PARTITION BY l."callId" ORDER BY l."createdAt" DESC, l."id" DESC) AS newest_first
  FROM @raw_schema.llm_call_logs AS l
  JOIN staged_trajectories AS t
    ON t.trajectory_id = l."trajectoryId"
  WHERE NULLIF(l."callId", '') IS NOT NULL
),

logged_calls_newest AS (
  SELECT *
  FROM logged_calls
  WHERE newest_first = 1
),

calls_merged AS (
  SELECT
    COALESCE(s.call_id, l.call_id) AS call_id,
    COALESCE(s.source_id, l.source_id) AS source_id,
    COALESCE(s.trajectory_id, l.trajectory_id) AS trajectory_id,
    COALESCE(s.window_start, l.window_start) AS window_start,
    s.step_position,
    COALESCE(s.step_number, l.step_number) AS step_number,
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
    COALESCE(s.system_prompt, l.system_prompt) AS system_prompt,
    COALESCE(s.user_prompt, l.user_prompt) AS user_prompt,
    COALESCE(s.messages_json, l.messages_json) AS messages_json,
    COALESCE(s.response, l.response) AS response,
    COALESCE(s.reasoning, l.reasoning) AS reasoning,
    COALESCE(s.temperature, l.temperature) AS temperature,
    COALESCE(s.max_tokens, l.max_tokens) AS max_tokens,
    s.call_id IS NOT NULL AS in_steps,
    l.log_id
  FROM step_calls AS s
  FULL OUTER JOIN logged_calls_newest AS l
    ON l.call_id = s.call_id AND l.source_id = s.source_id
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
  system_prompt,
  user_prompt,
  messages_json,
  COALESCE(
    @json_drop_system_turns(@json_parse(messages_json)),
    CASE
      WHEN user_prompt IS NULL THEN '[]'
      ELSE '[{"role": "user", "content": ' || @json_quote(user_prompt) || '}]'
    END
  ) AS input_turns_json,
  response,
  reasoning,
  temperature,
  max_tokens::INT AS max_tokens,
  in_steps,
  log_id
FROM calls_merged
