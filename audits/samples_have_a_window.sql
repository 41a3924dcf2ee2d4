/* Every training sample belongs to a window of babylon.windows. */
AUDIT (
  name samples_have_a_window
);

SELECT s.trajectory_id, s.window_id
FROM @this_model AS s
LEFT JOIN babylon.windows AS w
  ON w.window_id = s.window_id
WHERE w.window_id IS NULL
