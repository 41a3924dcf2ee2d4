/* Every raw market_outcomes row of the interval, typed, with the verdict of the checks.
   A row is a stock (stockTicker) or a prediction market (predictionMarketId). Re-synced
   duplicates of one window + instrument keep the newest createdAt; the older ones are
   rejected as superseded_duplicate. A row naming no instrument is rejected as
   outcome_without_instrument. Sentiment is recomputed from the change where the label
   contradicts it: |change| < @neutral_change_pct is NEUTRAL, above it BULLISH/BEARISH by
   sign (so a 0 % change labelled BEARISH becomes NEUTRAL). Rows whose windowId is not a
   valid YYYY-MM-DDTHH:MM cannot be placed in a window and are reported by
   babylon.rejected_rows as bad_window_id. */
MODEL (
  name staging.market_outcome_checks,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start
  ),
  grain source_id,
  audits (
    unique_values(columns := (source_id)),
    not_null(columns := (source_id, window_id, window_start))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    source_id TEXT,
    window_id TEXT,
    window_start TIMESTAMP,
    instrument_kind TEXT,
    instrument_id TEXT,
    ticker TEXT,
    start_price DOUBLE,
    end_price DOUBLE,
    change_pct DOUBLE,
    sentiment TEXT,
    logged_sentiment TEXT,
    news_json TEXT,
    market_id TEXT,
    question TEXT,
    outcome TEXT,
    final_probability DOUBLE,
    volume DOUBLE,
    created_at TIMESTAMP,
    reject_reason TEXT,
    reject_detail TEXT
  ),
  column_descriptions (
    source_id = 'market_outcomes.id',
    window_id = 'Window id YYYY-MM-DDTHH:MM',
    window_start = 'Window start',
    instrument_kind = 'stock or prediction_market',
    instrument_id = 'stockTicker or predictionMarketId',
    ticker = 'stockTicker',
    start_price = 'startPrice',
    end_price = 'endPrice',
    change_pct = 'changePercent; recomputed from the prices when they disagree by more than 0.01 or it is NULL',
    sentiment = 'BULLISH / BEARISH / NEUTRAL, consistent with change_pct',
    logged_sentiment = 'sentiment as logged',
    news_json = 'newsEvents as a JSON array text of {headline, sentiment, at}; [] when missing or malformed',
    market_id = 'predictionMarketId',
    question = 'question',
    outcome = 'YES / NO / UNRESOLVED',
    final_probability = 'finalProbability',
    volume = 'volume',
    created_at = 'createdAt',
    reject_reason = 'NULL when staged, else outcome_without_instrument or superseded_duplicate',
    reject_detail = 'Human-readable explanation of reject_reason'
  )
);

WITH outcomes_in_range AS (
  SELECT
    "id" AS source_id,
    @window_start_from_id("windowId") AS window_start,
    NULLIF(TRIM("stockTicker"), '') AS ticker,
    NULLIF(TRIM("predictionMarketId"), '') AS market_id,
    CAST("startPrice" AS DOUBLE) AS start_price,
    CAST("endPrice" AS DOUBLE) AS end_price,
    CAST("changePercent" AS DOUBLE) AS logged_change_pct,
    UPPER("sentiment") AS logged_sentiment,
    @json_parse(CAST("newsEvents" AS TEXT)) AS news,
    "question" AS question,
    UPPER("outcome") AS outcome,
    CAST("finalProbability" AS DOUBLE) AS final_probability,
    CAST("volume" AS DOUBLE) AS volume,
    "createdAt" AS created_at
  FROM @raw_schema.market_outcomes
),

outcomes_ranked AS (
  SELECT
    *,
    CASE WHEN ticker IS NOT NULL THEN 'stock' WHEN market_id IS NOT NULL THEN 'prediction_market' END AS instrument_kind,
    COALESCE(ticker, market_id) AS instrument_id,
    ROW_NUMBER() OVER (
      PARTITION BY window_start, COALESCE(ticker, market_id)
      ORDER BY created_at DESC NULLS LAST, source_id DESC
    ) AS newest_first,
    /* CAST AS DOUBLE changes nothing on DuckDB and keeps ROUND portable: PostgreSQL has no
       ROUND(double, int), and sqlglot rounds a DOUBLE through DECIMAL there only when it knows
       the type, which with SQLMesh's query optimizer off (config.yaml) it learns from a cast */
    CASE
      WHEN start_price > 0 AND end_price IS NOT NULL
       AND (logged_change_pct IS NULL
            OR ABS(logged_change_pct - ROUND(CAST((end_price - start_price) / start_price * 100 AS DOUBLE), 2)) > 0.01)
      THEN ROUND(CAST((end_price - start_price) / start_price * 100 AS DOUBLE), 2)
      ELSE logged_change_pct
    END AS change_pct
  FROM outcomes_in_range
  WHERE window_start BETWEEN @start_ts AND @end_ts
)

SELECT
  source_id,
  @window_id(window_start) AS window_id,
  window_start,
  instrument_kind,
  instrument_id,
  ticker,
  start_price,
  end_price,
  change_pct,
  CASE
    WHEN instrument_kind <> 'stock' THEN NULL
    WHEN change_pct IS NULL THEN logged_sentiment
    WHEN ABS(change_pct) < @neutral_change_pct THEN 'NEUTRAL'
    WHEN change_pct > 0 THEN 'BULLISH'
    ELSE 'BEARISH'
  END AS sentiment,
  logged_sentiment,
  CASE WHEN @json_kind(news) = 'array' THEN CAST(news AS TEXT) ELSE '[]' END AS news_json,
  market_id,
  question,
  outcome,
  final_probability,
  volume,
  created_at,
  CASE
    WHEN instrument_kind IS NULL THEN 'outcome_without_instrument'
    WHEN newest_first > 1 THEN 'superseded_duplicate'
  END AS reject_reason,
  CASE
    WHEN instrument_kind IS NULL THEN 'neither stockTicker nor predictionMarketId is set'
    WHEN newest_first > 1 THEN 'a newer row exists for window ' || @window_id(window_start) || ' and ' || instrument_id
  END AS reject_detail
FROM outcomes_ranked
