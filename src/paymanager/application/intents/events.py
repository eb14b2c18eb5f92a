"""Intent events: NOTIFY inside the transaction that changes the status, Redis after it commits.

PostgreSQL NOTIFY is transactional, so an api replica's SSE stream never sees a status that was
rolled back. Redis pub/sub (when `REDIS_URL` is set) fans out to other services on topic
`intent.{id}`; it is published after the commit, so a crash between the two can lose a Redis
message but never announce a change that did not happen. Subscribers re-read the intent when in doubt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import orjson

from paymanager.application.intents.store import Intent, IntentStore
from paymanager.db.pool import Conn

# An event as it travels: a JSON object (NOTIFY payload, Redis message, SSE data).
Event = dict[str, object]

# One NOTIFY channel for every intent: a replica LISTENs once and routes by the payload's intent id.
NOTIFY_CHANNEL = "paymanager_intent"


def topic(intent_id: str) -> str:
    return f"intent.{intent_id}"


class EventPublisher(Protocol):
    async def publish(self, topic: str, payload: Event) -> None: ...

    async def publish_many(self, messages: list[tuple[str, Event]]) -> None:
        """Publish (topic, payload) pairs in order, in one round trip where the transport allows."""
        ...


class NoPublisher:
    """Used when `REDIS_URL` is unset: NOTIFY alone carries the events."""

    async def publish(self, topic: str, payload: Event) -> None:
        del topic, payload

    async def publish_many(self, messages: list[tuple[str, Event]]) -> None:
        del messages


@dataclass(slots=True)
class Pending:
    """What one API transaction announces. `published` go to Redis after the commit; `notified` are
    also NOTIFYed after the commit (`run_idempotent` hands them to `Payments.notices`, so the commit
    does not take PostgreSQL's NOTIFY lock: db/notices.py), and so are the wake-ups of the job
    queues in `woken`, which the transaction enqueued on without a NOTIFY."""

    published: list[Event] = field(default_factory=list)
    notified: list[Event] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)

    def clear(self) -> None:
        self.published.clear()
        self.notified.clear()
        self.woken.clear()


def event_payload(intent: Intent) -> Event:
    """The event of one status change: enough to act on without reading the intent again (a manual
    intent's also says what its capture posted)."""
    payload: Event = {
        "type": f"intent.{intent.status.value}",
        "intent_id": str(intent.id),
        "status": intent.status.value,
        "version": intent.version,
        "amount": intent.amount,
        "fee": intent.fee,
        "currency": intent.currency,
        "channel": intent.channel,
        "at": intent.updated_at.isoformat(),
    }
    if intent.manual:
        payload |= {
            "capture_method": intent.capture_method.value,
            "amount_captured": intent.amount_captured,
            "fee_captured": intent.fee_captured,
        }
    return payload


def notify_text(payload: Event) -> str:
    """The NOTIFY payload of an event, for a statement that sends it itself."""
    return orjson.dumps(payload).decode()


async def notify(conn: Conn, payload: Event) -> None:
    """NOTIFY on the caller's transaction: delivered only if it commits."""
    await IntentStore(conn).notify(channel=NOTIFY_CHANNEL, text=notify_text(payload))
