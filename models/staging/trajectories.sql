/* Typed trajectories that passed every staging check: one row per trajectory. */
MODEL (
  name staging.trajectories,
  kind VIEW,
  grain source_id,
  audits (
    unique_values(columns := (source_id, trajectory_id)),
    not_null(columns := (source_id, trajectory_id, agent_id, window_id, pnl))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_id TEXT,
    trajectory_id TEXT,
    agent_id TEXT,
    window_id TEXT,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    window_id_derived BOOLEAN,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    steps INT,
    llm_calls INT,
    actions INT,
    trades INT,
    wins INT,
    errors INT,
    pnl DOUBLE,
    pnl_source TEXT,
    total_reward DOUBLE,
    final_status TEXT,
    is_training_data BOOLEAN,
    is_evaluation BOOLEAN,
    used_in_training BOOLEAN,
    trained_in_batch TEXT
  )
);

SELECT
  source_id, /* trajectories.id */
  trajectory_id, /* trajectories.trajectoryId */
  agent_id, /* trajectories.agentId */
  window_id, /* window id YYYY-MM-DDTHH:MM */
  window_start, /* window start (UTC) */
  window_end, /* window end, exclusive */
  window_id_derived, /* TRUE when the window comes from startTime */
  start_time, /* startTime */
  end_time, /* endTime */
  steps, /* steps in stepsJson */
  llm_calls, /* LLM calls in stepsJson */
  actions, /* steps with an action */
  trades, /* successful non-HOLD actions */
  wins, /* trades with pnl > 0 */
  errors, /* failed actions */
  pnl, /* finalPnL, else the last step's agentPnL */
  pnl_source, /* finalPnL or last_step_agentPnL */
  total_reward, /* totalReward */
  final_status, /* finalStatus */
  is_training_data, /* isTrainingData */
  is_evaluation, /* isEvaluation */
  used_in_training, /* usedInTraining */
  trained_in_batch /* trainedInBatch */
FROM staging.trajectory_checks
WHERE reject_reason IS NULL
