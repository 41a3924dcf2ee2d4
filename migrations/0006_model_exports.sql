-- model_exports: where each export of a trained model lives (`cli.py model export`), one row per
-- (model, format, path). A table of the toolkit's beside trained_models, not a new column of the
-- game's own table: the game's Prisma schema stays as it is. modelId is trained_models."modelId"
-- (RUN:step-N or RUN:merged); no foreign key, as a run trained without a database has no row there.
CREATE TABLE "model_exports" (
    "modelId"    TEXT NOT NULL,
    "format"     TEXT NOT NULL,
    "path"       TEXT NOT NULL,
    "baseModel"  TEXT NOT NULL,
    "sizeBytes"  BIGINT NOT NULL,
    "createdAt"  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "model_exports_pkey" PRIMARY KEY ("modelId", "format", "path")
);

CREATE INDEX "model_exports_modelId_idx" ON "model_exports" ("modelId");
