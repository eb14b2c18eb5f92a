"""Back-pressure: a full settlement queue answers 503 `queue_full` with Retry-After, and nothing of
the refused request happens; the settlement queue gets a default maximum depth at start-up."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from paymanager.application.intents.backpressure import apply_default_max_depth
from paymanager.application.intents.confirm import OUTBOX_QUEUE
from paymanager.application.intents.settle import settle
from paymanager.jobs import admin as job_admin
from tests.integration.payments.conftest import Api, build_components

pytestmark = pytest.mark.both_ledgers


async def _unfinished_outbox_jobs(api: Api) -> int:
    async with api.payments.pool.acquire() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM job WHERE queue = $1 AND finalized_at IS NULL", OUTBOX_QUEUE
        )
    return count


async def _created_p2p(api: Api, amount: int) -> tuple[str, str]:
    payer = await api.client.open_account()
    payee = await api.client.open_account()
    funding = await api.admin.fund(payer, 10_000)
    async with api.payments.pool.acquire() as conn, conn.transaction():
        await settle(api.payments, conn, uuid.UUID(funding["id"]), settled_by="test")
    created = await api.client.post(
        "/intents",
        {"channel": "internal-p2p", "amount": amount, "currency": "THB",
         "payer_account_id": payer, "payee_account_id": payee},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    return payer, created.json()["id"]


async def test_a_confirm_into_a_full_queue_answers_503_and_holds_nothing(api: Api) -> None:
    payer, intent_id = await _created_p2p(api, 1_000)
    before = await api.client.balance(payer)
    depth = await _unfinished_outbox_jobs(api)
    async with api.payments.pool.acquire() as conn:
        await job_admin.set_max_depth(conn, OUTBOX_QUEUE, depth)

    # The test client's ASGI transport raises any exception that escapes the app (a real server
    # then closes the keep-alive connection): the refusal must be an answer, not an escape.
    refused = await api.client.post(f"/intents/{intent_id}/confirm", key="confirm-1")

    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"].isdigit()
    assert refused.json()["error"]["code"] == "queue_full"
    assert refused.json()["error"]["details"] == {"queue": OUTBOX_QUEUE}
    assert (await api.client.get(f"/intents/{intent_id}")).json()["status"] == "created"
    assert await api.client.balance(payer) == before
    assert await _unfinished_outbox_jobs(api) == depth

    async with api.payments.pool.acquire() as conn:
        await job_admin.set_max_depth(conn, OUTBOX_QUEUE, depth + 1)
    # The refusal stored nothing under the key: the same request now runs.
    accepted = await api.client.post(f"/intents/{intent_id}/confirm", key="confirm-1")
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["status"] == "confirmed"


async def test_start_up_limits_the_settlement_queue_unless_an_operator_did(
    pool: asyncpg.Pool, database_url: str
) -> None:
    await build_components(pool, database_url, outbox_max_depth=1234)
    async with pool.acquire() as conn:
        queues = {queue.name: queue.max_depth for queue in await job_admin.list_queues(conn)}
        assert queues[OUTBOX_QUEUE] == 1234
        await job_admin.set_max_depth(conn, OUTBOX_QUEUE, 50)
    await build_components(pool, database_url, outbox_max_depth=1234)
    async with pool.acquire() as conn:
        assert await apply_default_max_depth(conn, 999) == 50
        queues = {queue.name: queue.max_depth for queue in await job_admin.list_queues(conn)}
    assert queues[OUTBOX_QUEUE] == 50
