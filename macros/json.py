"""Portable JSON and casting helpers for the models.

The models are written in DuckDB SQL and SQLMesh transpiles them for each gateway.
sqlglot transpiles plain JSON paths, but not JSON validation, JSON arrays or safe casts
(`TRY_CAST` becomes a plain `CAST` on PostgreSQL, which fails on bad input), so those go
through the macros below. Each one emits the native form for the gateway's `sql_engine`
variable (see config.py):

  duckdb    DuckDB's JSON type and TRY_CAST: a JSON value is text, a JSON array is JSON[].
  postgres  jsonb, and the small functions in schema babylon_rl created by
            @prepare_engine() (config `before_all`), because PostgreSQL 15 has no
            non-failing JSON parse.
  spark     JSON as text, like DuckDB: read with get_json_object / from_json, typed with
            try_parse_json's VARIANT where its JSON type matters; a JSON array is ARRAY<STRING>.
            @prepare_engine() declares raw.* as views over the lake's Parquet files.

JSON values are handled as opaque values: build them with @json_array / @json_value,
read them with @json_text / @json_kind, render them with CAST(... AS TEXT).
"""

from __future__ import annotations

from sqlglot import exp

from sqlmesh import macro

HELPER_SCHEMA = "babylon_rl"

# Non-failing parsers for PostgreSQL: malformed input becomes NULL instead of an error.
POSTGRES_HELPERS = f"""
CREATE SCHEMA IF NOT EXISTS {HELPER_SCHEMA};

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.try_jsonb(doc text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN doc::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_array(doc jsonb) RETURNS jsonb[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN jsonb_typeof(doc) = 'array' THEN ARRAY(SELECT jsonb_array_elements(doc)) END
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_array(doc text) RETURNS jsonb[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT {HELPER_SCHEMA}.json_array({HELPER_SCHEMA}.try_jsonb(doc))
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_chat(doc jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN jsonb_typeof(doc) = 'array' THEN doc END
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_drop_system_turns(doc jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN jsonb_typeof(doc) = 'array' THEN (
        SELECT COALESCE(
            jsonb_agg(jsonb_build_object('role', turn -> 'role', 'content', turn -> 'content') ORDER BY position),
            '[]'::jsonb
        )::text
        FROM jsonb_array_elements(doc) WITH ORDINALITY AS turns(turn, position)
        WHERE (turn ->> 'role') IS DISTINCT FROM 'system'
    ) END
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_array_missing_key(elements jsonb[], key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT count(*) FROM unnest(elements) AS e(element)
    WHERE jsonb_typeof(element) <> 'object' OR (element ->> key) IS NULL
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_system_turn(doc jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN jsonb_typeof(doc) = 'array' THEN (
        SELECT turn ->> 'content'
        FROM jsonb_array_elements(doc) WITH ORDINALITY AS turns(turn, position)
        WHERE (turn ->> 'role') = 'system'
        ORDER BY position
        LIMIT 1
    ) END
$fn$;

CREATE OR REPLACE FUNCTION {HELPER_SCHEMA}.json_array_missing_key(doc jsonb, key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN jsonb_typeof(doc) = 'array' THEN (
        SELECT count(*) FROM jsonb_array_elements(doc) AS elements(element)
        WHERE jsonb_typeof(element) <> 'object' OR (element ->> key) IS NULL
    ) ELSE 0 END
$fn$;
"""


def _postgres(evaluator) -> bool:
    return evaluator.var("sql_engine", "duckdb") == "postgres"


def _spark(evaluator) -> bool:
    return evaluator.var("sql_engine", "duckdb") == "spark"


def _spark_sql(sql: str) -> exp.Expression:
    """A Spark SQL expression, as a node SQLMesh renders for the gateway unchanged."""
    return exp.maybe_parse(sql, dialect="spark")


def _spark_path(keys: list[str]) -> str:
    return "$" + "".join(f".{key}" for key in keys)  # the models' keys are plain names


# The JSON type of a VARIANT, named as the other gateways name it.
_SPARK_KIND = """CASE WHEN {v} IS NULL THEN NULL
                      WHEN schema_of_variant({v}) LIKE 'OBJECT%' THEN 'object'
                      WHEN schema_of_variant({v}) LIKE 'ARRAY%' THEN 'array'
                      WHEN schema_of_variant({v}) = 'STRING' THEN 'string'
                      WHEN schema_of_variant({v}) = 'BOOLEAN' THEN 'boolean'
                      WHEN schema_of_variant({v}) = 'VOID' THEN 'null'
                      ELSE 'number' END"""


def spark_kind(variant_sql: str) -> str:
    return _SPARK_KIND.format(v=variant_sql)


def spark_quote(text_sql: str) -> str:
    """Text as a JSON string literal: to_json of a one-element array, without its brackets."""
    return f"regexp_extract(to_json(array(CAST({text_sql} AS STRING))), '^\\[(.*)\\]$', 1)"


def _helper(name: str, *args: exp.Expression) -> exp.Expression:
    # schema-qualified as a Dot of an identifier and a function: an Anonymous named
    # "babylon_rl.x" would be rendered as one upper-cased, quoted identifier.
    return exp.Dot(
        this=exp.to_identifier(HELPER_SCHEMA),
        expression=exp.Anonymous(this=name, expressions=list(args)),
    )


def _fn(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _keys(keys) -> list[str]:
    return [key.this if isinstance(key, exp.Literal) else key.name for key in keys]


def _duckdb_path(keys: list[str]) -> exp.Literal:
    return exp.Literal.string("$" + "".join(f'."{key}"' for key in keys))


@macro()
def prepare_engine(evaluator):
    """`before_all` statements: on PostgreSQL, create the helper functions above; on Spark, the raw
    tables as views over the lake; on DuckDB, keep extension auto-install off for the run (the
    warehouse never touches the network)."""
    if _spark(evaluator):
        from macros.lake import raw_views
        return [exp.maybe_parse(sql, dialect="spark") for sql in raw_views(evaluator.var("lake"), evaluator.var("raw_schema"))]
    if _postgres(evaluator):
        # one statement per blank-line separated block of POSTGRES_HELPERS
        statements = [part.strip().rstrip(";") for part in POSTGRES_HELPERS.split("\n\n") if part.strip()]
        return [exp.Command(this="CREATE", expression=exp.Literal.string(stmt[len("CREATE"):])) for stmt in statements]
    return evaluator.parse_one("SET autoinstall_known_extensions = false")


@macro()
def json_array(evaluator, doc):
    """The elements of a JSON array (text or JSON) as a list; NULL unless `doc` is a valid JSON array."""
    if _postgres(evaluator):
        return _helper("json_array", doc)
    if _spark(evaluator):
        d = doc.sql("spark")
        return _spark_sql(f"CASE WHEN json_array_length({d}) IS NOT NULL THEN from_json({d}, 'ARRAY<STRING>') END")
    return exp.TryCast(this=doc, to=exp.DataType.build("JSON[]", dialect="duckdb"))


@macro()
def json_value(evaluator, doc, *keys):
    """The JSON value at doc.key1.key2... (NULL when missing)."""
    names = _keys(keys)
    if _postgres(evaluator):
        return _fn("jsonb_extract_path", doc, *map(exp.Literal.string, names))
    if _spark(evaluator):  # JSON text, strings kept quoted, as DuckDB's json_extract
        return _spark_sql(f"to_json(variant_get(try_parse_json({doc.sql('spark')}), '{_spark_path(names)}'))")
    return _fn("json_extract", doc, _duckdb_path(names))


@macro()
def json_text(evaluator, doc, *keys):
    """The value at doc.key1.key2... as text: strings unquoted, objects and arrays as JSON, JSON null as NULL."""
    names = _keys(keys)
    if _postgres(evaluator):
        return _fn("jsonb_extract_path_text", doc, *map(exp.Literal.string, names))
    if _spark(evaluator):
        return _fn("get_json_object", doc, exp.Literal.string(_spark_path(names)))
    return _fn("json_extract_string", doc, _duckdb_path(names))


@macro()
def json_kind(evaluator, doc):
    """The JSON type of a value: 'object', 'array', 'string', 'number', 'boolean', 'null'; NULL when missing."""
    if _postgres(evaluator):
        return _fn("jsonb_typeof", doc)
    if _spark(evaluator):
        return _spark_sql(spark_kind(f"try_parse_json({doc.sql('spark')})"))
    return evaluator.parse_one(
        f"""CASE json_type({doc.sql("duckdb")})
              WHEN 'OBJECT' THEN 'object' WHEN 'ARRAY' THEN 'array' WHEN 'VARCHAR' THEN 'string'
              WHEN 'BOOLEAN' THEN 'boolean' WHEN 'NULL' THEN 'null'
              WHEN 'BIGINT' THEN 'number' WHEN 'UBIGINT' THEN 'number' WHEN 'DOUBLE' THEN 'number'
            END"""
    )


@macro()
def json_quote(evaluator, text):
    """Text as a JSON string literal (quoted and escaped), for assembling JSON text."""
    if _postgres(evaluator):
        return exp.cast(_fn("to_jsonb", exp.cast(text, "TEXT")), "TEXT")
    if _spark(evaluator):
        return _spark_sql(f"CASE WHEN {text.sql('spark')} IS NOT NULL THEN {spark_quote(text.sql('spark'))} END")
    return exp.cast(_fn("to_json", exp.cast(text, "VARCHAR")), "VARCHAR")


# Chat turns: a `messages` array as {role, content} pairs. On DuckDB a typed list of structs
# (json_transform parses the text once; the helpers below are list functions, no JSON is
# parsed again), on PostgreSQL the jsonb array.
CHAT_TURNS_STRUCTURE = '[{"role":"VARCHAR","content":"VARCHAR"}]'
SPARK_CHAT_TURNS = "ARRAY<STRUCT<role: STRING, content: STRING>>"


@macro()
def chat_turns_of(evaluator, llm_call):
    """The `messages` of a call parsed by @parse_step_calls, as chat turns; NULL unless an array."""
    if _postgres(evaluator):
        return _helper("json_chat", _fn("jsonb_extract_path", llm_call, exp.Literal.string("messages")))
    if _spark(evaluator):
        return _spark_sql(f"{llm_call.sql('spark')}.messages")
    return _fn("struct_extract", llm_call, exp.Literal.string("messages"))


@macro()
def chat_turns_from_text(evaluator, text):
    """A messages JSON text as chat turns; NULL unless it is a JSON array."""
    if _postgres(evaluator):
        return _helper("json_chat", _helper("try_jsonb", exp.cast(text, "TEXT")))
    if _spark(evaluator):
        t = text.sql("spark")
        return _spark_sql(f"CASE WHEN json_array_length({t}) IS NOT NULL THEN from_json({t}, '{SPARK_CHAT_TURNS}') END")
    return evaluator.parse_one(f"TRY(json_transform({text.sql('duckdb')}, '{CHAT_TURNS_STRUCTURE}'))")


@macro()
def system_turn_content(evaluator, turns):
    """The content of the first system turn; NULL when there is none."""
    if _postgres(evaluator):
        return _helper("json_system_turn", turns)
    if _spark(evaluator):
        return _spark_sql(f"try_element_at(filter({turns.sql('spark')}, turn -> turn.role = 'system'), 1).content")
    return evaluator.parse_one(f"list_filter({turns.sql('duckdb')}, turn -> turn.role = 'system')[1].content")


@macro()
def non_system_turns_json(evaluator, turns):
    """The turns other than system ones as JSON text [{"role": ..., "content": ...}, ...]; NULL for NULL turns."""
    if _postgres(evaluator):
        return _helper("json_drop_system_turns", turns)
    if _spark(evaluator):
        as_json = "coalesce({}, 'null')".format
        turn_json = (f"""'{{"role": ' || {as_json(spark_quote('turn.role'))} || ', "content": ' """
                     f"""|| {as_json(spark_quote('turn.content'))} || '}}'""")
        turns_sql = turns.sql("spark")
        return _spark_sql(f"""'[' || array_join(transform(filter({turns_sql}, turn -> turn.role IS DISTINCT FROM 'system'),
                                                               turn -> {turn_json}), ', ') || ']'""")
    as_json = "COALESCE(CAST(to_json({}) AS VARCHAR), 'null')"
    turn_json = f"""'{{"role": ' || {as_json.format('turn.role')} || ', "content": ' || {as_json.format('turn.content')} || '}}'"""
    return evaluator.parse_one(
        f"""'[' || array_to_string(list_transform(
                      list_filter({turns.sql('duckdb')}, turn -> turn.role IS DISTINCT FROM 'system'),
                      turn -> {turn_json}), ', ') || ']'"""
    )


_NUMBER = r"^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$"
_INTEGER = r"^\s*-?[0-9]{1,18}\s*$"


def _spark_double(text_sql: str) -> str:
    """Spark's try_cast, except that it also takes Java's "1.5d" and "2f", which DuckDB's TRY_CAST refuses."""
    return f"CASE WHEN NOT {text_sql} RLIKE '[dDfF] *$' THEN try_cast({text_sql} AS DOUBLE) END"


@macro()
def safe_double(evaluator, text):
    """Text to DOUBLE, NULL when it is not a number."""
    if _postgres(evaluator):
        return _guarded_cast(text, _NUMBER, "DOUBLE PRECISION")
    if _spark(evaluator):
        return _spark_sql(_spark_double(text.sql("spark")))
    return exp.TryCast(this=text, to=exp.DataType.build("DOUBLE"))


@macro()
def safe_int(evaluator, text):
    """Text to BIGINT, NULL when it is not an integer."""
    if _postgres(evaluator):
        return _guarded_cast(text, _INTEGER, "BIGINT")
    if _spark(evaluator):  # as DuckDB's TRY_CAST: "1.5" is 2, "1e3" is 1000
        return _spark_sql(f"try_cast(round({_spark_double(text.sql('spark'))}) AS BIGINT)")
    return exp.TryCast(this=text, to=exp.DataType.build("BIGINT"))


def _guarded_cast(text, pattern: str, type_: str) -> exp.Expression:
    return exp.Case(
        ifs=[exp.If(this=exp.RegexpLike(this=text, expression=exp.Literal.string(pattern)), true=exp.cast(text, type_, dialect="postgres"))]
    )


@macro()
def json_array_missing_key(evaluator, doc, key):
    """How many elements of a JSON array are not objects with a non-null `key` (0 for a NULL array)."""
    if _postgres(evaluator):
        return _helper("json_array_missing_key", doc, key)
    name = _keys([key])[0]
    if _spark(evaluator):
        d = doc.sql("spark")
        return _spark_sql(f"""coalesce(json_array_length({d}) - size(filter(from_json({d}, 'ARRAY<STRING>'),
                                                   element -> get_json_object(element, '$.{name}') IS NOT NULL)), 0)""")
    return evaluator.parse_one(
        f"""COALESCE(json_array_length({doc.sql("duckdb")})
              - len(list_filter(json_extract_string({doc.sql("duckdb")}, '$[*]."{name}"'), value -> value IS NOT NULL)), 0)"""
    )


@macro()
def json_length(evaluator, doc):
    """The number of elements of a JSON array."""
    if _postgres(evaluator):
        return _fn("jsonb_array_length", doc)
    return _fn("json_array_length", doc)  # Spark's has the same name


@macro()
def json_parse(evaluator, text):
    """Text parsed as JSON; NULL when it is not valid JSON."""
    if _postgres(evaluator):
        return _helper("try_jsonb", exp.cast(text, "TEXT"))
    if _spark(evaluator):  # JSON stays text on Spark, as on DuckDB: kept when it parses
        t = text.sql("spark")
        return _spark_sql(f"CASE WHEN try_parse_json({t}) IS NOT NULL THEN {t} END")
    # TRY_CAST as well as the guard: the optimizer may evaluate the cast before the CASE filters
    # (a malformed messagesJson such as "[" failed the whole llm_calls model).
    return evaluator.parse_one(f"CASE WHEN json_valid({text.sql('duckdb')}) THEN TRY_CAST({text.sql('duckdb')} AS JSON) END")


@macro()
def finite(evaluator, value):
    """A DOUBLE, with NaN, +-Infinity and magnitudes above 1e15 as NULL (no real P&L is that large,
    and sums or variances of such values overflow: STDDEV_SAMP of 1e308 fails the whole build)."""
    v = value.sql("duckdb")
    return evaluator.parse_one(
        f"""CASE WHEN {v} IN (CAST('NaN' AS DOUBLE), CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS DOUBLE))
                  OR ABS({v}) > 1e15
             THEN NULL ELSE {v} END"""
    )
