"""`cli.py snapshot`: PostgreSQL -> DuckDB raw, incremental and idempotent."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from babylon_rl.errors import DatabaseError
from babylon_rl.settings import Home
from babylon_rl.snapshot import run_snapshot
from tests.game_rows import execute, insert, stock_outcome, trajectory

pytestmark = pytest.mark.postgres


def _rows(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def game(migrated_pg_url: str) -> str:
    insert(migrated_pg_url, "trajectories", [
        trajectory("t1", "a1", "2025-01-15T10:00", pnl=12.5),
        trajectory("t2", "a2", "2025-01-15T10:00", pnl=None, window_id_known=False),
        trajectory("t3", "a1", "2025-01-15T11:00", pnl=-3.0),
    ])
    insert(migrated_pg_url, "market_outcomes", [stock_outcome("m1", "2025-01-15T10:00", "ACME", 1.25, "ACME wins contract")])
    return migrated_pg_url


def test_first_snapshot_copies_every_column(game: str, home: Path) -> None:
    result = run_snapshot(Home.resolve(home), game)
    copied = {t.table: t.rows_copied for t in result.tables}
    assert result.full_copy
    assert copied == {"trajectories": 3, "llm_call_logs": 0, "market_outcomes": 1, "training_batches": 0, "trained_models": 0}
    rows = _rows(home, 'SELECT "trajectoryId", "windowId", "finalPnL", "isTrainingData", "windowHours" FROM raw.trajectories ORDER BY 1')
    assert rows == [("t1", "2025-01-15T10:00", 12.5, True, 1), ("t2", None, None, True, 1), ("t3", "2025-01-15T11:00", -3.0, True, 1)]
    change, news = _rows(home, 'SELECT "changePercent", "newsEvents" FROM raw.market_outcomes')[0]
    assert float(change) == 1.25
    assert "ACME wins contract" in news  # JSONB arrives as text


def test_second_snapshot_copies_nothing(game: str, home: Path) -> None:
    run_snapshot(Home.resolve(home), game)
    again = run_snapshot(Home.resolve(home), game)
    assert not again.full_copy
    assert again.rows_copied == 0
    assert _rows(home, "SELECT count(*) FROM raw.trajectories") == [(3,)]


def test_resynced_row_replaces_the_old_one_and_marks_its_window(game: str, home: Path) -> None:
    run_snapshot(Home.resolve(home), game)
    _rows_before = _rows(home, "SELECT count(*) FROM meta.dirty_windows")
    execute(game, """UPDATE trajectories SET "finalPnL" = 99, "updatedAt" = %s WHERE "trajectoryId" = 't3'""", (datetime(2025, 1, 15, 13, 0),))
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("DELETE FROM meta.dirty_windows")
    result = run_snapshot(Home.resolve(home), game)
    assert {t.table: t.rows_copied for t in result.tables}["trajectories"] == 1
    assert _rows(home, """SELECT "finalPnL" FROM raw.trajectories WHERE "trajectoryId" = 't3'""") == [(99.0,)]
    assert _rows(home, "SELECT count(*) FROM raw.trajectories") == [(3,)]
    assert _rows(home, "SELECT window_start FROM meta.dirty_windows") == [(datetime(2025, 1, 15, 11, 0),)]
    assert _rows_before == [(1,)]  # the first (full) copy asked for a rebuild of everything


def test_a_table_empty_at_the_last_snapshot_is_copied_and_marks_its_windows(migrated_pg_url: str, home: Path) -> None:
    """The game's first market outcomes arrive after the first snapshot: the table has no watermark
    yet (it failed with a binder error, reading another table's changed rows)."""
    insert(migrated_pg_url, "trajectories", [trajectory("t1", "a1", "2025-01-15T10:00", pnl=12.5)])
    assert run_snapshot(Home.resolve(home), migrated_pg_url).full_copy
    insert(migrated_pg_url, "market_outcomes", [stock_outcome("m1", "2025-01-15T10:00", "ACME", 1.25, "ACME wins contract")])
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("DELETE FROM meta.dirty_windows")
    result = run_snapshot(Home.resolve(home), migrated_pg_url)
    assert not result.full_copy
    assert {t.table: t.rows_copied for t in result.tables}["market_outcomes"] == 1
    assert _rows(home, "SELECT window_start FROM meta.dirty_windows") == [(datetime(2025, 1, 15, 10, 0),)]


def test_late_row_inside_the_safety_margin_is_caught(game: str, home: Path) -> None:
    run_snapshot(Home.resolve(home), game)
    late = datetime(2025, 1, 15, 12, 0) - timedelta(minutes=5)  # older than the watermark
    insert(game, "trajectories", [trajectory("t4", "a3", "2025-01-15T10:00", updated=late, window_id_known=False)])
    result = run_snapshot(Home.resolve(home), game)
    assert {t.table: t.rows_copied for t in result.tables}["trajectories"] == 1
    assert (datetime(2025, 1, 15, 10, 0),) in _rows(home, "SELECT window_start FROM meta.dirty_windows")


def test_row_committed_later_than_the_margin_needs_a_full_snapshot(game: str, home: Path) -> None:
    """The documented limit of the margin: a row stamped 20 minutes before the watermark, committed after a
    snapshot, is not caught incrementally (margin 10 minutes); `snapshot --full` copies it."""
    run_snapshot(Home.resolve(home), game)
    late = datetime(2025, 1, 15, 12, 0) - timedelta(minutes=20)
    insert(game, "trajectories", [trajectory("t4", "a3", "2025-01-15T10:00", updated=late)])
    assert {t.table: t.rows_copied for t in run_snapshot(Home.resolve(home), game).tables}["trajectories"] == 0
    run_snapshot(Home.resolve(home), game, full=True)
    assert _rows(home, "SELECT count(*) FROM raw.trajectories") == [(4,)]


def _source_clock(url: str) -> datetime:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT (now() AT TIME ZONE 'UTC')::timestamp").fetchone()[0]


def test_future_dated_row_does_not_hide_later_rows(game: str, home: Path, run_cli) -> None:
    """One row stamped a day ahead of the source's clock: the watermark stays at the clock, so rows stamped
    after the snapshot (but before that future stamp) are still copied, and the summary counts the row."""
    source_now = _source_clock(game)
    insert(game, "trajectories", [trajectory("t-future", "a9", "2025-01-15T10:00", updated=source_now + timedelta(days=1))])
    first = run_snapshot(Home.resolve(home), game)
    trajectories = next(t for t in first.tables if t.table == "trajectories")
    assert trajectories.future_rows == 1
    assert datetime.fromisoformat(trajectories.watermark) < source_now + timedelta(minutes=5)
    assert _rows(home, "SELECT table_name, row_id, snapshot_id FROM meta.future_rows") == [
        ("trajectories", "row-t-future", first.snapshot_id)]
    now = _source_clock(game)  # after the first snapshot's clock, a day before the future row's stamp
    insert(game, "trajectories", [trajectory(f"t-new{i}", "a8", "2025-01-15T11:00", updated=now) for i in range(3)])
    run_snapshot(Home.resolve(home), game)
    assert _rows(home, """SELECT count(*) FROM raw.trajectories WHERE "trajectoryId" LIKE 't-new%'""") == [(3,)]
    result = run_cli("--database-url", game, "snapshot")
    assert "row(s) of trajectories are stamped after the source's clock" in " ".join(result.output.split())


def test_full_recopies_everything_and_forgets_deleted_rows(game: str, home: Path) -> None:
    run_snapshot(Home.resolve(home), game)
    execute(game, """DELETE FROM trajectories WHERE "trajectoryId" = 't1'""")
    result = run_snapshot(Home.resolve(home), game, full=True)
    assert result.full_copy
    assert {t.table: t.rows_copied for t in result.tables}["trajectories"] == 2


def test_raw_tables_carry_no_primary_key_index_and_a_full_copy_drops_an_old_one(game: str, home: Path) -> None:
    """The index behind a PRIMARY KEY cost a 100k snapshot 12 s at its commit. A warehouse made while raw.* had
    one loses it at the next full copy; rows stay unique by id through incremental copies all the same."""
    home.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("CREATE SCHEMA raw")
        conn.execute('CREATE TABLE raw.trajectories ("id" VARCHAR PRIMARY KEY)')  # as older versions made it, narrower
    run_snapshot(Home.resolve(home), game, full=True)
    assert _rows(home, "SELECT count(*) FROM duckdb_constraints() WHERE schema_name = 'raw'") == [(0,)]
    assert _rows(home, "SELECT count(*) FROM duckdb_indexes() WHERE schema_name = 'raw'") == [(0,)]
    execute(game, """UPDATE trajectories SET "finalPnL" = 7, "updatedAt" = %s WHERE "trajectoryId" = 't1'""", (datetime(2025, 1, 15, 13, 0),))
    run_snapshot(Home.resolve(home), game)
    assert _rows(home, 'SELECT count(*), count(DISTINCT "id") FROM raw.trajectories') == [(3, 3)]
    assert _rows(home, """SELECT "finalPnL" FROM raw.trajectories WHERE "trajectoryId" = 't1'""") == [(7.0,)]


def test_raw_text_columns_are_stored_as_named_not_as_duckdb_would_try(game: str, home: Path) -> None:
    """DuckDB tries every compression on every string of a row group unless a column names one (at 100k,
    a copy outside a transaction took twice as long). The JSON documents stay uncompressed, ids and free text
    FSST (left to itself, DuckDB stores these three rows' ids uncompressed), also after an incremental
    copy into the tables a full one made."""
    run_snapshot(Home.resolve(home), game, full=True)
    execute(game, """UPDATE trajectories SET "finalPnL" = 7, "updatedAt" = %s WHERE "trajectoryId" = 't1'""", (datetime(2025, 1, 15, 13, 0),))
    run_snapshot(Home.resolve(home), game)
    chosen = dict(_rows(home, """SELECT column_name, string_agg(DISTINCT compression, ',') FROM pragma_storage_info('raw.trajectories')
                                 WHERE segment_type = 'VARCHAR' GROUP BY 1"""))
    assert chosen["stepsJson"] == "Uncompressed" and chosen["trajectoryId"] == "FSST"


def test_each_run_is_recorded(game: str, home: Path) -> None:
    first = run_snapshot(Home.resolve(home), game)
    second = run_snapshot(Home.resolve(home), game)
    recorded = _rows(home, "SELECT snapshot_id, full_copy, source FROM meta.snapshots ORDER BY finished_at")
    assert [(r[0], r[1]) for r in recorded] == [(first.snapshot_id, True), (second.snapshot_id, False)]
    assert recorded[0][2] == game  # no password in this URL; see the masking test below


def test_unreachable_source_leaves_the_warehouse_unchanged(game: str, home: Path) -> None:
    run_snapshot(Home.resolve(home), game)
    bad = "postgresql://postgres:topsecretpw@127.0.0.1:1/babylon"
    with pytest.raises(DatabaseError) as failure:
        run_snapshot(Home.resolve(home), bad)
    assert "topsecretpw" not in str(failure.value)
    assert "postgres:***@127.0.0.1:1" in str(failure.value)
    assert _rows(home, "SELECT count(*) FROM meta.snapshots") == [(1,)]


def test_snapshot_command_prints_counts(run_cli, game: str) -> None:
    result = run_cli("--database-url", game, "snapshot")
    assert result.exit_code == 0, result.output
    assert "trajectories" in result.output and "full copy" in result.output


def test_empty_database_says_migrate(run_cli, pg_url: str) -> None:
    """A database without the game's tables: the next step is `db migrate`, not "run it again"."""
    result = run_cli("--database-url", pg_url, "snapshot")
    assert result.exit_code == 2, result.output
    assert "db migrate" in result.output and "run it again" not in result.output and "Traceback" not in result.output


def test_snapshot_without_database_url_is_a_clear_error(run_cli) -> None:
    result = run_cli("snapshot")
    assert result.exit_code == 2
    assert "--database-url" in result.output


def test_warehouse_connections_never_autoinstall(home: Path) -> None:
    from babylon_rl import warehouse

    conn = warehouse.connect(Home.resolve(home))
    settings = dict(conn.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN ('autoinstall_known_extensions', 'autoload_known_extensions')"
    ).fetchall())
    conn.close()
    assert settings == {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


def test_re_stamped_rows_are_copied_within_the_memory_limit(game: str, home: Path, monkeypatch) -> None:
    """An incremental snapshot that re-reads many large rows (here 200 MB of stepsJson against a
    128 MB DuckDB limit) streams them: neither the unchanged-row check nor the upsert holds them."""
    import psycopg
    from psycopg.rows import dict_row

    from babylon_rl import warehouse

    monkeypatch.setitem(warehouse.OFFLINE_CONFIG, "memory_limit", "128MB")
    with psycopg.connect(game, row_factory=dict_row) as conn:
        template = conn.execute("""SELECT * FROM trajectories WHERE "trajectoryId" = 't1'""").fetchone()
        columns = ", ".join(f'"{name}"' for name in template)
        with conn.cursor().copy(f"COPY trajectories ({columns}) FROM STDIN") as copy:
            for i in range(20_000):
                big = {**template, "id": f"big-{i}", "trajectoryId": f"big-{i}", "stepsJson": f'[{{"pad": "{i:06d}{"x" * 10_000}"}}]'}
                copy.write_row(list(big.values()))
    run_snapshot(Home.resolve(home), game)

    execute(game, """UPDATE trajectories SET "updatedAt" = "updatedAt" + interval '1 hour'""")
    result = run_snapshot(Home.resolve(home), game)

    assert {t.table: t.rows_copied for t in result.tables}["trajectories"] == 20_003
    assert _rows(home, "SELECT count(*), sum(length(\"stepsJson\")) > 200_000_000 FROM raw.trajectories") == [(20_003, True)]
