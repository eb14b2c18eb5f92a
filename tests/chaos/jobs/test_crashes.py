"""Crash tests: real worker processes on a real PostgreSQL, killed and stopped under load."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from paymanager.jobs import NewJob, enqueue_many
from tests.support.job_worker import EXECUTION_TABLE

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
async def spawn(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Spawn]:
    await pool.execute(EXECUTION_TABLE)
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.job_worker", database_url, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def wait_for(pool: asyncpg.Pool, query: str, expected: object, timeout_s: float = 60) -> None:
    """Poll until `query` returns `expected`; a correctness bound, not a timing."""
    deadline = time.monotonic() + timeout_s
    while (value := await pool.fetchval(query)) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"{query!r} returned {value!r}, not {expected!r}, within {timeout_s}s")
        await asyncio.sleep(0.05)


async def assert_each_job_recorded_once(pool: asyncpg.Pool, total: int) -> None:
    states = await pool.fetch("SELECT state, count(*) AS n FROM job GROUP BY state")
    assert {r["state"]: r["n"] for r in states} == {"completed": total}
    counts = await pool.fetch(
        "SELECT job_id, count(*) AS n FROM execution GROUP BY job_id HAVING count(*) <> 1"
    )
    assert counts == []
    assert await pool.fetchval("SELECT count(DISTINCT job_id) FROM execution") == total


async def test_three_workers_execute_and_record_5000_jobs_exactly_once(
    pool: asyncpg.Pool, spawn: Spawn
) -> None:
    await enqueue_many(pool, [NewJob("record", queue="crash") for _ in range(5_000)])
    workers = [spawn("--concurrency", "20") for _ in range(3)]
    await wait_for(pool, "SELECT count(*) FROM job WHERE state = 'completed'", 5_000)
    await assert_each_job_recorded_once(pool, 5_000)
    pids = {r["pid"] for r in await pool.fetch("SELECT DISTINCT pid FROM execution")}
    assert pids <= {w.pid for w in workers}


async def test_killed_worker_jobs_are_rescued_and_completed_by_the_others(
    pool: asyncpg.Pool, spawn: Spawn
) -> None:
    await enqueue_many(pool, [NewJob("record", {"sleep_s": 0.2}, queue="crash") for _ in range(300)])
    victim = spawn("--concurrency", "30", "--lease-ms", "1000")
    await wait_for(pool, "SELECT count(*) >= 30 FROM job WHERE state = 'running'", True)
    held = await pool.fetchval(
        "SELECT count(*) FROM job WHERE state = 'running' AND lease_owner = $1", f"crash-{victim.pid}"
    )
    assert held > 0
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    for _ in range(2):
        spawn("--concurrency", "30", "--lease-ms", "1000")
    await wait_for(pool, "SELECT count(*) FROM job WHERE state = 'completed'", 300)
    await assert_each_job_recorded_once(pool, 300)
    assert await pool.fetchval("SELECT count(*) FROM job WHERE stalled_count > 0") > 0


async def test_job_running_past_its_lease_while_heartbeating_is_not_rescued(
    pool: asyncpg.Pool, spawn: Spawn
) -> None:
    await enqueue_many(pool, [NewJob("record", {"sleep_s": 3.0}, queue="crash")])
    # Heartbeats every 250 ms, so a process starved for under 750 ms (a loaded CI machine) keeps its
    # lease; the job runs three leases.
    spawn("--concurrency", "1", "--lease-ms", "1000")
    spawn("--concurrency", "1", "--lease-ms", "1000")  # a second process, free to take a rescued job
    await wait_for(pool, "SELECT count(*) FROM job WHERE state = 'completed'", 1)
    row = await pool.fetchrow("SELECT attempt, stalled_count FROM job")
    assert row is not None
    assert (row["attempt"], row["stalled_count"]) == (1, 0)
    assert await pool.fetchval("SELECT count(*) FROM execution") == 1


async def test_sigterm_under_load_exits_in_time_and_gives_unfinished_jobs_back(
    pool: asyncpg.Pool, spawn: Spawn
) -> None:
    await enqueue_many(pool, [NewJob("record", {"sleep_s": 30}, queue="crash") for _ in range(50)])
    worker = spawn("--concurrency", "10", "--lease-ms", "60000", "--shutdown-timeout-s", "0.5")
    await wait_for(pool, "SELECT count(*) FROM job WHERE state = 'running'", 10)
    worker.send_signal(signal.SIGTERM)
    # Bounded: the worker must exit on its own, well before the jobs' 30 s or the 60 s leases.
    assert await asyncio.to_thread(worker.wait, 15) == 0
    assert await pool.fetchval("SELECT count(*) FROM job WHERE state = 'running'") == 0
    assert await pool.fetchval("SELECT count(*) FROM job WHERE state = 'available'") == 50
    assert await pool.fetchval("SELECT max(attempt) FROM job") == 0
