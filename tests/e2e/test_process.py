"""A real `paymanager run` subprocess: roles, headless mode, health probe, shutdown, refusals."""

from __future__ import annotations

import socket
import time

import asyncpg
import httpx
import pytest

from tests.support.databases import run_sync
from tests.support.processes import PaymanagerProcess, free_port, paymanager_env, run_cli
from tests.support.servers import confirmed_intent, lock_intent

pytestmark = pytest.mark.slow


def _listening_ports(pid: int) -> set[int]:
    import psutil

    ports: set[int] = set()
    for conn in psutil.Process(pid).net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN:
            ports.add(conn.laddr.port)
    return ports


def test_api_role_serves_livez_and_exits_zero_on_sigterm(database_url: str) -> None:
    port = free_port()
    proc = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="api", PORT=str(port)))
    try:
        proc.wait_for_line('"listening"')
        live = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5)
        assert live.status_code == 200
        assert live.json() == {"status": "ok"}
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["schema"] == "current"
        assert httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/docs", timeout=5).status_code == 200
        started = time.monotonic()
        assert proc.terminate(timeout_s=30) == 0
        assert time.monotonic() - started < 25
        assert '"stopped"' in proc.output
    finally:
        proc.close()


def test_headless_process_listens_nowhere_and_health_follows_it(database_url: str) -> None:
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker")
    proc = PaymanagerProcess(env)
    try:
        text = proc.wait_for_line("started in headless mode")
        assert '"roles": ["outbox-worker"]' in text or '"roles":["outbox-worker"]' in text
        assert _listening_ports(proc.proc.pid) == set()
        healthy = run_cli(["health"], env)
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        assert proc.terminate() == 0
        after = run_cli(["health"], env)
        assert after.returncode == 1, after.stdout + after.stderr
    finally:
        proc.close()


def test_health_reports_a_killed_process_dead(database_url: str) -> None:
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker")
    proc = PaymanagerProcess(env)
    try:
        proc.wait_for_line("started in headless mode")
        assert run_cli(["health"], env).returncode == 0
        proc.kill()
        assert run_cli(["health"], env).returncode == 1
    finally:
        proc.close()


def test_unknown_role_exits_two_with_the_message(database_url: str) -> None:
    result = run_cli(["run"], paymanager_env(database_url, WORKER_ROLES="api,outbox"))
    assert result.returncode == 2
    assert "'outbox' is not a role; did you mean outbox-worker?" in result.stderr
    assert "Valid roles:" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PSP_CONFIG_KEK", "c2VjcmV0"),  # base64, but 6 bytes
        ("PSP_CONFIG_KEK_PREVIOUS", "not base64!"),
        ("DB_POOL_MAX_SIZE", "3"),  # the job worker pins 3 connections and needs 4
    ],
)
def test_accepted_value_that_breaks_start_up_is_refused_as_configuration(
    database_url: str, variable: str, value: str
) -> None:
    """DESIGN/OPERATIONS: bad values stop start-up with exit code 2 and a message naming the variable,
    including values a later start-up step would refuse (with exit 1) if `Settings` let them pass."""
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker", DB_POOL_MIN_SIZE="1")
    env[variable] = value
    result = run_cli(["run"], env, timeout_s=60)
    assert result.returncode == 2, (result.returncode, (result.stdout + result.stderr)[-600:])
    assert variable in result.stderr


def test_older_schema_is_refused_with_the_migrate_hint(database_url: str) -> None:
    async def forget_newest() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(
                "DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)"
            )
        finally:
            await conn.close()

    run_sync(forget_newest())
    result = run_cli(["run"], paymanager_env(database_url, WORKER_ROLES="outbox-worker"))
    assert result.returncode == 1
    assert "paymanager migrate" in result.stdout + result.stderr


async def test_start_up_does_not_wait_on_an_intent_a_peer_holds(database_url: str) -> None:
    """The start-up reconciler skips a confirmed intent a peer holds (a settlement in progress):
    waiting on it would keep a new process in start-up until statement_timeout, then exit 1."""
    intent_id = await confirmed_intent(database_url)
    locker, _ = await lock_intent(database_url, intent_id)
    worker = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="outbox-worker"))
    try:
        worker.wait_for_line("started in headless mode", timeout_s=10)
    finally:
        await locker.close()
        worker.close()


def test_port_in_use_fails_start_up_with_exit_one(database_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_cli(
            ["run"], paymanager_env(database_url, WORKER_ROLES="api", PORT=str(port), HOST="127.0.0.1")
        )
    assert result.returncode == 1, result.stdout + result.stderr


def test_every_log_line_is_json_with_process_and_roles(database_url: str) -> None:
    import json

    port = free_port()
    proc = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="api", PORT=str(port)))
    try:
        proc.wait_for_line('"listening"')
        assert proc.terminate() == 0
        lines = [line for line in proc.output.splitlines() if line.strip()]
        assert len(lines) >= 3
        for line in lines:
            record = json.loads(line)
            assert record["process"].endswith(f".{proc.proc.pid}"), line
            assert record["roles"] == ["api"], line
    finally:
        proc.close()
