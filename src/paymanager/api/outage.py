"""What the API does while PostgreSQL is unreachable: answer 503 with Retry-After, log one line when
the outage starts and one when it ends (not a traceback per request), and find out by itself when
the database is back."""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg

from paymanager.logging import get_logger

log = get_logger("paymanager.api")

# The errors that mean "the database cannot be reached right now", as opposed to a bug: refused or
# reset connections, a server starting up or shutting down, a pool that could not connect in time,
# a server out of connections, memory or disk (SQLSTATE class 53).
DATABASE_UNAVAILABLE = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.InsufficientResourcesError,
)
RETRY_AFTER_SEC = 2
PROBE_INTERVAL_SEC = 1.0
PROBE_TIMEOUT_SEC = 2.0


class DatabaseOutage:
    """The API's view of the database: up, or down since a moment, with a probe that ends the
    outage once a connection answers again."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._down_since: float | None = None
        self._probe: asyncio.Task[None] | None = None

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def observed(self, exc: BaseException) -> None:
        """A request met `exc`: the first such error of an outage logs it and starts the probe."""
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        log.error(
            "database unavailable: answering 503 until it is back", error=f"{type(exc).__name__}: {exc}"
        )
        self._probe = asyncio.get_running_loop().create_task(self._wait_until_up())

    async def _wait_until_up(self) -> None:
        while True:
            await asyncio.sleep(PROBE_INTERVAL_SEC)
            try:
                async with self._pool.acquire(timeout=PROBE_TIMEOUT_SEC) as conn:
                    await conn.fetchval("SELECT 1", timeout=PROBE_TIMEOUT_SEC)
            except DATABASE_UNAVAILABLE:
                continue
            except asyncpg.PostgresError:
                continue
            break
        assert self._down_since is not None
        log.info("database reachable again", outage_sec=round(time.monotonic() - self._down_since, 1))
        self._down_since = None
        self._probe = None

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
