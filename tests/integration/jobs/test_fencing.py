"""Fencing: a handler whose lease moved on cannot commit its effects."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.jobs import JobContext, LeaseLostError, Registry, WorkerOptions, enqueue
from paymanager.jobs.maintenance import Maintenance
from tests.integration.jobs.conftest import StartWorker, wait_state, wait_until

SLOW = WorkerOptions(owner="first", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=100)


@pytest.fixture
async def effects(pool: asyncpg.Pool) -> None:
    await pool.execute("CREATE TABLE effect (job_id bigint, worker text)")


async def rescue_as_if_later(pool: asyncpg.Pool, database_url: str) -> None:
    """Run the rescuer as if an hour passed with no heartbeat: the stalled claim's lease expires."""
    later = datetime.now(UTC) + timedelta(hours=1)
    await Maintenance(pool, database_url, clock=lambda: later).rescue()


@pytest.mark.usefixtures("effects")
async def test_stalled_handler_cannot_commit_after_another_worker_took_the_job(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    wrote = asyncio.Event()
    resume = asyncio.Event()
    outcome: list[BaseException] = []
    first = Registry()

    @first.handler("pay")
    async def stalls_inside_its_transaction(ctx: JobContext) -> None:
        try:
            async with ctx.transaction(result="first") as conn:
                await conn.execute("INSERT INTO effect VALUES ($1, 'first')", ctx.id)
                wrote.set()
                await resume.wait()  # frozen here while the lease moves on
        except LeaseLostError as exc:
            outcome.append(exc)
            raise

    second = Registry()

    @second.handler("pay")
    async def completes(ctx: JobContext) -> None:
        async with ctx.transaction(result="second") as conn:
            await conn.execute("INSERT INTO effect VALUES ($1, 'second')", ctx.id)

    await start_worker(first, {"default": 1}, SLOW)
    job = await enqueue(pool, "pay", {})
    await asyncio.wait_for(wrote.wait(), 15)
    await rescue_as_if_later(pool, database_url)
    await start_worker(second, {"default": 1}, WorkerOptions(owner="second", poll_interval_ms=100))
    await wait_state(pool, job.id, "completed")
    resume.set()

    async def first_refused() -> bool:
        return bool(outcome)

    await wait_until(first_refused)
    rows = await pool.fetch("SELECT worker FROM effect")
    assert [r["worker"] for r in rows] == ["second"]
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", job.id) == "second"


@pytest.mark.usefixtures("effects")
async def test_complete_in_callers_transaction_rolls_back_when_lease_is_lost(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    started = asyncio.Event()
    resume = asyncio.Event()
    refused: list[BaseException] = []
    registry = Registry()

    runs = 0

    @registry.handler("pay")
    async def stalls_before_committing(ctx: JobContext) -> None:
        nonlocal runs
        runs += 1
        label = "late" if runs == 1 else "rerun"  # the rescued job may be claimed again afterwards
        started.set()
        await resume.wait()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("INSERT INTO effect VALUES ($1, $2)", ctx.id, label)
                await ctx.complete_in(conn)
        except LeaseLostError as exc:
            refused.append(exc)

    await start_worker(registry, {"default": 1}, SLOW)
    job = await enqueue(pool, "pay", {})
    await asyncio.wait_for(started.wait(), 15)
    await rescue_as_if_later(pool, database_url)
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == "available"
    resume.set()

    async def was_refused() -> bool:
        return bool(refused)

    await wait_until(was_refused)
    assert await pool.fetchval("SELECT count(*) FROM effect WHERE worker = 'late'") == 0


@pytest.mark.usefixtures("effects")
async def test_fenced_completion_commits_effect_and_completion_together(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("pay")
    async def pays(ctx: JobContext) -> None:
        async with ctx.transaction(result={"paid": True}) as conn:
            await conn.execute("INSERT INTO effect VALUES ($1, 'only')", ctx.id)

    await start_worker(registry)
    job = await enqueue(pool, "pay", {})
    await wait_state(pool, job.id, "completed")
    assert await pool.fetchval("SELECT count(*) FROM effect WHERE job_id = $1", job.id) == 1
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", job.id) == {"paid": True}
