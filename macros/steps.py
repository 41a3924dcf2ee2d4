"""Parsing stepsJson once, per gateway.

`@parse_steps(doc)` turns a trajectory's stepsJson into a list of steps in one pass over the
text: on DuckDB a single `json_transform` into typed structs (the step fields of both step
shapes, and of each LLM call only its id and response), on PostgreSQL the jsonb elements.
staging.trajectory_checks reads it. `@parse_step_calls(doc)` reads the same text for the LLM
calls with all their fields (the steps as their numbers and lists of calls), in
staging.training_chats, which turns them into chats. Each model parses once and stores
neither steps nor calls: only the figures and the checks (trajectory_checks) and the chats
(training_chats). A document that is not valid JSON or not an array gives NULL. The fields
are then read with `@field(value, key, ...)` (struct access on DuckDB, jsonb_extract_path_text on PostgreSQL),
always as text, and cast with @safe_double / @safe_int, so a number logged as a string or
garbage where a number belongs becomes NULL instead of failing the build.

`@step_number(step, position)` and `@call_id(llm_call, trajectory_id, step_number, call_index)`
are the one rule by which both models number the steps and name the calls (docs/TABLES.md "Call
ids"): trajectory_checks counts the calls by id, training_chats merges them with llm_call_logs by id.

`@json_kind_at(doc, element, position[, key])` is the slow path for the few dirty steps the
struct cannot classify (not an object, llmCalls not an array): the JSON type of
doc[position] (or doc[position].key) as 'object', 'array', 'string', ...
"""

from __future__ import annotations

import functools
import json

from sqlglot import exp

from macros.json import safe_int
from sqlmesh import macro

_TEXT = "VARCHAR"

# The fields of both step shapes (docs/TABLES.md) the models read; everything as text.
LLM_CALL_FIELDS = {
    "callId": _TEXT,
    "timestamp": _TEXT,
    "model": _TEXT,
    "purpose": _TEXT,
    "actionType": _TEXT,
    "systemPrompt": _TEXT,
    "userPrompt": _TEXT,
    "messages": [{"role": _TEXT, "content": _TEXT}],  # chat turns: see @chat_turns_of
    "response": _TEXT,
    "reasoning": _TEXT,
    "temperature": _TEXT,
    "maxTokens": _TEXT,
}
STEP_FIELDS = {
    "stepNumber": _TEXT,
    "stepId": _TEXT,
    "timestamp": _TEXT,
    "environmentState": {"agentBalance": _TEXT, "agentPnL": _TEXT},
    "action": {
        "actionType": _TEXT,
        "actionName": _TEXT,
        "success": _TEXT,
        "error": _TEXT,
        "result": {"pnl": _TEXT},
    },
    "observation": "JSON",
    "llmCalls": [{"callId": _TEXT, "response": _TEXT}],  # enough to count the calls by id and find those without an answer
}
STEPS_STRUCTURE = json.dumps([STEP_FIELDS], separators=(",", ":"))
STEP_CALLS_STRUCTURE = json.dumps([{"stepNumber": _TEXT, "stepId": _TEXT, "llmCalls": [LLM_CALL_FIELDS]}], separators=(",", ":"))


def _on_postgres(evaluator) -> bool:
    return evaluator.var("sql_engine", "duckdb") == "postgres"


def _on_spark(evaluator) -> bool:
    return evaluator.var("sql_engine", "duckdb") == "spark"


def spark_schema(structure) -> str:
    """A structure above as a Spark DDL type: {"a": "VARCHAR"} is STRUCT<`a`: STRING>; JSON is kept as its text."""
    if isinstance(structure, list):
        return f"ARRAY<{spark_schema(structure[0])}>"
    if isinstance(structure, dict):
        return "STRUCT<" + ", ".join(f"`{key}`: {spark_schema(value)}" for key, value in structure.items()) + ">"
    return "STRING"  # VARCHAR and JSON: Spark's from_json gives a non-string value as its JSON text


def _struct_path(value, names: list[str]) -> exp.Expression:
    result = value
    for name in names:
        result = exp.Dot(this=result, expression=exp.to_identifier(name, quoted=True))
    return result


def _key_names(keys) -> list[str]:
    return [key.this if isinstance(key, exp.Literal) else key.name for key in keys]


def _parse(evaluator, doc, structure: str) -> exp.Expression:
    if _on_spark(evaluator):
        # from_json takes a lone object for an array of one: only a JSON array is parsed
        d = doc.sql("spark")
        schema = spark_schema(json.loads(structure))
        return exp.maybe_parse(f"CASE WHEN json_array_length({d}) IS NOT NULL THEN from_json({d}, '{schema}') END", dialect="spark")
    if _on_postgres(evaluator):
        return exp.Dot(
            this=exp.to_identifier("babylon_rl"),
            expression=exp.Anonymous(this="json_array", expressions=[doc]),
        )
    # TRY: malformed JSON is NULL, not an error; a valid non-array document is NULL already
    return evaluator.parse_one(f"TRY(json_transform({doc.sql('duckdb')}, '{structure}'))")


@macro()
def parse_steps(evaluator, doc):
    """stepsJson as a list of steps (typed structs on DuckDB, jsonb on PostgreSQL); NULL unless a JSON array."""
    return _parse(evaluator, doc, STEPS_STRUCTURE)


@macro()
def parse_step_calls(evaluator, doc):
    """stepsJson as a list of steps holding their LLM calls with every call field; NULL unless a JSON array."""
    return _parse(evaluator, doc, STEP_CALLS_STRUCTURE)


@macro()
def field(evaluator, value, *keys):
    """value.key1.key2... as text (NULL when missing): a struct field on DuckDB, a jsonb path on PostgreSQL."""
    names = _key_names(keys)
    if _on_postgres(evaluator):
        return exp.Anonymous(this="jsonb_extract_path_text", expressions=[value, *map(exp.Literal.string, names)])
    if _on_spark(evaluator):
        return _struct_path(value, names)
    result = value
    for name in names:
        result = exp.Anonymous(this="struct_extract", expressions=[result, exp.Literal.string(name)])
    return result


@macro()
def call_list(evaluator, step):
    """The step's llmCalls as a list of calls; NULL when missing or not an array."""
    if _on_postgres(evaluator):
        return exp.Dot(
            this=exp.to_identifier("babylon_rl"),
            expression=exp.Anonymous(
                this="json_array",
                expressions=[exp.Anonymous(this="jsonb_extract_path", expressions=[step, exp.Literal.string("llmCalls")])],
            ),
        )
    if _on_spark(evaluator):
        return _struct_path(step, ["llmCalls"])
    return exp.Anonymous(this="struct_extract", expressions=[step, exp.Literal.string("llmCalls")])


@macro()
def step_number(evaluator, step, position):
    """The step's number (docs/TABLES.md "Call ids"): stepNumber, else stepId, when an integer;
    else its position in stepsJson."""
    number, step_id = (safe_int(evaluator, field(evaluator, step.copy(), exp.Literal.string(key))) for key in ("stepNumber", "stepId"))
    return exp.Coalesce(this=number, expressions=[step_id, position])


@macro()
def call_id(evaluator, llm_call, trajectory_id, step_number, call_index):
    """The call's id (docs/TABLES.md "Call ids"): its callId when not empty, else
    {trajectoryId}:{stepNumber}:{its index in the step}, as staging.trajectory_checks counts the
    calls and staging.training_chats merges them with llm_call_logs."""
    parts = [trajectory_id, exp.Literal.string(":"), exp.cast(step_number, "TEXT"), exp.Literal.string(":"), exp.cast(call_index, "TEXT")]
    made_up = functools.reduce(lambda left, right: exp.DPipe(this=left, expression=right), parts)
    own = exp.Nullif(this=field(evaluator, llm_call, exp.Literal.string("callId")), expression=exp.Literal.string(""))
    return exp.Coalesce(this=own, expressions=[made_up])


@macro()
def field_present(evaluator, value, *keys):
    """TRUE when value.key1... exists and is not JSON null (an object field on DuckDB keeps its struct)."""
    names = _key_names(keys)
    if _on_postgres(evaluator):
        path = exp.Anonymous(this="jsonb_extract_path", expressions=[value, *map(exp.Literal.string, names)])
        kind = exp.Coalesce(this=exp.Anonymous(this="jsonb_typeof", expressions=[path]), expressions=[exp.Literal.string("null")])
        return exp.NEQ(this=kind, expression=exp.Literal.string("null"))
    if _on_spark(evaluator):
        return exp.Not(this=exp.Is(this=_struct_path(value, names), expression=exp.Null()))
    result = value
    for name in names:
        result = exp.Anonymous(this="struct_extract", expressions=[result, exp.Literal.string(name)])
    return exp.Not(this=exp.Is(this=result, expression=exp.Null()))


@macro()
def json_kind_at(evaluator, doc, element, position, key=None):
    """The JSON type ('object', 'array', 'string', 'number', 'boolean', 'null') of doc[position]
    (or of its `key`); NULL when missing. Re-reads the document on DuckDB: only for dirty steps."""
    name = _key_names([key])[0] if key is not None else None
    if _on_postgres(evaluator):
        target = element if name is None else exp.Anonymous(
            this="jsonb_extract_path", expressions=[element, exp.Literal.string(name)]
        )
        return exp.Anonymous(this="jsonb_typeof", expressions=[target])
    if _on_spark(evaluator):
        from macros.json import spark_kind
        elements = f"variant_get(try_parse_json({doc.sql('spark')}), '$', 'ARRAY<VARIANT>')"
        target = f"try_element_at({elements}, CAST({position.sql('spark')} AS INT) + 1)"
        if name is not None:
            target = f"variant_get({target}, '$.{name}')"
        return exp.maybe_parse(spark_kind(target), dialect="spark")
    path = f"'$[' || CAST({position.sql('duckdb')} AS VARCHAR) || ']" + (f'."{name}"' if name else "") + "'"
    return evaluator.parse_one(
        f"""CASE json_type({doc.sql('duckdb')}, {path})
              WHEN 'OBJECT' THEN 'object' WHEN 'ARRAY' THEN 'array' WHEN 'VARCHAR' THEN 'string'
              WHEN 'BOOLEAN' THEN 'boolean' WHEN 'NULL' THEN 'null'
              WHEN 'BIGINT' THEN 'number' WHEN 'UBIGINT' THEN 'number' WHEN 'DOUBLE' THEN 'number'
            END"""
    )


@macro()
def calls_missing(evaluator, calls, key):
    """How many calls of a call list (@call_list) have no `key` (0 for a NULL list)."""
    name = _key_names([key])[0]
    c = calls.sql("postgres" if _on_postgres(evaluator) else "duckdb")
    if _on_postgres(evaluator):
        return exp.Dot(
            this=exp.to_identifier("babylon_rl"),
            expression=exp.Anonymous(this="json_array_missing_key", expressions=[calls, exp.Literal.string(name)]),
        )
    if _on_spark(evaluator):
        return exp.maybe_parse(f"coalesce(size(filter({calls.sql('spark')}, llm_call -> llm_call.`{name}` IS NULL)), 0)", dialect="spark")
    return evaluator.parse_one(f"COALESCE(len(list_filter({c}, llm_call -> llm_call.\"{name}\" IS NULL)), 0)")


@macro()
def list_length(evaluator, values):
    """Number of elements of a list (DuckDB LIST, PostgreSQL array); NULL for NULL."""
    if _on_postgres(evaluator):
        return exp.Anonymous(this="cardinality", expressions=[values])
    if _on_spark(evaluator):
        return exp.Anonymous(this="size", expressions=[values])  # NULL for NULL under ANSI, Spark 4's default
    return exp.Anonymous(this="len", expressions=[values])


@macro()
def unnest_with_position(evaluator, values, item, position):
    """Projections: one row per element of a list, as `item`, with its `position` from 0.
    Spark has one generator for both (posexplode); DuckDB and PostgreSQL zip two set-returning functions."""
    item_name, position_name = (e.name for e in (item, position))
    if _on_spark(evaluator):
        return exp.Aliases(
            this=exp.Anonymous(this="posexplode", expressions=[values]),
            expressions=[exp.to_identifier(position_name), exp.to_identifier(item_name)],
        )
    return [
        exp.alias_(exp.Unnest(expressions=[values]), item_name),
        exp.alias_(exp.Sub(this=exp.Anonymous(this="GENERATE_SUBSCRIPTS", expressions=[values.copy(), exp.Literal.number(1)]),
                           expression=exp.Literal.number(1)), position_name),
    ]
