-- training_batches: one row per training step/batch the toolkit runs.
-- status: pending -> training -> completed | failed
CREATE TABLE "training_batches" (
    "id"                TEXT NOT NULL,
    "batchId"           TEXT NOT NULL,
    "scenarioId"        TEXT,
    "baseModel"         TEXT NOT NULL,
    "modelVersion"      TEXT NOT NULL,
    "trajectoryIds"     TEXT NOT NULL,
    "rankingsJson"      TEXT,
    "rewardsJson"       TEXT NOT NULL,
    "trainingLoss"      DOUBLE PRECISION,
    "policyImprovement" DOUBLE PRECISION,
    "status"            TEXT NOT NULL DEFAULT 'pending',
    "error"             TEXT,
    "createdAt"         TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "startedAt"         TIMESTAMP(3),
    "completedAt"       TIMESTAMP(3),
    CONSTRAINT "training_batches_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "training_batches_batchId_key" ON "training_batches" ("batchId");
CREATE INDEX "training_batches_status_idx" ON "training_batches" ("status");
