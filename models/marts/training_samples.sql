/* One row per trajectory usable for training (isTrainingData and not isEvaluation): the
   chat exactly as the agent saw and answered it, with its outcome and its standing in the
   window. `messages` is a JSON array of {role, content}: the agent's system prompt, then
   for every LLM call of every step, in order, the call's input turns (the non-system turns
   of its `messages` where logged, else its userPrompt) and its answer (assistant). A system
   turn is repeated only where a call's system prompt changes. No ground truth enters here.
   A view: the chats are computed window by window in staging.training_chats (which parses the
   calls), the standing in babylon.agent_window_pnl and babylon.windows; joined here, so a
   change of the P&L marts does not parse the calls again. */
MODEL (
  name babylon.training_samples,
  kind VIEW,
  grain trajectory_id,
  audits (
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

SELECT
  c.trajectory_id,
  c.source_id,
  c.window_id,
  c.window_start,
  c.agent_id,
  c.start_time,
  c.end_time,
  c.messages,
  c.llm_calls,
  c.steps,
  c.actions,
  c.trades,
  c.wins,
  c.errors,
  c.pnl,
  a.pnl_rank,
  a.pnl_zscore,
  a.win_rate,
  w.agents AS window_agents,
  c.total_reward,
  c.final_status,
  c.used_in_training,
  c.trained_in_batch
FROM staging.training_chats AS c
LEFT JOIN babylon.agent_window_pnl AS a
  ON a.window_id = c.window_id AND a.agent_id = c.agent_id
LEFT JOIN babylon.windows AS w
  ON w.window_id = c.window_id
