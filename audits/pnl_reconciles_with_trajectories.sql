/* The agents' P&L of a window adds up to the P&L of the window's staged trajectories. */
AUDIT (
  name pnl_reconciles_with_trajectories
);

WITH agent_totals AS (
  SELECT window_id, SUM(pnl) AS pnl
  FROM @this_model
  GROUP BY window_id
),

trajectory_totals AS (
  SELECT window_id, SUM(pnl) AS pnl
  FROM staging.trajectory_checks
  WHERE reject_reason IS NULL
    AND window_start BETWEEN @start_ts AND @end_ts
  GROUP BY window_id
)

SELECT COALESCE(a.window_id, t.window_id) AS window_id, a.pnl AS agent_pnl, t.pnl AS trajectory_pnl
FROM agent_totals AS a
FULL OUTER JOIN trajectory_totals AS t
  ON t.window_id = a.window_id
WHERE a.pnl IS NULL OR t.pnl IS NULL OR ABS(a.pnl - t.pnl) > 1e-6 * GREATEST(1.0, ABS(t.pnl))
