"""The merchant is told how a session ended: `session.completed`, `.failed`, `.expired`, `.cancelled`.

`SessionNotifier.emit` is the ONE function every end of a session calls, on the connection of the
change itself, so the notice commits or rolls back with it. It writes a `checkout_session_event` row
(once per session and type: the table's unique key) and then hands the event to each `delivery`
given at construction, on the same connection.

Merchant webhooks: the row's insert is announced by a trigger (migration 0801) to the service's
endpoints subscribed to its type, through the same `webhook_enqueue` as intent and refund changes,
so each session event gets one signed delivery per endpoint with retries and dead letters. The
`deliveries` hook stays for in-process consumers of the event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from paymanager.application.ids import new_id
from paymanager.application.sessions.store import Leg, Session, SessionEvent, SessionStore
from paymanager.application.sessions.views import session_view
from paymanager.db.pool import Conn
from paymanager.domain.sessions import SessionStatus

EventType = Literal["session.completed", "session.failed", "session.expired", "session.cancelled"]
# Hands one new event to a delivery mechanism, inside the transaction that wrote it.
EventDelivery = Callable[[Conn, SessionEvent], Awaitable[None]]

EVENT_OF_STATUS: dict[SessionStatus, EventType] = {
    SessionStatus.COMPLETED: "session.completed",
    SessionStatus.FAILED: "session.failed",
    SessionStatus.EXPIRED: "session.expired",
    SessionStatus.CANCELLED: "session.cancelled",
}


class SessionNotifier:
    """Writes each end of a session as an event row and hands it to the deliveries."""

    def __init__(self, deliveries: Sequence[EventDelivery] = ()) -> None:
        self._deliveries = tuple(deliveries)

    async def emit(self, conn: Conn, session: Session, legs: list[Leg]) -> SessionEvent | None:
        """The event of `session`'s terminal status, written once; None if it was written before."""
        type_ = EVENT_OF_STATUS[session.status]
        event_id = new_id()
        payload: dict[str, object] = {"id": str(event_id), "type": type_, "data": session_view(session, legs)}
        now = session.updated_at
        written = await SessionStore(conn).insert_event(
            event_id=event_id, session=session, type_=type_, payload=payload, now=now
        )
        if not written:
            return None
        event = SessionEvent(event_id, session.id, session.service_id, type_, payload, now)
        for deliver in self._deliveries:
            await deliver(conn, event)
        return event
