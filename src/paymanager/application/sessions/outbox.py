"""The actions of checkout sessions as outbox jobs: their kinds, queue, schedule and enqueueing.

Each action is a job written in the transaction of the session change that needs it, with a unique
key per (action, leg), so a change seen twice never enqueues an action twice while the first is
unfinished. Retries follow the source documents' schedule (1 min, 5 min, 30 min, 2 h, 12 h, 24 h,
then 24 h) up to OUTBOX_MAX_ATTEMPTS, then the job is dead (listed and replayed with `paymanager jobs`).
"""

from __future__ import annotations

import uuid

from paymanager.db.pool import Conn
from paymanager.jobs import OUTBOX_SCHEDULE, enqueue

SESSION_QUEUE = "session-actions"
CLEANUP_QUEUE = "session-cleanup"

# The source documents' action names, kept as the job kinds so a dead letter reads as they do.
DEBIT_GIFT = "DEBIT_GIFT"
AUTHORIZE_PSP = "AUTHORIZE_PSP"
CAPTURE_PSP = "CAPTURE_PSP"
CANCEL_GIFT = "CANCEL_GIFT"
RELEASE_HOLD = "RELEASE_HOLD"
ACTIONS = (DEBIT_GIFT, AUTHORIZE_PSP, CAPTURE_PSP, CANCEL_GIFT, RELEASE_HOLD)
CLEANUP_KIND = "session.cleanup"

# A provider call that hangs is cut by the driver's own timeout; this bounds the whole action.
ACTION_TIMEOUT_MS = 120_000


def action_unique_key(kind: str, leg_id: uuid.UUID) -> str:
    return f"{kind}:{leg_id}"


async def enqueue_action(conn: Conn, kind: str, leg_id: uuid.UUID, *, max_attempts: int) -> bool:
    """Enqueue `kind` for a leg on `conn`; False when an unfinished one is already there."""
    assert kind in ACTIONS, f"unknown session action {kind}"
    result = await enqueue(
        conn,
        kind,
        {"leg_id": str(leg_id)},
        queue=SESSION_QUEUE,
        max_attempts=max_attempts,
        backoff=OUTBOX_SCHEDULE,
        unique_key=action_unique_key(kind, leg_id),
        timeout_ms=ACTION_TIMEOUT_MS,
    )
    return bool(result.created)
