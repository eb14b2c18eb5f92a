from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from paymanager.jobs import (
    EventStream,
    Fixed,
    JobContext,
    JobEvent,
    JobState,
    Registry,
    WorkerOptions,
    admin,
    enqueue,
)
from tests.integration.jobs.conftest import FAST, StartWorker, wait_state


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
