"""Waits on a condition, bounded in time: how a test knows another task has reached a point (a lock
waited for, a state written, a statement run) instead of sleeping and hoping it has."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

# How often a condition is looked at again; the bound is each caller's timeout, a correctness bound.
POLL_INTERVAL_S = 0.02
PREFIX_CHARS_MIN = 40


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 15.0) -> None:
    """Poll `predicate` until true; a correctness bound (the test fails if it never holds)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(POLL_INTERVAL_S)


async def now_true(value: bool) -> bool:
    """`value` as an awaitable, for `wait_until(lambda: now_true(...))` on in-process state."""
    return value


async def lock_waiters(conn: asyncpg.Pool | asyncpg.Connection) -> int:
    """How many backends of this test's database wait for a lock (a row, a table, a unique key)."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    )


async def wait_for_lock_waiters(
    conn: asyncpg.Pool | asyncpg.Connection, count: int = 1, timeout_s: float = 15.0
) -> None:
    """Until at least `count` backends of this database wait for a lock. `conn` must not be inside
    a transaction: pg_stat_activity is read once per transaction."""

    async def blocked() -> bool:
        return await lock_waiters(conn) >= count

    await wait_until(blocked, timeout_s)


async def wait_for_statement(
    conn: asyncpg.Pool | asyncpg.Connection, statement: str, timeout_s: float = 15.0
) -> None:
    """Until some other backend of this database has run `statement` (pg_stat_activity keeps an idle
    backend's last statement, cut at 1 KiB). `conn` must be one the caller holds, so that no one
    else's statement can replace the one looked for on the same backend."""

    async def ran() -> bool:
        texts = await conn.fetch(
            "SELECT query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        # A prefix long enough to name the statement (a short one, "BEGIN" say, prefixes nothing).
        return any(len(t["query"]) >= PREFIX_CHARS_MIN and statement.startswith(t["query"]) for t in texts)

    await wait_until(ran, timeout_s)
