"""Secrets (API keys, the database password) appear in no output, log, manifest, W&B file or any file of the home."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.conftest import _admin_connection
from tests.judge_server import JudgeServer
from tests.reliability.support import cli_env, files_containing, run
from tests.train_support import install

pytestmark = pytest.mark.postgres

OPENAI_KEY = "sk-SECRET-openai-4f1c9a"
WANDB_KEY = "wandb-SECRET-key-7d2e11"
PASSWORD = "pw-SECRET-db-83b0c5"
SECRETS = [OPENAI_KEY, WANDB_KEY, PASSWORD]


@pytest.fixture
def secret_url(migrated_pg_url: str):
    role = f"brl_secret_{uuid.uuid4().hex[:8]}"
    with _admin_connection() as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    try:
        yield migrated_pg_url.replace("postgresql://postgres@", f"postgresql://{role}:{PASSWORD}@")
    finally:
        with _admin_connection() as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")  # owns nothing: the test database belongs to postgres


def test_secrets_never_leak(secret_url: str, train_template: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    install(train_template, home)
    env = cli_env(home, OPENAI_API_KEY=OPENAI_KEY, WANDB_API_KEY=WANDB_KEY)
    db = ("--database-url", secret_url)
    wrong_db = ("--database-url", secret_url.rsplit("/", 1)[0] + "/no_such_db")
    outputs = []

    def cli(*args: str) -> None:
        result = run(home, *args, env=env, timeout=300)
        outputs.append((args, result.returncode, result.stdout + result.stderr))

    with JudgeServer() as judge:
        for args in [
            (*db, "db", "migrate"), (*db, "db", "status"), (*wrong_db, "db", "status"), (*wrong_db, "snapshot"),
            (*db, "simulate", "--agents", "5", "--windows", "2", "--start", "2025-01-15T00:00"),
            (*db, "snapshot"), (*db, "build"), (*wrong_db, "build"), ("windows", "--as-of", "2025-01-16"), ("export",),
            ("dataset", "build", "--name", "sim", "--min-agents", "3", "--min-actions", "0"),
            ("dataset", "list",), ("dataset", "show", "sim"), ("dataset", "export", "sim", "--format", "jsonl"),
            ("score", "--dataset", "sim", "--judge", "ruler", "--judge-model", "m", "--judge-base-url", "http://127.0.0.1:9/v1",
             "--max-retries", "0", "--timeout", "1"),
            ("score", "--dataset", "sim", "--judge", "ruler", "--judge-model", "m", "--judge-base-url", judge.base_url),
            (*db, "score", "--dataset", "sim", "--judge", "heuristic", "--write-back"),
            # the template's tiny model: what is tested is the write-back and W&B files, not SmolLM2 (minutes under CI's load)
            (*db, "train", "--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--run-name", "leak", "--max-steps", "2", "--learning-rate", "1e-3"),
            (*wrong_db, "train", "--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--run-name", "leak2", "--max-steps", "1"),
        ]:
            cli(*args)
        judge.mode = "500"  # the stand-in echoes the Authorization header in its error body
        cli("score", "--dataset", "sim", "--judge", "art-ruler", "--judge-model", "m", "--judge-base-url", judge.base_url,
            "--max-retries", "0")

    codes = {args[2] if args[0] == "--database-url" else args[0]: code for args, code, _ in outputs}
    assert codes["simulate"] == 0 and codes["build"] in (0, 2) and codes["train"] in (0, 2)
    assert any(code == 0 for args, code, _ in outputs if "train" in args), outputs[-3]
    for args, _, text in outputs:
        for secret in SECRETS:
            assert secret not in text, (args, secret)
    assert any("***@" in text for _, _, text in outputs)  # URLs are printed, masked
    assert files_containing(home, [s.encode() for s in SECRETS]) == []
