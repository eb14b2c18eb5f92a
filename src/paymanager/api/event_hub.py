"""Routes intent events from PostgreSQL NOTIFY to the SSE streams of this api process.

One dedicated LISTEN connection per process (not one per stream). When it dies it is re-opened with
a growing delay; streams cover the gap by re-reading their intent (see `routes_intents`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

import asyncpg
import orjson

from paymanager.application.intents.events import NOTIFY_CHANNEL
from paymanager.db.pool import connect
from paymanager.logging import get_logger

log = get_logger("paymanager.events")

QUEUE_EVENTS_MAX = 100
RECONNECT_DELAY_MAX_S = 5.0


class IntentEventHub:
    name = "intent-event-hub"

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        self._subscribers: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self._reconnect: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        conn = await connect(self._dsn, application_name="paymanager:intent-events")
        try:
            await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
            conn.add_termination_listener(self._on_terminated)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn

    def _on_terminated(self, _: Any) -> None:
        if not self._stopping and (self._reconnect is None or self._reconnect.done()):
            log.warning("the intent events LISTEN connection died; reconnecting")
            self._reconnect = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        delay = 0.1
        while not self._stopping:
            try:
                await self._connect()
                log.info("intent events LISTEN connection re-established")
                return
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("intent events reconnect failed", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_S)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        event = orjson.loads(str(payload))
        for queue in list(self._subscribers.get(event.get("intent_id", ""), ())):
            # A stream that stopped reading loses events rather than growing without bound; it
            # re-reads its intent on the next quiet interval.
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    def subscribe(self, intent_id: str) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_EVENTS_MAX)
        self._subscribers[intent_id].add(queue)
        return queue

    def unsubscribe(self, intent_id: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        subscribers = self._subscribers.get(intent_id)
        if subscribers is not None:
            subscribers.discard(queue)
            if not subscribers:
                del self._subscribers[intent_id]

    async def stop(self, timeout_s: float) -> None:
        self._stopping = True
        if self._reconnect is not None:
            self._reconnect.cancel()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), timeout=timeout_s)
