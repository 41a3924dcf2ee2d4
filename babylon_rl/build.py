"""`cli.py build`: snapshot the game database, then apply the SQLMesh models to the warehouse.

Under one file lock, so two builds never write at once. Windows whose raw rows
changed since the last build (recorded in `meta.dirty_windows` by the snapshot and
by `simulate --target duckdb`) are computed again: SQLMesh only fills intervals it has
not processed, so late rows into an already-built window would otherwise be ignored.
After a successful build the marts are published as Parquet under `exports/`, which
analysts can query while the next build holds the warehouse.

SQLMesh applies the models one by one, each in its own transactions, so a build stopped
half-way (Ctrl-C, kill, a failed model) can leave one mart rebuilt and the next not. Each
build is recorded in `meta.builds` and marked finished only once its marts and exports are
complete; `dataset build` and `export` refuse the marts of an unfinished one
(warehouse.refuse_half_built), and the next build repairs them: the windows it was computing
are still dirty, and table versions it created are restated whole (plan_prod).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from babylon_rl import atomic, locks, sqlmesh_state, warehouse
from babylon_rl.errors import BuildInterrupted, WarehouseError
from babylon_rl.settings import PROJECT_ROOT, Home
from babylon_rl.snapshot import SnapshotResult, run_snapshot

EPOCH = datetime(1970, 1, 1)
MART_SCHEMA = "babylon"
# Published after every build: the analysts' tables. training_samples (the bulk of the
# bytes, read by `dataset build` from the warehouse) only on `cli.py export --all`.
PUBLISHED_MARTS = ("windows", "agent_window_pnl", "window_market_context")
ALL_MARTS = (*PUBLISHED_MARTS, "training_samples")
KEPT_BUILDS = 1000  # rows of meta.builds kept
BUILD_ID_ENV = "BABYLON_RL_BUILD_ID"  # read by macros/exports.py
INTERRUPTED = "build interrupted: the marts may be half-built; run `python cli.py build` again to finish them"


# Told what a build is doing: (what, done, total), total None while it is not known.
OnProgress = Callable[[str, int, "int | None"], None]


def _no_progress(what: str, done: int, total: int | None) -> None:
    pass


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass
class ProdUpdate:
    """What applying the models to prod did."""

    models_changed: bool  # prod did not hold the project's models: a plan applied them
    restate_range: tuple[datetime, datetime] | None  # the range recomputed, None when nothing was
    versions: dict[str, tuple[str, str]]  # model name -> (fingerprint, table version) now in prod
    built_until: datetime  # the models' last cron tick: SQLMesh computes no window starting at or after it
    restated_windows: int = 0  # windows computed again: the dirty ones, or every window with data when whole_history
    whole_history: bool = False  # every day with data was recomputed (new model versions, a full snapshot)
    changed_only: bool = False  # whole_history for the models with new versions and what reads them, not every model
    restated_models: list[str] = field(default_factory=list)  # whole_history's models and what reads them (schema.name)


@dataclass
class BuildResult:
    snapshot: SnapshotResult | None
    restated_windows: int
    restate_range: tuple[datetime, datetime] | None
    whole_history: bool = False
    models_changed: bool = False
    changed_only: bool = False  # the whole history recomputed for the changed models and what reads them only
    restated_models: list[str] = field(default_factory=list)
    pending_windows: int = 0  # changed windows starting at or after built_until, left for a later build
    built_until: datetime | None = None
    models: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def sqlmesh_context(home: Home, gateway: str | None = None, config: str | None = None):
    """A SQLMesh Context over the repo's project, with the warehouse under `home`.

    Its console is SQLMesh's silent one, except that it keeps the errors of failed models
    (`failures`), so that a failed build can name the model and the engine's error (`describe_failures`),
    and stops the build before the next model once its `stop` event is set (_interrupts_noted).
    """
    # SQLMesh forks a pool of workers to read its cache of the models' rendered queries; for
    # a dozen models on 2 cores that costs more than it saves. Read at SQLMesh's import.
    os.environ.setdefault("MAX_FORK_WORKERS", "1")
    from sqlmesh import Context
    from sqlmesh.core.console import NoopConsole
    from sqlmesh.core.loader import SqlMeshLoader

    class BuildLoader(SqlMeshLoader):
        """The project without its YAML unit tests, which a build skips (plan_prod) and SQLMesh would parse at every load."""

        def load_model_tests(self) -> list:
            return []

    class FailureRecorder(NoopConsole):
        def __init__(self) -> None:
            super().__init__()
            self.failures: list = []
            self.stop = threading.Event()
            self.on_progress: OnProgress = _no_progress
            self.batches = (0, 0)  # (done, total) of the plan or run under way

        def log_failed_models(self, errors) -> None:
            self.failures.extend(errors)

        def start_evaluation_progress(self, batched_intervals, environment_naming_info, default_catalog, audit_only=False) -> None:
            self.batches = (0, sum(len(intervals) for intervals in batched_intervals.values()))
            self.on_progress("computing model batches", *self.batches)

        def update_snapshot_evaluation_progress(self, snapshot, interval, batch_idx, duration_ms, *args, **kwargs) -> None:
            self.batches = (self.batches[0] + 1, self.batches[1])
            model = snapshot.name.replace('"', "").split(".", 1)[-1]  # without the catalog
            self.on_progress(f"computed {model}", *self.batches)

        def start_snapshot_evaluation_progress(self, snapshot, audit_only: bool = False) -> None:
            # SQLMesh catches an Exception per model and goes on with the next; a KeyboardInterrupt it lets through
            if self.stop.is_set():
                raise KeyboardInterrupt

    home.ensure().export_env()
    logging.getLogger("sqlmesh").setLevel(logging.WARNING)
    context = Context(paths=[PROJECT_ROOT], gateway=gateway, config=config, loader=BuildLoader)
    context.console = FailureRecorder()
    return context


def describe_failures(context) -> str | None:
    """The first failed model of the context's last plan and the engine's error, in one line."""
    failures = getattr(context.console, "failures", None)
    if not failures:
        return None
    first = failures[0]
    name = getattr(first.node, "snapshot_name", None) or getattr(first.node, "name", None) or str(first.node)
    cause = first.__cause__ or first
    message = " ".join(str(cause).split())
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    name = name.replace('"', "")  # SQLMesh quotes the parts of a snapshot name
    return f"model {name} failed{more}: {type(cause).__name__}: {message[:300]}"


def _read_dirty(home: Home, marked_since: datetime = EPOCH) -> list[datetime]:
    if not home.warehouse.exists():
        return []
    conn = warehouse.connect(home)
    try:
        warehouse.create_meta_schema(conn)
        rows = conn.execute("SELECT window_start FROM meta.dirty_windows WHERE marked_at >= $since ORDER BY 1",
                            {"since": marked_since}).fetchall()
        return [row[0] for row in rows]
    finally:
        conn.close()


def _start_build(home: Home) -> tuple[int, dict[str, tuple[str, str]]]:
    """Record a build as started (its own transaction); return its id and the model versions the last finished build recorded."""
    conn = warehouse.connect(home)
    try:
        build_id = conn.execute(
            "INSERT INTO meta.builds SELECT coalesce(max(build_id), 0) + 1, $now, NULL FROM meta.builds RETURNING build_id",
            {"now": utcnow()},
        ).fetchone()[0]
        rows = conn.execute("SELECT model, fingerprint, version FROM meta.model_versions").fetchall()
        return build_id, {name: (fingerprint, version) for name, fingerprint, version in rows}
    finally:
        conn.close()


def _finish_build(home: Home, build_id: int) -> None:
    """Mark the build finished, and keep the last KEPT_BUILDS rows (`build --every 1` adds one a minute)."""
    conn = warehouse.connect(home)
    try:
        conn.execute("BEGIN TRANSACTION")
        conn.execute("UPDATE meta.builds SET finished_at = $now WHERE build_id = $id", {"now": utcnow(), "id": build_id})
        conn.execute("DELETE FROM meta.builds WHERE build_id <= $id - $kept", {"id": build_id, "kept": KEPT_BUILDS})
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextmanager
def _interrupts_noted() -> Iterator[threading.Event]:
    """Make Ctrl-C stop the build wherever it lands.

    DuckDB turns a Ctrl-C that lands in a query into RuntimeError('Query interrupted'), which
    SQLMesh records as a failed model before going on with the next ones. So SIGINT also sets
    the event given to SQLMesh's console, which stops it before its next model, and an error
    raised after it is re-raised as the KeyboardInterrupt it was.
    """
    interrupted = threading.Event()

    def on_sigint(signum, frame) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    # Only the main thread may set a handler; a process started to ignore SIGINT (`build &` in a script) goes on ignoring it.
    noting = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    previous = signal.signal(signal.SIGINT, on_sigint) if noting else None
    try:
        yield interrupted
    except Exception:
        if interrupted.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        if noting:
            signal.signal(signal.SIGINT, previous)


@contextmanager
def _publishing_at_the_end(build_id: int) -> Iterator[None]:
    """While set, BABYLON_RL_BUILD_ID keeps the `after_all` of the build's plans and runs from
    publishing exports (macros/exports.py): the build publishes once, when all its models are done."""
    previous = os.environ.get(BUILD_ID_ENV)
    os.environ[BUILD_ID_ENV] = str(build_id)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(BUILD_ID_ENV, None)
        else:
            os.environ[BUILD_ID_ENV] = previous


def _clear_dirty(home: Home, up_to: datetime, built_until: datetime, model_versions: dict[str, tuple[str, str]]) -> int:
    """Forget the dirty windows this build computed; return how many are left (they start at or after `built_until`)."""
    conn = warehouse.connect(home)
    try:
        conn.execute("BEGIN TRANSACTION")
        conn.execute("DELETE FROM meta.dirty_windows WHERE marked_at <= $t AND window_start < $until", {"t": up_to, "until": built_until})
        left = conn.execute("SELECT count(*) FROM meta.dirty_windows").fetchone()[0]
        conn.execute("DELETE FROM meta.model_versions")
        conn.executemany(
            "INSERT INTO meta.model_versions VALUES (?, ?, ?, now()::TIMESTAMP)",
            [[name, fp, version] for name, (fp, version) in sorted(model_versions.items())],
        )
        conn.execute("COMMIT")
        return left
    finally:
        conn.close()


def _incremental_models(context) -> list[str]:
    return sorted(model.fqn for model in context.models.values() if model.kind.is_incremental)


def _prod_holds_project(context, prod_versions: dict[str, tuple[str, str]]) -> bool:
    """True when prod (its `_model_versions`) holds exactly the project's models: no plan needed to apply them."""
    project = {s.name: s.fingerprint.to_identifier() for s in context.snapshots.values()}
    return bool(prod_versions) and project == {name: fingerprint for name, (fingerprint, _) in prod_versions.items()}


def _model_versions(context) -> dict[str, tuple[str, str]]:
    return {s.name: (s.fingerprint.to_identifier(), s.version) for s in sqlmesh_state.prod_snapshots(context)}


def _days_with_data(home: Home) -> tuple[datetime, datetime] | None:
    """From the first day of raw data to the end of its last day: outside it every interval is empty."""
    conn = warehouse.connect(home, read_only=True)
    try:
        oldest, newest = conn.execute(
            """WITH starts AS (
                   SELECT coalesce(try_strptime("windowId", '%Y-%m-%dT%H:%M'), "startTime") AS t FROM raw.trajectories
                   UNION ALL SELECT "startTime" FROM raw.trajectories
                   UNION ALL SELECT try_strptime("windowId", '%Y-%m-%dT%H:%M') FROM raw.market_outcomes
               )
               SELECT min(t), max(t) FROM starts"""
        ).fetchone()
    except duckdb.CatalogException:
        return None
    finally:
        conn.close()
    if oldest is None:
        return None
    first = datetime(oldest.year, oldest.month, oldest.day)
    return first, datetime(newest.year, newest.month, newest.day) + timedelta(days=1)


def record_data_start(home: Home, data_days: tuple[datetime, datetime] | None) -> None:
    """Write the first day of the game's data to HOME/data_start (the models' start, config.py).

    It only ever moves earlier: a day that moved later (a full snapshot of a game whose first
    rows were deleted) would hide built windows from the plan for nothing. Nor is it ever later
    than yesterday (UTC): SQLMesh refuses a start after the plan's end, and a game whose rows are
    all stamped ahead of now would have one.
    """
    if data_days is None:
        return
    first = min(data_days[0], utcnow() - timedelta(days=1)).date()
    recorded = home.recorded_data_start()
    if recorded is None or first < recorded:
        atomic.write_text(home.data_start, f"{first.isoformat()}\n")


def _windows_with_data(home: Home, start: datetime, end: datetime) -> int:
    """How many windows in [start, end) hold a trajectory (the window each trajectory is counted in)."""
    conn = warehouse.connect(home, read_only=True)
    try:
        window = warehouse.trajectory_window()
        return conn.execute(
            f"SELECT count(DISTINCT {window}) FROM raw.trajectories WHERE {window} >= $start AND {window} < $end",
            {"start": start, "end": end},
        ).fetchone()[0]
    finally:
        conn.close()


def apply_models(context, home: Home, dirty: list[datetime], data_days: tuple[datetime, datetime] | None,
                 window_hours: int = 1, recorded: dict[str, tuple[str, str]] | None = None) -> ProdUpdate:
    """Apply the models to prod, computing only windows that have data, then recompute the dirty ones.

    SQLMesh would backfill every interval from the models' configured start, batch by
    batch, although the game's data begins later. So the plan records missing intervals as
    processed without computing them (`empty_backfill`), and the toolkit computes what
    holds data: every day with data for the models with a new table version and those that
    read them (the first build: all; a changed mart: that mart and its dependents), and for
    every model the windows whose raw rows changed (`_recompute_windows`).
    With the models unchanged and nothing dirty, SQLMesh is not asked to do anything.
    """
    from sqlmesh.utils.errors import SQLMeshError

    context.console.failures.clear()
    try:
        update = plan_prod(context, dirty, window_hours, data_days, recorded)
    except SQLMeshError as exc:
        raise WarehouseError(
            f"the SQLMesh build failed ({describe_failures(context) or exc}); fix the model, or run `sqlmesh plan` "
            "from the repository root for the full error; `dataset build` refuses the marts until a build succeeds"
        ) from None
    finally:
        context.close()  # DuckDB lets no other process open the warehouse while SQLMesh holds it
    if update.whole_history:
        update.restated_windows = _windows_with_data(home, *update.restate_range)
    return update


def _last_cron_tick(context) -> datetime:
    """Where SQLMesh stops computing now: at the last tick of the models' cron (@hourly), so a
    window starting at or after it (the one in play) is left for a later build."""
    now = datetime.now(timezone.utc)
    ticks = [model.cron_floor(now) for model in context.models.values() if model.kind.is_incremental]
    return min(ticks).astimezone(timezone.utc).replace(tzinfo=None)


def plan_prod(context, dirty: list[datetime], window_hours: int, data_days: tuple[datetime, datetime] | None,
              recorded: dict[str, tuple[str, str]] | None = None, **plan_options) -> ProdUpdate:
    """Apply prod on any gateway: missing intervals recorded empty, then the days with data restated
    for the models with new table versions (every model after a full snapshot), and the dirty
    windows recomputed for the others.

    Table versions are new when they differ from `recorded`, those of the last finished build
    (default: prod's before this plan): a build stopped after its plan put new, empty tables
    in prod leaves them to be restated by the next one.
    """
    # The models' YAML unit tests are for `sqlmesh test` and CI; run in every build they cost seconds.
    plan_options = {"auto_apply": True, "no_prompts": True, "skip_tests": True, **plan_options}
    before = _model_versions(context)
    # A plan costs seconds even when it changes nothing: only plan when prod lacks the project's models.
    models_changed = not _prod_holds_project(context, before)
    if models_changed:
        context.plan("prod", empty_backfill=True, **plan_options)
    after = _model_versions(context)
    horizon = _last_cron_tick(context)
    was = before if recorded is None else recorded
    new_versions = {name: v for name, (_, v) in was.items()} != {name: v for name, (_, v) in after.items()}
    due = [window for window in dirty if window < horizon]  # SQLMesh would compute nothing for the others
    restate = None
    # A full snapshot recomputes every model; a new table version only its model (SQLMesh
    # restates what depends on a restated model too): a changed mart does not recompute staging.
    versioned = {name for name, (_, version) in after.items() if was.get(name, ("", ""))[1] != version}
    incremental = _incremental_models(context)
    restate_models = [m for m in incremental if EPOCH in due or m in versioned]
    # (a game whose rows all lie ahead of the horizon has nothing due: SQLMesh computes it as its hours end)
    whole_history = data_days is not None and bool(restate_models) and data_days[0] < horizon
    changed_only = whole_history and restate_models != incremental
    if whole_history:
        restate = (data_days[0], min(data_days[1], horizon))
        context.plan("prod", restate_models=restate_models, start=restate[0], end=restate[1], **plan_options)
    if data_days is not None and due and (changed_only or not whole_history):  # the other models need the new rows too
        recomputed = _recompute_windows(context, due, window_hours)
        restate = restate or recomputed
    if models_changed or new_versions:
        # Drop table versions no environment uses any more, so the warehouse does not grow with every model change.
        context.run_janitor(ignore_ttl=True)
    return ProdUpdate(models_changed, restate, after, built_until=horizon, restated_windows=len(due) if restate else 0,
                      whole_history=whole_history, changed_only=changed_only,
                      restated_models=_with_dependents(context, restate_models) if whole_history else [])


def _with_dependents(context, models: list[str]) -> list[str]:
    """The models and every model downstream of them (what SQLMesh restates with them), as schema.name."""
    found = set(models) | {d for m in models for d in context.dag.downstream(m)}
    return sorted(name.replace('"', "").split(".", 1)[-1] for name in found)


def _recompute_windows(context, windows: list[datetime], window_hours: int) -> tuple[datetime, datetime]:
    """Forget the windows' intervals in prod's state, then let `sqlmesh run` compute what is missing.

    Unlike a restatement plan, which takes one range (two late windows two weeks apart
    recomputed the two weeks between them: a 24 s build at 100k instead of 6 s), this
    recomputes only the windows, and does not re-create and re-audit the views
    (babylon.rejected_rows' audits read the whole history: ~6 s at 1M); their audits run
    whenever a plan changes a model.
    """
    from sqlmesh.utils.errors import SQLMeshError

    sqlmesh_state.forget_intervals(context, _hours(windows, window_hours))
    if context.run("prod", skip_janitor=True).is_failure:
        raise SQLMeshError("sqlmesh run failed")  # the console recorded the failed model (describe_failures)
    return min(windows), max(windows) + timedelta(hours=window_hours)


def _hours(windows: list[datetime], window_hours: int) -> list[tuple[datetime, datetime]]:
    return [(window, window + timedelta(hours=window_hours)) for window in windows]


def after_new_rows(home: Home, marked_since: datetime) -> None:
    """Run after `snapshot` and `simulate --target duckdb`, so that bare `sqlmesh plan` and `run`
    see the new rows as `cli.py build` does: record the data's first day (record_data_start), and
    mark the windows made dirty since `marked_since` as not computed in prod's SQLMesh state.

    `cli.py build` forgets dirty windows itself before its run and clears them from
    meta.dirty_windows after. Only the windows this command marked are forgotten: those of
    earlier commands were forgotten then, and may have been computed by a bare run since.
    "Everything" (a full snapshot) forgets every day with data.
    """
    data_days = _days_with_data(home)
    record_data_start(home, data_days)
    dirty = _read_dirty(home, marked_since)
    if not dirty or not home.sqlmesh_state.exists():
        return  # nothing was ever planned: the first plan computes every window
    from sqlmesh import Context

    if EPOCH in dirty:
        intervals = [data_days] if data_days else []
    else:
        intervals = _hours(dirty, 1)
    home.export_env()
    context = Context(paths=[PROJECT_ROOT], load=False)  # prod's state only: the project is not loaded
    try:
        sqlmesh_state.forget_intervals(context, intervals)
    finally:
        context.close()


def publish_marts(home: Home, marts: tuple[str, ...] = PUBLISHED_MARTS) -> list[str]:
    """Write the marts to exports/*.parquet for readers during builds (write_exports)."""
    conn = warehouse.connect(home, read_only=True)
    try:
        return write_exports(lambda sql: conn.execute(sql).fetchall(), home.exports, marts)
    finally:
        conn.close()


def write_exports(query: Callable[[str], list], exports: Path, marts: tuple[str, ...] = PUBLISHED_MARTS) -> list[str]:
    """Copy each mart that exists to `exports`/MART.parquet through `query` (a warehouse connection's).
    Also run by the `after_all` of a bare `sqlmesh plan/run` (macros/exports.py)."""
    present = {row[0] for row in query(f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{MART_SCHEMA}'")}

    def copy(mart: str, tmp: Path) -> None:
        query(f"COPY (SELECT * FROM {MART_SCHEMA}.{mart}) TO '{_quote(tmp)}' (FORMAT parquet, COMPRESSION zstd)")

    return _publish(exports, [m for m in marts if m in present], copy)


def _publish(exports: Path, marts: list[str], write: Callable[[str, Path], None]) -> list[str]:
    """exports/MART.parquet for each mart, `write` filling a temp file first; all renamed once every one is written,
    so that a build stopped while writing leaves the last build's set."""
    exports.mkdir(parents=True, exist_ok=True)
    written = {}
    for mart in marts:
        target = exports / f"{mart}.parquet"
        tmp = target.with_suffix(".parquet.tmp")
        write(mart, tmp)
        written[tmp] = target
    for tmp, target in written.items():
        tmp.replace(target)
    return [str(target) for target in written.values()]


def build_on_spark(home: Home, full: bool = False, on_progress: OnProgress = _no_progress) -> BuildResult:
    """`build --gateway spark`: the models on a local SparkSession over the lake (config.py's spark_config).

    The first build, a model change, and `--full` compute every day with data, as on the duckdb
    gateway (plan_prod); a later build recomputes the windows with data in the lake's days
    rewritten since the last Spark build began (each partition file is renamed into place, so
    its mtime says when it was written), late rows included. HOME/spark/built.json records when
    the last finished build began and its table versions: a build that failed half-way leaves
    it as it was, so the next one computes again what that one did not finish. Each plan and
    run publishes HOME/spark/exports.
    """
    from sqlmesh.utils.errors import SQLMeshError

    started = time.monotonic()
    if not (home.lake / "_lake.json").exists():
        raise WarehouseError(f"no lake at {home.lake}; run `cli.py snapshot --format parquet` first (after simulate or with --database-url)")
    record = home.root / "spark" / "built.json"
    with locks.exclusive(home.build_lock, 0, None):
        begun = time.time()
        last = json.loads(record.read_text()) if record.exists() else {"begun": None, "versions": {}}
        changed = [EPOCH] if full else _windows_in_lake_days_written_since(home, last["begun"])
        recorded = {name: tuple(version) for name, version in last["versions"].items()}
        data_days = _days_with_data(home)
        record_data_start(home, data_days)
        on_progress("starting Spark and loading the SQLMesh project", 0, None)
        context = _spark_context(home)
        context.console.on_progress = on_progress
        try:
            update = plan_prod(context, changed, 1, data_days, recorded)
        except SQLMeshError as exc:
            raise WarehouseError(
                f"the SQLMesh build on Spark failed ({describe_failures(context) or exc}); fix the model, or run "
                "`sqlmesh --config spark_config plan` from the repository root for the full error"
            ) from None
        finally:
            context.close()
        atomic.write_text(record, json.dumps({"begun": begun, "versions": update.versions}) + "\n")
    if update.whole_history:
        update.restated_windows = _windows_with_data(home, *update.restate_range)
    return BuildResult(
        snapshot=None, restated_windows=update.restated_windows, restate_range=update.restate_range,
        whole_history=update.whole_history, models_changed=update.models_changed, built_until=update.built_until,
        models={name: version for name, (_, version) in update.versions.items()},
        seconds=time.monotonic() - started,
    )


def _spark_context(home: Home):
    """The SQLMesh context of config.py's spark_config, or an error that says what to install."""
    if not _java_found():
        raise WarehouseError("the spark gateway needs Java: install a JDK 17+ (Debian: openjdk-17-jre-headless) "
                             "or set JAVA_HOME to one")
    try:
        return sqlmesh_context(home, config="spark_config")
    except ImportError:
        raise WarehouseError('pyspark is not installed: `pip install -e ".[spark]"`, then build again') from None


def _java_found() -> bool:
    """Where Spark's launcher looks: $JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        return (Path(java_home) / "bin" / "java").is_file()
    return shutil.which("java") is not None


def _windows_in_lake_days_written_since(home: Home, since: float | None) -> list[datetime]:
    """The windows holding trajectories in the lake's day partitions written after `since` (a time.time());
    none before a first build, which computes everything anyway."""
    if since is None:
        return []
    days = sorted({
        datetime.strptime(part.parent.name.split("=", 1)[1], "%Y-%m-%d")
        for table in ("trajectories", "llm_call_logs", "market_outcomes")
        for part in (home.lake / table).glob("day=*/*.parquet")
        if part.stat().st_mtime >= since
    })
    if not days:
        return []
    conn = warehouse.connect(home, read_only=True)
    try:
        window = warehouse.trajectory_window()
        rows = conn.execute(
            f"SELECT DISTINCT {window} AS w FROM raw.trajectories WHERE CAST({window} AS DATE) IN (SELECT unnest($days)) ORDER BY w",
            {"days": [day.date() for day in days]},
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows]


def write_spark_exports(spark, exports: Path, marts: tuple[str, ...] = PUBLISHED_MARTS) -> list[str]:
    """The spark gateway's marts as exports/MART.parquet (as write_exports writes them), and training_samples,
    the bulk of the bytes, as Spark writes it (exports/training_samples/part-*.parquet, without collecting it
    in the driver), for `dataset build --gateway spark`; that directory is swapped in one rename."""
    import pyarrow.parquet as pq

    exports.mkdir(parents=True, exist_ok=True)
    if spark.catalog.tableExists(f"{MART_SCHEMA}.training_samples"):
        with atomic.directory(exports / "training_samples") as fresh:
            spark.table(f"{MART_SCHEMA}.training_samples").write.mode("overwrite").parquet(str(fresh))

    def copy(mart: str, tmp: Path) -> None:
        pq.write_table(spark.table(f"{MART_SCHEMA}.{mart}").toArrow(), tmp, compression="zstd")

    return _publish(exports, [m for m in marts if spark.catalog.tableExists(f"{MART_SCHEMA}.{m}")], copy)


def refuse_half_built(home: Home) -> None:
    """Raise when the newest build did not finish (warehouse.refuse_half_built)."""
    conn = warehouse.connect(home, read_only=True)
    try:
        warehouse.refuse_half_built(conn, home)
    finally:
        conn.close()


def _quote(path) -> str:
    return str(path).replace("'", "''")


class Builder:
    """Runs `cli.py build` once, or again and again in one process (`build --every`).

    Between builds it keeps SQLMesh's loaded project, which a new process pays for again
    (importing SQLMesh and loading the project: ~1.5 s, most of a one-window build at
    100k), and loads it again only when a project file changed. The warehouse is released after
    every build, so readers and other commands can open it until the next one.
    """

    def __init__(self, home: Home, database_url: str | None) -> None:
        self.home = home
        self.database_url = database_url
        self._context = None
        self._loaded_files: dict[str, int] = {}

    def build(self, wait_seconds: float = 0, full_snapshot: bool = False,
              on_wait: Callable[[str], None] | None = None, on_progress: OnProgress = _no_progress) -> BuildResult:
        started = time.monotonic()
        with locks.exclusive(self.home.build_lock, wait_seconds, on_wait):
            snapshot = None
            if self.database_url:
                on_progress("copying the game tables", 0, None)
                snapshot = run_snapshot(self.home, self.database_url, full=full_snapshot)
            if not self.home.warehouse.exists():
                raise WarehouseError(
                    f"no warehouse at {self.home.warehouse}: pass --database-url to snapshot the game, or run `cli.py simulate --target duckdb`"
                )
            update, pending_windows = self._build_marts(on_progress)
        return BuildResult(
            snapshot=snapshot,
            restated_windows=update.restated_windows,
            restate_range=update.restate_range,
            whole_history=update.whole_history,
            models_changed=update.models_changed,
            changed_only=update.changed_only,
            restated_models=update.restated_models,
            pending_windows=pending_windows,
            built_until=update.built_until,
            models={name: version for name, (_, version) in update.versions.items()},
            seconds=time.monotonic() - started,
        )

    def _build_marts(self, on_progress: OnProgress) -> tuple[ProdUpdate, int]:
        """Apply the models and publish the marts, between the build's start and finish in meta.builds."""
        marked_before = utcnow()
        dirty = _read_dirty(self.home)
        build_id, recorded = _start_build(self.home)
        try:
            with _interrupts_noted() as interrupted, _publishing_at_the_end(build_id):
                data_days = _days_with_data(self.home)
                record_data_start(self.home, data_days)  # before the project loads: it is the models' start
                on_progress("loading the SQLMesh project", 0, None)
                context = self._sqlmesh()
                context.console.stop = interrupted
                context.console.on_progress = on_progress
                on_progress("planning", 0, None)
                update = apply_models(context, self.home, dirty, data_days, recorded=recorded)
                pending_windows = _clear_dirty(self.home, marked_before, update.built_until, update.versions)
                on_progress("publishing the exports", 0, None)
                publish_marts(self.home)
                _finish_build(self.home, build_id)
                return update, pending_windows
        except KeyboardInterrupt:
            self._context = None  # it may hold a half-done plan: load the project afresh next time
            raise BuildInterrupted(INTERRUPTED) from None
        except WarehouseError:
            self._context = None
            raise

    def _sqlmesh(self):
        files = _project_files(self.home)
        if self._context is None or files != self._loaded_files:
            self._context = sqlmesh_context(self.home)
            self._loaded_files = files
        return self._context


def _project_files(home: Home) -> dict[str, int]:
    """Every file of the SQLMesh project, and the home's data_start (the models' start), with its
    modification time: a file changed, added or removed since the project was loaded changes the result."""
    files = [PROJECT_ROOT / name for name in ("config.py", "external_models.yaml")]
    for folder in ("models", "macros", "audits"):
        files += (PROJECT_ROOT / folder).rglob("*")
    project = {str(f): f.stat().st_mtime_ns for f in files if f.suffix in (".sql", ".py", ".yaml") and f.is_file()}
    if home.data_start.exists():
        project[str(home.data_start)] = home.data_start.stat().st_mtime_ns
    return project


def run_build(home: Home, database_url: str | None, wait_seconds: float = 0, full_snapshot: bool = False,
              on_wait: Callable[[str], None] | None = None) -> BuildResult:
    """One build in this process: `cli.py build`."""
    return Builder(home, database_url).build(wait_seconds, full_snapshot, on_wait)
