/* One row per window: the ground truth the agents could not know (every stock's start,
   end, change, the sentiment its change shows, and its news's headlines and times; every
   prediction market's question, outcome and final
   probability), as JSON and as the text block the judge reads. Only the judge sees this;
   it never enters training_samples. A headline's own sentiment label (a simulator's, or a
   game's) is left out: what trains or judges learns a headline's meaning from what the
   stocks did, never from a label. Windows with trajectories but no recorded outcomes get
   a row saying so. */
MODEL (
  name babylon.window_market_context,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column window_start
  ),
  grain window_id,
  audits (
    unique_values(columns := (window_id)),
    not_null(columns := (window_id, window_start, stocks_json, prediction_markets_json, context_text))
  ),
  columns ( -- every output column, in query order, with its type (config.yaml: optimize_query)
    window_id TEXT,
    window_start TIMESTAMP,
    stocks_json TEXT,
    prediction_markets_json TEXT,
    stock_count INT,
    prediction_market_count INT,
    context_text TEXT
  ),
  column_descriptions (
    window_id = 'Window id YYYY-MM-DDTHH:MM',
    window_start = 'Window start (UTC)',
    stocks_json = 'JSON array of {ticker, start_price, end_price, change_pct, sentiment, news: [{headline, at}]}',
    prediction_markets_json = 'JSON array of {market_id, question, outcome, final_probability, volume}',
    stock_count = 'Stocks in the window''s ground truth',
    prediction_market_count = 'Prediction markets in the window''s ground truth',
    context_text = 'The rendered ground-truth block the judge reads'
  )
);

WITH outcomes AS (
  SELECT *
  FROM staging.market_outcome_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

window_keys AS (
  SELECT DISTINCT window_id, window_start
  FROM outcomes
  UNION
  SELECT DISTINCT window_id, window_start
  FROM staging.trajectory_checks
  WHERE window_start BETWEEN @start_ts AND @end_ts
    AND reject_reason IS NULL
),

news_items AS (
  SELECT
    source_id,
    @unnest_with_position(@json_array(news_json), news_item, news_position)
  FROM outcomes
  WHERE instrument_kind = 'stock'
),

news_typed AS (
  SELECT
    source_id,
    news_position,
    @json_text(news_item, 'headline') AS headline,
    @json_text(news_item, 'at') AS at_text
  FROM news_items
),

stock_news AS (
  SELECT
    source_id,
    '[' || STRING_AGG(
      '{"headline": ' || COALESCE(@json_quote(headline), 'null')
      || ', "at": ' || COALESCE(@json_quote(at_text), 'null') || '}',
      ', ' ORDER BY at_text, news_position
    ) || ']' AS news_json,
    STRING_AGG(
      '    news ' || COALESCE(at_text, 'at an unknown time') || ': ' || COALESCE(headline, '(no headline)'),
      CHR(10) ORDER BY at_text, news_position
    ) AS news_text
  FROM news_typed
  GROUP BY source_id
),

stocks_rendered AS (
  SELECT
    o.window_id,
    o.ticker,
    '{"ticker": ' || @json_quote(o.ticker)
    || ', "start_price": ' || COALESCE(CAST(o.start_price AS TEXT), 'null')
    || ', "end_price": ' || COALESCE(CAST(o.end_price AS TEXT), 'null')
    || ', "change_pct": ' || COALESCE(CAST(o.change_pct AS TEXT), 'null')
    || ', "sentiment": ' || COALESCE(@json_quote(o.sentiment), 'null')
    || ', "news": ' || COALESCE(n.news_json, '[]') || '}' AS stock_json,
    '- ' || o.ticker || ': ' || COALESCE(CAST(CAST(o.start_price AS DECIMAL(18, 2)) AS TEXT), '?')
    || ' -> ' || COALESCE(CAST(CAST(o.end_price AS DECIMAL(18, 2)) AS TEXT), '?')
    || ' (' || COALESCE(CASE WHEN o.change_pct > 0 THEN '+' ELSE '' END || CAST(CAST(o.change_pct AS DECIMAL(18, 2)) AS TEXT) || '%', 'change unknown')
    || ', ' || COALESCE(o.sentiment, 'sentiment unknown') || ')'
    || COALESCE(CHR(10) || n.news_text, '') AS stock_text
  FROM outcomes AS o
  LEFT JOIN stock_news AS n
    ON n.source_id = o.source_id
  WHERE o.instrument_kind = 'stock'
),

markets_rendered AS (
  SELECT
    window_id,
    market_id,
    '{"market_id": ' || @json_quote(market_id)
    || ', "question": ' || COALESCE(@json_quote(question), 'null')
    || ', "outcome": ' || COALESCE(@json_quote(outcome), 'null')
    || ', "final_probability": ' || COALESCE(CAST(final_probability AS TEXT), 'null')
    || ', "volume": ' || COALESCE(CAST(volume AS TEXT), 'null') || '}' AS market_json,
    '- ' || market_id || ': "' || COALESCE(question, '(no question)') || '" resolved '
    || COALESCE(outcome, 'UNKNOWN') || ', final probability '
    || COALESCE(CAST(CAST(final_probability AS DECIMAL(18, 4)) AS TEXT), 'unknown') AS market_text
  FROM outcomes
  WHERE instrument_kind = 'prediction_market'
),

stocks_by_window AS (
  SELECT
    window_id,
    COUNT(*) AS stock_count,
    '[' || STRING_AGG(stock_json, ', ' ORDER BY ticker) || ']' AS stocks_json,
    STRING_AGG(stock_text, CHR(10) ORDER BY ticker) AS stocks_text
  FROM stocks_rendered
  GROUP BY window_id
),

markets_by_window AS (
  SELECT
    window_id,
    COUNT(*) AS prediction_market_count,
    '[' || STRING_AGG(market_json, ', ' ORDER BY market_id) || ']' AS prediction_markets_json,
    STRING_AGG(market_text, CHR(10) ORDER BY market_id) AS markets_text
  FROM markets_rendered
  GROUP BY window_id
)

SELECT
  k.window_id,
  k.window_start,
  COALESCE(s.stocks_json, '[]') AS stocks_json,
  COALESCE(m.prediction_markets_json, '[]') AS prediction_markets_json,
  COALESCE(s.stock_count, 0)::INT AS stock_count,
  COALESCE(m.prediction_market_count, 0)::INT AS prediction_market_count,
  'Ground truth of window ' || k.window_id || ' (UTC); the agents did not know this.' || CHR(10)
  || 'Stocks (start -> end price, change, sentiment, news):' || CHR(10)
  || COALESCE(s.stocks_text, '- none recorded') || CHR(10)
  || 'Prediction markets (question, outcome, final probability of YES):' || CHR(10)
  || COALESCE(m.markets_text, '- none recorded') AS context_text
FROM window_keys AS k
LEFT JOIN stocks_by_window AS s
  ON s.window_id = k.window_id
LEFT JOIN markets_by_window AS m
  ON m.window_id = k.window_id
