"""Cancel an intent: before confirm it simply ends; after confirm its holds are voided first."""

from __future__ import annotations

import uuid

from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.intents.queries import get_intent
from paymanager.application.intents.settle import finish
from paymanager.application.intents.store import Intent
from paymanager.application.psp.payout import PAYOUT_CHANNELS
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.errors import InvalidTransitionError
from paymanager.domain.intents import IntentStatus

CANCELLED_BY_CALLER = "cancelled by the caller"


async def cancel_intent(
    payments: Payments,
    conn: Conn,
    caller: ServiceIdentity,
    intent_id: uuid.UUID,
    pending: list[events.Event],
) -> Intent:
    """Under the intent's row lock, so a settlement running at the same moment either wins (and the
    cancel answers 409 invalid_transition) or finds the intent cancelled and does nothing."""
    row = await get_intent(conn, caller, intent_id, lock=True)
    if row.status is IntentStatus.CONFIRMED and row.channel in PAYOUT_CHANNELS:
        # The PSP may be paying it out this very moment: only the PSP's answer (or an operator's
        # manual-review resolution) may end a confirmed payout.
        raise InvalidTransitionError(
            "a confirmed payout is in the PSP's hands and cannot be cancelled",
            {"from": row.status.value, "to": IntentStatus.CANCELLED.value, "allowed": []},
        )
    updated = await finish(
        payments, conn, row, IntentStatus.CANCELLED, settled_by=f"api:{caller.id}", reason=CANCELLED_BY_CALLER
    )
    pending.append(events.event_payload(updated))
    return updated
