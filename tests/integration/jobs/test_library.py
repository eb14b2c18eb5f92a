"""The engine as a library: it refuses connections without its codecs with a clear error, and
`JobEngine` runs a worker with its maintenance until a signal."""

from __future__ import annotations

import asyncio
import os
import signal

import asyncpg
import pytest

from paymanager.jobs import CodecError, JobEngine, Registry, WorkerOptions, enqueue
from tests.integration.jobs.conftest import counting_registry, wait_state, wait_until

OPTIONS = WorkerOptions(owner="lib", lease_ms=2_000, heartbeat_interval_ms=500, poll_interval_ms=200)


async def test_a_worker_refuses_a_pool_without_the_engines_codecs(database_url: str) -> None:
    plain = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    try:
        engine = JobEngine(plain, database_url, Registry(), {"default": 1}, OPTIONS)
        with pytest.raises(CodecError, match="create_pool"):
            await engine.__aenter__()
    finally:
        await plain.close()


async def test_enqueue_on_a_plain_connection_says_what_is_missing(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(CodecError, match="init_connection"):
            await enqueue(conn, "k", {"n": 1})
        assert await conn.fetchval("SELECT count(*) FROM job") == 0
    finally:
        await conn.close()


async def test_a_job_engine_runs_jobs_and_leads_maintenance_until_a_signal(
    pool: asyncpg.Pool, database_url: str
) -> None:
    ran: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    async with JobEngine(pool, database_url, counting_registry(ran), {"default": 5}, OPTIONS) as engine:
        job = await enqueue(pool, "k", {})
        await wait_state(pool, job.id, "completed")

        async def leading() -> bool:
            return engine.maintenance.is_leader

        await wait_until(leading)
        serving = asyncio.create_task(engine.run_until_signal())
        # One loop turn: the task installs its handlers before it first waits.
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, 10) == signal.SIGTERM
    assert ran == [job.id]
    assert signal.getsignal(signal.SIGTERM) == before
