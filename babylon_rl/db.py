"""The game's PostgreSQL database: connections and the numbered migrations in migrations/.

`migrate` applies pending migrations in order, each in its own transaction, and
records them in `_babylon_rl_migrations`. A migration whose tables the game
(Prisma) already created is recorded as adopted instead of failing.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

import psycopg

from babylon_rl.errors import DatabaseError, MigrationError
from babylon_rl.settings import PROJECT_ROOT, mask_url, scrub, url_password

MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
LEDGER = "_babylon_rl_migrations"
# Serialises concurrent `db migrate` runs against one database.
MIGRATION_LOCK_KEY = 0x62616279  # "baby"

_CREATE_TABLE = re.compile(r'CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"?(\w+)"?', re.IGNORECASE)


@contextmanager
def connect(url: str, **kwargs) -> Iterator[psycopg.Connection]:
    """A psycopg connection whose connection failures become one readable line."""
    try:
        conn = psycopg.connect(url, connect_timeout=10, **kwargs)
    except psycopg.Error as exc:
        reason = scrub(str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__, url_password(url), url)
        raise DatabaseError(
            f"cannot connect to {mask_url(url)}: {reason}; check that the server runs, the database exists "
            "and the user and password are right"
        ) from None
    try:
        _use_utc(conn)
        yield conn
    finally:
        conn.close()


def _use_utc(conn: psycopg.Connection) -> None:
    """The game's timestamps are UTC without a zone: `now()` written into them must be UTC too,
    whatever the server's zone or the client's PGTZ (which libpq applies after any startup option)."""
    conn.execute("SET TimeZone TO 'UTC'")
    if not conn.autocommit:
        conn.commit()


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def tables(self) -> list[str]:
        return _CREATE_TABLE.findall(self.sql)


@dataclass(frozen=True)
class MigrationState:
    name: str
    status: str  # applied | adopted | pending | changed
    applied_at: datetime | None


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    files = sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    return [Migration(path.stem, path.read_text()) for path in files]


def _ensure_ledger(conn: psycopg.Connection) -> None:
    conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {LEDGER} (
            name TEXT PRIMARY KEY,
            checksum TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            adopted BOOLEAN NOT NULL DEFAULT false
        )"""
    )


def _recorded(conn: psycopg.Connection) -> dict[str, tuple[str, datetime, bool]]:
    rows = conn.execute(f"SELECT name, checksum, applied_at, adopted FROM {LEDGER}").fetchall()
    return {name: (checksum, applied_at, adopted) for name, checksum, applied_at, adopted in rows}


def _existing_tables(conn: psycopg.Connection, names: list[str]) -> set[str]:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ANY(%s)",
        (names,),
    ).fetchall()
    return {row[0] for row in rows}


def status(url: str, migrations: list[Migration] | None = None) -> list[MigrationState]:
    migrations = load_migrations() if migrations is None else migrations
    with connect(url) as conn:
        has_ledger = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (LEDGER,)).fetchone()[0]
        recorded = _recorded(conn) if has_ledger else {}
    states = []
    for migration in migrations:
        if migration.name not in recorded:
            states.append(MigrationState(migration.name, "pending", None))
            continue
        checksum, applied_at, adopted = recorded[migration.name]
        if checksum != migration.checksum:
            states.append(MigrationState(migration.name, "changed", applied_at))
        else:
            states.append(MigrationState(migration.name, "adopted" if adopted else "applied", applied_at))
    return states


def migrate(url: str, migrations: list[Migration] | None = None) -> list[MigrationState]:
    """Apply every pending migration; return what this run did (empty when nothing was pending)."""
    migrations = load_migrations() if migrations is None else migrations
    done: list[MigrationState] = []
    with connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            _ensure_ledger(conn)
        for migration in migrations:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                state = _apply_one(conn, migration)
            if state is not None:
                done.append(state)
    return done


def _apply_one(conn: psycopg.Connection, migration: Migration) -> MigrationState | None:
    recorded = _recorded(conn)
    if migration.name in recorded:
        if recorded[migration.name][0] != migration.checksum:
            raise MigrationError(
                f"migration {migration.name} changed after it was applied; restore migrations/{migration.name}.sql "
                "and put the change in a new numbered migration"
            )
        return None
    tables = migration.tables
    existing = _existing_tables(conn, tables) if tables else set()
    if tables and existing == set(tables):
        adopted = True  # the game (Prisma) created these tables already
    elif existing:
        missing = sorted(set(tables) - existing)
        raise MigrationError(
            f"migration {migration.name}: tables {sorted(existing)} exist but {missing} do not; "
            "repair the database by hand or drop the partial tables, then run db migrate again"
        )
    else:
        adopted = False
        try:
            conn.execute(migration.sql)
        except psycopg.Error as exc:
            raise MigrationError(f"migration {migration.name} failed: {str(exc).strip().splitlines()[0]}") from None
    row = conn.execute(
        f"INSERT INTO {LEDGER} (name, checksum, adopted) VALUES (%s, %s, %s) RETURNING applied_at",
        (migration.name, migration.checksum, adopted),
    ).fetchone()
    return MigrationState(migration.name, "adopted" if adopted else "applied", row[0])
