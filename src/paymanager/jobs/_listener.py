"""The worker's subscription to the process's LISTEN connection (`db.Listener`).

The connection itself (reconnects, health pings, the one statement at a time) belongs to the
process's `Database`; the worker subscribes to its wake-up channels there and is told after a
reconnect, so it polls once to cover the gap.

An idle worker also runs the claim a NOTIFY prompts on that connection (`fetch`): its backend has
just woken to deliver the notification, where a pooled connection's backend has slept since the last
job. One statement runs on it at a time (the claim or the ping); a claim finding it busy or down goes
to a pooled connection instead. While a statement runs there, PostgreSQL holds the backend's
notifications back until it returns: a claim waiting on a lock (a migration's ALTER TABLE) holds them
at most the session's lock_timeout (WorkerOptions.claim_lock_timeout_ms), after which the claim fails
and is retried.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from paymanager.db.database import Database
from paymanager.db.listener import Subscription
from paymanager.jobs._queries import Q


class Listener:
    def __init__(
        self,
        database: Database,
        handlers: dict[str, Callable[[str], None]],
        on_reconnect: Callable[[], None],
        check_interval_s: float,
        lock_timeout_ms: int | None = None,
    ) -> None:
        self._shared = database.listener
        self._lock_timeout_ms = lock_timeout_ms
        self._subscription = Subscription(
            handlers, on_reconnect=on_reconnect, setup=self._setup, check_interval_s=check_interval_s
        )
        # The lock held by the statement running on the connection (a claim or the ping).
        self._busy = self._shared.busy

    async def _setup(self, conn: asyncpg.Connection) -> None:
        # Claims run there too: plan them as the worker's pinned connections do (generic, by index).
        await conn.execute(Q["job_session_generic_plans"])
        if self._lock_timeout_ms is not None:
            await conn.execute(Q["job_session_lock_timeout"], self._lock_timeout_ms)

    async def start(self) -> None:
        await self._shared.subscribe(self._subscription)

    async def stop(self) -> None:
        await self._shared.unsubscribe(self._subscription)

    @property
    def reconnects(self) -> int:
        return self._shared.reconnects

    @property
    def backend_pid(self) -> int | None:
        return self._shared.backend_pid

    def can_fetch(self) -> bool:
        """True while the connection is up and nothing runs on it."""
        return self._shared.can_fetch()

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        """Run one statement on the LISTEN connection (see the module's docstring)."""
        return await self._shared.fetch(query, *args)
