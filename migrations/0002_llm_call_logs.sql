-- llm_call_logs: one row per LLM call, the same calls as in trajectories.stepsJson, normalised.
CREATE TABLE "llm_call_logs" (
    "id"               TEXT NOT NULL,
    "trajectoryId"     TEXT NOT NULL,
    "stepId"           TEXT NOT NULL,
    "callId"           TEXT NOT NULL,
    "timestamp"        TIMESTAMP(3) NOT NULL,
    "latencyMs"        INTEGER,
    "model"            TEXT NOT NULL,
    "purpose"          TEXT NOT NULL,
    "actionType"       TEXT,
    "systemPrompt"     TEXT NOT NULL,
    "userPrompt"       TEXT NOT NULL,
    "messagesJson"     TEXT,
    "response"         TEXT NOT NULL,
    "reasoning"        TEXT,
    "temperature"      DOUBLE PRECISION NOT NULL,
    "maxTokens"        INTEGER NOT NULL,
    "topP"             DOUBLE PRECISION,
    "promptTokens"     INTEGER,
    "completionTokens" INTEGER,
    "totalTokens"      INTEGER,
    "metadata"         TEXT,
    "createdAt"        TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "llm_call_logs_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "llm_call_logs_callId_key" ON "llm_call_logs" ("callId");
CREATE INDEX "llm_call_logs_trajectoryId_idx" ON "llm_call_logs" ("trajectoryId");
CREATE INDEX "llm_call_logs_createdAt_idx" ON "llm_call_logs" ("createdAt");
