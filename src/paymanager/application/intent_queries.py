"""Reading intents: one intent as the caller may see it, lists with cursor pagination, the API view."""

from __future__ import annotations

import uuid
from typing import Any

from paymanager.application.services import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.channels import ChannelName
from paymanager.domain.errors import NotFoundError
from paymanager.domain.intents import IntentStatus

Q = load_queries("paymanager.application", "intents.sql")

LIST_LIMIT_MAX = 100


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def intent_view(row: Any) -> dict[str, Any]:
    """The API's representation of an intent."""
    awaiting = None
    if row["status"] == IntentStatus.CONFIRMED and row["channel"] == ChannelName.IPPS_TRANSFER:
        awaiting = "psp"
    elif row["status"] == IntentStatus.CONFIRMED:
        awaiting = "settlement"
    return {
        "id": str(row["id"]),
        "channel": row["channel"],
        "status": row["status"],
        "awaiting": awaiting,
        "amount": row["amount"],
        "fee": row["fee"],
        "total": row["amount"] + row["fee"],
        "currency": row["currency"],
        "payer_account_id": str(row["payer_account_id"]),
        "payee_account_id": str(row["payee_account_id"]),
        "description": row["description"],
        "metadata": row["metadata"],
        "version": row["version"],
        "failure_reason": row["failure_reason"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
        "expires_at": _iso(row["expires_at"]),
        "confirmed_at": _iso(row["confirmed_at"]),
        "settle_deadline_at": _iso(row["settle_deadline_at"]),
        "finished_at": _iso(row["finished_at"]),
    }


def visible(row: Any, caller: ServiceIdentity | None) -> bool:
    return row is not None and (caller is None or caller.is_admin or row["service_id"] == caller.id)


async def get_intent(conn: Conn, caller: ServiceIdentity, intent_id: uuid.UUID, *, lock: bool = False) -> Any:
    """The intent, if the caller created it (or is an admin); `lock` takes its row lock."""
    row = await conn.fetchrow(Q["intent_lock" if lock else "intent_get"], intent_id)
    check_visible(row, caller, intent_id)
    return row


def check_visible(row: Any, caller: ServiceIdentity, intent_id: uuid.UUID) -> None:
    """`NotFoundError` unless the intent exists and the caller may see it (another service's intent
    is answered as unknown, so its existence does not leak)."""
    if not visible(row, caller):
        raise NotFoundError("no such intent", {"intent_id": str(intent_id)})


async def list_intents(
    conn: Conn,
    caller: ServiceIdentity,
    *,
    status: str | None,
    channel: str | None,
    account_id: uuid.UUID | None,
    starting_after: uuid.UUID | None,
    limit: int,
) -> tuple[list[Any], bool]:
    """Newest first; admins see every service's intents. Returns the page and whether more follow."""
    assert 1 <= limit <= LIST_LIMIT_MAX
    service = None if caller.is_admin else caller.id
    rows = await conn.fetch(Q["intent_list"], service, status, channel, account_id, starting_after, limit + 1)
    return list(rows[:limit]), len(rows) > limit
