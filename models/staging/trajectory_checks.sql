/* Every raw trajectory of the interval, typed, with its window, its step figures and the
   verdict of the staging checks. `reject_reason` is NULL for rows that are staged
   (staging.trajectories) and names the first failed check otherwise (babylon.rejected_rows):
     no_trajectory_id, no_agent, duplicate_trajectory_id (an older row of the same
     trajectoryId), steps_not_json, steps_not_array, no_steps, a step problem
     (step_not_object, unknown_step_shape, llm_calls_not_array, llm_call_without_response),
     no_pnl (finalPnL NULL/NaN and no step with agentPnL).
   P&L is finalPnL, else the agentPnL of the last step that has one.
   The steps are parsed here, in the batch's CTEs, and not stored (@parse_steps: one
   json_transform of stepsJson with the step fields of both shapes, docs/TABLES.md, and of
   each LLM call only its id and whether it has a response); staging.training_chats
   parses the calls' text itself. `llm_calls` counts the calls of the steps and those only
   in llm_call_logs, by call id, as staging.training_chats merges them. */
MODEL (
  name staging.trajectory_checks,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start,
    batch_size 336 -- hours per query (two weeks): memory follows two weeks of play, not the whole history
  ),
  grain source_id,
  audits (
    unique_values(columns := (source_id)),
    not_null(columns := (source_id, window_start, window_id)),
    not_null_when_staged
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_id TEXT,
    trajectory_id TEXT,
    agent_id TEXT,
    window_id TEXT,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    window_hours INT,
    window_id_derived BOOLEAN,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    steps INT,
    llm_calls INT,
    actions INT,
    trades INT,
    wins INT,
    errors INT,
    final_pnl DOUBLE,
    last_step_pnl DOUBLE,
    pnl DOUBLE,
    pnl_source TEXT,
    total_reward DOUBLE,
    final_status TEXT,
    is_training_data BOOLEAN,
    is_evaluation BOOLEAN,
    used_in_training BOOLEAN,
    trained_in_batch TEXT,
    updated_at TIMESTAMP,
    reject_reason TEXT,
    reject_detail TEXT
  ),
  column_descriptions (
    source_id = 'trajectories.id',
    trajectory_id = 'trajectories.trajectoryId',
    agent_id = 'trajectories.agentId',
    window_id = 'Window id YYYY-MM-DDTHH:MM (UTC start)',
    window_start = 'Window start: windowId when it is a valid YYYY-MM-DDTHH:MM, else startTime truncated to windowHours',
    window_end = 'Window end (exclusive): window_start + window_hours',
    window_hours = 'windowHours when it divides 24, else the window_hours variable',
    window_id_derived = 'TRUE when windowId was NULL or unparsable and the window comes from startTime',
    start_time = 'startTime (UTC)',
    end_time = 'endTime (UTC)',
    steps = 'Steps in stepsJson',
    llm_calls = 'LLM calls: those of stepsJson and those only in llm_call_logs (by call id, as staging.training_chats merges them)',
    actions = 'Steps with an action (HOLD included)',
    trades = 'Successful actions other than HOLD',
    wins = 'Trades with result.pnl > 0',
    errors = 'Steps whose action failed or has an error',
    final_pnl = 'finalPnL, NULL when NULL or not finite',
    last_step_pnl = 'agentPnL of the last step that has one',
    pnl = 'The trajectory''s P&L: final_pnl, else last_step_pnl',
    pnl_source = 'finalPnL or last_step_agentPnL',
    total_reward = 'totalReward as logged',
    final_status = 'finalStatus',
    is_training_data = 'isTrainingData',
    is_evaluation = 'isEvaluation',
    used_in_training = 'usedInTraining',
    trained_in_batch = 'trainedInBatch',
    updated_at = 'updatedAt',
    reject_reason = 'NULL when staged, else the code of the first failed check',
    reject_detail = 'Human-readable explanation of reject_reason'
  )
);

WITH trajectories_typed AS (
  SELECT
    "id" AS source_id,
    NULLIF("trajectoryId", '') AS trajectory_id,
    NULLIF("agentId", '') AS agent_id,
    "windowId" AS raw_window_id,
    @window_start_from_id("windowId") AS window_start_named,
    @window_hours("windowHours") AS window_hours,
    window_start,
    "startTime" AS start_time,
    "endTime" AS end_time,
    @finite("finalPnL") AS final_pnl,
    "totalReward" AS total_reward,
    "finalStatus" AS final_status,
    COALESCE("isTrainingData", TRUE) AS is_training_data,
    COALESCE("isEvaluation", FALSE) AS is_evaluation,
    COALESCE("usedInTraining", FALSE) AS used_in_training,
    "trainedInBatch" AS trained_in_batch,
    "updatedAt" AS updated_at
  FROM @trajectories_in_range() AS t
),

trajectories_windowed AS (
  SELECT
    *,
    ROW_NUMBER() OVER (
      PARTITION BY trajectory_id ORDER BY updated_at DESC NULLS LAST, source_id DESC
    ) AS newest_first
  FROM trajectories_typed
),

steps_parsed AS (
  SELECT "id" AS source_id, "trajectoryId" AS trajectory_id, "stepsJson" AS steps_json, @parse_steps("stepsJson") AS steps
  FROM @trajectories_in_range() AS t
),

steps_unnested AS (
  SELECT source_id, trajectory_id, steps_json, @unnest_with_position(steps, step, step_position)
  FROM steps_parsed
),

steps_fields AS (
  SELECT
    source_id,
    trajectory_id,
    step_position,
    @step_number(step, step_position) AS step_number,
    @field(step, 'stepId') AS step_id_text,
    @field_present(step, 'environmentState') AS has_state,
    @field(step, 'environmentState', 'agentPnL') AS pnl_text,
    @field_present(step, 'action') AS has_action,
    @field(step, 'action', 'actionType') AS legacy_action_type,
    @field(step, 'action', 'actionName') AS plugin_action_name,
    LOWER(@field(step, 'action', 'success')) AS success_text,
    NULLIF(@field(step, 'action', 'error'), '') AS action_error,
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
    step_position,
    step_number,
    CASE
      WHEN step_kind <> 'object' THEN NULL
      WHEN step_id_text IS NOT NULL OR plugin_action_name IS NOT NULL OR has_observation THEN 'plugin'
      WHEN legacy_action_type IS NOT NULL OR has_state THEN 'legacy'
    END AS step_shape,
    @safe_double(pnl_text) AS agent_pnl,
    CASE WHEN has_action THEN COALESCE(legacy_action_type, plugin_action_name) END AS action_type,
    CASE success_text WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END AS action_success,
    action_error,
    @safe_double(action_pnl_text) AS action_pnl,
    CASE WHEN llm_calls_kind = 'array' THEN llm_calls END AS llm_calls,
    llm_calls_kind,
    step_kind
  FROM steps_fields
),

steps_in_range AS (
  SELECT
    source_id,
    trajectory_id,
    step_position,
    step_number,
    agent_pnl,
    llm_calls,
    action_type IS NOT NULL AS is_action,
    COALESCE(action_success AND action_type <> 'HOLD', FALSE) AS is_trade,
    COALESCE(action_success AND action_type <> 'HOLD' AND action_pnl > 0, FALSE) AS is_win,
    action_type IS NOT NULL AND (action_success = FALSE OR action_error IS NOT NULL) AS is_error,
    COALESCE(@list_length(llm_calls), 0) AS llm_call_count,
    CASE
      WHEN step_kind IS DISTINCT FROM 'object' THEN 'step_not_object'
      WHEN step_shape IS NULL THEN 'unknown_step_shape'
      WHEN llm_calls_kind NOT IN ('array', 'null') THEN 'llm_calls_not_array'
      WHEN @calls_missing(llm_calls, 'response') > 0 THEN 'llm_call_without_response'
    END AS problem
  FROM steps_typed
),

/* the ids staging.training_chats gives the steps' calls (docs/TABLES.md "Call ids") */
step_call_ids AS (
  SELECT
    source_id,
    @call_id(llm_call, trajectory_id, step_number, call_index) AS call_id
  FROM (
    SELECT source_id, trajectory_id, step_number, @unnest_with_position(llm_calls, llm_call, call_index)
    FROM steps_in_range
    WHERE llm_call_count > 0
  ) AS calls
),

trajectories_once AS (
  SELECT source_id, trajectory_id, window_start, window_start + INTERVAL 1 HOUR * window_hours AS window_end
  FROM trajectories_windowed
  WHERE newest_first = 1
),

/* calls only llm_call_logs holds, kept as staging.training_chats keeps them */
logged_only_calls AS (
  SELECT l.source_id, COUNT(*) AS calls
  FROM @newest_call_logs(trajectories_once, near_batch := TRUE) AS l
  WHERE NOT EXISTS (SELECT 1 FROM step_call_ids AS s WHERE s.source_id = l.source_id AND s.call_id = l.call_id)
  GROUP BY l.source_id
),

step_figures AS (
  SELECT
    source_id,
    COUNT(*) AS steps,
    SUM(llm_call_count) AS llm_calls,
    SUM(CASE WHEN is_action THEN 1 ELSE 0 END) AS actions,
    SUM(CASE WHEN is_trade THEN 1 ELSE 0 END) AS trades,
    SUM(CASE WHEN is_win THEN 1 ELSE 0 END) AS wins,
    SUM(CASE WHEN is_error THEN 1 ELSE 0 END) AS errors
  FROM steps_in_range
  GROUP BY source_id
),

first_step_problem AS (
  SELECT source_id, step_position, problem
  FROM (
    SELECT
      source_id,
      step_position,
      problem,
      ROW_NUMBER() OVER (PARTITION BY source_id ORDER BY step_position) AS position_rank
    FROM steps_in_range
    WHERE problem IS NOT NULL
  ) AS problems
  WHERE position_rank = 1
),

last_step_pnl AS (
  SELECT source_id, agent_pnl
  FROM (
    SELECT
      source_id,
      @finite(agent_pnl) AS agent_pnl,
      ROW_NUMBER() OVER (PARTITION BY source_id ORDER BY step_position DESC) AS position_rank
    FROM steps_in_range
    WHERE @finite(agent_pnl) IS NOT NULL
  ) AS pnl_steps
  WHERE position_rank = 1
),

trajectories_without_steps AS (
  SELECT t.source_id
  FROM trajectories_windowed AS t
  LEFT JOIN step_figures AS f
    ON f.source_id = t.source_id
  WHERE f.source_id IS NULL
),

/* stepsJson is read again only for the few trajectories without any step row */
unparsed_steps AS (
  SELECT "id" AS source_id, @json_kind(@json_parse("stepsJson")) AS steps_kind
  FROM @trajectories_in_range() AS t
  WHERE "id" IN (SELECT source_id FROM trajectories_without_steps)
),

trajectories_checked AS (
  SELECT
    t.*,
    COALESCE(f.steps, 0) AS steps,
    COALESCE(f.llm_calls, 0) + COALESCE(o.calls, 0) AS llm_calls,
    COALESCE(f.actions, 0) AS actions,
    COALESCE(f.trades, 0) AS trades,
    COALESCE(f.wins, 0) AS wins,
    COALESCE(f.errors, 0) AS errors,
    l.agent_pnl AS last_step_pnl,
    CASE
      WHEN t.trajectory_id IS NULL THEN 'no_trajectory_id'
      WHEN t.agent_id IS NULL THEN 'no_agent'
      WHEN t.newest_first > 1 THEN 'duplicate_trajectory_id'
      WHEN f.source_id IS NULL AND u.steps_kind IS NULL THEN 'steps_not_json'
      WHEN f.source_id IS NULL AND u.steps_kind <> 'array' THEN 'steps_not_array'
      WHEN f.source_id IS NULL THEN 'no_steps'
      WHEN p.problem IS NOT NULL THEN p.problem
      WHEN t.final_pnl IS NULL AND l.agent_pnl IS NULL THEN 'no_pnl'
    END AS reject_reason,
    p.step_position AS problem_step
  FROM trajectories_windowed AS t
  LEFT JOIN step_figures AS f
    ON f.source_id = t.source_id
  LEFT JOIN first_step_problem AS p
    ON p.source_id = t.source_id
  LEFT JOIN last_step_pnl AS l
    ON l.source_id = t.source_id
  LEFT JOIN unparsed_steps AS u
    ON u.source_id = t.source_id
  LEFT JOIN logged_only_calls AS o
    ON o.source_id = t.source_id
)

SELECT
  source_id,
  trajectory_id,
  agent_id,
  @window_id(window_start) AS window_id,
  window_start,
  window_start + INTERVAL 1 HOUR * window_hours AS window_end,
  window_hours::INT AS window_hours,
  window_start_named IS NULL AS window_id_derived,
  start_time,
  end_time,
  steps::INT AS steps,
  llm_calls::INT AS llm_calls,
  actions::INT AS actions,
  trades::INT AS trades,
  wins::INT AS wins,
  errors::INT AS errors,
  final_pnl,
  last_step_pnl,
  COALESCE(final_pnl, last_step_pnl) AS pnl,
  CASE
    WHEN final_pnl IS NOT NULL THEN 'finalPnL'
    WHEN last_step_pnl IS NOT NULL THEN 'last_step_agentPnL'
  END AS pnl_source,
  total_reward,
  final_status,
  is_training_data,
  is_evaluation,
  used_in_training,
  trained_in_batch,
  updated_at,
  reject_reason,
  CASE reject_reason
    WHEN 'no_trajectory_id' THEN 'trajectoryId is NULL or empty'
    WHEN 'no_agent' THEN 'agentId is NULL or empty'
    WHEN 'duplicate_trajectory_id' THEN 'a newer row has the same trajectoryId ' || trajectory_id
    WHEN 'steps_not_json' THEN 'stepsJson is not valid JSON'
    WHEN 'steps_not_array' THEN 'stepsJson is valid JSON but not an array of steps'
    WHEN 'no_steps' THEN 'stepsJson is an empty array'
    WHEN 'no_pnl' THEN 'finalPnL is NULL or not finite and no step has environmentState.agentPnL'
    ELSE 'step ' || CAST(problem_step AS TEXT) || ' of stepsJson: ' || CASE reject_reason
      WHEN 'step_not_object' THEN 'the step is not a JSON object'
      WHEN 'unknown_step_shape' THEN 'the step has neither the legacy (action.actionType, environmentState) nor the plugin (stepId, action.actionName, observation) fields'
      WHEN 'llm_calls_not_array' THEN 'llmCalls is not an array'
      WHEN 'llm_call_without_response' THEN 'an LLM call is not an object with a response'
    END
  END AS reject_detail
FROM trajectories_checked
