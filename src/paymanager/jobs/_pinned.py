"""A pool connection held for the life of a hot loop (claiming, completing).

Borrowing per statement costs a round trip each time: asyncpg resets a connection (UNLISTEN, RESET
ALL, ...) when it goes back to the pool. The claim and completion loops run thousands of statements a
second, so each keeps one connection; a connection that breaks is dropped and replaced on next use.

With `generic_plans`, the connection plans each statement once (`job_session_generic_plans`), and
with `lock_timeout_ms` waits at most that long on a lock (the claim sessions); the settings are undone
before the connection goes back to the pool, whose reset keeps session settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from paymanager.db.pool import Pool
from paymanager.jobs._store import end_claim_session, start_claim_session

BROKEN = (asyncpg.InterfaceError, asyncpg.exceptions.ConnectionDoesNotExistError, OSError, TimeoutError)


class PinnedConnection:
    def __init__(
        self, pool: Pool, *, generic_plans: bool = False, lock_timeout_ms: int | None = None
    ) -> None:
        self._pool = pool
        self._generic_plans = generic_plans
        self._lock_timeout_ms = lock_timeout_ms
        self._conn: Any = None

    async def _acquire(self) -> Any:
        conn = await self._pool.acquire()
        if self._generic_plans:
            try:
                await start_claim_session(conn, lock_timeout_ms=self._lock_timeout_ms)
            except BaseException:
                conn.terminate()
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)
                raise
        return conn

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        if self._conn is None:
            self._conn = await self._acquire()
        try:
            rows: list[asyncpg.Record] = await self._conn.fetch(query, *args)
        except (*BROKEN, asyncio.CancelledError):
            # Interrupted mid-statement, the connection's protocol state is unknown: never reuse it.
            await self._drop(terminate=True)
            raise
        return rows

    async def _drop(self, *, terminate: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if terminate:
            conn.terminate()
        elif self._generic_plans:
            try:
                await end_claim_session(conn)
            except Exception:
                # A connection that cannot take the setting back must not serve anyone else.
                conn.terminate()
        with contextlib.suppress(Exception):
            await self._pool.release(conn)

    async def close(self) -> None:
        await self._drop(terminate=False)
