"""Reading intents: one intent as the caller may see it, lists with cursor pagination, the API view."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

from paymanager.application.intents.store import Intent, IntentStore
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS
from paymanager.domain.errors import NotFoundError
from paymanager.domain.intents import CaptureMethod, IntentStatus

LIST_LIMIT_MAX = 100


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def intent_view(intent: Intent) -> dict[str, object]:
    """The API's representation of an intent."""
    awaiting = None
    if intent.status is IntentStatus.CONFIRMED and intent.channel in PAYOUT_CHANNEL_PSPS:
        awaiting = "psp"
    elif intent.status is IntentStatus.CONFIRMED:
        awaiting = "settlement"
    elif intent.status is IntentStatus.REQUIRES_CAPTURE:
        awaiting = "capture"
    return {
        "id": str(intent.id),
        "channel": intent.channel,
        "status": intent.status.value,
        "awaiting": awaiting,
        "amount": intent.amount,
        "fee": intent.fee,
        "total": intent.amount + intent.fee,
        "currency": intent.currency,
        "payer_account_id": str(intent.payer_account_id),
        "payee_account_id": str(intent.payee_account_id),
        "description": intent.description,
        "metadata": intent.metadata,
        "version": intent.version,
        "failure_reason": intent.failure_reason,
        "created_at": _iso(intent.created_at),
        "updated_at": _iso(intent.updated_at),
        "expires_at": _iso(intent.expires_at),
        "confirmed_at": _iso(intent.confirmed_at),
        "settle_deadline_at": _iso(intent.settle_deadline_at),
        "finished_at": _iso(intent.finished_at),
        **capture_view(intent),
    }


# Shown since manual capture came; a response stored before that had none of them (see `legacy_view`).
CAPTURE_FIELDS = ("capture_method", "amount_captured", "fee_captured")


def capture_view(intent: Intent) -> dict[str, object]:
    return {
        "capture_method": intent.capture_method.value,
        "amount_captured": intent.amount_captured,
        "fee_captured": intent.fee_captured,
    }


def legacy_view(body: dict[str, object]) -> dict[str, object] | None:
    """An automatic intent's view as responses showed it before manual capture existed (without the
    capture fields), so an Idempotency-Key stored then still replays its first response; None for a
    manual intent, which has no such past."""
    if body.get("capture_method") != CaptureMethod.AUTOMATIC.value:
        return None
    return {key: value for key, value in body.items() if key not in CAPTURE_FIELDS}


def view_at(intent: Intent, version: int) -> Intent | None:
    """The intent as it was at `version`, rebuilt from its row now; None when the row cannot tell.

    Only status changes move the version, each setting its own columns (intents.sql): created (1)
    has none of them; a confirm (2) sets `confirmed_at` (its `updated_at`), `settle_deadline_at` and
    `hold_id`; an end sets `finished_at` (its `updated_at`) and `failure_reason` (a capture also
    `amount_captured` and `fee_captured`). Every other column
    is written once, at create. A replayed Idempotency-Key answers from this (the body's digest,
    kept with the key, checks the rebuilt body)."""
    if version == intent.version:
        return intent
    if version == 1:
        return dataclasses.replace(
            intent, status=IntentStatus.CREATED, version=1, updated_at=intent.created_at, hold_id=None,
            confirmed_at=None, settle_deadline_at=None, finished_at=None, failure_reason=None,
            amount_captured=None, fee_captured=None,
        )  # fmt: skip
    if version == 2 and intent.version == 3 and intent.confirmed_at is not None:
        held = IntentStatus.REQUIRES_CAPTURE if intent.manual else IntentStatus.CONFIRMED
        return dataclasses.replace(
            intent, status=held, version=2, updated_at=intent.confirmed_at,
            finished_at=None, failure_reason=None, amount_captured=None, fee_captured=None,
        )  # fmt: skip
    return None


def visible(intent: Intent | None, caller: ServiceIdentity | None) -> bool:
    return intent is not None and (caller is None or caller.is_admin or intent.service_id == caller.id)


async def get_intent(
    conn: Conn, caller: ServiceIdentity, intent_id: uuid.UUID, *, lock: bool = False
) -> Intent:
    """The intent, if the caller created it (or is an admin); `lock` takes its row lock."""
    intent = await IntentStore(conn).get(intent_id=intent_id, lock=lock)
    return check_visible(intent, caller, intent_id)


def check_visible(intent: Intent | None, caller: ServiceIdentity, intent_id: uuid.UUID) -> Intent:
    """The intent; `NotFoundError` unless it exists and the caller may see it (another service's
    intent is answered as unknown, so its existence does not leak)."""
    if intent is None or not visible(intent, caller):
        raise NotFoundError("no such intent", {"intent_id": str(intent_id)})
    return intent


async def list_intents(
    conn: Conn,
    caller: ServiceIdentity,
    *,
    status: str | None,
    channel: str | None,
    account_id: uuid.UUID | None,
    starting_after: uuid.UUID | None,
    limit: int,
) -> tuple[list[Intent], bool]:
    """Newest first; admins see every service's intents. Returns the page and whether more follow."""
    assert 1 <= limit <= LIST_LIMIT_MAX
    service = None if caller.is_admin else caller.id
    intents = await IntentStore(conn).page(
        service_id=service, status=status, channel=channel, account_id=account_id, before=starting_after,
        limit=limit + 1,
    )  # fmt: skip
    return intents[:limit], len(intents) > limit
