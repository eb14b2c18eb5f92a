"""A stop's release of jobs whose lease moved on (rescued, or claimed again elsewhere): it gives up at
once instead of trying again for a second (a review of the session's last commits; each test failed
before its fix)."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from tests.integration.jobs.conftest import StartWorker, job_state, start_a_slow_job


async def _held_job_whose_lease_moved_on(pool: asyncpg.Pool, start_worker: StartWorker, how: str) -> Any:
    worker, job = await start_a_slow_job(pool, start_worker)
    if how == "reclaimed":  # rescued and claimed by another worker: running under another token
        await pool.execute(
            "UPDATE job SET lease_token = gen_random_uuid(), lease_owner = 'other' WHERE id = $1", job.id
        )
    else:  # rescued, not claimed yet
        await pool.execute(
            "UPDATE job SET state = 'available', lease_token = NULL, lease_owner = NULL,"
            " lease_expires_at = NULL WHERE id = $1",
            job.id,
        )
    return worker, job


async def test_stop_does_not_wait_a_second_for_a_job_whose_lease_moved_on(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    """_release retries every context the statement did not return, for up to RELEASE_WAIT_S, as if
    its row were locked. A held attempt whose lease is gone (rescued and re-claimed elsewhere: the
    state the batch.py commit says a worker can be in) can never be released, so every such stop
    runs ~1 s past its timeout_s (and past the runtime's share; STOP_GRACE_S is 2 s) and ends
    with a false "left to expire" warning."""
    worker, job = await _held_job_whose_lease_moved_on(pool, start_worker, "reclaimed")
    began = time.monotonic()
    await worker.stop(timeout_s=0)
    elapsed = time.monotonic() - began
    assert await job_state(pool, job.id) == "running"  # the other worker's lease is untouched
    assert elapsed < 0.5, f"stop(timeout_s=0) took {elapsed:.2f}s retrying a release that cannot happen"


async def test_stop_does_not_wait_a_second_for_a_job_already_rescued(
    pool: asyncpg.Pool, start_worker: StartWorker
) -> None:
    worker, job = await _held_job_whose_lease_moved_on(pool, start_worker, "rescued")
    began = time.monotonic()
    await worker.stop(timeout_s=0)
    elapsed = time.monotonic() - began
    assert await job_state(pool, job.id) == "available"
    assert elapsed < 0.5, f"stop(timeout_s=0) took {elapsed:.2f}s retrying a release that cannot happen"
