"""The events that join the lifecycle's (active, waiting, removed, a worker's error), the stalled event, a
caller waiting for a job to finish, and a handler's log lines (docs/state_machines.md, "Events")."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from paymanager.db.database import Database
from paymanager.jobs import (
    EventStream,
    JobContext,
    JobEvent,
    JobState,
    NewJob,
    PermanentError,
    Registry,
    WorkerOptions,
    admin,
    enqueue,
    enqueue_many,
)
from paymanager.jobs.context import LOG_LINE_CHARS_MAX, LOG_LINES_MAX
from paymanager.jobs.maintenance import Maintenance
from tests.integration.jobs.conftest import FAST, StartWorker, wait_state, wait_until
from tests.support.processes import paymanager_env, run_cli


async def events_of(stream: EventStream, job_id: int, until: str) -> list[str]:
    names: list[str] = []
    while True:
        event: JobEvent = await stream.next(timeout_s=15)
        if event.id == job_id:
            names.append(event.event)
            if event.event == until:
                return names


def ok_registry() -> Registry:
    registry = Registry()

    async def ok(ctx: JobContext) -> dict[str, int]:
        return {"id": ctx.id}

    async def broken(ctx: JobContext) -> None:
        raise PermanentError("card declined")

    registry.register("ok", ok)
    registry.register("broken", broken)
    return registry


async def test_a_worker_with_active_events_announces_each_start(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    options = WorkerOptions(owner="a", lease_ms=2_000, heartbeat_interval_ms=500, active_events=True)
    async with EventStream(database_url) as stream:
        await start_worker(ok_registry(), options=options)
        job = await enqueue(pool, "ok", {})
        names = await events_of(stream, job.id, "completed")
    assert "active" in names


async def events_until_removed(stream: EventStream, sentinel: int) -> list[JobEvent]:
    """Every event up to the `removed` of job `sentinel` (NOTIFYs arrive in commit order)."""
    seen: list[JobEvent] = []
    while True:
        event: JobEvent = await stream.next(timeout_s=15)
        if (event.event, event.id) == ("removed", sentinel):
            return seen
        seen.append(event)


async def test_a_queue_with_waiting_events_announces_each_job_that_becomes_available(
    pool: asyncpg.Pool, database_url: str
) -> None:
    async with pool.acquire() as conn:
        await admin.set_waiting_events(conn, "w", True)
    async with EventStream(database_url) as stream:
        one = await enqueue(pool, "ok", {}, queue="w")
        many = await enqueue_many(pool, [NewJob("ok", {}, queue="w"), NewJob("ok", {}, queue="plain")])
        await enqueue(pool, "ok", {}, queue="plain")
        delayed = await enqueue(pool, "ok", {}, queue="w", delay_ms=3_600_000)
        lifo = await enqueue(pool, "ok", {}, queue="w", lifo=True)
        sentinel = await enqueue(pool, "ok", {}, queue="plain")
        async with pool.acquire() as conn:
            await admin.remove_job(conn, sentinel.id)
        at_enqueue = await events_until_removed(stream, sentinel.id)

        later = datetime.now(UTC) + timedelta(hours=2)
        await Maintenance(pool, database_url, clock=lambda: later).promote()
        second = await enqueue(pool, "ok", {}, queue="plain")
        async with pool.acquire() as conn:
            await admin.remove_job(conn, second.id)
        at_promotion = await events_until_removed(stream, second.id)
    waiting = [(e.id, e.kind, e.queue) for e in at_enqueue if e.event == "waiting"]
    # The delayed job is not waiting yet, and the queue without the setting publishes nothing.
    assert waiting == [(one.id, "ok", "w"), (many[0], "ok", "w"), (lifo.id, "ok", "w")]
    assert [(e.event, e.id) for e in at_promotion] == [("waiting", delayed.id)]


async def test_a_queue_without_waiting_events_publishes_none(pool: asyncpg.Pool, database_url: str) -> None:
    async with pool.acquire() as conn:
        await admin.set_waiting_events(conn, "w", True)
        await admin.set_waiting_events(conn, "w", False)
    async with EventStream(database_url) as stream:
        await enqueue(pool, "ok", {}, queue="w")
        await enqueue_many(pool, [NewJob("ok", {}, queue="w")])
        await enqueue(pool, "ok", {}, queue="never-set")
        sentinel = await enqueue(pool, "ok", {}, queue="w")
        async with pool.acquire() as conn:
            await admin.remove_job(conn, sentinel.id)
        assert await events_until_removed(stream, sentinel.id) == []


async def test_the_waiting_events_setting_shows_in_the_queue_listings(
    pool: asyncpg.Pool, database_url: str
) -> None:
    async with pool.acquire() as conn:
        await admin.set_waiting_events(conn, "w", True)
        await admin.set_global_concurrency(conn, "plain", 5)
        shown = {q.name: q.waiting_events for q in await admin.list_queues(conn)}
    assert shown == {"plain": False, "w": True}
    stats = await asyncio.to_thread(run_cli, ["jobs", "stats"], paymanager_env(database_url))
    assert "w (waiting events): empty" in stats.stdout, stats.stdout + stats.stderr
    assert "plain (concurrency 5): empty" in stats.stdout
    listed = await asyncio.to_thread(run_cli, ["jobs", "stats", "--json"], paymanager_env(database_url))
    by_name = {q["name"]: q for q in map(json.loads, listed.stdout.splitlines())}
    assert (by_name["w"]["waiting_events"], by_name["plain"]["waiting_events"]) == (True, False)
    async with pool.acquire() as conn:
        await admin.set_waiting_events(conn, "w", False)
    stats = await asyncio.to_thread(run_cli, ["jobs", "stats"], paymanager_env(database_url))
    assert "w: empty" in stats.stdout


async def test_removing_a_job_publishes_removed(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "ok", {}, queue="q")
    async with EventStream(database_url) as stream, pool.acquire() as conn:
        assert await admin.remove_job(conn, job.id)
        event = await stream.next(timeout_s=10)
    assert (event.event, event.id, event.kind, event.queue) == ("removed", job.id, "ok", "q")


async def test_a_rescued_job_publishes_stalled(pool: asyncpg.Pool, database_url: str) -> None:
    job = await enqueue(pool, "ok", {})
    await pool.execute(
        "UPDATE job SET state = 'running', attempt = 1, lease_owner = 'gone',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE id = $1",
        job.id,
    )
    later = datetime.now(UTC) + timedelta(hours=1)
    async with EventStream(database_url) as stream:
        await Maintenance(pool, database_url, clock=lambda: later).rescue()
        event = await stream.next(timeout_s=10)
    # The attempt the lost lease held is given back.
    assert (event.event, event.id, event.attempt) == ("stalled", job.id, 0)
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", job.id) == "available"


async def test_a_worker_reports_its_own_errors_to_its_error_hook(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    heard: list[tuple[str, BaseException]] = []
    options = WorkerOptions(
        owner="e", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=3_600_000,
        claim_lock_timeout_ms=50,
    )  # fmt: skip
    await start_worker(ok_registry(), options=options, on_error=lambda where, exc: heard.append((where, exc)))
    async with pool.acquire() as locker, locker.transaction():
        # A migration's lock: the claim that a NOTIFY starts gives up after its lock timeout.
        await locker.execute("LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        await pool.execute("SELECT pg_notify('pm_job_available', 'default')")

        async def heard_a_claim_error() -> bool:
            return any(where == "claim" for where, _ in heard)

        await wait_until(heard_a_claim_error)
    assert isinstance(heard[0][1], asyncpg.LockNotAvailableError)


async def test_wait_until_finished_returns_how_the_job_ended(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    database = Database(database_url, pool)
    await start_worker(ok_registry(), options=FAST)
    done = await enqueue(pool, "ok", {})
    broken = await enqueue(pool, "broken", {})
    finished = await done.wait_until_finished(database, timeout_s=30)
    assert (finished.id, finished.state, finished.result) == (done.id, JobState.COMPLETED, {"id": done.id})
    failed = await broken.wait_until_finished(database, timeout_s=30)
    assert failed.state is JobState.DEAD
    assert failed.error is not None
    assert "card declined" in failed.error["error"]
    await database.close()


async def test_wait_until_finished_without_completed_events_reads_the_row_again(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    database = Database(database_url, pool)
    options = WorkerOptions(
        owner="q", lease_ms=2_000, heartbeat_interval_ms=500, notify_completed_events=False
    )
    await start_worker(ok_registry(), options=options)
    job = await enqueue(pool, "ok", {})
    assert (await job.wait_until_finished(database, timeout_s=30)).state is JobState.COMPLETED
    await database.close()


async def test_wait_until_finished_times_out_or_finds_no_job(pool: asyncpg.Pool, database_url: str) -> None:
    database = Database(database_url, pool)
    job = await enqueue(pool, "ok", {})  # no worker runs it
    with pytest.raises(TimeoutError):
        await job.wait_until_finished(database, timeout_s=0.5)
    await pool.execute("DELETE FROM job")
    with pytest.raises(LookupError):
        await job.wait_until_finished(database, timeout_s=30)
    await database.close()


async def test_a_handlers_log_lines_are_kept_with_the_job_bounded(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("chatty")
    async def chatty(ctx: JobContext) -> None:
        await ctx.log("x" * (LOG_LINE_CHARS_MAX + 50))
        for n in range(LOG_LINES_MAX + 4):
            await ctx.log(f"line {n}")

    await start_worker(registry)
    job = await enqueue(pool, "chatty", {})
    await wait_state(pool, job.id, "completed")
    logs = await pool.fetchval("SELECT logs FROM job WHERE id = $1", job.id)
    assert len(logs) == LOG_LINES_MAX
    assert logs[0]["line"] == "line 4"
    assert logs[-1]["line"] == f"line {LOG_LINES_MAX + 3}"
    job_row = await admin.get_job(pool, job.id)
    assert job_row is not None
    assert job_row["logs"] == logs


async def test_a_log_line_of_a_lost_lease_is_refused(pool: asyncpg.Pool, start_worker: StartWorker) -> None:
    registry = Registry()
    outcome: list[str] = []

    @registry.handler("late")
    async def late(ctx: JobContext) -> None:
        await ctx._pool.execute("UPDATE job SET lease_token = gen_random_uuid() WHERE id = $1", ctx.id)
        try:
            await ctx.log("too late")
        except Exception as exc:
            outcome.append(type(exc).__name__)
            raise

    await start_worker(registry)
    job = await enqueue(pool, "late", {})

    async def refused() -> bool:
        return outcome == ["LeaseLostError"]

    await wait_until(refused)
    assert await pool.fetchval("SELECT logs FROM job WHERE id = $1", job.id) is None
