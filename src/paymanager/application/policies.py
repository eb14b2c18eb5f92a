"""Policies: admins set limits per channel (and optionally per service); intents are checked against them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from paymanager.application.ids import new_id
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain import policies as rules
from paymanager.domain.channels import ChannelRegistry
from paymanager.domain.errors import InvalidInputError, NotFoundError
from paymanager.domain.money import Money, currency

Q = load_queries("paymanager.application", "policies.sql")
QI = load_queries("paymanager.application", "intents.sql")
QA = load_queries("paymanager.application", "accounts.sql")
QS = load_queries("paymanager.application", "services.sql")

POLICIES_LIMIT = 1_000


@dataclass(frozen=True, slots=True)
class PolicyInput:
    channel: str
    service_id: str | None
    min_amount: int | None
    max_amount: int | None
    daily_volume_per_account: int | None
    currencies: list[str] | None


def policy_view(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "channel": row["channel"],
        "service_id": row["service_id"],
        "min_amount": row["min_amount"],
        "max_amount": row["max_amount"],
        "daily_volume_per_account": row["daily_volume_per_account"],
        "currencies": row["currencies"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
    }


def policy_of(row: Any) -> rules.Policy:
    """A policy from its row, or from the row as JSON (`to_jsonb(policy)`)."""
    return rules.Policy(
        id=str(row["id"]),
        channel=row["channel"],
        service_id=row["service_id"],
        min_amount=row["min_amount"],
        max_amount=row["max_amount"],
        daily_volume_per_account=row["daily_volume_per_account"],
        currencies=frozenset(row["currencies"]) if row["currencies"] is not None else None,
    )


async def put_policy(conn: Conn, channels: ChannelRegistry, given: PolicyInput, now: datetime) -> Any:
    """Create or replace the policy of (channel, service)."""
    channels.get(given.channel)
    for code in given.currencies or []:
        currency(code)
    if given.min_amount is not None and given.max_amount is not None and given.min_amount > given.max_amount:
        raise InvalidInputError(
            "min_amount is larger than max_amount",
            {"min_amount": given.min_amount, "max_amount": given.max_amount},
        )
    if given.service_id is not None and await conn.fetchval(QS["service_exists"], given.service_id) is None:
        raise NotFoundError("no such service", {"service_id": given.service_id})
    return await conn.fetchrow(
        Q["policy_upsert"],
        new_id(),
        given.channel,
        given.service_id,
        given.min_amount,
        given.max_amount,
        given.daily_volume_per_account,
        sorted(set(given.currencies)) if given.currencies else None,
        now,
    )


async def list_policies(conn: Conn) -> list[Any]:
    return list(await conn.fetch(Q["policy_list"], POLICIES_LIMIT))


async def get_policy(conn: Conn, policy_id: uuid.UUID) -> Any:
    row = await conn.fetchrow(Q["policy_get"], policy_id)
    if row is None:
        raise NotFoundError("no such policy", {"policy_id": str(policy_id)})
    return row


async def delete_policy(conn: Conn, policy_id: uuid.UUID) -> None:
    if await conn.fetchval(Q["policy_delete"], policy_id) is None:
        raise NotFoundError("no such policy", {"policy_id": str(policy_id)})


async def enforce(
    conn: Conn, channel: str, service_id: str, payer_account_id: uuid.UUID, amount: Money, now: datetime
) -> None:
    """Raise `PolicyViolationError` naming the first refusing rule; nothing when no policy applies."""
    matching = [policy_of(row) for row in await conn.fetch(Q["policy_matching"], channel, service_id)]
    await enforce_matching(conn, matching, channel, payer_account_id, amount, now)


async def enforce_matching(
    conn: Conn,
    matching: list[rules.Policy],
    channel: str,
    payer_account_id: uuid.UUID,
    amount: Money,
    now: datetime,
) -> None:
    """`enforce` with the policies that apply already read.

    The daily volume is summed under a lock on the payer account, so two concurrent intents cannot
    both fit under a limit that only one of them fits.
    """
    if not matching:
        return
    used = 0
    if rules.needs_daily_volume(matching):
        await conn.execute(QA["account_lock"], payer_account_id)
        day_start = datetime.combine(now.date(), time.min, tzinfo=now.tzinfo)
        used = await conn.fetchval(QI["intent_daily_volume"], payer_account_id, channel, day_start)
    rules.check_all(matching, amount, used)
