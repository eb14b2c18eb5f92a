"""The `paymanager` commands on a database that is not there, not migrated, or given bad input: a
message and a non-zero exit (2 for bad input), never a traceback."""

from __future__ import annotations

import pytest

from tests.support.databases import DatabaseFactory, run_sync
from tests.support.processes import paymanager_env, run_cli

pytestmark = pytest.mark.slow

# A port nothing listens on (below the test range of tests/support/processes.py).
CLOSED_DATABASE_URL = "postgresql://postgres@127.0.0.1:9/paymanager"


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["run", "--migrate"],
        ["jobs", "ls"],
        ["jobs", "stats"],
        ["ledger", "verify"],
        ["services", "list"],
        ["services", "create", "nobody"],
    ],
)
def test_cli_without_a_database_says_so_without_a_traceback(args: list[str]) -> None:
    result = run_cli(args, paymanager_env(CLOSED_DATABASE_URL, WORKER_ROLES="outbox-worker"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-600:]


def test_cli_jobs_on_an_unmigrated_database_says_run_migrate(database_factory: DatabaseFactory) -> None:
    url = run_sync(database_factory.create_empty())
    try:
        result = run_cli(["jobs", "ls"], paymanager_env(url))
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr[-600:]
        assert "paymanager migrate" in result.stderr
    finally:
        run_sync(database_factory.drop(url))


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", "balance", "0xZZ"],
        ["ledger", "accounts", "--after", "0xqq"],
        ["services", "create", ""],
    ],
)
def test_cli_bad_input_is_a_message_and_exit_two(database_url: str, args: list[str]) -> None:
    result = run_cli(args, paymanager_env(database_url))
    assert result.returncode == 2, result.stdout + result.stderr[-600:]
    assert "Traceback" not in result.stderr, result.stderr[-600:]
