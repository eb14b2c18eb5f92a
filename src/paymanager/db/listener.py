"""The process's one LISTEN connection, watched and re-established when it dies.

Every user of NOTIFY in a process (the job worker's wake-ups, the SSE streams' intent events, job
event subscribers) subscribes here instead of opening a connection of its own, so a lost connection
is handled one way: noticed (asyncpg's termination callback, and a ping every check interval for a
half-open TCP connection), reconnected with capped backoff, its channels listened to again, and every
subscriber told (`on_reconnect`) so that it covers the notifications it missed (the worker polls,
a stream re-reads its intent).

The connection opens with the first subscription and closes with the last. One statement may run on
it at a time (`fetch`): the job worker runs the claim a NOTIFY prompts here, on a backend that has
just woken to deliver it. While a statement runs, PostgreSQL holds this backend's notifications
back until it returns, so such statements must be short and bounded by a lock timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from paymanager.logging import get_logger

log = get_logger("paymanager.db.listener")

RECONNECT_DELAY_MS_MIN = 50
RECONNECT_DELAY_MS_MAX = 5_000
CHECK_INTERVAL_S_DEFAULT = 5.0
PING_TIMEOUT_S = 5.0
# A statement interrupted on the connection leaves its protocol state unknown: reconnect.
BROKEN = (asyncpg.InterfaceError, asyncpg.exceptions.ConnectionDoesNotExistError, OSError, TimeoutError)

Connect = Callable[[], Awaitable[asyncpg.Connection]]
Setup = Callable[[asyncpg.Connection], Awaitable[None]]


@dataclass(eq=False)
class Subscription:
    """What one user listens to: its handlers by channel, what it sets on the session, and what it
    does after a reconnect. Handlers get the NOTIFY payload and run on the event loop; they must not
    block."""

    handlers: dict[str, Callable[[str], None]]
    on_reconnect: Callable[[], None] | None = None
    setup: Setup | None = None
    check_interval_s: float = CHECK_INTERVAL_S_DEFAULT
    channels: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.channels = frozenset(self.handlers)


class Listener:
    def __init__(self, connect: Connect) -> None:
        self._open = connect
        self._subscriptions: list[Subscription] = []
        self._conn: asyncpg.Connection | None = None
        self._listening: set[str] = set()
        self._lost = asyncio.Event()
        # Held by the statement running on the connection (a subscriber's fetch, the ping, a LISTEN).
        self._busy = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._subscribing = asyncio.Lock()
        self.reconnects = 0
        self.backend_pid: int | None = None

    @property
    def busy(self) -> asyncio.Lock:
        return self._busy

    async def subscribe(self, subscription: Subscription) -> Subscription:
        """Listen to the subscription's channels (connecting first if nobody listens yet)."""
        self._subscriptions.append(subscription)
        try:
            async with self._subscribing:  # two first subscribers must not open two connections
                if self._task is None:
                    await self._connect()
                    self._task = asyncio.create_task(self._watch(), name="listener")
                elif self._conn is not None and not self._lost.is_set():
                    if subscription.setup is not None:
                        async with self._busy:
                            await subscription.setup(self._conn)
                    await self._listen()
                # Otherwise a reconnect is under way: it sets up and listens for every subscription.
        except BaseException:
            await self.unsubscribe(subscription)
            raise
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        """Stop delivering to `subscription`; the last one out closes the connection."""
        with contextlib.suppress(ValueError):
            self._subscriptions.remove(subscription)
        if not self._subscriptions:
            await self.close()

    async def close(self) -> None:
        """Drop every subscription and close the connection."""
        self._subscriptions.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close()

    def can_fetch(self) -> bool:
        """True while the connection is up and nothing runs on it."""
        return self._conn is not None and not self._lost.is_set() and not self._busy.locked()

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        """Run one statement on the LISTEN connection (see the module's docstring)."""
        async with self._busy:
            conn = self._conn
            if conn is None or self._lost.is_set():
                raise asyncpg.InterfaceError("the LISTEN connection is down")
            try:
                rows: list[asyncpg.Record] = await conn.fetch(query, *args)
            except (*BROKEN, asyncio.CancelledError):
                self._lost.set()
                raise
            return rows

    # --- the connection ----------------------------------------------------------------------------

    async def _connect(self) -> None:
        conn = await self._open()
        try:
            for subscription in list(self._subscriptions):
                if subscription.setup is not None:
                    await subscription.setup(conn)
            self._conn = conn
            self._listening = set()
            self._lost.clear()
            await self._listen()
        except BaseException:
            self._conn = None
            conn.terminate()
            raise
        conn.add_termination_listener(lambda _conn: self._lost.set())
        self.backend_pid = conn.get_server_pid()

    async def _listen(self) -> None:
        """LISTEN to every channel a subscription wants and the connection does not listen to yet."""
        conn = self._conn
        assert conn is not None
        wanted = set().union(*(s.channels for s in self._subscriptions)) if self._subscriptions else set()
        for channel in sorted(wanted - self._listening):
            async with self._busy:
                await conn.add_listener(channel, self._deliver)
            self._listening.add(channel)

    def _deliver(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        for subscription in list(self._subscriptions):
            handler = subscription.handlers.get(channel)
            if handler is not None:
                handler(str(payload))

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        self._listening = set()
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=1)
            if not conn.is_closed():
                conn.terminate()

    def _check_interval_s(self) -> float:
        return min((s.check_interval_s for s in self._subscriptions), default=CHECK_INTERVAL_S_DEFAULT)

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), timeout=self._check_interval_s())
            if not self._lost.is_set() and await self._alive():
                continue
            log.warning("LISTEN connection lost; reconnecting")
            await self._close()
            await self._reconnect()

    async def _alive(self) -> bool:
        async def ping() -> None:
            async with self._busy:
                assert self._conn is not None
                await self._conn.fetchval("SELECT 1")

        try:
            await asyncio.wait_for(ping(), timeout=PING_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError, AssertionError):
            return False
        return True

    async def _reconnect(self) -> None:
        delay_ms = RECONNECT_DELAY_MS_MIN
        while True:
            try:
                await self._connect()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                log.warning("LISTEN reconnect failed", error=str(exc), retry_ms=delay_ms)
                await asyncio.sleep(delay_ms / 1000)
                delay_ms = min(delay_ms * 2, RECONNECT_DELAY_MS_MAX)
                continue
            self.reconnects += 1
            log.info("LISTEN connection re-established", reconnects=self.reconnects)
            for subscription in list(self._subscriptions):
                if subscription.on_reconnect is not None:
                    subscription.on_reconnect()
            return
