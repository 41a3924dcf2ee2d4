"""`cli.py db migrate` / `db status` against a real PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from babylon_rl import db

pytestmark = pytest.mark.postgres

# The production columns of SOURCE_SCHEMA.md: (table, column) -> (type, nullable).
PRODUCTION_COLUMNS = json.loads((Path(__file__).parent / "data" / "production_columns.json").read_text())


def _columns(url: str) -> dict[str, list]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """SELECT table_name, column_name,
                      CASE WHEN data_type = 'numeric' THEN format('numeric(%s,%s)', numeric_precision, numeric_scale)
                           WHEN data_type = 'character varying' THEN format('varchar(%s)', character_maximum_length)
                           WHEN data_type LIKE 'timestamp%%' THEN format('timestamp(%s)', datetime_precision)
                           ELSE data_type END,
                      is_nullable = 'YES'
               FROM information_schema.columns
               WHERE table_schema = 'public' AND table_name NOT LIKE '\\_babylon%%'"""
        ).fetchall()
    return {f"{table}.{column}": [type_, nullable] for table, column, type_, nullable in rows}


def test_migrate_creates_the_production_columns(pg_url: str) -> None:
    db.migrate(pg_url)
    columns = _columns(pg_url)
    # model_exports is the toolkit's own table (migration 0006, `model export`): the game's tables are left as they are
    toolkit = {name: kind for name, kind in columns.items() if name.startswith("model_exports.")}
    assert {name: kind for name, kind in columns.items() if name not in toolkit} == PRODUCTION_COLUMNS
    assert set(toolkit) == {f"model_exports.{c}" for c in ("modelId", "format", "path", "baseModel", "sizeBytes", "createdAt")}


def test_migrate_creates_the_production_indexes(migrated_pg_url: str) -> None:
    with psycopg.connect(migrated_pg_url) as conn:
        indexes = {row[0]: row[1] for row in conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'trajectories'")}
    assert 'CREATE UNIQUE INDEX "trajectories_trajectoryId_key"' in indexes["trajectories_trajectoryId_key"]
    assert indexes["trajectories_windowId_agentId_idx"].endswith('("windowId", "agentId")')
    assert indexes["trajectories_isTrainingData_usedInTraining_idx"].endswith('("isTrainingData", "usedInTraining")')


def test_defaults_follow_the_schema(migrated_pg_url: str) -> None:
    with psycopg.connect(migrated_pg_url) as conn:
        conn.execute(
            """INSERT INTO training_batches ("id", "batchId", "baseModel", "modelVersion", "trajectoryIds", "rewardsJson")
               VALUES ('b1', 'batch-1', 'm', 'v1', '[]', '{}')"""
        )
        status, created = conn.execute('SELECT "status", "createdAt" FROM training_batches').fetchone()
    assert status == "pending"
    assert created is not None


def test_second_migrate_does_nothing(run_cli, pg_url: str) -> None:
    first = run_cli("--database-url", pg_url, "db", "migrate")
    second = run_cli("--database-url", pg_url, "db", "migrate")
    assert first.exit_code == 0 and "0005_trained_models: applied" in first.output
    assert second.exit_code == 0 and "nothing to do" in second.output


def test_status_lists_applied_and_pending(run_cli, pg_url: str, tmp_path: Path) -> None:
    migrations = db.load_migrations()
    db.migrate(pg_url, migrations[:2])
    states = {state.name: state.status for state in db.status(pg_url)}
    assert states["0001_trajectories"] == "applied"
    assert states["0003_market_outcomes"] == "pending"
    result = run_cli("--database-url", pg_url, "db", "status")
    assert result.exit_code == 0
    assert "pending" in result.output and "applied" in result.output


def test_changed_migration_is_refused(pg_url: str) -> None:
    migrations = db.load_migrations()
    db.migrate(pg_url, migrations)
    edited = [db.Migration(m.name, m.sql + "\n-- edited") if i == 0 else m for i, m in enumerate(migrations)]
    with pytest.raises(db.MigrationError, match="0001_trajectories changed after it was applied"):
        db.migrate(pg_url, edited)
    assert db.status(pg_url, edited)[0].status == "changed"


def test_tables_created_by_the_game_are_adopted(pg_url: str) -> None:
    """A database where Prisma already made the tables: record, don't fail, don't touch the data."""
    migrations = db.load_migrations()
    with psycopg.connect(pg_url) as conn:
        conn.execute(migrations[0].sql)
        conn.execute(
            """INSERT INTO trajectories ("id","trajectoryId","agentId","startTime","endTime","durationMs","stepsJson",
               "rewardComponentsJson","metricsJson","metadataJson","totalReward","episodeLength","finalStatus","updatedAt")
               VALUES ('t1','t1','a1',now(),now(),0,'[]','{}','{}','{}',0,0,'completed',now())"""
        )
    done = {state.name: state.status for state in db.migrate(pg_url)}
    assert done["0001_trajectories"] == "adopted"
    assert done["0002_llm_call_logs"] == "applied"
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 1


def test_partially_existing_tables_are_refused(pg_url: str, tmp_path: Path) -> None:
    two_tables = db.Migration("0001_pair", 'CREATE TABLE "a" (x int);\nCREATE TABLE "b" (x int);')
    with psycopg.connect(pg_url) as conn:
        conn.execute('CREATE TABLE "a" (x int)')
    with pytest.raises(db.MigrationError, match=r"tables \['a'\] exist but \['b'\] do not"):
        db.migrate(pg_url, [two_tables])


def test_failed_migration_rolls_back_whole(pg_url: str) -> None:
    broken = db.Migration("0001_broken", 'CREATE TABLE "ok" (x int);\nCREATE TABLE "bad" (x nosuchtype);')
    with pytest.raises(db.MigrationError, match="0001_broken failed"):
        db.migrate(pg_url, [broken])
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('ok')").fetchone()[0] is None
    assert db.status(pg_url, [broken])[0].status == "pending"


def test_unreachable_database_is_one_line_with_masked_password(run_cli) -> None:
    url = "postgresql://postgres:hunter2secret@127.0.0.1:1/babylon"
    result = run_cli("--database-url", url, "db", "migrate")
    assert result.exit_code == 2
    assert "hunter2secret" not in result.output
    assert "postgresql://postgres:***@127.0.0.1:1/babylon" in result.output
    assert "Traceback" not in result.output


def test_missing_database_names_the_url(run_cli, pg_url: str) -> None:
    missing = pg_url.rsplit("/", 1)[0] + "/does_not_exist_db"
    result = run_cli("--database-url", missing, "db", "status")
    assert result.exit_code == 2
    assert "does_not_exist_db" in result.output


def test_no_database_url_says_how_to_give_one(run_cli) -> None:
    result = run_cli("db", "migrate")
    assert result.exit_code == 2
    assert "--database-url" in result.output and "DATABASE_URL" in result.output


@pytest.mark.parametrize(("url", "fault"), [
    ("postgresql://postgres:hunter2secret@127.0.0.1:abc/babylon", "the port is not a number"),
    ("postgresql://postgres:hunter2secret@[::1/babylon", "cannot be parsed"),
    ("mysql://postgres:hunter2secret@127.0.0.1/babylon", "the scheme 'mysql' is not postgresql://"),
    ("postgres//postgres:hunter2secret@127.0.0.1/babylon", "neither a postgresql:// URL"),
    ("host=127.0.0.1 password=hunter2secret dbname", 'missing "=" after "dbname"'),
])
def test_malformed_database_url_says_what_is_malformed_with_the_password_hidden(run_cli, url: str, fault: str) -> None:
    for command in (("db", "status"), ("snapshot",)):
        result = run_cli("--database-url", url, *command)
        assert result.exit_code == 2, result.output
        assert "malformed database URL" in result.output and fault in result.output
        assert "hunter2secret" not in result.output and "Traceback" not in result.output
