"""A job stepped through its states by hand, with the statements a worker runs, for tests of the engine
that need no worker: claim, complete, fail for good, and a two-child flow."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from paymanager.jobs import NewJob, enqueue_flow
from paymanager.jobs._queries import Q


async def claim(pool: asyncpg.Pool, queue: str, lease_ms: int = 60_000) -> dict[int, uuid.UUID]:
    """Claim every available job of `queue` as a worker would; their lease tokens by id."""
    rows = await pool.fetch(Q["job_claim_batch"], [queue], [100], "w", lease_ms, [], [], [], False, False)
    return {r["id"]: r["lease_token"] for r in rows}


async def complete(pool: asyncpg.Pool, job_id: int, token: uuid.UUID, result: Any = None) -> None:
    rows = await pool.fetch(Q["job_complete_many"], [job_id], [token], [result], False)
    assert [r["id"] for r in rows] == [job_id]


async def fail_dead(pool: asyncpg.Pool, job_id: int, token: uuid.UUID) -> None:
    """The worker's write of a last failed attempt (PermanentError or attempts exhausted)."""
    rows = await pool.fetch(
        Q["job_fail_many"], [job_id], [token], ["dead"], [None], [{"error": "boom", "type": "X"}], [True]
    )
    assert [r["id"] for r in rows] == [job_id]


async def flow(pool: asyncpg.Pool, on_child_dead: str = "ignore") -> tuple[int, int, int]:
    """A parent with two children, each on a queue of its own so a test can run them one by one."""
    async with pool.acquire() as conn, conn.transaction():
        parent, (a, b) = await enqueue_flow(
            conn,
            NewJob("parent", queue="p"),
            [NewJob("child", {"n": 1}, queue="qa"), NewJob("child", {"n": 2}, queue="qb")],
            on_child_dead=on_child_dead,  # type: ignore[arg-type]
        )
    return parent, a, b
