/* Every element of every trajectory's stepsJson array, parsed into typed columns
   (@parse_steps: one json_transform of the text on DuckDB). The LLM calls are only
   counted and checked here; staging.llm_calls reads them with all their fields.
   Both step shapes of docs/TABLES.md are read: the legacy shape (action.actionType,
   environmentState) and the trajectory-logger plugin shape (stepId, action.actionName,
   llmCalls with callId and messages). `problem` names what makes a step unusable; a
   trajectory with any such step is rejected in staging.trajectory_checks. Trajectories
   whose stepsJson is not a JSON array have no rows here (rejected there too).
   staging.steps keeps the steps of staged trajectories. */
MODEL (
  name staging.step_rows,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 336 -- hours per query (two weeks): memory follows two weeks of play, not the whole history
  ),
  grain (source_id, step_position),
  audits (
    unique_combination_of_columns(columns := (source_id, step_position)),
    not_null(columns := (source_id, step_position, window_start))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_id TEXT,
    trajectory_id TEXT,
    window_start TIMESTAMP,
    step_position INT,
    step_number BIGINT,
    step_id TEXT,
    step_shape TEXT,
    step_time TIMESTAMP,
    agent_balance DOUBLE,
    agent_pnl DOUBLE,
    action_type TEXT,
    action_success BOOLEAN,
    action_error TEXT,
    action_pnl DOUBLE,
    is_action BOOLEAN,
    is_trade BOOLEAN,
    is_win BOOLEAN,
    is_error BOOLEAN,
    llm_call_count INT,
    problem TEXT
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
    llm_call_count = 'Number of LLM calls in the step',
    problem = 'Why the step is unusable (step_not_object, unknown_step_shape, llm_calls_not_array, llm_call_without_response); NULL when usable'
  )
);

WITH steps_parsed AS (
  SELECT
    "id" AS source_id,
    "trajectoryId" AS trajectory_id,
    window_start,
    "stepsJson" AS steps_json,
    @parse_steps("stepsJson") AS steps
  FROM @trajectories_in_range() AS t
),

steps_unnested AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    steps_json,
    @unnest_with_position(steps, step, step_position)
  FROM steps_parsed
),

steps_fields AS (
  SELECT
    source_id,
    trajectory_id,
    window_start,
    step_position,
    @field(step, 'stepNumber') AS step_number_text,
    @field(step, 'stepId') AS step_id_text,
    @field(step, 'timestamp') AS timestamp_text,
    @field_present(step, 'environmentState') AS has_state,
    @field(step, 'environmentState', 'agentBalance') AS balance_text,
    @field(step, 'environmentState', 'agentPnL') AS pnl_text,
    @field_present(step, 'action') AS has_action,
    @field(step, 'action', 'actionType') AS legacy_action_type,
    @field(step, 'action', 'actionName') AS plugin_action_name,
    LOWER(@field(step, 'action', 'success')) AS success_text,
    @field(step, 'action', 'error') AS action_error,
    @field(step, 'action', 'result', 'pnl') AS action_pnl_text,
    @field_present(step, 'observation') AS has_observation,
    @call_list(step) AS llm_calls,
    /* the struct cannot tell a non-object step or a non-array llmCalls from a missing one:
       only those rare steps re-read their JSON type */
    CASE
      WHEN @call_list(step) IS NULL THEN @json_kind_at(steps_json, step, step_position, 'llmCalls')
      ELSE 'array'
    END AS llm_calls_kind,
    CASE
      WHEN @field(step, 'stepNumber') IS NULL AND @field(step, 'stepId') IS NULL AND @field(step, 'timestamp') IS NULL
       AND NOT @field_present(step, 'environmentState') AND NOT @field_present(step, 'action')
       AND NOT @field_present(step, 'observation') AND @call_list(step) IS NULL
      THEN @json_kind_at(steps_json, step, step_position)
      ELSE 'object'
    END AS step_kind
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
      WHEN step_id_text IS NOT NULL OR plugin_action_name IS NOT NULL OR has_observation THEN 'plugin'
      WHEN legacy_action_type IS NOT NULL OR has_state THEN 'legacy'
    END AS step_shape,
    @safe_double(timestamp_text) AS epoch_ms,
    @safe_double(balance_text) AS agent_balance,
    @safe_double(pnl_text) AS agent_pnl,
    CASE WHEN has_action THEN COALESCE(legacy_action_type, plugin_action_name) END AS action_type,
    CASE success_text WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END AS action_success,
    NULLIF(action_error, '') AS action_error,
    @safe_double(action_pnl_text) AS action_pnl,
    llm_calls_kind,
    llm_calls,
    step_kind
  FROM steps_fields
)

SELECT
  s.source_id,
  s.trajectory_id,
  s.window_start,
  s.step_position::INT AS step_position,
  s.step_number::BIGINT AS step_number,
  s.trajectory_id || ':' || CAST(s.step_number AS TEXT) AS step_id,
  s.step_shape,
  CASE
    WHEN s.epoch_ms BETWEEN 0 AND 253402300799999
    THEN TIMESTAMP '1970-01-01 00:00:00' + INTERVAL 1 MILLISECOND * s.epoch_ms
  END AS step_time,
  s.agent_balance,
  s.agent_pnl,
  s.action_type,
  s.action_success,
  s.action_error,
  s.action_pnl,
  s.action_type IS NOT NULL AS is_action,
  COALESCE(s.action_success AND s.action_type <> 'HOLD', FALSE) AS is_trade,
  COALESCE(s.action_success AND s.action_type <> 'HOLD' AND s.action_pnl > 0, FALSE) AS is_win,
  s.action_type IS NOT NULL AND (s.action_success = FALSE OR s.action_error IS NOT NULL) AS is_error,
  COALESCE(CASE WHEN s.llm_calls_kind = 'array' THEN @list_length(s.llm_calls) END, 0)::INT AS llm_call_count,
  CASE
    WHEN s.step_kind IS DISTINCT FROM 'object' THEN 'step_not_object'
    WHEN s.step_shape IS NULL THEN 'unknown_step_shape'
    WHEN s.llm_calls_kind NOT IN ('array', 'null') THEN 'llm_calls_not_array'
    WHEN s.llm_calls_kind = 'array' AND @calls_missing(s.llm_calls, 'response') > 0 THEN 'llm_call_without_response'
  END AS problem
FROM steps_typed AS s
