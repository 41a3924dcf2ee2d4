"""Write-back to the game's PostgreSQL: training_batches, trained_models and the trained trajectories.

Ids are deterministic: batch `RUN:step-N`, model `RUN:step-N` (or `RUN:merged`), so running
the same run again updates rows instead of inserting them twice. A batch goes
pending -> training -> completed | failed; its completion and the marking of its
trajectories (`usedInTraining`, `trainedInBatch`, `updatedAt`) commit in one transaction.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from babylon_rl import db

_NAMESPACE = uuid.UUID("6b0e7a52-2c1b-4a53-9a3e-8f1c0e2d7b11")


def batch_id(run_name: str, step: int) -> str:
    return f"{run_name}:step-{step}"


def row_id(key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, key))


@dataclass
class WriteBack:
    url: str
    run_name: str
    base_model: str

    def fail_unfinished(self, reason: str = "interrupted") -> int:
        """Batches of this run left `pending`/`training` by a crash become failed."""
        with db.connect(self.url) as conn, conn.transaction():
            cur = conn.execute(
                """UPDATE "training_batches" SET "status" = 'failed', "error" = %s, "completedAt" = now()
                   WHERE starts_with("batchId", %s) AND "status" IN ('pending', 'training')""",
                (reason, f"{self.run_name}:step-"),
            )
            conn.execute(
                """UPDATE "trained_models" SET "status" = 'failed', "updatedAt" = now()
                   WHERE starts_with("modelId", %s) AND "status" = 'training'""",
                (f"{self.run_name}:",),
            )
            return cur.rowcount

    def start_batch(self, step: int, window_ids: list[str], rewards: dict[str, float]) -> str:
        bid = batch_id(self.run_name, step)
        ids = list(rewards)
        with db.connect(self.url) as conn, conn.transaction():
            conn.execute(
                """INSERT INTO "training_batches"
                     ("id", "batchId", "scenarioId", "baseModel", "modelVersion", "trajectoryIds", "rewardsJson", "status")
                   VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending')
                   ON CONFLICT ("batchId") DO NOTHING""",
                (row_id(bid), bid, window_ids[0] if len(window_ids) == 1 else None, self.base_model,
                 f"{self.run_name}:step-{step}", json.dumps(ids), json.dumps(rewards)),
            )
            conn.execute(
                """UPDATE "training_batches" SET "status" = 'training', "startedAt" = now(), "error" = NULL,
                          "completedAt" = NULL, "trajectoryIds" = %s, "rewardsJson" = %s, "baseModel" = %s
                   WHERE "batchId" = %s""",
                (json.dumps(ids), json.dumps(rewards), self.base_model, bid),
            )
        return bid

    def complete_batch(self, step: int, trajectory_ids: list[str], loss: float, improvement: float | None,
                       rewards: dict[str, float] | None = None) -> None:
        """`rewards`: the rewards known only after the step (on-policy: the mean reward of each decision's answers)."""
        bid = batch_id(self.run_name, step)
        with db.connect(self.url) as conn, conn.transaction():
            conn.execute(
                """UPDATE "training_batches" SET "status" = 'completed', "completedAt" = now(),
                          "trainingLoss" = %s, "policyImprovement" = %s, "error" = NULL,
                          "rewardsJson" = COALESCE(%s, "rewardsJson")
                   WHERE "batchId" = %s""",
                (loss, improvement, json.dumps(rewards) if rewards is not None else None, bid),
            )
            conn.execute(
                """UPDATE "trajectories" SET "usedInTraining" = true, "trainedInBatch" = %s, "updatedAt" = now()
                   WHERE "trajectoryId" = ANY(%s)""",
                (bid, trajectory_ids),
            )

    def fail_batch(self, step: int, error: str) -> None:
        with db.connect(self.url) as conn, conn.transaction():
            conn.execute(
                """UPDATE "training_batches" SET "status" = 'failed', "error" = %s, "completedAt" = now()
                   WHERE "batchId" = %s AND "status" <> 'completed'""",
                (error[:2000], batch_id(self.run_name, step)),
            )

    def model_training(self, model_key: str, version: str, storage_path: str, step: int, wandb_run_id: str | None) -> None:
        model_id = f"{self.run_name}:{model_key}"
        with db.connect(self.url) as conn, conn.transaction():
            conn.execute(
                """INSERT INTO "trained_models"
                     ("id", "modelId", "version", "baseModel", "trainingBatch", "status", "storagePath", "wandbRunId", "updatedAt")
                   VALUES (%s, %s, %s, %s, %s, 'training', %s, %s, now())
                   ON CONFLICT ("modelId") DO UPDATE SET "status" = 'training', "storagePath" = EXCLUDED."storagePath",
                     "trainingBatch" = EXCLUDED."trainingBatch", "wandbRunId" = EXCLUDED."wandbRunId", "updatedAt" = now()""",
                (row_id(model_id), model_id, version, self.base_model, batch_id(self.run_name, step), storage_path, wandb_run_id),
            )

    def model_finished(self, model_key: str, status: str, avg_reward: float | None, eval_metrics: dict | None) -> None:
        """Set a checkpoint's status; metrics given as None keep the row's earlier ones (archiving keeps what was measured)."""
        with db.connect(self.url) as conn, conn.transaction():
            conn.execute(
                """UPDATE "trained_models" SET "status" = %s, "avgReward" = COALESCE(%s, "avgReward"),
                          "evalMetrics" = COALESCE(%s::jsonb, "evalMetrics"), "updatedAt" = now(),
                          "archivedAt" = CASE WHEN %s = 'archived' THEN now() ELSE "archivedAt" END
                   WHERE "modelId" = %s""",
                (status, avg_reward, json.dumps(eval_metrics) if eval_metrics else None, status, f"{self.run_name}:{model_key}"),
            )
