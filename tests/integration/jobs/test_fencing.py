"""Fencing: a handler whose lease moved on cannot commit its effects."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import JobContext, LeaseLostError, NewJob, Registry, WorkerOptions, enqueue, enqueue_many
from paymanager.jobs._queries import Q
from paymanager.jobs.batch import complete_all_in, hold_leases
from paymanager.jobs.maintenance import Maintenance
from tests.integration.jobs.conftest import (
    StartWorker,
    a_completion_behind_a_held_claim,
    wait_state,
    wait_until,
)
from tests.support.job_contexts import context_from_row
from tests.support.locks import finishes_without_waiting

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


# A stale attempt and the new one, both running: the rescuer took the first attempt's lease (as if its
# worker stalled for an hour) and a claim gave the job to the second, which has not finished. Every
# write of the first attempt must be refused while the second runs, not only once it has finished.


async def claim(pool: asyncpg.Pool, owner: str) -> JobContext:
    (row,) = await pool.fetch(Q["job_claim"], ["default"], [1], owner, 60_000, False)
    return context_from_row(pool, row, max_attempts=25)


async def stale_and_running_attempts(pool: asyncpg.Pool, database_url: str) -> tuple[JobContext, JobContext]:
    await enqueue(pool, "pay", {})
    stale = await claim(pool, "first")
    await rescue_as_if_later(pool, database_url)
    return stale, await claim(pool, "second")


async def held_by(pool: asyncpg.Pool, ctx: JobContext) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT state, lease_token, attempt, errors, lease_expires_at FROM job WHERE id = $1", ctx.id
    )
    assert row is not None
    assert (row["state"], row["lease_token"]) == ("running", ctx.lease_token)
    return dict(row)


@pytest.mark.usefixtures("effects")
async def test_a_stale_attempts_transaction_is_refused_while_the_new_attempt_still_runs(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await enqueue(pool, "pay", {})
    stale = await claim(pool, "first")
    taken: list[JobContext] = []

    async def write_while_the_lease_moves_on() -> None:
        async with stale.transaction(result="first") as conn:
            await conn.execute("INSERT INTO effect VALUES ($1, 'first')", stale.id)
            # Inside the block, past its lease check, the stalled attempt loses the job.
            await rescue_as_if_later(pool, database_url)
            taken.append(await claim(pool, "second"))

    with pytest.raises(LeaseLostError):
        await write_while_the_lease_moves_on()
    (running,) = taken
    await held_by(pool, running)
    assert await pool.fetchval("SELECT count(*) FROM effect") == 0
    async with running.transaction(result="second") as conn:
        await conn.execute("INSERT INTO effect VALUES ($1, 'second')", running.id)
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", running.id) == "second"


async def test_a_stale_attempts_completion_is_refused_while_the_new_attempt_still_runs(
    pool: asyncpg.Pool, database_url: str
) -> None:
    stale, running = await stale_and_running_attempts(pool, database_url)
    # The worker completes a handler that returned by job_complete_many, or with its next claim.
    for complete in ("job_complete_many", "job_complete_many_deleting"):
        rows = await pool.fetch(Q[complete], [stale.id], [stale.lease_token], ["first"], False)
        assert rows == [], complete
    for claim in ("job_claim_batch", "job_claim_batch_deleting"):
        rows = await pool.fetch(
            Q[claim], ["default"], [1], "first", 60_000, [stale.id], [stale.lease_token], ["first"],
            False, False,
        )  # fmt: skip
        assert rows == [], claim
    async with pool.acquire() as conn, conn.transaction():
        with pytest.raises(LeaseLostError):
            await stale.complete_in(conn, "first")
        with pytest.raises(LeaseLostError):
            await complete_all_in(conn, [stale])
    await held_by(pool, running)
    done = await pool.fetch(Q["job_complete_many"], [running.id], [running.lease_token], ["second"], False)
    assert [row["id"] for row in done] == [running.id]


@pytest.mark.parametrize("state", ["retryable", "dead", "cancelled", "available"])
async def test_a_stale_attempts_failure_leaves_the_job_to_the_new_attempt(
    pool: asyncpg.Pool, database_url: str, state: str
) -> None:
    stale, running = await stale_and_running_attempts(pool, database_url)
    before = await held_by(pool, running)
    error = {"error": "stale attempt raised", "type": "RuntimeError"}
    rows = await pool.fetch(
        Q["job_fail_many"], [stale.id], [stale.lease_token], [state], [0], [error], [True]
    )
    assert rows == []
    assert await held_by(pool, running) == before


async def test_a_stale_attempts_heartbeat_neither_extends_the_lease_nor_hears_it_still_holds_it(
    pool: asyncpg.Pool, database_url: str
) -> None:
    stale, running = await stale_and_running_attempts(pool, database_url)
    before = await held_by(pool, running)
    assert await pool.fetch(Q["job_heartbeat_many"], [stale.id], [stale.lease_token], 3_600_000) == []
    assert await held_by(pool, running) == before
    with pytest.raises(LeaseLostError):
        await stale.progress(50)
    async with pool.acquire() as conn, conn.transaction():
        assert await hold_leases(conn, [stale, running]) == [running]
    assert stale.lease_lost.is_set()
    assert not running.lease_lost.is_set()
    beat = await pool.fetch(Q["job_heartbeat_many"], [running.id], [running.lease_token], 3_600_000)
    assert [row["id"] for row in beat] == [running.id]


@pytest.mark.parametrize(
    ("statement", "args"),
    [
        ("job_claim_batch", (["q"], [100], "w", 60_000, [], [], [], False, False)),
        ("job_claim", (["q"], [100], "w", 60_000, False)),
        ("job_claim_queue", ("q", 100, "w", 60_000, False)),
    ],
)
async def test_every_attempt_holds_a_lease_token_of_its_own(
    pool: asyncpg.Pool, database_url: str, statement: str, args: tuple[Any, ...]
) -> None:
    """A claim draws its random part once for all its jobs: the tokens must still differ from job
    to job (a worker keys the leases it holds by token) and from attempt to attempt (fencing)."""
    ids = await enqueue_many(pool, [NewJob("k", queue="q") for _ in range(30)])
    first = {r["id"]: r["lease_token"] for r in await pool.fetch(Q[statement], *args)}
    assert sorted(first) == ids
    assert len(set(first.values())) == len(ids)
    await rescue_as_if_later(pool, database_url)
    second = {r["id"]: r["lease_token"] for r in await pool.fetch(Q[statement], *args)}
    assert sorted(second) == ids
    assert all(second[job_id] != first[job_id] for job_id in ids)


async def test_a_heartbeat_leaves_out_a_job_whose_outcome_is_on_its_way(
    pool: asyncpg.Pool, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The claim statement that writes a completion locks the job's row. A heartbeat that waited for
    # that lock, or held the row while its own commit waited for a slow WAL flush, stalled both
    # claims in flight until their lock_timeout failed them and undid their work. Here a
    # transaction holds the row as that claim would.
    worker, first_id, open_gate = await a_completion_behind_a_held_claim(pool, start_worker, monkeypatch)
    async with pool.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("UPDATE job SET lease_expires_at = lease_expires_at WHERE id = $1", first_id)
        holder_pid = await holder.fetchval("SELECT pg_backend_pid()")
        finished, beat = await finishes_without_waiting(pool, holder_pid, worker.heartbeat())
        await tx.rollback()
    await beat
    open_gate()
    assert finished, "a heartbeat waited for the row of a job whose completion is on its way"

    async def both_completed() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM job WHERE state = 'completed'")) == 2

    await wait_until(both_completed)
