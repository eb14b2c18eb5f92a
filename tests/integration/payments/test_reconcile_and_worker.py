"""The start-up reconciler, and settlement through a real job Worker with its fenced completion."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from paymanager.application.intents.confirm import OUTBOX_QUEUE, SETTLE_KIND
from paymanager.application.intents.reconcile import reconcile
from paymanager.application.intents.settle import settle, settle_handler
from paymanager.jobs import Registry, Worker, WorkerOptions
from tests.integration.payments.conftest import Api

pytestmark = pytest.mark.both_ledgers


async def _confirmed_p2p(api: Api, amount: int = 1_000) -> tuple[str, str, str]:
    payer, payee = await api.client.open_account(), await api.client.open_account()
    funding = await api.admin.fund(payer, 10_000)
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(funding["id"]), settled_by="test")
    body = {
        "channel": "internal-p2p", "amount": amount, "currency": "THB",
        "payer_account_id": payer, "payee_account_id": payee,
    }  # fmt: skip
    created = await api.client.post("/intents", body)
    confirmed = await api.client.post(f"/intents/{created.json()['id']}/confirm")
    assert confirmed.json()["status"] == "confirmed", confirmed.text
    return created.json()["id"], payer, payee


async def _jobs(api: Api, intent_id: str) -> int:
    async with api.payments.pool.acquire() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM job WHERE kind = $1 AND payload->>'intent_id' = $2",
                SETTLE_KIND,
                intent_id,
            )
        )


async def test_a_confirmed_intent_whose_job_was_lost_is_enqueued_again(api: Api) -> None:
    intent_id, _, _ = await _confirmed_p2p(api)
    async with api.payments.pool.acquire() as conn:
        await conn.execute("DELETE FROM job WHERE payload->>'intent_id' = $1", intent_id)
    report = await reconcile(api.payments, batch_size=2, max_intents=100)
    assert report.reenqueued == 1
    assert await _jobs(api, intent_id) == 1


async def test_a_confirmed_intent_with_a_live_job_is_left_alone(api: Api) -> None:
    intent_id, _, _ = await _confirmed_p2p(api)
    report = await reconcile(api.payments, batch_size=10, max_intents=100)
    assert report.reenqueued == 0
    assert await _jobs(api, intent_id) == 1


async def test_the_reconciler_does_not_re_enqueue_an_intent_settled_while_it_ran(api: Api) -> None:
    # The settlement job's transaction (settle, then the job's completion) is open while the
    # reconciler runs. The intent had a live job all along: no new job, no "no live job" alarm.
    intent_id, _, _ = await _confirmed_p2p(api)
    async with api.payments.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        updated = await settle(api.payments, conn, uuid.UUID(intent_id), settled_by="test")
        assert updated is not None
        await conn.execute(
            "UPDATE job SET state = 'completed', finalized_at = now()"
            " WHERE kind = $1 AND payload->>'intent_id' = $2",
            SETTLE_KIND,
            intent_id,
        )
        # The intent's row is locked by the settling transaction: the reconciler skips it (its
        # holder is handling it) instead of waiting, and enqueues nothing for it.
        report = await asyncio.wait_for(reconcile(api.payments, batch_size=10, max_intents=100), 10)
        await tx.commit()
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "settled"
    assert report.reenqueued == 0
    assert await _jobs(api, intent_id) == 1


async def test_an_intent_past_its_deadline_is_failed_and_its_hold_released(api: Api) -> None:
    intent_id, payer, payee = await _confirmed_p2p(api)
    api.clock.now = datetime.now(UTC) + timedelta(
        seconds=api.payments.settings.intent_settle_deadline_sec + 1
    )
    report = await reconcile(api.payments, batch_size=10, max_intents=100)
    assert report.failed == 1
    api.clock.now = None
    intent = (await api.client.get(f"/intents/{intent_id}")).json()
    assert intent["status"] == "failed"
    assert intent["failure_reason"] == "settlement deadline passed"
    assert (await api.client.balance(payer))["available"] == 10_000
    assert (await api.client.balance(payee))["posted"] == 0


async def test_a_worker_settles_confirmed_intents_through_the_outbox(api: Api) -> None:
    intent_id, _, payee = await _confirmed_p2p(api, amount=700)
    registry = Registry()
    registry.register(SETTLE_KIND, settle_handler(api.payments), queue=OUTBOX_QUEUE)
    pool = api.payments.pool
    worker = Worker(pool, api.components.database, registry, {OUTBOX_QUEUE: 4}, WorkerOptions(owner="test"))
    await worker.start()
    try:
        deadline = time.monotonic() + 15
        while (await api.client.get(f"/intents/{intent_id}")).json()["status"] != "settled":
            assert time.monotonic() < deadline, "not settled in time"
            await asyncio.sleep(0.05)
    finally:
        await worker.stop(5)
    assert (await api.client.balance(payee))["posted"] == 700
    async with pool.acquire() as conn:
        state = await conn.fetchval("SELECT state::text FROM job WHERE payload->>'intent_id' = $1", intent_id)
    assert state == "completed"
