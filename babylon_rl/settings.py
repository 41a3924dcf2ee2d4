"""Where the toolkit keeps its state and where its inputs come from.

Everything the toolkit writes lives under one home directory: `--home`, else
`BABYLON_RL_HOME`, else `./.babylon`. The SQLMesh `config.yaml` reads the same
variable, so `sqlmesh plan` from the repo root and `cli.py` agree on the warehouse.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from babylon_rl.errors import ConfigError

# A name that becomes one directory under the home (datasets/NAME, runs/RUN): no path
# separators, no leading dot (temp dirs and hidden files start with one), no leading dash.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

HOME_ENV = "BABYLON_RL_HOME"
DEFAULT_HOME = ".babylon"
DATABASE_URL_ENV = "DATABASE_URL"

# The checkout holding config.yaml, models/ and migrations/ (the SQLMesh project).
PROJECT_ROOT = Path(__file__).resolve().parent.parent


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
    def models(self) -> Path:
        return self.root / "models"

    @property
    def extensions(self) -> Path:
        return self.root / "duckdb_extensions"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def build_lock(self) -> Path:
        return self.root / "build.lock"

    def ensure(self) -> "Home":
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the home directory {self.root}: {exc.strerror}; pass --home DIR") from None
        return self

    def export_env(self) -> None:
        """Make child tools (SQLMesh's config.yaml) see the same home."""
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
    return cli_value or os.environ.get(DATABASE_URL_ENV) or None


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, safe to print or log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable database URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


def scrub(text: str, *secrets: str | None) -> str:
    """Remove every given secret value from a message before it is shown."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def require_database_url(url: str | None) -> str:
    if not url:
        raise ConfigError("no game database given: pass --database-url postgresql://USER@HOST/DB or set DATABASE_URL")
    return url
