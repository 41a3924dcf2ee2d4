"""Where the toolkit keeps its state and where its inputs come from.

Everything the toolkit writes lives under one home directory: `--home`, else
`BABYLON_RL_HOME` (a relative one from the working directory), else the checkout's own
`.babylon`. The SQLMesh project's config.py resolves it the same way, so `sqlmesh plan`
(`-p PATH` from anywhere) and `cli.py` agree on the warehouse.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

from babylon_rl.errors import ConfigError

# A name that becomes one directory under the home (datasets/NAME, runs/RUN): no path
# separators, no leading dot (temp dirs and hidden files start with one), no leading dash.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

HOME_ENV = "BABYLON_RL_HOME"
DATABASE_URL_ENV = "DATABASE_URL"

# The checkout holding config.py, models/ and migrations/ (the SQLMesh project).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = PROJECT_ROOT / ".babylon"

# Where the models start while no game data has been seen (config.py): a fresh plan walks every
# hour from here, so once data is there they start at its first day instead (Home.data_start).
MODELS_START_WITHOUT_DATA = date(2024, 1, 1)


@dataclass(frozen=True)
class Home:
    """The toolkit's state directory and the fixed layout inside it."""

    root: Path

    @classmethod
    def resolve(cls, cli_value: str | os.PathLike[str] | None = None) -> "Home":
        raw = cli_value or os.environ.get(HOME_ENV) or DEFAULT_HOME
        return cls(Path(raw).expanduser().resolve())

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse.duckdb"

    @property
    def sqlmesh_state(self) -> Path:
        return self.root / "sqlmesh_state.duckdb"

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def judge_cache(self) -> Path:
        return self.root / "judge_cache"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def improve_state(self) -> Path:
        """The improve loop's state.json (improve_state.py): its champion is the model `promoted` names (model_names.py)."""
        return self.root / "improve" / "state.json"

    @property
    def frozen_states(self) -> Path:
        """The frozen blocks' output per packed decision, kept across processes (train/state_cache.py, StatesOnDisk)."""
        return self.root / ".cache" / "frozen-states"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def extensions(self) -> Path:
        return self.root / "duckdb_extensions"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def spark_exports(self) -> Path:
        """The spark gateway's published marts (config.py's spark_config keeps its catalog and tables in HOME/spark)."""
        return self.root / "spark" / "exports"

    @property
    def build_lock(self) -> Path:
        return self.root / "build.lock"

    @property
    def data_start(self) -> Path:
        """The first day of the game's data, as `snapshot`, `simulate` and `build` last found it
        (build.record_data_start): the models' start in config.py."""
        return self.root / "data_start"

    def recorded_data_start(self) -> date | None:
        try:
            text = self.data_start.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        try:
            return date.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"{self.data_start} holds {text[:40]!r}, not a day like 2026-11-20: delete it, "
                              "then run `cli.py build` (it writes the file again from the warehouse)") from None

    def models_start(self) -> str:
        """The day the SQLMesh models start at (config.py): the game's first day, else MODELS_START_WITHOUT_DATA."""
        return (self.recorded_data_start() or MODELS_START_WITHOUT_DATA).isoformat()

    def ensure(self) -> "Home":
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the home directory {self.root}: {exc.strerror}; pass --home DIR") from None
        return self

    def export_env(self) -> None:
        """Make child tools (SQLMesh's config.py) see the same home."""
        os.environ[HOME_ENV] = str(self.root)


def safe_name(name: str, what: str) -> str:
    """`name` if it is safe as one directory under the home, else a ConfigError naming `what`."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid {what} {name!r}: use 1-100 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit, without path separators"
        )
    return name


def resolve_database_url(cli_value: str | None) -> str | None:
    """The game database's URL from --database-url or DATABASE_URL, checked for form (not reached)."""
    url = cli_value or os.environ.get(DATABASE_URL_ENV) or None
    if url is not None:
        fault = _url_fault(url)
        if fault:
            raise ConfigError(f"malformed database URL {mask_url(url)} (--database-url or {DATABASE_URL_ENV}): {fault}; "
                              "write it as postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    return url


def _url_fault(url: str) -> str | None:
    """What is wrong with the URL's form, with no secret in it; None when libpq can parse it."""
    import psycopg.conninfo

    if "://" in url:
        scheme = url.split("://", 1)[0]
        if scheme not in ("postgresql", "postgres"):
            return f"the scheme {scheme!r} is not postgresql://"
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            return f"it cannot be parsed ({exc})"
        try:
            parts.port
        except ValueError:
            return "the port is not a number from 0 to 65535"
    elif "=" not in url:
        return "it is neither a postgresql:// URL nor a libpq key=value string"
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        return scrub(str(exc).strip().splitlines()[-1], url_password(url), url) or "libpq cannot parse it"
    return None


_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)")


def _userinfo(url: str) -> tuple[str, str, str | None, str] | None:
    """(scheme://, user, password or None, the rest after @) by plain splitting, which cannot fail
    on a malformed URL; None for a libpq key=value string."""
    if "://" not in url and "=" in url:
        return None
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return f"{head}{sep}", "", None, rest
    user, colon, password = userinfo.partition(":")
    return f"{head}{sep}", user, password if colon else None, host


def mask_url(url: str) -> str:
    """The URL (or libpq key=value string) with its password replaced by ***, safe to print or log,
    also when it is malformed."""
    parts = _userinfo(url)
    if parts is None:
        return _CONNINFO_PASSWORD.sub(r"\1***", url)
    head, user, password, host = parts
    masked = f"{head}{user}:***@{host}" if password is not None else url
    return _QUERY_PASSWORD.sub(r"\1***", masked)


def url_password(url: str) -> str | None:
    parts = _userinfo(url)
    if parts is None:
        match = _CONNINFO_PASSWORD.search(url)
        return match.group(2).strip("'") if match else None
    query = _QUERY_PASSWORD.search(url)
    return parts[2] or (query.group(2) if query else None) or None


def scrub(text: str, *secrets: str | None) -> str:
    """Remove every given secret value from a message before it is shown."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def require_database_url(url: str | None) -> str:
    if not url:
        raise ConfigError("no game database given: pass --database-url postgresql://USER@HOST/DB or set DATABASE_URL")
    return url
