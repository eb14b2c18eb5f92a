"""Fixtures for the job engine's integration tests: workers that are always stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from paymanager.jobs import EnqueueResult, JobContext, Registry, Worker, WorkerOptions, enqueue

# Short leases and intervals keep crash-like tests quick; they are correctness bounds, not timings.
FAST = WorkerOptions(owner="test", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=200)

StartWorker = Callable[..., Awaitable[Worker]]


@pytest.fixture
async def start_worker(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[StartWorker]:
    started: list[Worker] = []

    async def start(
        registry: Registry,
        queues: dict[str, int] | None = None,
        options: WorkerOptions = FAST,
        **kwargs: Any,
    ) -> Worker:
        worker = Worker(pool, database_url, registry, queues or {"default": 10}, options, **kwargs)
        await worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        await worker.stop(timeout_s=2)


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 15.0) -> None:
    """Poll `predicate` until true; a correctness bound (the test fails if it never holds)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.02)


async def job_state(pool: asyncpg.Pool, job_id: int) -> str:
    return str(await pool.fetchval("SELECT state FROM job WHERE id = $1", job_id))


async def wait_state(pool: asyncpg.Pool, job_id: int, state: str, timeout_s: float = 15.0) -> None:
    async def reached() -> bool:
        return await job_state(pool, job_id) == state

    await wait_until(reached, timeout_s)


async def start_a_slow_job(pool: asyncpg.Pool, start_worker: StartWorker) -> tuple[Worker, EnqueueResult]:
    """A worker (2 slots, the FAST options) running one job of kind "slow", which sleeps for 30 s."""
    started = asyncio.Event()
    registry = Registry()

    @registry.handler("slow")
    async def slow(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    worker = await start_worker(registry, {"default": 2}, FAST)
    job = await enqueue(pool, "slow", {}, queue="default")
    await asyncio.wait_for(started.wait(), 10)
    return worker, job
