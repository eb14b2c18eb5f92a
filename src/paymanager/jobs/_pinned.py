"""A pool connection held for the life of a hot loop (claiming, completing).

Borrowing per statement costs a round trip each time: asyncpg resets a connection (UNLISTEN, RESET
ALL, ...) when it goes back to the pool. The claim and completion loops run thousands of statements a
second, so each keeps one connection; a connection that breaks is dropped and replaced on next use.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from paymanager.db.pool import Pool

BROKEN = (asyncpg.InterfaceError, asyncpg.exceptions.ConnectionDoesNotExistError, OSError, TimeoutError)


class PinnedConnection:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._conn: Any = None

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        if self._conn is None:
            self._conn = await self._pool.acquire()
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
        with contextlib.suppress(Exception):
            await self._pool.release(conn)

    async def close(self) -> None:
        await self._drop(terminate=False)
