"""One history, three engines: the duckdb, postgres and spark gateways build the same rows in every mart.

The game is simulated into PostgreSQL with every kind of production flaw. The duckdb gateway
builds it through `cli.py build` (snapshot, then SQLMesh); the postgres gateway runs the same
models in the game database; the spark gateway runs them on a local SparkSession over the
Parquet lake that `snapshot --format parquet` writes. Rows are compared sorted, numbers to
1e-9 relative, JSON text as parsed JSON (jsonb and Spark render it with other spacing).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl
import psycopg
import pytest

from babylon_rl.build import MART_SCHEMA, plan_prod
from babylon_rl.settings import PROJECT_ROOT

pytestmark = pytest.mark.postgres

START = "2025-01-15T10:00"
DATA_DAYS = (datetime(2025, 1, 15), datetime(2025, 1, 16))
MARTS = ("windows", "agent_window_pnl", "window_market_context", "training_samples", "rejected_rows")


def _require_spark() -> None:
    """Spark is part of CI's install (the `spark` extra and Java 17+); elsewhere its absence skips."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        reason = "no Java for Spark: install a JDK 17+ (.ci/run installs Debian's openjdk-17-jre-headless)"
    else:
        try:
            import pyspark  # noqa: F401

            return
        except ImportError:
            reason = 'pyspark is not installed: pip install -e ".[spark]"'
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _value(value):
    """A cell as the gateways are compared: numbers to 9 significant digits, NaN as itself (not NULL), JSON parsed."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else round(value, 9 - int(math.floor(math.log10(abs(value)))) if value else 0)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.dumps(json.loads(value, parse_int=float), sort_keys=True)  # 102 and 102.0 are one number
        except ValueError:
            return value
    return value


def _rows(rows) -> list[tuple]:
    return sorted((tuple(_value(v) for v in row) for row in rows), key=repr)


def _columns(home: Path, mart: str) -> list[str]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return [row[0] for row in conn.execute(f"DESCRIBE {MART_SCHEMA}.{mart}").fetchall()]


def _select(mart: str, columns: list[str], quote: str) -> str:
    return f"SELECT {', '.join(quote + c + quote for c in columns)} FROM {MART_SCHEMA}.{mart}"


def _readme_commands(program: str) -> list[str]:
    """README, "Querying yourself": the commands of `program` on its bold-led lines, as written."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    return [span for line in readme.splitlines() if line.startswith("**")
            for span in line.split("`")[1::2] if span.startswith(f"{program} ")]


def _run_in_checkout(command: str, home: Path, tmp_path: Path, **env: str) -> str:
    """Run a README command in a checkout whose default home (.babylon) is `home`; its output."""
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    if not (checkout / ".babylon").exists():
        (checkout / ".babylon").symlink_to(home)
    done = subprocess.run(["bash", "-c", command], cwd=checkout, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env})
    assert done.returncode == 0, (command, done.stderr[-2000:])
    return done.stdout


def _dataset(path: Path) -> tuple[dict[str, list[tuple]], list[str]]:
    """A dataset's rows per split, normalised as the marts' are, and its held-out trajectory ids."""
    manifest = json.loads((path / "manifest.json").read_text())
    splits = {split: _rows(pl.read_parquet(path / f"{split}.parquet").rows()) for split in ("train", "validation", "eval")}
    return splits, manifest["eval_trajectory_ids"]


def _difference(engine: str, mart: str, columns: list[str], rows: list[tuple], expected: list[tuple]) -> str:
    """The first differing value, named by its column, or the row counts when they differ."""
    if len(rows) != len(expected):
        return f"{engine}: {mart} has {len(rows)} rows, duckdb {len(expected)}"
    for row, want in zip(rows, expected):
        for column, value, wanted in zip(columns, row, want):
            if value != wanted:
                if isinstance(value, str) and isinstance(wanted, str):  # where the texts part
                    at = next((i for i, (x, y) in enumerate(zip(value, wanted)) if x != y), min(len(value), len(wanted)))
                    value, wanted = value[max(0, at - 80):at + 80], wanted[max(0, at - 80):at + 80]
                return f"{engine}: {mart}.{column} is {value!r:.300} where duckdb has {wanted!r:.300}"
    return f"{engine}: {mart} differs"


@pytest.fixture
def history(run_cli, migrated_pg_url: str, home: Path) -> str:
    """The game simulated into PostgreSQL, built on the duckdb gateway, and written to the lake."""
    _require_spark()
    for args in (
        ("simulate", "--agents", "6", "--windows", "4", "--seed", "3", "--start", START, "--dirt-rate", "0.05"),
        ("build",),
        ("snapshot", "--format", "parquet"),
    ):
        result = run_cli("--database-url", migrated_pg_url, *args)
        assert result.exit_code == 0, result.output
    return migrated_pg_url


def _postgres_marts(url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple]]:
    from sqlmesh import Context

    monkeypatch.setenv("BABYLON_RL_PG_DATABASE", url.rsplit("/", 1)[1])
    monkeypatch.setenv("BABYLON_RL_PG_STATE_SCHEMA", "sqlmesh_state_test")
    context = Context(paths=str(PROJECT_ROOT), gateway="postgres")
    try:
        plan_prod(context, [], 1, DATA_DAYS, skip_tests=True)
    finally:
        context.close()
    with psycopg.connect(url) as conn:
        return {mart: _rows(conn.execute(_select(mart, _columns(home, mart), '"')).fetchall()) for mart in MARTS}


def _spark_marts(home: Path) -> tuple[dict[str, list[tuple]], list[str]]:
    from sqlmesh import Context

    context = Context(paths=str(PROJECT_ROOT), config="spark_config")
    try:
        plan_prod(context, [], 1, DATA_DAYS, skip_tests=True)
        adapter = context.engine_adapter
        marts = {mart: _rows(adapter.fetchall(_select(mart, _columns(home, mart), "`"))) for mart in MARTS}
    finally:
        context.close()
    return marts, sorted(p.name for p in (home / "spark" / "exports").glob("*.parquet"))


def test_duckdb_postgres_and_spark_build_the_same_marts(run_cli, history: str, home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        on_duckdb = {mart: _rows(conn.execute(_select(mart, _columns(home, mart), '"')).fetchall()) for mart in MARTS}
    on_postgres = _postgres_marts(history, home, monkeypatch)
    on_spark, exports = _spark_marts(home)

    assert len(on_duckdb["windows"]) == 4 and len(on_duckdb["agent_window_pnl"]) == 24
    assert on_duckdb["rejected_rows"], "the dirt rate should leave rejected rows to compare"
    differences = [
        _difference(engine, mart, _columns(home, mart), rows[mart], on_duckdb[mart])
        for engine, rows in (("postgres", on_postgres), ("spark", on_spark))
        for mart in MARTS
        if rows[mart] != on_duckdb[mart]
    ]
    assert not differences, "\n".join(differences)
    # dataset build reads the marts of any gateway, and the three give the same dataset
    datasets = {}
    for gateway in ("duckdb", "postgres", "spark"):
        result = run_cli("--database-url", history, "dataset", "build", "--name", f"from-{gateway}", "--gateway", gateway,
                         "--min-agents", "3", "--min-actions", "1", "--eval-fraction", "0.25", "--validation-fraction", "0.25")
        assert result.exit_code == 0, result.output
        datasets[gateway] = _dataset(home / "datasets" / f"from-{gateway}")
    assert datasets["duckdb"][0]["train"], "the dataset should hold training rows"
    assert datasets["postgres"] == datasets["duckdb"] and datasets["spark"] == datasets["duckdb"]
    # the agents' standing reads the marts of any gateway, and the three give the same standing
    standings = {}
    for gateway in ("duckdb", "postgres", "spark"):
        result = run_cli("--database-url", history, "agents", "--gateway", gateway, "--json", "--resamples", "500")
        assert result.exit_code == 0, result.output
        standings[gateway] = json.loads(result.output)
    assert len(standings["duckdb"]["agents"]) == 6 and standings["duckdb"]["windows"] == 4
    for gateway in ("postgres", "spark"):
        assert standings[gateway]["agents"] == standings["duckdb"]["agents"], gateway

    (psql,) = _readme_commands("psql")
    assert "2025-01-15T13:00" in _run_in_checkout(psql, home, tmp_path, DATABASE_URL=history)
    # the spark gateway publishes its marts as the duckdb gateway does, for readers without Spark
    assert exports == ["agent_window_pnl.parquet", "window_market_context.parquet", "windows.parquet"]
    exported = pl.read_parquet(home / "spark" / "exports" / "agent_window_pnl.parquet")
    assert exported.height == 24


def _spark_build(home: Path) -> str:
    """`cli.py build --gateway spark` in a process of its own, as a user runs it: a SparkSession lives as
    long as its process, with the first home's catalog, so one test process cannot build two homes."""
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "cli.py"), "--home", str(home), "build", "--gateway", "spark"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def test_build_on_spark_computes_the_history_then_only_the_new_window(run_cli, home: Path, tmp_path: Path) -> None:
    _require_spark()
    result = run_cli("simulate", "--target", "duckdb", "--agents", "5", "--windows", "3", "--seed", "2", "--start", START)
    assert result.exit_code == 0, result.output

    output = _spark_build(home)
    assert "computed all 3 window(s) with data" in output
    assert pl.read_parquet(home / "spark" / "exports" / "windows.parquet").height == 3

    result = run_cli("simulate", "--target", "duckdb", "--agents", "5", "--windows", "1", "--seed", "2")
    assert result.exit_code == 0, result.output
    output = _spark_build(home)
    # the lake rewrote the day, so every window of that day with data is computed again
    assert "wrote the changed days" in output and "restated 4 changed window(s)" in output
    windows = pl.read_parquet(home / "spark" / "exports" / "windows.parquet")
    assert windows.height == 4 and windows["window_id"].sort().to_list()[-1] == "2025-01-15T13:00"

    on_exports, on_lake = _readme_commands("spark-sql")
    assert "2025-01-15T13:00" in _run_in_checkout(on_exports, home, tmp_path)
    assert "2025-01-15\t20" in _run_in_checkout(on_lake, home, tmp_path)  # 4 windows of 5 agents


def test_build_on_spark_without_a_lake_or_with_every_says_what_to_do(run_cli) -> None:
    result = run_cli("build", "--gateway", "spark", "--every", "5")
    assert result.exit_code == 2 and "--every and --wait are for the duckdb gateway" in result.output
    result = run_cli("build", "--gateway", "spark")
    assert result.exit_code == 2 and "no warehouse" in result.output and "simulate` first" in result.output


def test_build_on_spark_says_what_to_install(run_cli, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli("simulate", "--target", "duckdb", "--agents", "2", "--windows", "1", "--seed", "2", "--start", START)
    assert result.exit_code == 0, result.output
    # Java: checked before Spark starts, where its launcher looks (JAVA_HOME, else the PATH)
    with monkeypatch.context() as env:
        env.setenv("JAVA_HOME", str(home / "no-java"))
        result = run_cli("build", "--gateway", "spark")
        assert result.exit_code == 2 and "the spark gateway needs Java: install a JDK 17+" in result.output
        env.delenv("JAVA_HOME")
        env.setenv("PATH", str(home))
        result = run_cli("build", "--gateway", "spark")
        assert result.exit_code == 2 and "the spark gateway needs Java" in result.output
    # pyspark
    for name in [name for name in sys.modules if name == "pyspark" or name.startswith("pyspark.")] or ["pyspark"]:
        monkeypatch.setitem(sys.modules, name, None)
    result = run_cli("build", "--gateway", "spark")
    assert result.exit_code == 2 and 'pyspark is not installed: `pip install -e ".[spark]"`' in result.output
