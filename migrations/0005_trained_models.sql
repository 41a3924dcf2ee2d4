-- trained_models: one row per model version the toolkit produces.
-- status: training -> ready -> deployed -> archived | failed
CREATE TABLE "trained_models" (
    "id"              TEXT NOT NULL,
    "modelId"         TEXT NOT NULL,
    "version"         TEXT NOT NULL,
    "baseModel"       TEXT NOT NULL,
    "trainingBatch"   TEXT,
    "status"          TEXT NOT NULL DEFAULT 'training',
    "deployedAt"      TIMESTAMP(3),
    "archivedAt"      TIMESTAMP(3),
    "storagePath"     TEXT NOT NULL,
    "benchmarkScore"  DOUBLE PRECISION,
    "accuracy"        DOUBLE PRECISION,
    "avgReward"       DOUBLE PRECISION,
    "evalMetrics"     JSONB,
    "wandbRunId"      TEXT,
    "wandbArtifactId" TEXT,
    "agentsUsing"     INTEGER NOT NULL DEFAULT 0,
    "totalInferences" INTEGER NOT NULL DEFAULT 0,
    "createdAt"       TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt"       TIMESTAMP(3) NOT NULL,
    CONSTRAINT "trained_models_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "trained_models_modelId_key" ON "trained_models" ("modelId");
CREATE INDEX "trained_models_status_idx" ON "trained_models" ("status");
