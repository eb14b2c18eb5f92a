"""Review findings: the ledger resolved a hold but the intent's transaction did not commit.

With a ledger outside PostgreSQL (TigerBeetle) a post is not undone when the transaction that
records it rolls back (a lost lease, a crash before the commit). The tests reproduce that state on
the PostgreSQL ledger by posting the hold on a connection of its own, then check that whatever ends
the intent next (the settlement job past its deadline, the reconciler, a cancel) records the money
that moved instead of failing forever.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from paymanager.application import ledger_ops
from paymanager.application.reconcile import reconcile
from paymanager.application.settle_intent import settle
from tests.integration.payments.conftest import Api
from tests.integration.payments.test_reconcile_and_worker import _confirmed_p2p

AMOUNT = 1_000


async def _post_outside_the_intents_transaction(api: Api, intent_id: str) -> None:
    async with api.payments.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM intent WHERE id = $1", uuid.UUID(intent_id))
        assert await ledger_ops.resolve(api.payments.ledger, conn, row, post=True)


def _past_the_deadline(api: Api) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=api.payments.settings.intent_settle_deadline_sec + 1)


async def test_a_settlement_past_its_deadline_of_a_hold_already_posted_records_it_settled(api: Api) -> None:
    intent_id, _, payee = await _confirmed_p2p(api, amount=AMOUNT)
    await _post_outside_the_intents_transaction(api, intent_id)
    api.clock.now = _past_the_deadline(api)
    async with api.payments.pool.acquire() as conn, conn.transaction():
        updated = await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")
    assert updated is not None
    assert updated["status"] == "settled"
    api.clock.now = None
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
    assert (await api.client.balance(payee))["posted"] == AMOUNT
    async with api.payments.pool.acquire() as conn:
        outcome = await conn.fetchval(
            "SELECT outcome FROM settlement WHERE intent_id = $1", uuid.UUID(intent_id)
        )
    assert outcome == "posted"


async def test_the_reconciler_records_a_posted_hold_and_goes_on_to_the_other_intents(api: Api) -> None:
    posted_id, _, _ = await _confirmed_p2p(api, amount=AMOUNT)
    other_id, other_payer, _ = await _confirmed_p2p(api, amount=AMOUNT)
    await _post_outside_the_intents_transaction(api, posted_id)
    api.clock.now = _past_the_deadline(api)
    await reconcile(api.payments, batch_size=10, max_intents=100)
    api.clock.now = None
    assert (await api.client.get(f"/intents/{posted_id}")).json()["status"] == "settled"
    assert (await api.client.get(f"/intents/{other_id}")).json()["status"] == "failed"
    assert (await api.client.balance(other_payer))["available"] == 10_000


async def test_a_cancel_of_a_hold_already_posted_is_a_4xx_and_the_intent_records_the_settlement(
    api: Api,
) -> None:
    intent_id, _, payee = await _confirmed_p2p(api, amount=AMOUNT)
    await _post_outside_the_intents_transaction(api, intent_id)
    cancelled = await api.client.post(f"/intents/{intent_id}/cancel")
    assert cancelled.status_code < 500, cancelled.text
    assert (await api.client.balance(payee))["posted"] == AMOUNT
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
