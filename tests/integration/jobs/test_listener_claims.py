"""An idle worker runs the claim a NOTIFY prompts on its LISTEN connection, and on a pooled one
whenever that connection is busy or down; either way every job runs once."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg

from paymanager.jobs import JobContext, Registry, enqueue
from paymanager.jobs._queries import Q
from tests.integration.jobs.conftest import (
    QUIET,
    StartWorker,
    counting_registry,
    idle,
    wait_state,
    wait_until,
)
from tests.support.pinned_sessions import LOCK_TIMEOUT, PLANNED, SETTINGS


async def last_statement(pool: asyncpg.Pool, pid: int | None) -> str:
    return str(await pool.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid))


async def test_an_idle_worker_claims_on_its_listen_connection(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    worker = await start_worker(counting_registry(ran), options=QUIET)
    await idle(worker)
    for _ in range(3):
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")
    assert len(ran) == 3
    # The listener's backend ran the claim statement last (pg_stat_activity keeps an idle
    # backend's last statement, cut at 1 KiB), planned as the pinned connections plan theirs.
    statement = await last_statement(pool, worker.listener.backend_pid)
    assert len(statement) > 500
    assert Q["job_claim_queue"].startswith(statement)
    assert dict((await worker.listener.fetch(SETTINGS))[0]) == PLANNED
    # And waits on a lock at most as long as the pinned claim sessions (WorkerOptions' 1,000 ms).
    assert dict((await worker.listener.fetch(LOCK_TIMEOUT))[0]) == {"lock_timeout": "1s"}


async def test_a_busy_listen_connection_leaves_the_claim_to_a_pooled_one(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    worker = await start_worker(counting_registry(ran), options=QUIET)
    await idle(worker)
    # As while the listener's health ping is on its way: the connection is taken on our side (its
    # backend is idle, so the NOTIFY still arrives).
    async with worker.listener._busy:
        assert not worker.listener.can_fetch()
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")
    assert ran == [job.id]
    # The listener's backend ran nothing since it started listening.
    assert (await last_statement(pool, worker.listener.backend_pid)).startswith("LISTEN")


async def test_jobs_are_claimed_while_the_listen_connection_is_down_and_after(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    options = dataclasses.replace(QUIET, poll_interval_ms=200, listener_check_interval_ms=200)
    worker = await start_worker(counting_registry(ran), options=options)
    old_pid = worker.listener.backend_pid
    assert await pool.fetchval("SELECT pg_terminate_backend($1)", old_pid)
    # Down: no NOTIFY reaches the worker, and no claim may use the dead connection; the poll
    # finds the job and claims it on a pooled connection.
    job = await enqueue(pool, "k", {})
    await wait_state(pool, job.id, "completed")

    async def reconnected() -> bool:
        return worker.listener.reconnects >= 1

    await wait_until(reconnected)
    again = await enqueue(pool, "k", {})
    await wait_state(pool, again.id, "completed")
    assert sorted(ran) == sorted([job.id, again.id])


async def test_a_claim_broken_off_on_the_listen_connection_is_retried_and_the_job_runs_once(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    # No polling: a polled claim would take the job (or wait on the lock) before the NOTIFY's.
    worker = await start_worker(counting_registry(ran), options=QUIET)
    await idle(worker)
    listener_pid = worker.listener.backend_pid
    async with pool.acquire() as locker:
        transaction = locker.transaction()
        await transaction.start()
        # The claim reads job_queue (paused queues): with that table locked, the claim the NOTIFY
        # prompts waits on the listener's backend until the backend is killed under it. The job
        # is inserted by hand because enqueue() reads job_queue too (the queue's depth).
        await locker.execute("LOCK TABLE job_queue IN ACCESS EXCLUSIVE MODE")
        job_id = await pool.fetchval(
            "INSERT INTO job (queue, kind, payload, state) VALUES ('default', 'k', '{}', 'available')"
            " RETURNING id, pg_notify('pm_job_available', 'default')"
        )

        async def claim_waits_on_the_listener() -> bool:
            wait = await pool.fetchval(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", listener_pid
            )
            return bool(wait == "Lock")

        await wait_until(claim_waits_on_the_listener)
        assert await pool.fetchval("SELECT pg_terminate_backend($1)", listener_pid)
        await transaction.rollback()
    await wait_state(pool, job_id, "completed")
    assert ran == [job_id]
    assert await pool.fetchval("SELECT attempt FROM job WHERE id = $1", job_id) == 1


async def test_one_notify_into_an_idle_worker_sends_one_claim(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # A second claim goes out beside one in flight only once a claim came back full (a backlog).
    ran: list[int] = []
    worker = await start_worker(counting_registry(ran), options=QUIET)
    claims: list[str] = []
    for conn in (*worker._all_conns, worker.listener):
        fetch = conn.fetch

        async def recording(
            query: str, *args: Any, _fetch: Any = fetch, _on: str = type(conn).__name__
        ) -> Any:
            if query in (Q["job_claim"], Q["job_claim_queue"], Q["job_claim_batch"]):
                claims.append(_on)
            return await _fetch(query, *args)

        conn.fetch = recording  # type: ignore[method-assign]
    await idle(worker)
    claims.clear()  # the start-up's claim
    for n in range(1, 4):
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")
        await idle(worker)  # every claim the NOTIFY prompted came back
        assert claims == ["Listener"] * n


async def test_a_job_run_in_its_claims_task_leaves_the_worker_free_to_claim_the_next(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # An idle worker's claim runs its first job in the claim's own task; from then on that task
    # is the job's and no longer a claim in flight, which would hold back every other claim (one
    # claim at a time while none came back full) until the slow job ended.
    release = asyncio.Event()
    ran: list[int] = []
    registry = counting_registry(ran)

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        await release.wait()

    worker = await start_worker(registry, options=QUIET)
    await idle(worker)
    stuck = await enqueue(pool, "slow", {})
    await wait_state(pool, stuck.id, "running")
    (held,) = [held for held in worker._held.values() if held.ctx.id == stuck.id]
    assert held.task is not None
    assert not held.task.done()
    assert not worker._claims
    job = await enqueue(pool, "k", {})
    await wait_state(pool, job.id, "completed")
    assert ran == [job.id]
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", stuck.id) == "running"
    release.set()
    await wait_state(pool, stuck.id, "completed")


async def test_a_job_run_in_its_claims_task_owns_that_task(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    # The whole job runs in the claim's task, which is the job's from then on: an asyncio.timeout or
    # a TaskGroup inside the handler binds to it, and the worker's own timeout cancels it.
    registry = Registry()
    tasks: dict[str, asyncio.Task[Any] | None] = {}

    @registry.handler("nested")
    async def nested(ctx: JobContext) -> str:
        tasks["handler"] = asyncio.current_task()
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(5)
        except TimeoutError:
            pass
        async with asyncio.TaskGroup() as group:
            child = group.create_task(asyncio.sleep(0, result="child"))
        return f"inner timeout caught, {child.result()}"

    @registry.handler("hangs", max_attempts=1, timeout_ms=50)
    async def hangs(ctx: JobContext) -> None:
        await asyncio.sleep(5)

    worker = await start_worker(registry, options=QUIET)
    await idle(worker)
    launched: list[asyncio.Task[None]] = []

    class RecordingClaims(set[asyncio.Task[None]]):
        def add(self, task: asyncio.Task[None]) -> None:
            launched.append(task)
            super().add(task)

    worker._claims = RecordingClaims(worker._claims)
    job = await enqueue(pool, "nested", {})
    await wait_state(pool, job.id, "completed")
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", job.id) == (
        "inner timeout caught, child"
    )
    assert tasks["handler"] in launched
    assert tasks["handler"] not in worker._claims
    stuck = await enqueue(pool, "hangs", {})
    await wait_state(pool, stuck.id, "dead")
    error = await pool.fetchval("SELECT last_error FROM job WHERE id = $1", stuck.id)
    assert error["type"] == "TimeoutError"
