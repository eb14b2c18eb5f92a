"""Several running jobs sharing one transaction (jobs/batch.py), each fenced by its own lease."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import orjson
import pytest

from paymanager.jobs import JobContext, LeaseLostError, PermanentError, Registry, WorkerOptions, enqueue
from paymanager.jobs._queries import CHANNEL_EVENTS
from paymanager.jobs.batch import SharedTransactions, complete_all_in, hold_leases
from tests.integration.jobs.conftest import StartWorker, job_state, wait_until
from tests.support.job_contexts import context_from_row

LOCK_NOWAIT = "SELECT id FROM job WHERE id = $1 FOR UPDATE NOWAIT"


class _Rollback(Exception):
    pass


async def _complete_then_roll_back(pool: asyncpg.Pool, ctxs: list[JobContext]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await complete_all_in(conn, ctxs)
        raise _Rollback


@pytest.fixture
async def effects(pool: asyncpg.Pool) -> None:
    await pool.execute("CREATE TABLE effect (job_id bigint, item text)")


def _context(pool: asyncpg.Pool, row: Any) -> JobContext:
    return context_from_row(pool, row, max_attempts=5)


async def _running(pool: asyncpg.Pool, count: int) -> list[JobContext]:
    """`count` jobs claimed as a worker claims them: running, each under its own lease token."""
    for i in range(count):
        await enqueue(pool, "pay", {"n": i})
    rows = await pool.fetch(
        "UPDATE job SET state = 'running', attempt = attempt + 1, lease_owner = 'first',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        " RETURNING *"
    )
    return sorted((_context(pool, row) for row in rows), key=lambda ctx: ctx.id)


async def _take_lease(pool: asyncpg.Pool, ctx: JobContext) -> None:
    """What a rescue and a claim by another worker do to a stalled job: a new lease token."""
    await pool.execute(
        "UPDATE job SET lease_owner = 'second', lease_token = gen_random_uuid() WHERE id = $1", ctx.id
    )


async def test_hold_leases_locks_the_jobs_still_held_and_marks_the_others_lost(pool: asyncpg.Pool) -> None:
    ctxs = await _running(pool, 3)
    await _take_lease(pool, ctxs[1])
    async with pool.acquire() as conn, conn.transaction():
        held = await hold_leases(conn, ctxs)
        assert held == [ctxs[0], ctxs[2]]
        assert ctxs[1].lease_lost.is_set()
        assert not ctxs[0].lease_lost.is_set()
        async with pool.acquire() as other:
            # The held rows are locked until the shared transaction ends; the lost one is not.
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.fetchval(LOCK_NOWAIT, ctxs[0].id)
            assert await other.fetchval(LOCK_NOWAIT, ctxs[1].id) == ctxs[1].id


async def test_complete_all_in_commits_with_the_transaction_and_not_without(pool: asyncpg.Pool) -> None:
    ctxs = await _running(pool, 2)
    with pytest.raises(_Rollback):
        await _complete_then_roll_back(pool, ctxs)
    assert [await job_state(pool, ctx.id) for ctx in ctxs] == ["running", "running"]
    ctxs[0].result = {"paid": 1}
    async with pool.acquire() as conn, conn.transaction():
        await complete_all_in(conn, ctxs)
    assert [await job_state(pool, ctx.id) for ctx in ctxs] == ["completed", "completed"]
    assert all(ctx.completed_in_transaction for ctx in ctxs)
    assert await pool.fetchval("SELECT result FROM job WHERE id = $1", ctxs[0].id) == {"paid": 1}


async def test_complete_all_in_refuses_a_lost_lease_and_the_transaction_rolls_back(
    pool: asyncpg.Pool,
) -> None:
    ctxs = await _running(pool, 2)
    await _take_lease(pool, ctxs[1])
    with pytest.raises(LeaseLostError):
        async with pool.acquire() as conn, conn.transaction():
            await complete_all_in(conn, ctxs)
    assert ctxs[1].lease_lost.is_set()
    assert [await job_state(pool, ctx.id) for ctx in ctxs] == ["running", "running"]


@pytest.mark.usefixtures("effects")
async def test_shared_transactions_give_each_job_of_a_group_its_own_outcome(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    groups: list[int] = []

    async def work(conn: asyncpg.Connection, items: list[tuple[JobContext, str]]) -> list[str | Exception]:
        groups.append(len(items))
        outcomes: list[str | Exception] = []
        for ctx, item in items:
            if item == "bad":  # an expected failure of this job alone: it writes nothing
                outcomes.append(PermanentError("bad item"))
                continue
            await conn.execute("INSERT INTO effect VALUES ($1, $2)", ctx.id, item)
            outcomes.append(item)
        return outcomes

    committed: list[str] = []

    async def after_commit(results: list[str]) -> None:
        committed.extend(results)

    shared: SharedTransactions[str, str] = SharedTransactions(
        pool, work, batch_max=10, batches_in_flight_max=1, after_commit=after_commit
    )
    registry = Registry()

    @registry.handler("pay")
    async def pays(ctx: JobContext) -> None:
        await shared.run(ctx, str(ctx.payload["item"]))

    items = ["a", "b", "bad", "c", "d", "e"]
    jobs = [await enqueue(pool, "pay", {"item": item}, max_attempts=1) for item in items]
    await start_worker(
        registry, {"default": 10}, WorkerOptions(owner="w", claim_batch_max=10, poll_interval_ms=100)
    )

    async def all_finished() -> bool:
        return all([await job_state(pool, job.id) in ("completed", "dead") for job in jobs])

    await wait_until(all_finished)
    states = [await job_state(pool, job.id) for job in jobs]
    assert states == ["completed", "completed", "dead", "completed", "completed", "completed"]
    written = await pool.fetch("SELECT item FROM effect ORDER BY item")
    assert [r["item"] for r in written] == ["a", "b", "c", "d", "e"]
    assert max(groups) > 1  # the handlers the worker started together shared a transaction
    await wait_until(lambda: asyncio.sleep(0, len(committed) == 5))
    assert sorted(committed) == ["a", "b", "c", "d", "e"]


@pytest.mark.usefixtures("effects")
async def test_a_deadlocked_group_is_rolled_back_and_run_again_once(pool: asyncpg.Pool) -> None:
    ctxs = await _running(pool, 3)
    attempts = 0

    async def work(conn: asyncpg.Connection, items: list[tuple[JobContext, str]]) -> list[str | Exception]:
        nonlocal attempts
        attempts += 1
        for ctx, item in items:
            await conn.execute("INSERT INTO effect VALUES ($1, $2)", ctx.id, item)
        if attempts == 1:  # as PostgreSQL does when this group and a heartbeat wait on each other
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        return [item for _, item in items]

    shared: SharedTransactions[str, str] = SharedTransactions(
        pool, work, batch_max=10, batches_in_flight_max=1
    )
    results = await asyncio.gather(*(shared.run(ctx, f"item {ctx.id}") for ctx in ctxs))
    assert results == [f"item {ctx.id}" for ctx in ctxs]
    assert attempts == 2
    written = await pool.fetch("SELECT job_id FROM effect ORDER BY job_id")
    assert [r["job_id"] for r in written] == [ctx.id for ctx in ctxs]  # the first attempt left nothing
    assert [await job_state(pool, ctx.id) for ctx in ctxs] == ["completed"] * 3


@pytest.mark.usefixtures("effects")
async def test_an_error_of_the_group_itself_reaches_every_caller_and_commits_nothing(
    pool: asyncpg.Pool,
) -> None:
    ctxs = await _running(pool, 2)

    async def work(conn: asyncpg.Connection, items: list[tuple[JobContext, str]]) -> list[str | Exception]:
        for ctx, item in items:
            await conn.execute("INSERT INTO effect VALUES ($1, $2)", ctx.id, item)
        await conn.execute("SELECT 1 / 0")  # a statement fails: not one job's outcome
        return [item for _, item in items]

    shared: SharedTransactions[str, str] = SharedTransactions(
        pool, work, batch_max=10, batches_in_flight_max=1
    )
    outcomes = await asyncio.gather(*(shared.run(ctx, "x") for ctx in ctxs), return_exceptions=True)
    assert all(isinstance(o, asyncpg.DivisionByZeroError) for o in outcomes)
    assert await pool.fetchval("SELECT count(*) FROM effect") == 0
    assert [await job_state(pool, ctx.id) for ctx in ctxs] == ["running", "running"]
    assert not any(ctx.completed_in_transaction for ctx in ctxs)


async def test_the_completed_events_of_a_group_go_out_in_one_notify(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    """Each NOTIFY is a commit under PostgreSQL's one NOTIFY lock: a group's jobs share one."""
    groups: list[list[int]] = []

    async def work(conn: asyncpg.Connection, items: list[tuple[JobContext, str]]) -> list[str | Exception]:
        groups.append([ctx.id for ctx, _ in items])
        return [item for _, item in items]

    shared: SharedTransactions[str, str] = SharedTransactions(
        pool, work, batch_max=10, batches_in_flight_max=1
    )
    registry = Registry()

    @registry.handler("pay")
    async def pays(ctx: JobContext) -> None:
        await shared.run(ctx, "x")

    messages: list[list[int]] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener(
            CHANNEL_EVENTS,
            lambda *args: messages.append([e["id"] for e in orjson.loads(args[3]) if e["e"] == "completed"]),
        )
        jobs = [await enqueue(pool, "pay", {}) for _ in range(8)]
        await start_worker(
            registry, {"default": 8}, WorkerOptions(owner="w", claim_batch_max=8, poll_interval_ms=100)
        )

        async def every_event_arrived() -> bool:
            return sorted(i for m in messages for i in m) == sorted(job.id for job in jobs)

        await wait_until(every_event_arrived)
    finally:
        await listener.close()
    assert max(len(group) for group in groups) > 1
    assert sorted(sorted(m) for m in messages if m) == sorted(sorted(group) for group in groups)


async def test_completed_events_off_holds_back_the_notify_of_jobs_completed_in_their_transaction(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    """`notify_completed_events=False` saves every `completed` NOTIFY, those of `ctx.transaction()` too."""
    registry = Registry()

    @registry.handler("pay")
    async def pays(ctx: JobContext) -> None:
        async with ctx.transaction(result="paid"):
            pass

    @registry.handler("fails", max_attempts=1)
    async def fails(ctx: JobContext) -> None:
        raise RuntimeError("the later job")

    messages: list[str] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener(CHANNEL_EVENTS, lambda *args: messages.append(args[3]))
        job = await enqueue(pool, "pay", {})
        await start_worker(registry, {"default": 1}, WorkerOptions(owner="w", notify_completed_events=False))

        async def completed() -> bool:
            return await job_state(pool, job.id) == "completed"

        await wait_until(completed)
        # The completed event would go out on the loop's next turn after the commit, long before a
        # job enqueued only now fails: once that job's `dead` event has arrived, it would have too.
        later = await enqueue(pool, "fails", {})

        def heard() -> list[dict[str, Any]]:
            return [event for message in messages for event in orjson.loads(message)]

        async def later_dead_heard() -> bool:
            return {"e": "dead", "id": later.id} in [{"e": e["e"], "id": e["id"]} for e in heard()]

        await wait_until(later_dead_heard)
    finally:
        await listener.close()
    assert [event for event in heard() if event["e"] == "completed"] == []
