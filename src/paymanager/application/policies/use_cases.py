"""Policies: admins set limits per channel (and optionally per service); intents are checked against them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, time

from paymanager.application.accounts.store import AccountStore
from paymanager.application.ids import new_id
from paymanager.application.intents.store import IntentStore
from paymanager.application.policies.store import PolicyStore, StoredPolicy
from paymanager.application.services.store import ServiceStore
from paymanager.db.pool import Conn
from paymanager.domain import policies as rules
from paymanager.domain.channels import ChannelRegistry
from paymanager.domain.errors import InvalidInputError, NotFoundError
from paymanager.domain.money import Money, currency

POLICIES_LIMIT = 1_000


@dataclass(frozen=True, slots=True)
class PolicyInput:
    channel: str
    service_id: str | None
    min_amount: int | None
    max_amount: int | None
    daily_volume_per_account: int | None
    currencies: list[str] | None


def policy_view(policy: StoredPolicy) -> dict[str, object]:
    return {
        "id": str(policy.id),
        "channel": policy.channel,
        "service_id": policy.service_id,
        "min_amount": policy.min_amount,
        "max_amount": policy.max_amount,
        "daily_volume_per_account": policy.daily_volume_per_account,
        "currencies": policy.currencies,
        "created_at": policy.created_at.isoformat(),
        "updated_at": policy.updated_at.isoformat(),
    }


async def put_policy(
    conn: Conn, channels: ChannelRegistry, given: PolicyInput, now: datetime
) -> StoredPolicy:
    """Create or replace the policy of (channel, service)."""
    channels.get(given.channel)
    for code in given.currencies or []:
        currency(code)
    if given.min_amount is not None and given.max_amount is not None and given.min_amount > given.max_amount:
        raise InvalidInputError(
            "min_amount is larger than max_amount",
            {"min_amount": given.min_amount, "max_amount": given.max_amount},
        )
    if given.service_id is not None and not await ServiceStore(conn).exists(service_id=given.service_id):
        raise NotFoundError("no such service", {"service_id": given.service_id})
    return await PolicyStore(conn).upsert(
        policy_id=new_id(),
        channel=given.channel,
        service_id=given.service_id,
        min_amount=given.min_amount,
        max_amount=given.max_amount,
        daily_volume_per_account=given.daily_volume_per_account,
        currencies=sorted(set(given.currencies)) if given.currencies else None,
        now=now,
    )


async def list_policies(conn: Conn) -> list[StoredPolicy]:
    return await PolicyStore(conn).page(limit=POLICIES_LIMIT)


async def get_policy(conn: Conn, policy_id: uuid.UUID) -> StoredPolicy:
    found = await PolicyStore(conn).get(policy_id=policy_id)
    if found is None:
        raise NotFoundError("no such policy", {"policy_id": str(policy_id)})
    return found


async def delete_policy(conn: Conn, policy_id: uuid.UUID) -> None:
    if not await PolicyStore(conn).delete(policy_id=policy_id):
        raise NotFoundError("no such policy", {"policy_id": str(policy_id)})


async def enforce(
    conn: Conn, channel: str, service_id: str, payer_account_id: uuid.UUID, amount: Money, now: datetime
) -> None:
    """Raise `PolicyViolationError` naming the first refusing rule; nothing when no policy applies."""
    matching = await PolicyStore(conn).matching(channel=channel, service_id=service_id)
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
        await AccountStore(conn).lock(account_id=payer_account_id)
        day_start = datetime.combine(now.date(), time.min, tzinfo=now.tzinfo)
        used = await IntentStore(conn).daily_volume(
            payer_account_id=payer_account_id, channel=channel, since=day_start
        )
    rules.check_all(matching, amount, used)
