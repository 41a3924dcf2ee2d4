/* A staged trajectory (no reject_reason) has the figures every mart relies on. */
AUDIT (
  name not_null_when_staged
);

SELECT source_id
FROM @this_model
WHERE reject_reason IS NULL
  AND (trajectory_id IS NULL OR agent_id IS NULL OR pnl IS NULL OR steps = 0)
