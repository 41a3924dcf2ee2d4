/* One row per step of a staged trajectory (see staging.step_rows for the parse).
   No audits of its own: as a view it would be audited over the whole history at every
   build. Its grain and keys are audited where they are made, batch by batch: step_rows'
   (source_id, step_position) is unique and not null (all steps of a trajectory are in its
   window's batch), and staging.trajectories' source_id is unique with agent_id and
   window_id not null. */
MODEL (
  name staging.steps,
  kind VIEW,
  grain (source_id, step_position),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_id TEXT,
    trajectory_id TEXT,
    agent_id TEXT,
    window_id TEXT,
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
    llm_call_count INT
  )
);

SELECT
  s.source_id, /* trajectories.id */
  s.trajectory_id, /* trajectories.trajectoryId */
  t.agent_id, /* trajectories.agentId */
  t.window_id, /* window id */
  s.window_start, /* window start */
  s.step_position, /* position in stepsJson, from 0 */
  s.step_number, /* stepNumber */
  s.step_id, /* {trajectoryId}:{stepNumber} */
  s.step_shape, /* legacy or plugin */
  s.step_time, /* step timestamp */
  s.agent_balance, /* agentBalance before acting */
  s.agent_pnl, /* agentPnL before acting */
  s.action_type, /* actionType / actionName */
  s.action_success, /* action.success */
  s.action_error, /* action.error */
  s.action_pnl, /* action.result.pnl */
  s.is_action, /* has an action */
  s.is_trade, /* successful non-HOLD action */
  s.is_win, /* trade with pnl > 0 */
  s.is_error, /* failed action */
  s.llm_call_count /* LLM calls of the step */
FROM staging.step_rows AS s
JOIN staging.trajectories AS t
  ON t.source_id = s.source_id
