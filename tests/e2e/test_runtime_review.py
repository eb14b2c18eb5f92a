"""The process runtime where a review found it broken (each test failed before its fix, 2026-11-29):
shutdown bounds, shutdown order, start-up waits, configuration refused late, CLI errors.

Each test starts real `paymanager` processes on a real database; none uses a mock.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from paymanager.db.pool import connect, create_pool
from paymanager.jobs import admin, enqueue
from paymanager.jobs.maintenance import Maintenance
from tests.e2e.payments.conftest import create_service, start_server
from tests.support.processes import PaymanagerProcess, paymanager_env, run_cli
from tests.support.signed_client import SignedClient

pytestmark = pytest.mark.slow

# A port nothing listens on (below the test range of tests/support/processes.py).
CLOSED_DATABASE_URL = "postgresql://postgres@127.0.0.1:9/paymanager"


async def confirmed_intent(database_url: str) -> str:
    """An admin-transfer confirmed by an api-only process: its settle job waits in `outbox`."""
    api, url, env = start_server(database_url, "api")
    try:
        service = create_service(env, "review-admin", admin=True)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            boss = SignedClient(http, service.id, service.secret)
            account = await boss.open_account()
            return str((await boss.fund(account, 1_000))["id"])
    finally:
        assert api.terminate() == 0, api.output
        api.close()


async def lock_intent(database_url: str, intent_id: str) -> tuple[asyncpg.Connection, object]:
    """A peer transaction holding the intent's row lock (as a long confirm/settle/cancel would)."""
    locker = await asyncpg.connect(database_url)
    tx = locker.transaction()
    await tx.start()
    await locker.execute("SELECT 1 FROM intent WHERE id = $1 FOR UPDATE", uuid.UUID(intent_id))
    return locker, tx


async def wait_job_state(conn: asyncpg.Connection, kind: str, state: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await conn.fetchval("SELECT state FROM job WHERE kind = $1", kind) == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {kind} never reached {state}")


async def test_sigterm_with_a_settlement_waiting_on_a_lock_exits_within_the_timeout_and_loses_no_job(
    database_url: str,
) -> None:
    """DESIGN §3: running jobs get SHUTDOWN_TIMEOUT_MS, then the process exits 0. A job whose shared
    settlement transaction is still open on its row cannot be released (its row is locked): it keeps
    its lease and the rescuer returns it when the lease expires (before, the process waited on that
    lock for as long as the peer held it, past the timeout)."""
    probe = await connect(database_url)
    await admin.pause_queue(probe, "outbox")
    worker = PaymanagerProcess(
        paymanager_env(database_url, WORKER_ROLES="outbox-worker", SHUTDOWN_TIMEOUT_MS="2000")
    )
    locker = None
    try:
        worker.wait_for_line("started in headless mode")
        intent_id = await confirmed_intent(database_url)
        locker, _ = await lock_intent(database_url, intent_id)
        await admin.resume_queue(probe, "outbox")
        await wait_job_state(probe, "intent.settle", "running")
        started = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        deadline = started + 2.0 + 3.0  # the timeout, and the documented ~1 s claim wait, and slack
        while worker.proc.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        exited_after = time.monotonic() - started
        job = await probe.fetchrow("SELECT state, lease_owner FROM job WHERE kind = 'intent.settle'")
        process = await probe.fetchrow("SELECT stopped_at FROM process WHERE pid = $1", worker.proc.pid)
        assert worker.proc.poll() == 0, f"still running {exited_after:.1f}s after SIGTERM (timeout 2 s)"
        assert process["stopped_at"] is not None
        if job["state"] == "running":  # not released: the rescuer's, once its lease expires
            await locker.close()
            locker = None
            later = datetime.now(UTC) + timedelta(hours=1)
            async with await create_pool(database_url, min_size=1, max_size=2) as pool:
                await Maintenance(pool, database_url, clock=lambda: later).rescue()
            job = await probe.fetchrow("SELECT state, lease_owner FROM job WHERE kind = 'intent.settle'")
        assert job["state"] == "available", dict(job)
        assert job["lease_owner"] is None, dict(job)
    finally:
        if locker is not None:
            await locker.close()
        await probe.close()
        worker.close()


async def test_sigterm_stops_claiming_before_the_maintenance_duty_in_progress_ends(database_url: str) -> None:
    """The maintenance leader's VACUUM (here waiting on a lock, as a long VACUUM of a big table runs)
    must not keep the job worker claiming new work after SIGTERM, nor eat the running jobs' grace."""
    locker = await asyncpg.connect(database_url)
    tx = locker.transaction()
    await tx.start()
    await locker.execute("LOCK TABLE job IN SHARE UPDATE EXCLUSIVE MODE")  # VACUUM waits, claims do not
    worker = PaymanagerProcess(
        paymanager_env(database_url, WORKER_ROLES="outbox-worker", SHUTDOWN_TIMEOUT_MS="4000")
    )
    probe = await connect(database_url)
    try:
        worker.wait_for_line("job maintenance leader elected")
        await asyncio.sleep(1)  # the leader's first duties run; its VACUUM now waits
        worker.proc.send_signal(signal.SIGTERM)
        worker.wait_for_line("shutdown requested", timeout_s=5)
        late = await enqueue(probe, "ledger.expire_pending", {}, queue="outbox")
        await asyncio.sleep(2)
        state = await probe.fetchval("SELECT state FROM job WHERE id = $1", late.id)
        assert state == "available", f"a job enqueued after SIGTERM was claimed and ended {state}"
    finally:
        await tx.rollback()
        await locker.close()
        await probe.close()
        worker.close()


async def test_start_up_does_not_wait_on_an_intent_a_peer_holds(database_url: str) -> None:
    """The start-up reconciler locks confirmed intents without SKIP LOCKED: a peer holding one (a
    settlement in progress) keeps a new process in start-up until statement_timeout, then exit 1."""
    intent_id = await confirmed_intent(database_url)
    locker, _ = await lock_intent(database_url, intent_id)
    worker = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="outbox-worker"))
    try:
        worker.wait_for_line("started in headless mode", timeout_s=10)
    finally:
        await locker.close()
        worker.close()


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


def test_cli_jobs_on_an_unmigrated_database_says_run_migrate(database_factory: object) -> None:
    from tests.support.databases import run_sync

    url = run_sync(database_factory.create_empty())  # type: ignore[attr-defined]
    try:
        result = run_cli(["jobs", "ls"], paymanager_env(url))
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr[-600:]
        assert "paymanager migrate" in result.stderr
    finally:
        run_sync(database_factory.drop(url))  # type: ignore[attr-defined]


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


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PSP_CONFIG_KEK", "c2VjcmV0"),  # base64, but 6 bytes
        ("PSP_CONFIG_KEK_PREVIOUS", "not base64!"),
        ("LEDGER_BACKEND", "tigerbeetle"),
        ("DB_POOL_MAX_SIZE", "3"),  # the job worker pins 3 connections and needs 4
    ],
)
def test_accepted_value_that_breaks_start_up_is_refused_as_configuration(
    database_url: str, variable: str, value: str
) -> None:
    """DESIGN/OPERATIONS: bad values stop start-up with exit code 2 and a message naming the variable;
    these pass `Settings` and fail a later start-up step with exit 1."""
    env = paymanager_env(database_url, WORKER_ROLES="outbox-worker", DB_POOL_MIN_SIZE="1")
    env[variable] = value
    result = run_cli(["run"], env, timeout_s=60)
    assert result.returncode == 2, (result.returncode, (result.stdout + result.stderr)[-600:])
    assert variable in result.stderr
