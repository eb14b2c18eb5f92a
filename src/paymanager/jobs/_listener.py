"""The worker's LISTEN connection, checked and re-established when it dies.

A LISTEN connection that dies silently would leave a worker on its slow polling fallback; this one
notices (asyncpg's termination callback, and a ping every `check_interval_s` for half-open TCP),
reconnects with capped backoff, and calls `on_reconnect` so the worker polls once to cover the gap.

An idle worker also runs the claim a NOTIFY prompts on this connection (`fetch`): its backend has
just woken to deliver the notification, where a pooled connection's backend has slept since the last
job, which shortens the enqueue-to-start latency (docs/BENCHMARKS.md, "Figures behind the job engine's
code"). One statement runs on it at a
time (the claim or the ping); a claim finding it busy or down goes to a pooled connection instead.
While a statement runs here, PostgreSQL holds this backend's notifications back until it returns: a
claim waiting on a lock (a migration's ALTER TABLE) holds them at most the session's lock_timeout
(WorkerOptions.claim_lock_timeout_ms), after which the claim fails and is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg

from paymanager.db.pool import connect
from paymanager.jobs._pinned import BROKEN
from paymanager.jobs._queries import Q
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.listener")

RECONNECT_DELAY_MS_MIN = 50
RECONNECT_DELAY_MS_MAX = 5_000
PING_TIMEOUT_S = 5.0


class Listener:
    def __init__(
        self,
        dsn: str,
        handlers: dict[str, Callable[[str], None]],
        on_reconnect: Callable[[], None],
        check_interval_s: float,
        application_name: str = "paymanager:job-listener",
        lock_timeout_ms: int | None = None,
    ) -> None:
        self._dsn = dsn
        self._lock_timeout_ms = lock_timeout_ms
        self._handlers = handlers
        self._on_reconnect = on_reconnect
        self._check_interval_s = check_interval_s
        self._application_name = application_name
        self._conn: Any = None
        self._lost = asyncio.Event()
        # Held by the statement running on the connection (a claim or the ping).
        self._busy = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0
        self.backend_pid: int | None = None

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.create_task(self._watch(), name="job-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close()

    async def _connect(self) -> None:
        conn = await connect(self._dsn, application_name=self._application_name)
        try:
            # Claims run here too: plan them as the worker's pinned connections do (generic, by index).
            await conn.execute(Q["job_session_generic_plans"])
            if self._lock_timeout_ms is not None:
                await conn.execute(Q["job_session_lock_timeout"], self._lock_timeout_ms)
            for channel, handler in self._handlers.items():
                await conn.add_listener(channel, self._callback(handler))
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(lambda _conn: self._lost.set())
        self._conn = conn
        self.backend_pid = conn.get_server_pid()
        self._lost.clear()

    @staticmethod
    def _callback(handler: Callable[[str], None]) -> Callable[..., None]:
        def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            handler(payload)

        return on_notify

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=1)
            if not conn.is_closed():
                conn.terminate()

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), timeout=self._check_interval_s)
            if not self._lost.is_set() and await self._alive():
                continue
            log.warning("job listener connection lost; reconnecting")
            await self._close()
            await self._reconnect()

    def can_fetch(self) -> bool:
        """True while the connection is up and nothing runs on it."""
        return self._conn is not None and not self._lost.is_set() and not self._busy.locked()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Run one statement on the LISTEN connection (see the module's docstring)."""
        async with self._busy:
            conn = self._conn
            if conn is None or self._lost.is_set():
                raise asyncpg.InterfaceError("the job listener's connection is down")
            try:
                rows: list[asyncpg.Record] = await conn.fetch(query, *args)
            except (*BROKEN, asyncio.CancelledError):
                # Interrupted mid-statement, the protocol's state is unknown: reconnect.
                self._lost.set()
                raise
            return rows

    async def _alive(self) -> bool:
        async def ping() -> None:
            async with self._busy:
                await self._conn.fetchval(Q["job_listener_ping"])

        try:
            await asyncio.wait_for(ping(), timeout=PING_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError, AttributeError):
            return False
        return True

    async def _reconnect(self) -> None:
        delay_ms = RECONNECT_DELAY_MS_MIN
        while True:
            try:
                await self._connect()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                log.warning("job listener reconnect failed", error=str(exc), retry_ms=delay_ms)
                await asyncio.sleep(delay_ms / 1000)
                delay_ms = min(delay_ms * 2, RECONNECT_DELAY_MS_MAX)
                continue
            self.reconnects += 1
            log.info("job listener reconnected", reconnects=self.reconnects)
            self._on_reconnect()
            return
