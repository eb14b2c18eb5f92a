"""A confirm lost between the ledger's hold and its commit (the process died): on TigerBeetle the
hold stays, its id recorded in `ledger_hold`; on PostgreSQL it rolls back with the confirm."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from paymanager.adapters.secret_box import Secret
from paymanager.application.ids import transfer_id
from paymanager.application.intents import events
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.settle import settle
from paymanager.application.services.use_cases import ServiceIdentity

if TYPE_CHECKING:
    from tests.integration.payments.conftest import Api


async def funded_invoice(
    api: Api, *, funding: int, amount: int, expires_in_sec: int
) -> tuple[str, dict[str, Any]]:
    """A payer funded with `funding` and a created merchant invoice of `amount` it owes: (payer, invoice)."""
    payer = await api.client.open_account()
    merchant = await api.client.open_account(kind="merchant")
    funded = await api.admin.fund(payer, funding)
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(funded["id"]), settled_by="test")
    body = {
        "channel": "merchant-invoice", "amount": amount, "currency": "THB", "payer_account_id": payer,
        "payee_account_id": merchant, "expires_in_sec": expires_in_sec,
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    assert created.status_code == 201, created.text
    return payer, created.json()


async def confirm_then_roll_back(api: Api, intent_id: str) -> None:
    """The service's confirm of `intent_id`, its transaction rolled back instead of committed."""
    caller = ServiceIdentity(api.client.service_id, "shop", frozenset(), Secret(b"unused"))
    async with api.payments.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await confirm_intent(api.payments, conn, caller, uuid.UUID(intent_id), events.Pending())
        await transaction.rollback()


async def voided_legs(api: Api, intent_id: str) -> int:
    """How many void transfers the ledger holds for the hold recorded for `intent_id` (TigerBeetle)."""
    async with api.payments.pool.acquire() as conn:
        hold_id = await conn.fetchval("SELECT hold_id FROM ledger_hold WHERE intent_id = $1::uuid", intent_id)
    assert hold_id is not None, "a confirm on TigerBeetle records its hold id first"
    ids = [transfer_id(hold_id, f"void.{purpose}") for purpose in ("amount", "fee")]
    return len(await api.payments.ledger.lookup_transfers(ids))
