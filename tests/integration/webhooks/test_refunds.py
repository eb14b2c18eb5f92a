"""Refunds over the API with the outbox worker running: amounts bounded by the settled amount under
concurrency, idempotency, the fee rule, failure when the payee cannot cover it, webhooks, and a
ledger that verifies after a random mix."""

from __future__ import annotations

import asyncio
import random
import uuid

import asyncpg

from tests.integration.webhooks.conftest import Hooks
from tests.support.waiting import wait_for_lock_waiters, wait_until

AMOUNT = 1_000


async def _settled(
    hooks: Hooks, amount: int = AMOUNT, *, channel: str = "internal-p2p"
) -> tuple[str, str, str]:
    """A settled intent of the shop: (intent id, payer, payee)."""
    payer = await hooks.shop.open_account()
    payee = await hooks.shop.open_account("merchant" if channel == "merchant-invoice" else "user")
    funding = await hooks.admin.fund(payer, amount * 2)
    await hooks.wait_status(funding["id"], "settled")
    body: dict[str, object] = {"channel": channel, "amount": amount, "currency": "THB",
                               "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
    if channel == "merchant-invoice":
        body["expires_in_sec"] = 3_600
    created = await hooks.shop.post("/intents", body)
    assert created.status_code == 201, created.text
    intent_id: str = created.json()["id"]
    assert (await hooks.shop.post(f"/intents/{intent_id}/confirm")).status_code == 200
    await hooks.wait_status(intent_id, "settled")
    return intent_id, payer, payee


async def _refund_done(hooks: Hooks, refund_id: str) -> dict[str, object]:
    found: list[dict[str, object]] = []

    async def finished() -> bool:
        body = (await hooks.shop.get(f"/refunds/{refund_id}")).json()
        if body["status"] != "pending":
            found.append(body)
            return True
        return False

    await wait_until(finished)
    return found[0]


async def _posted(hooks: Hooks, account: str) -> int:
    return int((await hooks.shop.balance(account))["posted"])


async def test_a_partial_refund_moves_money_back_and_keeps_the_p2p_fee(hooks: Hooks) -> None:
    intent_id, payer, payee = await _settled(hooks)
    payer_before, payee_before = await _posted(hooks, payer), await _posted(hooks, payee)
    created = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 400, "reason": "damaged"})
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "pending"
    done = await _refund_done(hooks, created.json()["id"])
    assert done["status"] == "succeeded"
    assert done["fee_refunded"] == 0
    assert await _posted(hooks, payer) == payer_before + 400
    assert await _posted(hooks, payee) == payee_before - 400
    listed = await hooks.shop.get(f"/intents/{intent_id}/refunds")
    assert [r["id"] for r in listed.json()["data"]] == [created.json()["id"]]


async def test_an_invoice_refund_returns_the_fee_pro_rata(hooks: Hooks) -> None:
    intent_id, payer, _ = await _settled(hooks, 10_000, channel="merchant-invoice")
    fee = (await hooks.shop.get(f"/intents/{intent_id}")).json()["fee"]
    assert fee > 0
    before = await _posted(hooks, payer)
    first = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 3_333})
    rest = await hooks.shop.post(f"/intents/{intent_id}/refunds", {})
    assert rest.json()["amount"] == 10_000 - 3_333
    for created in (first, rest):
        assert (await _refund_done(hooks, created.json()["id"]))["status"] == "succeeded"
    assert first.json()["fee_refunded"] + rest.json()["fee_refunded"] == fee
    assert await _posted(hooks, payer) == before + 10_000 + fee


async def test_over_refund_is_422_with_the_refundable_amount_and_writes_nothing(hooks: Hooks) -> None:
    intent_id, _, _ = await _settled(hooks)
    assert (await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 300})).status_code == 201
    refused = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 701})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "refund_exceeds_refundable"
    assert refused.json()["error"]["details"]["refundable"] == 700
    assert await hooks.pool.fetchval("SELECT count(*) FROM refund") == 1
    for bad in ({"amount": 0}, {"amount": -5}, {"amount": "10"}, {"amount": 1.5}, {"nope": 1}):
        response = await hooks.shop.post(f"/intents/{intent_id}/refunds", bad)
        assert response.status_code == 422, (bad, response.text)
    assert await hooks.pool.fetchval("SELECT count(*) FROM refund") == 1


async def test_refunds_of_unsettled_intents_refunds_and_strangers_are_refused(hooks: Hooks) -> None:
    payer = await hooks.shop.open_account()
    payee = await hooks.shop.open_account()
    body = {"channel": "internal-p2p", "amount": 100, "currency": "THB",
            "payer_account_id": payer, "payee_account_id": payee}  # fmt: skip
    created = await hooks.shop.post("/intents", body)
    unsettled = await hooks.shop.post(f"/intents/{created.json()['id']}/refunds", {"amount": 10})
    assert unsettled.status_code == 409
    assert unsettled.json()["error"]["code"] == "intent_not_settled"
    intent_id, _, _ = await _settled(hooks)
    refund = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 10})
    of_refund = await hooks.shop.post(f"/intents/{refund.json()['id']}/refunds", {"amount": 1})
    assert of_refund.status_code == 409
    assert of_refund.json()["error"]["code"] == "refund_not_refundable"
    stranger = await hooks.shop.post(f"/intents/{uuid.uuid4()}/refunds", {"amount": 1})
    assert stranger.status_code == 404
    # The admin's funding intents are not the shop's to refund.
    other = await hooks.pool.fetchval("SELECT id FROM intent WHERE channel = 'admin-transfer' LIMIT 1")
    assert (await hooks.shop.post(f"/intents/{other}/refunds", {"amount": 1})).status_code == 404


async def test_a_refund_is_idempotent_by_key(hooks: Hooks) -> None:
    intent_id, _, _ = await _settled(hooks)
    first = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 100}, key="refund-1")
    again = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 100}, key="refund-1")
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    changed = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 200}, key="refund-1")
    assert changed.status_code == 409
    assert await hooks.pool.fetchval("SELECT count(*) FROM refund") == 1


async def test_concurrent_refunds_never_exceed_the_settled_amount(hooks: Hooks) -> None:
    intent_id, _, _ = await _settled(hooks)
    async with hooks.pool.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM intent WHERE id = $1 FOR UPDATE", uuid.UUID(intent_id))
        racing = [
            asyncio.create_task(hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 600}))
            for _ in range(2)
        ]
        await wait_for_lock_waiters(hooks.pool, 2)
        await tx.rollback()
        answers = await asyncio.gather(*racing)
    assert sorted(a.status_code for a in answers) == [201, 422]
    refused = next(a for a in answers if a.status_code == 422)
    assert refused.json()["error"]["details"]["refundable"] == 400
    total = await hooks.pool.fetchval(
        "SELECT sum(amount) FROM refund WHERE intent_id = $1", uuid.UUID(intent_id)
    )
    assert total == 600


async def test_a_refund_the_payee_cannot_cover_fails_and_frees_its_amount(hooks: Hooks) -> None:
    intent_id, _, payee = await _settled(hooks)
    elsewhere = await hooks.shop.open_account()
    body = {"channel": "internal-p2p", "amount": 990, "currency": "THB",
            "payer_account_id": payee, "payee_account_id": elsewhere}  # fmt: skip
    spend = await hooks.shop.post("/intents", body)
    assert (await hooks.shop.post(f"/intents/{spend.json()['id']}/confirm")).status_code == 200
    await hooks.wait_status(spend.json()["id"], "settled")
    created = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 500})
    done = await _refund_done(hooks, created.json()["id"])
    assert done["status"] == "failed"
    assert "does not cover" in str(done["failure_reason"])
    assert await _posted(hooks, payee) == 5
    again = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 1_001})
    assert again.json()["error"]["details"]["refundable"] == 1_000


async def test_refund_events_reach_the_webhooks(hooks: Hooks) -> None:
    endpoint_id, _ = await hooks.endpoint("/refunds", types=["refund.pending", "refund.succeeded"])
    intent_id, _, _ = await _settled(hooks)
    created = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": 100})
    await _refund_done(hooks, created.json()["id"])
    await hooks.wait_finished(endpoint_id, 2)
    assert sorted(r.type or "" for r in hooks.receiver.received_on("/refunds")) == [
        "refund.pending",
        "refund.succeeded",
    ]


async def test_the_ledger_verifies_after_a_random_mix_of_refunds(hooks: Hooks) -> None:
    rng = random.Random(16)
    intents = [await _settled(hooks, rng.randint(100, 2_000)) for _ in range(3)]
    expected: dict[str, int] = {}
    for _ in range(12):
        intent_id, _, _ = rng.choice(intents)
        amount = rng.randint(1, 900)
        response = await hooks.shop.post(f"/intents/{intent_id}/refunds", {"amount": amount})
        assert response.status_code in (201, 422), response.text
        if response.status_code == 201:
            expected[intent_id] = expected.get(intent_id, 0) + amount
    await _all_finished(hooks.pool)
    verification = await hooks.components.ledger.verify()
    assert verification.violations == []
    assert verification.debits_posted == verification.credits_posted
    for intent_id, _, _ in intents:
        settled = await hooks.pool.fetchval(
            "SELECT coalesce(amount_captured, amount) FROM intent WHERE id = $1", uuid.UUID(intent_id)
        )
        refunded = await hooks.pool.fetchval(
            "SELECT coalesce(sum(amount), 0) FROM refund WHERE intent_id = $1 AND status = 'succeeded'",
            uuid.UUID(intent_id),
        )
        assert refunded == expected.get(intent_id, 0)
        assert refunded <= settled


async def _all_finished(pool: asyncpg.Pool) -> None:
    async def none_pending() -> bool:
        return bool(await pool.fetchval("SELECT count(*) FROM refund WHERE status = 'pending'") == 0)

    await wait_until(none_pending)
