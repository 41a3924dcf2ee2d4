-- trajectories: one row per agent per window (the game's "episode").
-- Column names, types, defaults and index names follow the game's Prisma schema.
CREATE TABLE "trajectories" (
    "id"                   TEXT NOT NULL,
    "trajectoryId"         TEXT NOT NULL,
    "agentId"              TEXT NOT NULL,
    "startTime"            TIMESTAMP(3) NOT NULL,
    "endTime"              TIMESTAMP(3) NOT NULL,
    "durationMs"           INTEGER NOT NULL,
    "windowId"             VARCHAR(50),
    "windowHours"          INTEGER NOT NULL DEFAULT 1,
    "episodeId"            VARCHAR(100),
    "scenarioId"           VARCHAR(100),
    "batchId"              VARCHAR(100),
    "stepsJson"            TEXT NOT NULL,
    "rewardComponentsJson" TEXT NOT NULL,
    "metricsJson"          TEXT NOT NULL,
    "metadataJson"         TEXT NOT NULL,
    "totalReward"          DOUBLE PRECISION NOT NULL,
    "episodeLength"        INTEGER NOT NULL,
    "finalStatus"          TEXT NOT NULL,
    "finalBalance"         DOUBLE PRECISION,
    "finalPnL"             DOUBLE PRECISION,
    "tradesExecuted"       INTEGER,
    "postsCreated"         INTEGER,
    "aiJudgeReward"        DOUBLE PRECISION,
    "aiJudgeReasoning"     TEXT,
    "judgedAt"             TIMESTAMP(3),
    "isTrainingData"       BOOLEAN NOT NULL DEFAULT true,
    "isEvaluation"         BOOLEAN NOT NULL DEFAULT false,
    "usedInTraining"       BOOLEAN NOT NULL DEFAULT false,
    "trainedInBatch"       TEXT,
    "createdAt"            TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt"            TIMESTAMP(3) NOT NULL,
    CONSTRAINT "trajectories_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "trajectories_trajectoryId_key" ON "trajectories" ("trajectoryId");
CREATE INDEX "trajectories_windowId_idx" ON "trajectories" ("windowId");
CREATE INDEX "trajectories_windowId_agentId_idx" ON "trajectories" ("windowId", "agentId");
CREATE INDEX "trajectories_agentId_startTime_idx" ON "trajectories" ("agentId", "startTime");
CREATE INDEX "trajectories_scenarioId_createdAt_idx" ON "trajectories" ("scenarioId", "createdAt");
CREATE INDEX "trajectories_isTrainingData_usedInTraining_idx" ON "trajectories" ("isTrainingData", "usedInTraining");
CREATE INDEX "trajectories_trainedInBatch_idx" ON "trajectories" ("trainedInBatch");
CREATE INDEX "trajectories_aiJudgeReward_idx" ON "trajectories" ("aiJudgeReward");
-- Not in the game's schema: the snapshot's incremental watermark scans updatedAt.
CREATE INDEX "trajectories_updatedAt_idx" ON "trajectories" ("updatedAt");
