"""Job events to subscribers (NOTIFY, Redis), and the admin's hand on jobs: list, inspect, retry,
replay, with unique keys and concurrent producers in the way."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paymanager.db.pool import Conn
from paymanager.jobs import (
    EventStream,
    Fixed,
    JobContext,
    JobEvent,
    JobState,
    NewJob,
    Registry,
    Worker,
    WorkerOptions,
    admin,
    enqueue,
    enqueue_many,
)
from paymanager.jobs._queries import Q
from tests.integration.jobs.conftest import COMPLETING_STATEMENTS, FAST, StartWorker, complete_by, wait_state
from tests.support.waiting import wait_for_lock_waiters


async def collect(stream: EventStream, job_id: int, until: str) -> list[str]:
    names: list[str] = []
    while True:
        event: JobEvent = await stream.next(timeout_s=15)
        if event.id == job_id:
            names.append(event.event)
            if event.event == until:
                return names


def failing_registry() -> Registry:
    registry = Registry()

    @registry.handler("flaky", max_attempts=2, backoff=Fixed(0))
    async def flaky(ctx: JobContext) -> None:
        await ctx.progress(50)
        raise RuntimeError("psp timeout")

    return registry


async def test_subscriber_in_another_connection_receives_lifecycle_events(
    pool: asyncpg.Pool, database_url: str, start_worker: StartWorker
) -> None:
    async with EventStream(database_url) as stream:
        await start_worker(failing_registry())
        job = await enqueue(pool, "flaky", {})
        names = await collect(stream, job.id, "dead")
    assert names == ["progress", "failed", "retrying", "progress", "failed", "dead"]


async def test_events_fan_out_through_redis(
    pool: asyncpg.Pool, database_url: str, redis_url: str, start_worker: StartWorker
) -> None:
    registry = Registry()
    registry.register("ok", lambda ctx: None)
    options = WorkerOptions(owner="r", lease_ms=2_000, heartbeat_interval_ms=500, redis_url=redis_url)
    async with EventStream(redis_url=redis_url) as stream:
        await start_worker(registry, options=options)
        job = await enqueue(pool, "ok", {})
        assert await collect(stream, job.id, "completed") == ["completed"]


# Names of the longest length made of every character a name may hold (the domains job_queue_name
# and job_kind_name): the `completed` events are concatenated JSON, unescaped.
LONG_QUEUE = ("Az09_.:-" * 8)[:64]
LONG_KIND = ("zA90-:._" * 16)[:128]


@pytest.mark.parametrize("statement", COMPLETING_STATEMENTS)
async def test_completed_events_of_a_whole_batch_with_the_longest_names_reach_subscribers(
    pool: asyncpg.Pool, database_url: str, statement: str
) -> None:
    jobs = await enqueue_many(pool, [NewJob(LONG_KIND, {}, queue=LONG_QUEUE) for _ in range(60)])
    async with EventStream(database_url) as stream, pool.acquire() as conn:
        rows = await conn.fetch(Q["job_claim_queue"], LONG_QUEUE, 60, "t", 30_000, False)
        assert len(await complete_by(conn, statement, rows, notify=True)) == 60
        seen: list[JobEvent] = []
        while len(seen) < 60:
            seen.append(await stream.next(timeout_s=15))
    assert sorted(e.id for e in seen) == sorted(jobs)
    assert {(e.event, e.kind, e.queue, e.attempt) for e in seen} == {("completed", LONG_KIND, LONG_QUEUE, 1)}


@pytest.mark.parametrize("transport", ["notify", "redis"])
async def test_failure_events_of_a_batch_with_long_errors_reach_subscribers(
    pool: asyncpg.Pool, database_url: str, redis_url: str, transport: str
) -> None:
    """A flush of failures publishes up to 60 events per message, each with an error of up to 300
    characters: 20 dead jobs make ~15 kB, past NOTIFY's 8000 bytes. No event of the batch may be lost
    on either transport (a failed NOTIFY must not skip the Redis publish after it, either)."""
    registry = Registry()
    jobs = 20
    running = 0
    outage = asyncio.Event()

    @registry.handler("psp.call", max_attempts=1)
    async def call(ctx: JobContext) -> None:
        nonlocal running
        running += 1
        if running == jobs:
            outage.set()  # the PSP goes down: every call in flight fails at once
        await outage.wait()
        raise RuntimeError("the PSP refused the request: " + "e" * 400)

    ids = {(await enqueue(pool, "psp.call", {"n": n})).id for n in range(jobs)}
    options = WorkerOptions(
        owner="events", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=200,
        redis_url=redis_url if transport == "redis" else None,
    )  # fmt: skip
    stream = EventStream(database_url) if transport == "notify" else EventStream(redis_url=redis_url)
    async with stream:
        worker = Worker(pool, database_url, registry, {"default": jobs}, options)
        await worker.start()
        try:
            dead: set[int] = set()
            while dead != ids:
                try:
                    event = await stream.next(timeout_s=10)
                except TimeoutError:
                    states = await pool.fetch("SELECT state, count(*) FROM job GROUP BY state")
                    pytest.fail(f"{len(ids - dead)} of {jobs} dead events lost; jobs: {states}")
                if event.event == "dead":
                    dead.add(event.id)
        finally:
            await worker.stop(timeout_s=2)


# --- admin: list, inspect, retry, replay ----------------------------------------------------------


async def test_dead_jobs_are_listed_inspected_and_replayed_by_filter(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    registry = Registry()

    @registry.handler("settle", max_attempts=1)
    async def settle(ctx: JobContext) -> str:
        if ctx.payload["fail"] and ctx.attempt == 1 and not ctx.payload.get("replayed"):
            raise RuntimeError(ctx.payload["why"])
        return "done"

    await start_worker(registry, {"default": 5, "other": 5}, FAST)
    a = await enqueue(pool, "settle", {"fail": True, "why": "psp timeout"})
    b = await enqueue(pool, "settle", {"fail": True, "why": "card declined"})
    c = await enqueue(pool, "settle", {"fail": True, "why": "psp timeout"}, queue="other")
    for job in (a, b, c):
        await wait_state(pool, job.id, "dead")

    dead = await admin.list_jobs(pool, state=JobState.DEAD)
    assert [j["id"] for j in dead] == [c.id, b.id, a.id]
    shown = await admin.get_job(pool, a.id)
    assert shown is not None
    assert shown["errors"][0]["error"] == "psp timeout"

    await pool.execute("UPDATE job SET payload = payload || '{\"replayed\": true}'")
    replayed = await admin.replay_dead(pool, queue="default", error_contains="psp timeout")
    assert replayed == [a.id]
    await wait_state(pool, a.id, "completed")
    assert await pool.fetchval("SELECT state FROM job WHERE id = $1", c.id) == "dead"

    window = await admin.replay_dead(pool, since=datetime.now(UTC) - timedelta(hours=1))
    assert sorted(window) == sorted([b.id, c.id])
    assert await admin.retry_job(pool, a.id) is False  # completed jobs are not retried
    stats = await admin.stats(pool)
    assert sum(stats.get("default", {}).values()) == 2


@pytest.mark.parametrize(
    ("action", "args"),
    [
        (admin.set_max_depth, ("q", 0)),
        (admin.set_max_depth, ("q", 200_000_000)),
        (admin.pause_queue, ("no such queue!",)),
        (admin.get_job, (2**63,)),
    ],
)
async def test_admin_refuses_bad_input_with_a_clear_error(pool: asyncpg.Pool, action: Any, args: Any) -> None:
    with pytest.raises(ValueError):
        await action(pool, *args)


# --- retry and replay of jobs whose unique key another job holds -----------------------------------

SETTLE = "intent.settle"


async def _dead(conn: Conn, unique_key: str | None) -> int:
    """A job that died (its unique key, if any, is free again once it is dead)."""
    result = await enqueue(conn, SETTLE, {"n": 1}, unique_key=unique_key)
    assert result.created
    await conn.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", result.id)
    return result.id


async def test_replaying_dead_jobs_skips_one_whose_unique_key_a_live_job_holds(conn: Conn) -> None:
    # The settlement job of an intent died; the reconciler enqueued a new one under the same unique
    # key. An operator replays the dead jobs of the kind: the others must come back, and the one
    # whose work is already queued again stays dead (two live jobs cannot share the key).
    held = await _dead(conn, "intent.settle:a")
    live = await enqueue(conn, SETTLE, {"n": 2}, unique_key="intent.settle:a")
    assert live.created
    free = await _dead(conn, "intent.settle:b")
    plain = await _dead(conn, None)
    replayed = await admin.replay_dead(conn, kind=SETTLE)
    assert sorted(replayed) == sorted([free, plain])
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", held) == "dead"


async def test_replaying_two_dead_jobs_with_one_unique_key_brings_back_one(conn: Conn) -> None:
    older = await _dead(conn, "intent.settle:c")
    newer = await _dead(conn, "intent.settle:c")
    assert await admin.replay_dead(conn, kind=SETTLE) == [newer]
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", older) == "dead"


async def test_retrying_a_dead_job_whose_unique_key_a_live_job_holds_is_refused_not_an_error(
    conn: Conn,
) -> None:
    held = await _dead(conn, "intent.settle:d")
    assert (await enqueue(conn, SETTLE, {"n": 2}, unique_key="intent.settle:d")).created
    assert await admin.retry_job(conn, held) is False
    assert await conn.fetchval("SELECT state::text FROM job WHERE id = $1", held) == "dead"


async def test_concurrent_retries_of_two_dead_jobs_sharing_a_unique_key_do_not_raise(
    pool: asyncpg.Pool,
) -> None:
    """job_retry's NOT EXISTS sees no live holder in either transaction; the second UPDATE then waits
    on the unique index. It must be refused (False), as it is when the holder is already committed,
    not fail with UniqueViolationError (a 500 in the admin API, a traceback in the CLI)."""
    ids = []
    for _ in range(2):
        job = await enqueue(pool, "k", {}, unique_key="settle:x")
        await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
        ids.append(job.id)
    async with pool.acquire() as first, pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        assert await admin.retry_job(first, ids[0])
        other = asyncio.create_task(admin.retry_job(second, ids[1]))
        await wait_for_lock_waiters(pool)  # the second waits on the unique index entry of the first
        await tx.commit()
        assert await other is False


async def test_replay_racing_an_enqueue_of_the_same_key_does_not_fail_the_whole_replay(
    pool: asyncpg.Pool,
) -> None:
    """One live holder of a key must not make the whole replay fail, even a holder enqueued
    concurrently (by the reconciler): the other dead jobs are replayed."""
    dead = []
    for key in ("settle:y", None):
        job = await enqueue(pool, "k", {}, unique_key=key)
        await pool.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job.id)
        dead.append(job.id)
    async with pool.acquire() as producer:
        tx = producer.transaction()
        await tx.start()
        assert (await enqueue(producer, "k", {}, unique_key="settle:y")).created
        replay = asyncio.create_task(admin.replay_dead(pool, kind="k"))
        await wait_for_lock_waiters(pool)  # the replay waits on the producer's unique index entry
        await tx.commit()
    assert await replay == [dead[1]]
