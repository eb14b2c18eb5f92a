"""A process's graceful stop (SIGTERM) with work in its way: a settlement waiting on a lock, and a
maintenance duty in progress. Each test starts real `paymanager` processes on a real database."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.db.pool import connect, create_pool
from paymanager.jobs import admin, enqueue
from paymanager.jobs.maintenance import Maintenance
from tests.support.processes import PaymanagerProcess, paymanager_env
from tests.support.servers import confirmed_intent, lock_intent, wait_job_state
from tests.support.waiting import wait_for_lock_waiters

pytestmark = pytest.mark.slow


async def test_sigterm_with_a_settlement_waiting_on_a_lock_exits_within_the_timeout_and_loses_no_job(
    database_url: str,
) -> None:
    """DESIGN §3: running jobs get SHUTDOWN_TIMEOUT_MS, then the process exits 0. A job whose shared
    settlement transaction is still open on its row cannot be released (its row is locked): it keeps
    its lease and the rescuer returns it when the lease expires; the process must not wait on that
    lock for as long as the peer holds it."""
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
        # The timeout, the documented ~1 s claim wait, and slack for a machine running the whole suite:
        # what is checked is that the stop does not wait on the lock, which the peer holds for ever.
        deadline = started + 2.0 + 8.0
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
        # The storage upkeep's VACUUM may be the lock's first waiter, during start-up: the signal
        # handlers are installed only once the process says it started.
        worker.wait_for_line("started in headless mode")
        await wait_for_lock_waiters(probe)  # the leader's VACUUM waits on the lock
        worker.proc.send_signal(signal.SIGTERM)
        worker.wait_for_line("shutdown requested", timeout_s=5)
        late = await enqueue(probe, "ledger.expire_pending", {}, queue="outbox")
        # Once the process is gone nothing can claim the job any more: its state then is final.
        assert await asyncio.to_thread(worker.proc.wait, 30) == 0, worker.output
        state = await probe.fetchval("SELECT state FROM job WHERE id = $1", late.id)
        assert state == "available", f"a job enqueued after SIGTERM was claimed and ended {state}"
    finally:
        await tx.rollback()
        await locker.close()
        await probe.close()
        worker.close()
