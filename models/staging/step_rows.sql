/* Every element of every trajectory's stepsJson array, parsed once into typed columns.
   Both step shapes of docs/TABLES.md are read: the legacy shape (action.actionType,
   environmentState) and the trajectory-logger plugin shape (stepId, action.actionName,
   llmCalls with callId and messages). `problem` names what makes a step unusable; a
   trajectory with any such step is rejected in staging.trajectory_checks. Trajectories
   whose stepsJson is not a JSON array have no rows here (rejected there too).
   staging.steps keeps the steps of staged trajectories. */
MODEL (
  name staging.step_rows,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start
  ),
  grain (source_id, step_position),
  audits (
    unique_combination_of_columns(columns := (source_id, step_position)),
    not_null(columns := (source_id, step_position, window_start))
  ),
  column_descriptions (
    source_id = 'trajectories.id',
    trajectory_id = 'trajectories.trajectoryId',
    window_start = 'Start of the trajectory''s window (from windowId, else startTime truncated to windowHours)',
    step_position = 'Position of the step in stepsJson, from 0: the order the steps were logged in',
    step_number = 'stepNumber (plugin shape: else stepId) when an integer, else step_position',
    step_id = 'Step id as in llm_call_logs.stepId: {trajectoryId}:{step_number}',
    step_shape = 'legacy or plugin; NULL when the step is not an object of either shape',
    step_time = 'timestamp (epoch milliseconds) as TIMESTAMP',
    agent_balance = 'environmentState.agentBalance before acting',
    agent_pnl = 'environmentState.agentPnL before acting',
    action_type = 'action.actionType (legacy) or action.actionName (plugin)',
    action_success = 'action.success',
    action_error = 'action.error as text',
    action_pnl = 'action.result.pnl: the trade''s P&L',
    is_action = 'The step has an action (HOLD included)',
    is_trade = 'A successful action other than HOLD',
    is_win = 'A trade with action_pnl > 0',
    is_error = 'An action with success = false or an error',
    llm_calls_json = 'The step''s llmCalls array as JSON text (NULL when the step has none)',
    llm_call_count = 'Number of LLM calls in the step',
    problem = 'Why the step is unusable (step_not_object, unknown_step_shape, llm_calls_not_array, llm_call_without_response); NULL when usable'
  )
);

WITH trajectories_in_range AS (
  SELECT
    "id" AS source_id,
    "trajectoryId" AS trajectory_id,
    "stepsJson" AS steps_json,
    COALESCE(
      @window_start_from_id("windowId"),
      @window_start_from_time("startTime", @window_hours("windowHours"))
    ) AS window_start
  FROM @raw_schema.trajectories
),

steps_unnested AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    UNNEST(@json_array(steps_json)) AS step,
    GENERATE_SUBSCRIPTS(@json_array(steps_json), 1) - 1 AS step_position
  FROM trajectories_in_range
  WHERE window_start BETWEEN @start_ts AND @end_ts
),

steps_fields AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    step_position,
    @json_kind(step) AS step_kind,
    @json_text(step, 'stepNumber') AS step_number_text,
    @json_text(step, 'stepId') AS step_id_text,
    @json_text(step, 'timestamp') AS timestamp_text,
    @json_kind(@json_value(step, 'environmentState')) AS state_kind,
    @json_text(step, 'environmentState', 'agentBalance') AS balance_text,
    @json_text(step, 'environmentState', 'agentPnL') AS pnl_text,
    @json_kind(@json_value(step, 'action')) AS action_kind,
    @json_text(step, 'action', 'actionType') AS legacy_action_type,
    @json_text(step, 'action', 'actionName') AS plugin_action_name,
    LOWER(@json_text(step, 'action', 'success')) AS success_text,
    @json_text(step, 'action', 'error') AS action_error,
    @json_text(step, 'action', 'result', 'pnl') AS action_pnl_text,
    @json_kind(@json_value(step, 'observation')) AS observation_kind,
    @json_value(step, 'llmCalls') AS llm_calls
  FROM steps_unnested
),

steps_typed AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    step_position,
    COALESCE(@safe_int(step_number_text), @safe_int(step_id_text), step_position) AS step_number,
    CASE
      WHEN step_kind <> 'object' THEN NULL
      WHEN step_id_text IS NOT NULL OR plugin_action_name IS NOT NULL OR observation_kind IS NOT NULL THEN 'plugin'
      WHEN legacy_action_type IS NOT NULL OR state_kind = 'object' THEN 'legacy'
    END AS step_shape,
    @safe_double(timestamp_text) AS epoch_ms,
    @safe_double(balance_text) AS agent_balance,
    @safe_double(pnl_text) AS agent_pnl,
    CASE WHEN action_kind = 'object' THEN COALESCE(legacy_action_type, plugin_action_name) END AS action_type,
    CASE success_text WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END AS action_success,
    NULLIF(action_error, '') AS action_error,
    @safe_double(action_pnl_text) AS action_pnl,
    @json_kind(llm_calls) AS llm_calls_kind,
    llm_calls,
    step_kind
  FROM steps_fields
)

SELECT
  source_id,
  trajectory_id,
  window_start,
  step_position::INT AS step_position,
  step_number::BIGINT AS step_number,
  trajectory_id || ':' || CAST(step_number AS TEXT) AS step_id,
  step_shape,
  CASE
    WHEN epoch_ms BETWEEN 0 AND 253402300799999
    THEN TIMESTAMP '1970-01-01 00:00:00' + INTERVAL 1 MILLISECOND * epoch_ms
  END AS step_time,
  agent_balance,
  agent_pnl,
  action_type,
  action_success,
  action_error,
  action_pnl,
  action_type IS NOT NULL AS is_action,
  COALESCE(action_success AND action_type <> 'HOLD', FALSE) AS is_trade,
  COALESCE(action_success AND action_type <> 'HOLD' AND action_pnl > 0, FALSE) AS is_win,
  action_type IS NOT NULL AND (action_success = FALSE OR action_error IS NOT NULL) AS is_error,
  CASE WHEN llm_calls_kind = 'array' THEN CAST(llm_calls AS TEXT) END AS llm_calls_json,
  CASE WHEN llm_calls_kind = 'array' THEN @json_length(llm_calls) ELSE 0 END::INT AS llm_call_count,
  CASE
    WHEN step_kind IS DISTINCT FROM 'object' THEN 'step_not_object'
    WHEN step_shape IS NULL THEN 'unknown_step_shape'
    WHEN llm_calls_kind NOT IN ('array', 'null') THEN 'llm_calls_not_array'
    WHEN llm_calls_kind = 'array' AND @json_array_missing_key(llm_calls, 'response') > 0 THEN 'llm_call_without_response'
  END AS problem
FROM steps_typed
