"""Routes intent events from PostgreSQL NOTIFY to the SSE streams of an api process.

The hub subscribes once to the process's LISTEN connection (`Database.listener`), not once per
stream. That connection is re-established when it dies; streams cover the gap by re-reading their
intent (see `routes_intents`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

import orjson

from paymanager.application.intents.events import NOTIFY_CHANNEL, Event
from paymanager.db.database import Database
from paymanager.db.listener import Subscription
from paymanager.logging import get_logger

log = get_logger("paymanager.events")

QUEUE_EVENTS_MAX = 100


class IntentEventHub:
    name = "intent-event-hub"

    def __init__(self, database: Database) -> None:
        self._listener = database.listener
        self._subscription = Subscription({NOTIFY_CHANNEL: self._on_notify})
        self._subscribers: dict[str, set[asyncio.Queue[Event]]] = defaultdict(set)

    async def start(self) -> None:
        await self._listener.subscribe(self._subscription)

    def _on_notify(self, payload: str) -> None:
        event: Event = orjson.loads(payload)
        for queue in list(self._subscribers.get(str(event.get("intent_id", "")), ())):
            # A stream that stopped reading loses events rather than growing without bound; it
            # re-reads its intent on the next quiet interval.
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    def subscribe(self, intent_id: str) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=QUEUE_EVENTS_MAX)
        self._subscribers[intent_id].add(queue)
        return queue

    def unsubscribe(self, intent_id: str, queue: asyncio.Queue[Event]) -> None:
        subscribers = self._subscribers.get(intent_id)
        if subscribers is not None:
            subscribers.discard(queue)
            if not subscribers:
                del self._subscribers[intent_id]

    async def stop(self, timeout_s: float) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._listener.unsubscribe(self._subscription), timeout=timeout_s)
