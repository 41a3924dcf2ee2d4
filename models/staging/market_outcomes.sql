/* The ground truth of each window: one row per window and instrument (stock or prediction
   market), deduplicated and with consistent sentiment (see staging.market_outcome_checks). */
MODEL (
  name staging.market_outcomes,
  kind VIEW,
  grain (window_id, instrument_kind, instrument_id),
  audits (
    unique_combination_of_columns(columns := (window_id, instrument_kind, instrument_id)),
    not_null(columns := (source_id, window_id, instrument_kind, instrument_id))
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
    news_json TEXT,
    market_id TEXT,
    question TEXT,
    outcome TEXT,
    final_probability DOUBLE,
    volume DOUBLE
  )
);

SELECT
  source_id, /* market_outcomes.id */
  window_id, /* window id */
  window_start, /* window start */
  instrument_kind, /* stock or prediction_market */
  instrument_id, /* ticker or market id */
  ticker, /* stockTicker */
  start_price, /* startPrice */
  end_price, /* endPrice */
  change_pct, /* change % over the window */
  sentiment, /* BULLISH / BEARISH / NEUTRAL */
  news_json, /* newsEvents JSON array text */
  market_id, /* predictionMarketId */
  question, /* the market's question */
  outcome, /* YES / NO / UNRESOLVED */
  final_probability, /* final probability of YES */
  volume /* traded volume */
FROM staging.market_outcome_checks
WHERE reject_reason IS NULL
