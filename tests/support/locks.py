"""Waiting on lock conditions instead of sleeping: a test holds a transaction open on one connection,
acts on another, and asks PostgreSQL (pg_stat_activity) whether the second now waits for a lock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import asyncpg

from tests.support.waiting import wait_until

T = TypeVar("T")

POLL_S = 0.01
# A correctness bound: the test fails when the condition never holds, it never waits this long else.
WAIT_S_MAX = 15.0


async def finishes_without_waiting(
    pool: asyncpg.Pool, holder_pid: int, work: Awaitable[T], timeout_s: float = WAIT_S_MAX
) -> tuple[bool, asyncio.Task[T]]:
    """Run `work` until it finishes or some backend waits for a lock that backend `holder_pid` (a
    transaction the test holds open) holds.

    Returns (True, the done task) when it finished without anything seen waiting, (False, the task
    still running) when something waits: the caller must then end the holder's transaction and
    await the task."""
    task = asyncio.ensure_future(work)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not task.done():
        if await _waiter_behind(pool, holder_pid) is not None:
            return False, task
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"work neither finished nor waited for backend {holder_pid} within {timeout_s}s"
            )
        await asyncio.wait({task}, timeout=POLL_S)
    return True, task


async def _waiter_behind(pool: asyncpg.Pool, holder_pid: int) -> int | None:
    pid = await pool.fetchval(
        "SELECT pid FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND $1 = ANY (pg_blocking_pids(pid)) LIMIT 1",
        holder_pid,
    )
    return None if pid is None else int(pid)


async def wait_for_a_waiter_behind(
    pool: asyncpg.Pool, blocker_pid: int, timeout_s: float = WAIT_S_MAX
) -> int:
    """The pid of a backend that waits for a lock held by backend `blocker_pid` (a transaction the
    test holds open), once there is one; for work whose connection the test does not choose (an
    API request, a worker's pool)."""
    found: list[int] = []

    async def waiting() -> bool:
        pid = await _waiter_behind(pool, blocker_pid)
        if pid is not None:
            found.append(pid)
        return pid is not None

    await wait_until(waiting, timeout_s)
    return found[-1]
