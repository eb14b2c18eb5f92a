"""Quote and create an intent: channel, scope, accounts, currency and policies are checked here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from paymanager.application.context import Payments
from paymanager.application.ids import new_id
from paymanager.application.intents import events
from paymanager.application.intents.store import Intent, IntentStore, NewIntent, Party
from paymanager.application.policies import use_cases as policies
from paymanager.application.psp.payout import check_psp_served
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import FEE_SHARDS, AccountKind, Channel, Quote, SystemAccount
from paymanager.domain.errors import (
    CaptureMethodNotAllowedError,
    CurrencyMismatchError,
    InvalidInputError,
    NotFoundError,
)
from paymanager.domain.intents import CaptureMethod
from paymanager.domain.money import positive


@dataclass(frozen=True, slots=True)
class IntentRequest:
    channel: str
    amount: int
    currency: str
    payer_account_id: uuid.UUID | None = None
    payee_account_id: uuid.UUID | None = None
    description: str | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    expires_in_sec: int | None = None
    capture_method: CaptureMethod = CaptureMethod.AUTOMATIC


def quote(payments: Payments, caller: ServiceIdentity, channel_name: str, amount: int, code: str) -> Quote:
    channel = payments.channels.get(channel_name)
    channel.check_scope(caller.scopes)
    return channel.quote(positive(amount, code))


def manual_capture_channels(payments: Payments) -> list[str]:
    """The channels whose intents may be created with `capture_method=manual`."""
    return [channel.name.value for channel in payments.channels if channel.manual_capture]


def quote_view(q: Quote) -> dict[str, object]:
    return {
        "channel": q.channel.value,
        "currency": q.amount.currency,
        "amount": q.amount.amount,
        "fee": q.fee.amount,
        "total": q.total.amount,
    }


@dataclass(frozen=True, slots=True)
class _Party:
    id: uuid.UUID
    kind: AccountKind
    owner_service_id: str | None

    @property
    def checked(self) -> tuple[object, AccountKind]:
        return self.id, self.kind


def _party(
    payments: Payments,
    accounts: dict[uuid.UUID, Party],
    channel: Channel,
    side: str,
    given: uuid.UUID | None,
    system: SystemAccount | None,
    code: str,
) -> _Party | None:
    """The account on one side: the channel's system account, or the caller's choice checked to exist."""
    if system is not None:
        if given is not None:
            raise InvalidInputError(
                f"channel {channel.name.value} chooses the {side} itself; do not send {side}_account_id",
                {"channel": channel.name.value, "field": f"{side}_account_id"},
            )
        return _Party(payments.system_account(system, code), AccountKind.SYSTEM, None)
    if given is None:
        return None
    account = accounts.get(given)
    if account is None:
        raise NotFoundError(f"no such {side} account", {f"{side}_account_id": str(given)})
    if account.currency != code:
        raise CurrencyMismatchError(
            f"the {side} account holds {account.currency}, not {code}",
            {f"{side}_account_id": str(given), "account_currency": account.currency, "currency": code},
        )
    return _Party(account.id, account.kind, account.owner_service_id)


async def create_intent(
    payments: Payments,
    conn: Conn,
    caller: ServiceIdentity,
    request: IntentRequest,
    pending: list[events.Event],
) -> Intent:
    """Insert a `created` intent in the caller's transaction; its event goes into `pending`."""
    channel = payments.channels.get(request.channel)
    channel.check_scope(caller.scopes)
    check_psp_served(payments, channel.name.value)
    q = channel.quote(positive(request.amount, request.currency))
    code = request.currency
    if request.capture_method is CaptureMethod.MANUAL and not channel.manual_capture:
        raise CaptureMethodNotAllowedError(
            f"channel {channel.name.value} does not allow capture_method manual",
            {"channel": channel.name.value, "allowed": manual_capture_channels(payments)},
        )
    given = [i for i in (request.payer_account_id, request.payee_account_id) if i is not None]
    # Both accounts and the policies in one round trip.
    store = IntentStore(conn)
    found = await store.parties_and_policies(
        account_ids=given, channel=channel.name.value, service_id=caller.id
    )
    accounts, matching = found.accounts, found.policies
    payer = _party(payments, accounts, channel, "payer", request.payer_account_id, channel.payer_system, code)
    payee = _party(payments, accounts, channel, "payee", request.payee_account_id, channel.payee_system, code)
    channel.check_parties(
        payer.checked if payer and not channel.payer_system else None,
        payee.checked if payee and not channel.payee_system else None,
    )
    assert payer is not None
    assert payee is not None
    # The initiating side must be the caller's own account: every channel spends from the payer's
    # (system payers are guarded by scope instead). An invoice is the merchant's (the payee), and the
    # service that creates it confirms it too, so its payer must be the caller's as well: a service
    # must not be able to invoice, and so debit, another service's user.
    owned = (("payee", payee), ("payer", payer)) if channel.expires else (("payer", payer),)
    for side, party in owned:
        if party.kind is not AccountKind.SYSTEM and not (
            caller.is_admin or party.owner_service_id == caller.id
        ):
            raise NotFoundError(f"no such {side} account", {f"{side}_account_id": str(party.id)})
    now = payments.clock()
    await policies.enforce_matching(conn, matching, channel.name.value, payer.id, q.amount, now)
    expires_at = None
    if channel.expires:
        ttl = request.expires_in_sec or payments.settings.invoice_default_ttl_sec
        if not 1 <= ttl <= payments.settings.invoice_max_ttl_sec:
            raise InvalidInputError(
                f"expires_in_sec must be between 1 and {payments.settings.invoice_max_ttl_sec}",
                {"expires_in_sec": ttl},
            )
        expires_at = now + timedelta(seconds=ttl)
    intent_id = new_id()
    fee_account = None
    if q.fee.amount > 0:
        fee_account = payments.system_account(SystemAccount.FEES, code, intent_id.int % FEE_SHARDS)
    row = await store.insert(
        NewIntent(
            id=intent_id,
            service_id=caller.id,
            channel=channel.name.value,
            amount=q.amount.amount,
            fee=q.fee.amount,
            currency=code,
            payer_account_id=payer.id,
            payee_account_id=payee.id,
            fee_account_id=fee_account,
            description=request.description,
            metadata=request.metadata,
            now=now,
            expires_at=expires_at,
            capture_method=request.capture_method,
        )
    )
    # No NOTIFY: nothing can follow an intent over SSE before it exists. Redis subscribers (who may
    # listen to every intent) get the event after the commit.
    pending.append(events.event_payload(row))
    return row
