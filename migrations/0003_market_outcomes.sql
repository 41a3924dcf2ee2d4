-- market_outcomes: the ground truth of a window (what the agents could not know).
-- A row is either a stock (stockTicker ...) or a prediction market (predictionMarketId ...).
CREATE TABLE "market_outcomes" (
    "id"                 TEXT NOT NULL,
    "windowId"           VARCHAR(50) NOT NULL,
    "stockTicker"        VARCHAR(20),
    "startPrice"         DECIMAL(10,2),
    "endPrice"           DECIMAL(10,2),
    "changePercent"      DECIMAL(5,2),
    "sentiment"          VARCHAR(20),
    "newsEvents"         JSONB,
    "predictionMarketId" TEXT,
    "question"           TEXT,
    "outcome"            VARCHAR(20),
    "finalProbability"   DECIMAL(5,4),
    "volume"             DECIMAL(15,2),
    "createdAt"          TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "market_outcomes_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "market_outcomes_windowId_idx" ON "market_outcomes" ("windowId");
CREATE INDEX "market_outcomes_windowId_stockTicker_idx" ON "market_outcomes" ("windowId", "stockTicker");
CREATE INDEX "market_outcomes_createdAt_idx" ON "market_outcomes" ("createdAt");
