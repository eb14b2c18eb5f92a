"""The steps the manual-capture tests take on an in-process API: funded accounts, manual intents
confirmed into `requires_capture`, and the balances a capture moves."""

from __future__ import annotations

import uuid
from typing import Any

from paymanager.application.context import Payments
from paymanager.application.intents.settle import settle
from tests.support.signed_client import SignedClient


async def settle_now(payments: Payments, intent_id: str) -> None:
    """What the outbox worker's settlement job does, run here."""
    async with payments.pool.acquire() as conn, conn.transaction():
        await settle(payments, conn, uuid.UUID(intent_id), settled_by="test")


async def funded_payer(
    payments: Payments, admin: SignedClient, client: SignedClient, amount: int = 10_000
) -> str:
    """A user account of `client` holding `amount` (settled)."""
    payer = await client.open_account()
    funding = await admin.fund(payer, amount)
    await settle_now(payments, str(funding["id"]))
    return payer


def intent_body(
    channel: str, payer: str, payee: str, amount: int, *, capture_method: str = "manual"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "channel": channel, "amount": amount, "currency": "THB", "payer_account_id": payer,
        "payee_account_id": payee, "capture_method": capture_method,
    }  # fmt: skip
    if channel == "merchant-invoice":
        body["expires_in_sec"] = 3_600
    return body


async def confirmed_manual(
    client: SignedClient, payer: str, payee: str, amount: int, *, channel: str = "internal-p2p"
) -> dict[str, Any]:
    """A manual intent of `client`, confirmed: its view (status requires_capture)."""
    created = await client.post("/intents", intent_body(channel, payer, payee, amount))
    assert created.status_code == 201, created.text
    confirmed = await client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    view: dict[str, Any] = confirmed.json()
    return view


async def posted(client: SignedClient, account_id: str) -> int:
    return int((await client.balance(account_id))["posted"])


async def balance_figures(client: SignedClient, account_id: str) -> dict[str, int]:
    """The account's posted, pending and available balance."""
    shown = await client.balance(account_id)
    return {key: int(shown[key]) for key in ("posted", "pending", "available")}
